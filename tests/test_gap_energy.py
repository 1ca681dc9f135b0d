"""The SOL gap split (tileops.roofline.gap) on audit entries written and read back as the audit writes them, and the
energy rates (tileops.roofline.energy), fed by the sensors' readings as the later wiring will feed them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tileops.device import DeviceInfo, NvmlSession

from tileops.audit.ncu import premise
from tileops.roofline.energy import RATES, energy_rates
from tileops.roofline.gap import GapBlank, GapSplit, gap_for, split_gap
from tileops.records import AUDIT_FILE, AuditEntry, DeviceIdentity, parse_record, read_audit, to_json

BW = 4.8e12  # bytes/s: the ceiling the row was priced against


def _record(**over: object):
    data = {"schema_version": 1, "run_id": "r1", "op": "relu", "family": "elementwise",
            "label": "llama3-8b-mlp-act-prefill-4k", "dtype": "bfloat16", "backend": "torch", "status": "ok",
            "timing": {"timer": "cupti", "median_s": 1e-3, "min_s": 9e-4, "mean_s": 1e-3, "p10_s": 9e-4,
                       "p90_s": 1.1e-3, "n": 100, "rel_noise": 0.01, "warmup": 10, "total_s": 0.5,
                       "stop_reason": "median precision reached"},
            "flops": 0, "bytes": 1_000_000_000, "read_bytes": 500_000_000, "roof_key": None,
            "data_terms": {}, "env": {"device_kind": "cuda", "device_name": "NVIDIA H200", "hostname": "h",
                                      "torch_version": "2.11", "tileops_version": "0", "run_id": "r1"},
            "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:00:01+00:00"}
    data.update(over)
    return parse_record(json.dumps(data))


def _entry(**over: object) -> AuditEntry:
    base = dict(op="relu", label="llama3-8b-mlp-act-prefill-4k", dtype="bfloat16", backend="torch", verdict="WARN",
                reason="reads 2.6x the declared read half", expected_read_bytes=500_000_000,
                measured_read_bytes=1_300_000_000, measured_write_bytes=200_000_000, kernels=1,
                device=DeviceIdentity(kind="cuda", name="NVIDIA H200", hostname="h"))
    base.update(over)
    return AuditEntry(**base)  # type: ignore[arg-type]


def _written_and_read(tmp_path: Path, *entries: AuditEntry) -> list[AuditEntry]:
    """The entries as `tileops audit` leaves them: one JSON line each in audit.jsonl, read by the contract."""
    (tmp_path / AUDIT_FILE).write_text("".join(to_json(e) + "\n" for e in entries))
    return read_audit(tmp_path)


# -- the split ----------------------------------------------------------------------------------------------


def test_the_issues_example_reads_as_excess_traffic_times_speed_at_what_it_moves(tmp_path: Path) -> None:
    """1 GB by the formula (half reads); the kernel reads 1.3 GB and writes at least the formula's 0.5 GB: it moves
    1.8x the minimum. At 30 % SOL it runs at 54 % of the ceiling at the bytes it moves."""
    (entry,) = _written_and_read(tmp_path, _entry())
    rec = _record()
    actual = (1e9 / BW) / 0.30
    got = gap_for(rec, entry, actual_time_s=actual, bandwidth=BW)
    assert isinstance(got, GapSplit)
    assert got.efficiency == pytest.approx(0.30) and got.traffic_ratio == pytest.approx(1.8)
    assert got.achieved == pytest.approx(0.54) and got.moved_bytes == 1_800_000_000
    assert got.efficiency * got.traffic_factor == pytest.approx(got.achieved)
    assert got.traffic_factor == pytest.approx(got.traffic_ratio) and got.bound_at_moved == "memory"
    assert got.describe() == "moves 1.80x the minimum bytes; at what it moves it runs at 54% of the ceiling"
    assert got.note == ""


def test_measured_writes_above_the_formulas_write_half_count() -> None:
    got = split_gap(formula_bytes=1000, formula_read_bytes=500, measured_read_bytes=500, measured_write_bytes=900,
                    actual_time_s=1.0, bandwidth=1000.0)
    assert got.moved_bytes == 1400 and got.traffic_ratio == pytest.approx(1.4)
    none_measured = split_gap(formula_bytes=1000, formula_read_bytes=500, measured_read_bytes=500,
                              measured_write_bytes=None, actual_time_s=1.0, bandwidth=1000.0)
    assert none_measured.moved_bytes == 1000 and none_measured.traffic_ratio == 1.0


def test_a_compute_bound_row_is_not_explained_by_its_traffic() -> None:
    """A GEMM whose compute time (5 ms) outweighs even its doubled traffic (2 ms): the SOL gap is all speed."""
    got = split_gap(formula_bytes=4_800_000_000, formula_read_bytes=3_200_000_000, measured_read_bytes=6_400_000_000,
                    measured_write_bytes=None, actual_time_s=0.01, bandwidth=BW, compute_time_s=0.005)
    assert got.bound_at_moved == "compute" and got.traffic_ratio == pytest.approx(1 + 3.2 / 4.8)
    assert got.achieved == pytest.approx(got.efficiency) == pytest.approx(0.5) and got.traffic_factor == 1.0
    assert "traffic does not explain its gap" in got.describe() and "50% of its compute ceiling" in got.describe()


def test_traffic_can_turn_a_compute_bound_row_memory_bound() -> None:
    """Compute 1 ms, formula bytes 0.5 ms at the ceiling; moving 4x the bytes takes 2 ms: the traffic costs half the
    SOL (a factor of 2, not the byte ratio of 4)."""
    got = split_gap(formula_bytes=2_400_000_000, formula_read_bytes=1_200_000_000, measured_read_bytes=8_400_000_000,
                    measured_write_bytes=None, actual_time_s=0.004, bandwidth=BW, compute_time_s=0.001)
    assert got.bound_at_moved == "memory" and got.traffic_ratio == pytest.approx(4.0)
    assert got.efficiency == pytest.approx(0.25) and got.achieved == pytest.approx(0.5)
    assert got.traffic_factor == pytest.approx(2.0)


def test_a_failed_audit_shows_the_split_with_its_caveat(tmp_path: Path) -> None:
    (entry,) = _written_and_read(tmp_path, _entry(verdict="FAIL", measured_read_bytes=300_000_000,
                                                  measured_write_bytes=500_000_000))
    got = gap_for(_record(), entry, actual_time_s=1e-3, bandwidth=BW)
    assert isinstance(got, GapSplit) and got.traffic_ratio == pytest.approx(0.8)
    assert "the formula's bytes" in got.describe() and "FAILED" in got.note


def test_an_exempt_shortfall_says_why_it_reads_less(tmp_path: Path) -> None:
    (entry,) = _written_and_read(tmp_path, _entry(verdict="EXEMPT", measured_read_bytes=250_000_000,
                                                  exemption="audit/exempt.yaml:3"))
    got = gap_for(_record(), entry, actual_time_s=1e-3, bandwidth=BW)
    assert isinstance(got, GapSplit) and got.traffic_ratio == pytest.approx(0.75)
    assert "audit/exempt.yaml:3" in got.note and "need not read" in got.note


@pytest.mark.parametrize("over, rec_over, words", [
    ({"verdict": "ERROR", "measured_read_bytes": None, "reason": "ncu not found"}, {},
     "no DRAM reading for this row (ERROR: ncu not found)"),
    ({"verdict": "SKIPPED", "measured_read_bytes": None, "reason": ""}, {}, "(SKIPPED)"),
    ({"verdict": "NO-VERDICT", "expected_read_bytes": None}, {"read_bytes": None}, "declares no read half"),
    ({"premise": premise("kernel")}, {}, "replayed each kernel"),
    ({"device": DeviceIdentity(kind="cuda", name="NVIDIA A100-SXM4-80GB", hostname="h")}, {}, "audited on 'NVIDIA A100-SXM4-80GB', timed on 'NVIDIA H200'"),
    ({"data_terms": {"nnz": 10}}, {"data_terms": {"nnz": 12}}, "a different call"),
    ({"expected_read_bytes": 400_000_000}, {}, "declares 400000000 read bytes, the timed one 500000000"),
])
def test_no_split_without_a_matching_reading(tmp_path: Path, over: dict, rec_over: dict, words: str) -> None:
    (entry,) = _written_and_read(tmp_path, _entry(**over))
    got = gap_for(_record(**rec_over), entry, actual_time_s=1e-3, bandwidth=BW)
    assert isinstance(got, GapBlank) and words in got.why


def test_the_default_replay_is_not_mistaken_for_a_kernel_replay(tmp_path: Path) -> None:
    for mode in ("app-range", "range"):
        (entry,) = _written_and_read(tmp_path, _entry(premise=premise(mode)))
        assert isinstance(gap_for(_record(), entry, actual_time_s=1e-3, bandwidth=BW), GapSplit)


def test_no_audit_and_the_wrong_row() -> None:
    got = gap_for(_record(), None, actual_time_s=1e-3, bandwidth=BW)
    assert isinstance(got, GapBlank) and "not audited" in got.why
    with pytest.raises(ValueError, match="is not row"):
        gap_for(_record(), _entry(op="add"), actual_time_s=1e-3, bandwidth=BW)


@pytest.mark.parametrize("kw", [{"formula_bytes": 0}, {"actual_time_s": 0.0}, {"bandwidth": float("nan")},
                                {"formula_read_bytes": 2000}, {"measured_read_bytes": -1},
                                {"compute_time_s": -1.0}])
def test_split_refuses_nonsense(kw: dict) -> None:
    args = dict(formula_bytes=1000, formula_read_bytes=500, measured_read_bytes=500, measured_write_bytes=None,
                actual_time_s=1.0, bandwidth=1000.0)
    args.update(kw)
    with pytest.raises(ValueError):
        split_gap(**args)  # type: ignore[arg-type]


# -- energy ----------------------------------------------------------------------------------------------


def test_energy_rates_from_a_window() -> None:
    got = energy_rates(12.5, 100, flops=2_000_000_000, nbytes=4_000_000, window_s=2.0, window="back-to-back calls")
    assert got.joules_per_call == pytest.approx(0.125)
    assert got.flop_per_joule == pytest.approx(1.6e10) and got.bytes_per_joule == pytest.approx(3.2e7)
    assert got.average_power_w == pytest.approx(6.25) and got.blank == {} and got.window == "back-to-back calls"


def test_energy_rates_blank_with_their_reasons() -> None:
    why = "no RAPL energy counter (/sys/class/powercap/intel-rapl:* absent)"
    none = energy_rates(None, 10, flops=1, nbytes=1, window_s=1.0, why=why)
    assert none.joules_per_call is None and none.blank == {k: why for k in RATES}
    assert energy_rates(None, 10, flops=1, nbytes=1).blank["joules_per_call"] == "no energy reading"
    assert "did not advance" in energy_rates(0.0, 10, flops=1, nbytes=1).blank["flop_per_joule"]
    data_only = energy_rates(1.0, 10, flops=0, nbytes=None)
    assert data_only.joules_per_call == pytest.approx(0.1)
    assert data_only.flop_per_joule is None and "moves data only" in data_only.blank["flop_per_joule"]
    assert data_only.bytes_per_joule is None and "no byte count" in data_only.blank["bytes_per_joule"]
    assert data_only.average_power_w is None and "length is unknown" in data_only.blank["average_power_w"]
    assert "no FLOP count" in energy_rates(1.0, 1, flops=None, nbytes=0).blank["flop_per_joule"]
    assert "no bytes" in energy_rates(1.0, 1, flops=None, nbytes=0).blank["bytes_per_joule"]


@pytest.mark.parametrize("args, kw", [((1.0, 0), {}), ((-1.0, 1), {}), ((float("inf"), 1), {}),
                                      ((1.0, 1), {"window_s": -1.0})])
def test_energy_rates_refuse_nonsense(args: tuple, kw: dict) -> None:
    with pytest.raises(ValueError):
        energy_rates(*args, flops=1, nbytes=1, **kw)


def test_the_sensors_readings_feed_the_rates(tmp_path: Path) -> None:
    """A GPU window read by the sensors (a fake NVML: 500 J over 2 s) and this machine's CPU window (whose RAPL
    reading, or the reason it has none, passes through unchanged)."""
    from tileops.bench.sensors import RowSensors

    from sensors_support import Clock, FakeNvml, FakeProc

    FakeProc(tmp_path / "proc")
    clock = Clock()
    s = RowSensors(DeviceInfo(kind="cuda", name="NVIDIA H200", index=0, uuid="GPU-1"), proc=tmp_path / "proc",
                   sys=tmp_path / "sys", nvml=NvmlSession(FakeNvml()), own_pids=set(), poll_s=None, clock=clock)
    s.start()
    clock.t += 2.0
    g = s.stop().gpu
    assert g is not None
    rates = energy_rates(g.energy_j, 1000, flops=10**12, nbytes=10**9, window_s=2.0,
                         why=g.blank.get("energy_j", ""))
    assert rates.joules_per_call == pytest.approx(0.5) and rates.flop_per_joule == pytest.approx(2e12)
    host = RowSensors(DeviceInfo(kind="cpu", name="a CPU"))
    host.start()
    cpu = host.stop().cpu
    assert cpu is not None
    rates = energy_rates(cpu.energy_j, 1, flops=1, nbytes=1, why=cpu.blank.get("energy_j", ""))
    if cpu.energy_j is None:
        assert rates.blank["joules_per_call"] == cpu.blank["energy_j"]
