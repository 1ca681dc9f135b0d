"""The reference probe (issue 39): recorded on a real CPU row, priced into two SOLs, and split in a baseline.

The first tests run a real row in this process (the probe is the bench's own code, on this host); the pricing
and the baseline split are pure functions over records built as data (tests/roofline_fixtures.py).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import statistics
from pathlib import Path

import pytest

from roofline_fixtures import make_profile, make_record
from tileops.bench.execute import Task, run_task
from tileops.bench.interval import QUICK_BLOCKS
from tileops.bench.probe import PROBE_SHARE, ProbeKind, VisitProbe, compute_bound, merge_readings, worker_probe
from tileops.device import describe_device
from tileops.records import Environment, ProbeRate, ProbeReading, from_data, parse_record, to_json
from tileops.report.baseline import compare
from tileops.roofline import price


#: A row of a few tenths of a second: gaps enough for a probe on a busy shared host too.
RULE = dataclasses.replace(QUICK_BLOCKS, max_time_s=0.4, min_time_s=0.2, target_precision=0.001)


def _cpu_task(op: str = "relu", label: str = "cpu-512x1024", probe: bool = True) -> Task:
    device = describe_device("cpu")
    env = Environment(device=device.identity, torch_version="2", tileops_version="0", run_id="probe-test")
    return Task(op=op, label=label, case="float32", case_name="float32", backend="torch", device=device,
                rule=RULE, env=env, probe=probe)


# -- on a real CPU row ------------------------------------------------------------------------------------


def test_a_real_cpu_row_records_its_probe_and_what_it_cost(tmp_path: Path) -> None:
    rec = run_task(_cpu_task())
    assert rec.status == "ok", rec.error
    probe = rec.probe
    assert probe is not None and rec.timing is not None
    memory = probe.rate("memory")
    assert memory is not None, probe.not_run  # a memory-bound row: the memory probe, timed between its blocks
    assert memory.unit == "B/s" and memory.reference == "read" and memory.work == 4 << 20
    assert memory.n >= 1 and all(t > 0 for v in memory.times_s for t in v)
    assert probe.rate("fma") is None and "memory-bound" in probe.not_run["fma"]
    assert probe.not_run["sm_clock"] == "a CPU: no SM clock"
    # the cost: within the share of the row's time, but for the one probe that may overrun its estimate
    longest = max(t for v in memory.times_s for t in v)
    assert 0 < probe.cost_s <= PROBE_SHARE * rec.timing.total_s + 2 * longest + 1e-3
    assert probe.cost_share == pytest.approx(probe.cost_s / rec.timing.total_s)
    # it survives the file: written and read back strictly, and by msgspec's mirror (the fast reader serve and
    # roofline use) alike, which must not decline the line (a list of probes once made it decline every record)
    back = parse_record(to_json(rec))
    assert back.probe == probe
    if importlib.util.find_spec("msgspec") is not None:
        from tileops.records.fast import line_reader

        declined: list[bytes] = []
        mirror = line_reader(type(rec), declined.append)
        assert mirror is not None and mirror(to_json(rec).encode()) == back and declined == []


def test_no_probe_records_none() -> None:
    rec = run_task(_cpu_task(probe=False))
    assert rec.status == "ok" and rec.probe is None


def test_a_compute_bound_row_gets_the_fma_probe_and_a_memory_bound_row_does_not() -> None:
    probe = worker_probe(describe_device("cpu"))
    kinds, why = probe.kinds(compute=True)
    assert [k.name for k in kinds] == ["memory", "fma"] and "fma" not in why
    kinds, why = probe.kinds(compute=False)
    assert [k.name for k in kinds] == ["memory"] and "memory-bound" in why["fma"]
    fma = probe.kinds(compute=True)[0][1]
    seconds = fma.run()
    assert seconds > 0 and fma.work / seconds > 1e8  # a real GEMM's FLOP/s on this host
    assert compute_bound(2 * 512**3, 3 * 4 * 512**2, "cpu") and not compute_bound(512 * 1024, 8 * 512 * 1024, "cpu")


# -- the cost limiter, on a clock of its own ----------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_probing_stays_within_its_share_of_the_visits_time() -> None:
    clock = _Clock()

    def run() -> float:
        clock.now += 0.002  # each probe takes 2 ms
        return 0.002

    kind = ProbeKind("memory", "B/s", 4e6, "read", "test", run, last_s=0.002)
    probe = VisitProbe([kind], clock=clock)
    probe.start()
    for _ in range(50):  # 50 blocks of 20 ms, a probe gap after each
        clock.now += 0.020
        probe.between()
    reading = probe.reading(clock.now)
    assert reading.cost_s <= PROBE_SHARE * clock.now + 1e-12
    assert reading.cost_s >= 0.8 * PROBE_SHARE * clock.now  # and it uses the share it has
    assert reading.rates[0].n == round(reading.cost_s / 0.002)


def test_a_probe_that_fails_stops_and_says_why() -> None:
    clock = _Clock()

    def run() -> float:
        raise RuntimeError("device lost")

    probe = VisitProbe([ProbeKind("fma", "FLOP/s", 1e6, "cpu.fp32", "test", run, last_s=0.0)], clock=clock)
    probe.start()
    clock.now = 1.0
    probe.between()
    probe.between()
    reading = probe.reading(1.0)
    assert reading.rates == [] and "device lost" in reading.not_run["fma"]


def test_two_visits_pool_their_probes() -> None:
    a = ProbeReading(rates=[ProbeRate(kind="memory", unit="B/s", work=1e6, times_s=[[1e-3, 1.1e-3]])], cost_s=0.01,
                     cost_share=0.02, not_run={"fma": "x"})
    b = ProbeReading(rates=[ProbeRate(kind="memory", unit="B/s", work=1e6, times_s=[[2e-3, 2.2e-3]])], cost_s=0.02,
                     cost_share=0.04)
    merged = merge_readings(a, b, total_s=1.0)
    assert merged is not None and merged.cost_s == pytest.approx(0.03) and merged.cost_share == pytest.approx(0.03)
    rate = merged.rate("memory")
    assert rate is not None and rate.times_s == [[1e-3, 1.1e-3], [2e-3, 2.2e-3]]
    level = rate.level()
    assert level is not None
    # the geometric mean of the visits' medians, as a row's level is of its visits' centres
    assert level.rate == pytest.approx(statistics.geometric_mean([1e6 / t for t in (1e-3, 1.1e-3, 2e-3, 2.2e-3)]))
    assert level.lo < level.rate < level.hi
    assert merge_readings(None, b, 1.0) is b and merge_readings(a, None, 1.0) is a


def test_a_probe_reading_that_is_no_time_is_refused() -> None:
    good = json.loads(to_json(make_record(probe=ProbeReading(rates=[ProbeRate(
        kind="memory", unit="B/s", work=1e6, times_s=[[1e-3]])]))))
    bad = json.loads(json.dumps(good))
    bad["probe"]["rates"][0]["times_s"] = [[-1.0]]
    with pytest.raises(ValueError, match="times_s"):
        from_data(type(make_record()), bad)


# -- two SOLs, on constructed records -------------------------------------------------------------------------


def _probe(kind: str, work: float, times: list[float], reference: str) -> ProbeRate:
    return ProbeRate(kind=kind, unit="B/s" if kind == "memory" else "FLOP/s", work=work, times_s=[times],  # type: ignore[arg-type]
                     reference=reference)


PROFILE = make_profile(bw_theoretical=1e9, bw_calibration=1.0, measured={"read": 8e8},
                       roofs={"cpu.fp32": (1e10, 1.0)})


def test_pricing_fills_the_probe_ratio_and_sol_against_the_devices_state() -> None:
    # memory-bound: 800 bytes at 1e9 B/s is 0.8 us of SOL; the row took 1 us (80 %); the probe read 4e8 B/s
    # against the calibration's 8e8: the device ran at half its calibrated bandwidth, so the kernel's own SOL is 160 %
    times = [1e-2 * f for f in (0.98, 1.0, 1.02, 0.99, 1.01)]
    rec = make_record(flops=0, bytes=800, median_s=1e-6, level_ci_s=(0.95e-6, 1.05e-6), ci_df=20.0,
                      probe=ProbeReading(rates=[_probe("memory", 4e6, times, "read")]))
    p = price(rec, PROFILE)
    assert p.bound == "memory" and p.efficiency == pytest.approx(0.8)
    assert p.probe_kind == "memory" and p.probe_ratio == pytest.approx(0.5)
    assert p.probe_ratio_ci is not None and p.probe_ratio_ci[0] < 0.5 < p.probe_ratio_ci[1]
    assert p.state_efficiency == pytest.approx(1.6)
    lo, hi = p.state_efficiency_ci or (math.nan, math.nan)
    assert lo < 1.6 < hi
    # wider than either interval alone: both uncertainties are in it (log space)
    assert p.sol_ci is not None
    assert math.log(hi / lo) > math.log(p.sol_ci[1] / p.sol_ci[0])
    assert math.log(hi / lo) > math.log(p.probe_ratio_ci[1] / p.probe_ratio_ci[0])


def test_a_compute_bound_row_is_read_against_the_fma_probe_only() -> None:
    fma = _probe("fma", 1e8, [0.02, 0.021, 0.019], "cpu.fp32")  # 5e9 FLOP/s against 1e10: ratio 0.5
    mem = _probe("memory", 4e6, [1e-2, 1e-2], "read")
    rec = make_record(flops=10**6, bytes=8, median_s=2e-4, level_ci_s=(1.9e-4, 2.1e-4), ci_df=20.0,
                      probe=ProbeReading(rates=[mem, fma]))
    p = price(rec, PROFILE)
    assert p.bound == "compute" and p.probe_kind == "fma" and p.probe_ratio == pytest.approx(0.5)
    assert p.state_efficiency == pytest.approx(p.efficiency / 0.5)
    no_fma = price(make_record(flops=10**6, bytes=8, median_s=2e-4, level_ci_s=(1.9e-4, 2.1e-4), ci_df=20.0,
                               probe=ProbeReading(rates=[mem])), PROFILE)
    assert no_fma.probe_ratio is None and no_fma.state_efficiency is None  # never the memory probe


def test_no_probe_or_no_calibrated_rate_of_its_kind_leaves_the_second_sol_blank() -> None:
    plain = price(make_record(flops=0, bytes=800, median_s=1e-6), PROFILE)
    assert plain.efficiency is not None and plain.probe_ratio is None and plain.state_efficiency is None
    no_read = make_profile(bw_theoretical=1e9, bw_calibration=1.0)  # its mixes hold triad only
    probed = make_record(flops=0, bytes=800, median_s=1e-6,
                         probe=ProbeReading(rates=[_probe("memory", 4e6, [1e-2, 1.1e-2], "read")]))
    assert price(probed, no_read).probe_ratio is None
    one = make_record(flops=0, bytes=800, median_s=1e-6,
                      probe=ProbeReading(rates=[_probe("memory", 4e6, [1e-2], "read")]))
    assert price(one, PROFILE).probe_ratio is None  # one probe: no interval can be told, so no reading


# -- the baseline split ----------------------------------------------------------------------------------------


def _row(label: str, time_s: float, probe_s: float, *, run: str) -> object:
    spread = (0.985, 0.995, 1.0, 1.005, 1.015, 0.99, 1.01, 1.0)
    probe = ProbeReading(rates=[ProbeRate(kind="memory", unit="B/s", work=4e6, reference="read",
                                          times_s=[[probe_s * f for f in spread], [probe_s * f for f in spread]])])
    rec = make_record(label=label, flops=0, bytes=800, median_s=time_s, level_ci_s=(time_s / 1.02, time_s * 1.02),
                      ci_df=30.0, run_id=run, probe=probe)
    return price(rec, PROFILE)


def test_the_baseline_split_tells_a_slower_device_from_a_kernel_that_regressed() -> None:
    base = [_row(f"r{i}", 1e-6, 1e-2, run="old") for i in range(6)]
    # now: rows 0-2 ran on a device 20 % slower (probe and row alike); rows 3-5 regressed 20 % on a healthy device
    now = [_row(f"r{i}", 1.2e-6, 1.2e-2, run="new") for i in range(3)]
    now += [_row(f"r{i}", 1.2e-6, 1e-2, run="new") for i in range(3, 6)]
    c = compare(now, base)  # type: ignore[arg-type]
    by = {r.key[1]: r for r in c.rows}
    for i in range(3):
        s = by[f"r{i}"].split
        assert s is not None and s.probe_kind == "memory"
        assert s.device.status == "slower" and s.probe_change == pytest.approx(1 / 1.2 - 1)
        assert s.kernel.status == "same", s.kernel.message
        lo, hi = s.probe_change_ci or (math.nan, math.nan)
        assert lo < s.probe_change < hi < 0
        assert "the device is slower now" in s.describe() and "the kernel's own efficiency is the same" in s.describe()
    for i in range(3, 6):
        s = by[f"r{i}"].split
        assert s is not None
        assert s.device.status == "same", s.device.message
        assert s.kernel.status == "slower" and s.kernel_change == pytest.approx(1 / 1.2 - 1)
        assert "the kernel's own efficiency fell" in s.describe()
    # every row's time went up 20 %: the time verdict alone cannot tell the two apart
    assert [by[f"r{i}"].ratio for i in range(6)] == [pytest.approx(1.2)] * 6


def test_a_side_without_a_probe_has_no_split() -> None:
    old = price(make_record(flops=0, bytes=800, median_s=1e-6, level_ci_s=(0.99e-6, 1.01e-6), ci_df=30.0), PROFILE)
    new = _row("row", 1e-6, 1e-2, run="new")
    (row,) = compare([new], [old]).rows  # type: ignore[list-item]
    assert row.split is None and row.change == "same"


# -- benchmarks/device_state.py's figures ---------------------------------------------------------------------


def test_the_device_state_benchmark_reads_each_rows_spreads_and_the_goal() -> None:
    """Its spreads over runs given as data (six real runs take minutes): the state SOL of a row whose device
    drifted holds still, and the goal line counts the rows that meet it."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import device_state

    drift = (1.0, 1.3, 0.8, 1.1, 0.9, 1.2)
    runs = [{"relu": {"time": 1e-4 * d, "sol": 0.5 / d, "state": 0.6, "ratio": 0.8 / d, "cost": 0.05},
             "gemm": {"time": 1e-3 * d, "sol": 0.5 / d, "state": 0.6 / d, "ratio": 0.8, "cost": 0.12}}
            for d in drift]
    rows = {r["row"]: r for r in device_state.per_row(runs)}  # type: ignore[arg-type]
    sd = statistics.stdev(math.log(d) for d in drift)
    assert rows["relu"]["spread_time"] == pytest.approx(sd) and rows["relu"]["spread_state"] == pytest.approx(0.0)
    assert rows["gemm"]["state_over_time"] == pytest.approx(1.0) and rows["gemm"]["cost_max"] == 0.12
    text = "\n".join(device_state.report(list(rows.values())))
    assert "1 of 2 row(s)" in text and "most 12.0 % (NOT met)" in text


def test_a_probe_kind_that_cannot_be_built_is_not_run_and_the_others_are(monkeypatch: pytest.MonkeyPatch) -> None:
    from tileops.bench.probe import Probe

    def broken(self: Probe) -> ProbeKind:
        raise MemoryError("no room for the buffer")

    monkeypatch.setattr(Probe, "_memory", broken)
    probe = Probe(describe_device("cpu"))
    kinds, why = probe.kinds(compute=True)
    assert [k.name for k in kinds] == ["fma"] and "no room for the buffer" in why["memory"]
