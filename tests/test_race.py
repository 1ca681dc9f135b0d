"""Interleaved races (issue 39, item 4): a row's backends timed in one worker, their blocks alternating, judged
on the paired ratio of their blocks.

The statistic against an independent computation (a visit's level, ``interval.visit_of``), the alternating
loop on real timed calls (including a host that drifts threefold during the race, which the paired ratio
cancels and each backend's own interval does not), the best-backend verdict on the paired interval and the
fallback to the backends' own intervals, and real races on this CPU: eager against torch.compile in the worker
(slow: it compiles), a backend that fails while the other's row is kept.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import pytest

from cli_support import tileops
from export_support import env, profile, record, write_run
from tileops.bench.environment import run_environment
from tileops.bench.execute import Task
from tileops.bench.interval import QUICK_BLOCKS, BlockRule, visit_of
from tileops.bench.race import Lane, RaceTask, alternate, block_ratios, pairings
from tileops.bench.select import Planned, Selection, plan
from tileops.bench.sweep import race_groups
from tileops.bench.timers import CpuWallTimer
from tileops.bench.worker import Worker
from tileops.device import describe_device
from tileops.ops import backends
from tileops.ops.catalog import load_entries
from tileops.ops.registry import load_all
from tileops.profiles import ProfileChooser
from tileops.records import RacePairing, iter_records, load_records, parse_record, to_json
from tileops.roofline import compare_backends, price_all
from tileops.roofline.races import BackendRace, paired_interval
from tileops.stats import ratio_interval

CPU = describe_device("cpu")
#: a race that stops on its time cap alone: every lane takes the same rounds
RULE = BlockRule(target_precision=1e-9, min_time_s=0.0, max_time_s=0.25, min_samples=1, max_samples=10**6,
                 warmup_s=0.001, min_blocks=4, block_time_s=0.005, pause_s=0.001)


def spin(n: int) -> None:
    """A call of known cost: ``n`` additions (the interpreter's, so no library may skip them)."""
    x = 0
    for i in range(n):
        x += i


# -- the paired statistic -------------------------------------------------------------------------------------


def test_the_paired_ratio_is_a_visits_level_over_blocks_of_one_ratio() -> None:
    ratios = [0.48, 0.52, 0.5, 0.61, 0.49, 0.5, 0.47, 0.9]
    centre, ci = ratio_interval(ratios)
    visit = visit_of([[r] for r in ratios])  # the house statistic, computed by the bench's own visit
    assert centre == pytest.approx(visit.centre_s)
    assert ci is not None and ci[0] < centre < ci[1]
    assert ci[1] / centre - 1 == pytest.approx(visit.half_width(), rel=1e-9)  # the same t, scale and factor
    assert ratio_interval([2.0, 2.0, 2.0]) == (pytest.approx(2.0), (pytest.approx(2.0), pytest.approx(2.0)))
    assert ratio_interval([1.5])[1] is None  # one pair: no interval
    with pytest.raises(ValueError, match="positive finite"):
        ratio_interval([1.0, 0.0])


def test_each_backend_is_paired_round_by_round_with_the_reference() -> None:
    blocks = {"torch": [[2.0, 2.2, 2.1], [4.0, 4.1]], "compile": [[1.0, 1.1, 1.05], [2.0, 2.05], [9.0]]}
    got = pairings(blocks)
    assert got["torch"] == RacePairing(backends=["torch", "compile"], reference="torch")
    assert got["compile"].ratios == pytest.approx([0.5, 2.025 / 4.05])  # the rounds both took
    assert got["compile"].ratio is not None and got["compile"].ratio_ci is not None
    assert block_ratios(blocks["compile"], blocks["torch"]) == got["compile"].ratios
    rec = dataclasses.replace(record(backend="compile"), race=got["compile"])
    assert parse_record(to_json(rec)) == rec  # the record carries it, and reads back the same


def test_a_pairing_that_breaks_the_contract_is_refused_naming_its_field() -> None:
    bad = dataclasses.replace(record(backend="compile"), race=RacePairing(
        backends=["torch", "compile"], reference="torch", ratios=[0.5, 0.6], ratio=0.55, ratio_ci=[0.6, 0.7]))
    with pytest.raises(ValueError, match="ratio_ci"):
        parse_record(to_json(bad))
    stray = dataclasses.replace(bad, race=RacePairing(backends=["compile"], reference="torch"))
    with pytest.raises(ValueError, match="reference"):
        parse_record(to_json(stray))


# -- alternating blocks on real timed calls ---------------------------------------------------------------------


def lane(name: str, fn, rule: BlockRule = RULE) -> Lane:
    return Lane(name, fn, CpuWallTimer(lambda: None), rule)


def test_blocks_alternate_and_a_drifting_host_cancels_in_the_paired_ratio() -> None:
    """A host that slows threefold over the race (every call's cost grows with the time since the start) moves
    each backend's blocks; the ratio of the blocks of one round does not move. So the paired interval is
    narrower than either backend's own, and centred on the true ratio of 2."""
    order: list[str] = []
    t0 = time.perf_counter()

    def drift() -> float:
        return 1.0 + 2.0 * min(1.0, (time.perf_counter() - t0) / 0.5)

    def a() -> None:
        order.append("a")
        spin(int(2000 * drift()))

    def b() -> None:
        order.append("b")
        spin(int(4000 * drift()))

    lanes = [lane("a", a, dataclasses.replace(RULE, max_time_s=RULE.max_time_s / 2)), lane("b", b)]
    alternate(lanes)
    ra, rb = lanes
    assert ra.failed is None and rb.failed is None and len(ra.blocks) >= 4
    assert len(ra.blocks) == len(rb.blocks)  # one block of each per round; a's half budget waits for b's
    assert ra.elapsed_s > ra.rule.max_time_s and ra.stop_reason == rb.stop_reason == "time cap"
    runs = [k for i, k in enumerate(order) if i == 0 or order[i - 1] != k]
    assert runs[:8] == ["a", "b"] * 4  # A's block (and its re-warm call), then B's, then A's ...
    got = pairings({"a": ra.blocks, "b": rb.blocks})["b"]
    assert got.ratio_ci is not None and got.ratio is not None
    assert 1.4 < got.ratio < 2.8  # spinning twice as long takes about twice as long
    paired = math.log(got.ratio_ci[1] / got.ratio_ci[0])
    for own in (ra, rb):
        t = own.timing()
        assert t.median_ci_s is not None
        assert paired < math.log(t.median_ci_s[1] / t.median_ci_s[0])  # the drift widens each alone


def test_a_lane_that_fails_leaves_the_race_and_the_others_race_on() -> None:
    calls = {"n": 0}

    def flaky() -> None:
        calls["n"] += 1
        if calls["n"] > 12:  # past its warm-up and first blocks
            raise RuntimeError("the backend broke mid-race")
        spin(1000)

    lanes = [lane("ok", lambda: spin(1000)), lane("flaky", flaky)]
    alternate(lanes)
    assert isinstance(lanes[1].failed, RuntimeError) and lanes[0].failed is None
    assert lanes[0].stop_reason == "time cap" and len(lanes[0].blocks) > len(lanes[1].blocks)


# -- the verdict ------------------------------------------------------------------------------------------------


def race_of(paired: list[float] | None, spread: float) -> BackendRace:
    """compile 10 % faster than eager; their own intervals ±``spread``; raced interleaved when ``paired``."""
    pair = {} if paired is None else {
        "torch": RacePairing(backends=["torch", "compile"], reference="torch"),
        "compile": RacePairing(backends=["torch", "compile"], reference="torch", ratios=paired,
                               ratio=ratio_interval(paired)[0])}
    return BackendRace(("cpu", "relu", "big", "float32"), {"torch": 0.5, "compile": 0.55}, "compile", "torch",
                       {"torch": (0.5 * (1 - spread), 0.5 * (1 + spread)),
                        "compile": (0.55 * (1 - spread), 0.55 * (1 + spread))}, pair)


def test_the_verdict_uses_the_paired_interval_and_falls_back_to_the_own_intervals() -> None:
    tight = [0.9, 0.91, 0.89, 0.9, 0.92, 0.9, 0.88, 0.9]  # every pair says compile is 10 % faster
    loose = [0.6, 1.3, 0.9, 1.2, 0.7, 1.1, 0.8, 1.25]  # the pairs disagree: the interval reaches 1
    assert not race_of(tight, 0.2).within_noise and race_of(tight, 0.2).paired  # own intervals overlap: paired wins
    assert race_of(loose, 0.01).within_noise  # own intervals apart, but the pairs cannot tell them
    assert race_of(None, 0.2).within_noise and not race_of(None, 0.01).within_noise  # sequential: as before
    assert not race_of(None, 0.2).paired
    ci = race_of(tight, 0.2).paired_ci("torch")
    assert ci is not None and ci[1] < 1.0 and race_of(tight, 0.2).as_dict()["paired_ci"] == list(ci)
    three = ["torch", "compile", "triton"]
    compiled = RacePairing(backends=three, reference="torch", ratios=tight, ratio=0.9)
    kernel = RacePairing(backends=three, reference="torch", ratios=[r * 0.5 for r in tight], ratio=0.45)
    assert paired_interval(kernel, compiled) == (pytest.approx(0.5), pytest.approx(0.5))  # two non-references
    elsewhere = RacePairing(backends=["torch", "compile"], reference="torch", ratios=tight, ratio=0.9)
    assert paired_interval(kernel, elsewhere) is None  # not one race


def test_priced_records_of_an_interleaved_race_are_judged_on_their_pairs(tmp_path: Path) -> None:
    """Through pricing and the table: the records' pairings reach the verdict, the summary says so."""
    from tileops.report import render_text

    e = env()
    pairs = [0.9, 0.91, 0.89, 0.9, 0.92, 0.9, 0.88, 0.9]
    recs = []
    for backend, seconds in (("torch", 1.1e-3), ("compile", 1e-3)):
        r = record("relu", "big", seconds=seconds, backend=backend, e=e)
        ci = [seconds * 0.8, seconds * 1.2]  # the own intervals overlap: sequentially, within noise
        recs.append(dataclasses.replace(r, timing=dataclasses.replace(r.timing, median_ci_s=ci, level_ci_s=ci),
                                        race=pairings({"torch": [[1.0]], "compile": [[0.9]]})[backend]))
    recs[1] = dataclasses.replace(recs[1], race=RacePairing(backends=["torch", "compile"], reference="torch",
                                                            ratios=pairs, ratio=ratio_interval(pairs)[0]))
    priced = price_all(load_records([write_run(tmp_path / "run", recs)]), ProfileChooser.only(profile()))
    (race,) = compare_backends(priced).values()
    assert (race.best, race.paired, race.within_noise) == ("compile", True, False)
    text = " ".join(render_text(priced, "table").split())
    assert "raced interleaved: 1 row(s) judged on the paired ratio" in text and "within noise" not in text


# -- planning and real races on this CPU ------------------------------------------------------------------------


def test_a_row_on_several_backends_is_one_race_unless_sequential() -> None:
    sel = Selection(ops=["relu", "add"], labels=["cpu-512x1024"], backends=["all"], dtypes=["float32"])
    todo = plan(load_entries(), load_all(), sel, CPU)
    groups = race_groups(todo)
    raced = [[p.backend for p in g] for g in groups if len(g) > 1]
    assert raced and all(g == ["torch", "compile"] for g in raced)  # triton is skipped on a CPU: alone
    assert all(p.skip_reason for g in groups if len(g) == 1 for p in g)
    assert all(len(g) == 1 for g in race_groups(todo, "sequential"))
    skipped = Planned("relu", todo[0].row, todo[0].case, "compile", "no compiler")
    assert [len(g) for g in race_groups([todo[0], skipped])] == [1, 1]


def task(backend: str, env_=None) -> Task:
    return Task(op="relu", label="cpu-512x1024", case="float32", case_name="float32", backend=backend,
                device=CPU, rule=QUICK_BLOCKS, env=env_ or run_environment(CPU, "race", 2))


@pytest.mark.slow
def test_a_real_cpu_race_of_eager_and_compile_yields_both_records_and_their_paired_interval(tmp_path: Path) -> None:
    worker = Worker(threads=2, env=backends.cache_env(tmp_path / "cc"))
    try:
        got, alone = worker.race(RaceTask((task("torch"), task("compile"))), "elementwise", timeout_s=120,
                                 compile_timeout_s=300)
    finally:
        worker.close()
    assert alone == []
    eager, compiled = (r.record for r in got)
    assert (eager.backend, compiled.backend) == ("torch", "compile")
    assert eager.status == compiled.status == "ok", (eager.error, compiled.error)
    assert compiled.timing.compile_s > 0 and eager.timing.compile_s is None  # each compile its own
    pair = compiled.race
    assert pair is not None and pair.backends == ["torch", "compile"] and pair.reference == "torch"
    n = min(len(got[0].blocks), len(got[1].blocks))
    assert n >= 2 and len(pair.ratios) == n  # a ratio per round both took
    assert pair.ratios == pytest.approx(block_ratios(got[1].blocks, got[0].blocks))
    assert pair.ratio_ci is not None and pair.ratio_ci[0] <= pair.ratio <= pair.ratio_ci[1]
    assert eager.race == RacePairing(backends=["torch", "compile"], reference="torch")
    assert eager.conditions.cpu.energy_j is None and "interleaved race" in eager.conditions.cpu.blank["energy_j"]
    for r in got:  # each keeps its own blocks and interval
        assert r.record.timing.n == sum(len(b) for b in r.blocks) and r.record.timing.median_ci_s is not None


@pytest.mark.slow
def test_a_backend_that_fails_in_a_race_keeps_the_others_row(tmp_path: Path) -> None:
    """compile overruns its compile allowance in the race: the worker is killed, compile's row is a timeout and
    eager's row, timed alone, is kept (the sweep end to end)."""
    out = tmp_path / "run"
    r = tileops("bench", "--backend", "torch", "--backend", "compile", "--quick", "--op", "relu", "--label",
                "cpu-512x1024", "--dtype", "float32", "--passes", "1", "--no-plot", "--calibrate", "never",
                "--compile-timeout", "0.2", "--compile-cache", str(tmp_path / "cc"), "--out", str(out),
                env={"TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"})
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]  # a row failed: its error record is written
    recs = {x.backend: x for x in iter_records(out)}
    assert recs["torch"].status == "ok" and recs["torch"].race is None  # timed alone after the race was lost
    err = recs["compile"].error
    assert recs["compile"].status == "error" and err.kind == "timeout"
    assert "compile backend's first call" in err.message and "other backends are timed one by one" in err.message


def test_a_backend_that_cannot_prepare_keeps_the_others_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton on a CPU refuses its first call (no CUDA device): its error record is written and eager's row,
    left alone in the race, is timed on its own. Raced in a worker process of its own, as the bench does: this
    test process may run Triton's interpreter (test_triton_kernels sets TRITON_INTERPRET=1 when collected), in
    which a CPU's Triton call succeeds."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    worker = Worker(threads=2)
    try:
        got, alone = worker.race(RaceTask((task("torch"), task("triton"))), "elementwise", timeout_s=120,
                                 compile_timeout_s=120)
    finally:
        worker.close()
    assert alone == []
    eager, kernel, blocks = got[0].record, got[1].record, got[1].blocks
    assert eager.status == "ok" and eager.timing is not None and eager.race is None  # no one to pair with
    assert kernel.status == "error" and kernel.error is not None and blocks == []
    assert kernel.error.kind == "unsupported" and "Triton kernels run on CUDA devices" in kernel.error.message
    assert kernel.params == eager.params and kernel.shapes == eager.shapes  # named as a sequential race names it
