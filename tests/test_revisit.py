"""The sweep's second pass (``tileops.bench.revisit``) and the workers' host allocator (``tileops.bench.allocator``).

Issue 26: a row's interval must cover what a rerun gives. The pieces are checked on deterministic blocks and
records (the within-visit interval, the drift pooled over rows, the widening, the one-record-per-row rewrite),
then end to end on real CPU rows: a two-pass bench writes one record per row whose interval includes the
host's drift that run.json states, and ``--passes 1`` writes none.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from roofline_fixtures import make_record, write_records

from tileops.bench import allocator, revisit
from tileops.bench.interval import CPU_BLOCKS, QUICK_BLOCKS, drift_half_width, rerun_interval, visit_rules, widen
from tileops.records import iter_records, read_run_info, replace_records


def _visit(level: float, n: int, wiggle: float = 0.01) -> list[list[float]]:
    """``n`` blocks around ``level`` seconds, alternating by ``wiggle`` (deterministic)."""
    return [[level * (1 + wiggle * (-1) ** i)] * 3 for i in range(n)]


# -- the within-visit interval -------------------------------------------------------------------------


def test_a_shift_between_two_visits_is_left_to_the_drift_not_to_the_rows_t_quantile() -> None:
    """Pooled as one series, two visits 30 % apart make a row's own interval enormous (its effective count falls
    to two: a t quantile of one degree of freedom); taken about each visit's own mean, the interval is the
    within-visit noise, and the shift is priced by the drift pooled over every row (:func:`widen`)."""
    blocks = _visit(1e-3, 6) + _visit(1.3e-3, 6)
    mixed = rerun_interval(blocks)
    within = rerun_interval(blocks, visit_start=6)
    assert mixed is not None and within is not None
    assert within.precision < 0.03 < 0.3 < mixed.precision
    assert within.median_s == mixed.median_s and within.lo_s <= within.median_s <= within.hi_s
    # one visit: visit_start at either end changes nothing
    one = _visit(1e-3, 8, wiggle=0.02)
    assert rerun_interval(one, visit_start=0) == rerun_interval(one) == rerun_interval(one, visit_start=8)
    # two blocks of one visit each: no degree of freedom left for the within-visit spread
    assert rerun_interval([[1e-3], [1.1e-3]], visit_start=1) is None


def test_the_second_visit_stops_on_the_within_visit_interval() -> None:
    first, second = visit_rules(CPU_BLOCKS)
    assert first.max_time_s == first.min_time_s == second.max_time_s == CPU_BLOCKS.max_time_s / 2
    prior = _visit(1e-3, 4)
    now = _visit(1.3e-3, 6, wiggle=0.002)
    assert second.decide(prior + now, elapsed_s=second.min_time_s, visit_start=4) is not None
    assert second.decide(prior + now, elapsed_s=second.min_time_s) is None  # pooled: the shift keeps it going


def test_widening_adds_the_drift_in_quadrature() -> None:
    iv = rerun_interval(_visit(1e-3, 8, wiggle=0.02))
    assert iv is not None
    sigma = 0.05
    wide = widen(iv, sigma)
    h_row, h_drift = math.log(iv.hi_s / iv.median_s), math.log1p(drift_half_width(sigma))
    assert math.log(wide.hi_s / wide.median_s) == pytest.approx(math.hypot(h_row, h_drift))
    assert wide.lo_s < iv.lo_s and wide.hi_s > iv.hi_s and wide.median_s == iv.median_s
    assert widen(iv, 0.0).pair == pytest.approx(iv.pair)
    assert drift_half_width(0.0) == 0.0 and drift_half_width(0.1) == pytest.approx(math.exp(1.96 * 0.1414) - 1,
                                                                                   rel=1e-3)


# -- settle: the records that replace the first pass's ----------------------------------------------


def _rec(op: str, median_s: float, ci: tuple[float, float] | None, backend: str = "torch", **extra):
    return make_record(op=op, median_s=median_s, median_ci_s=ci, backend=backend, **extra)


def test_settle_widens_every_row_by_the_drift_its_revisited_rows_show() -> None:
    ops = ["a", "b", "c", "d"]
    shifts = [1.10, 0.92, 1.05, 0.95]  # each row's second visit against its first
    first = {_rec(op, 1e-3, (0.99e-3, 1.01e-3)).key: _rec(op, 1e-3, (0.99e-3, 1.01e-3)) for op in ops}
    compiled = _rec("e", 2e-3, (1.98e-3, 2.02e-3), backend="compile")  # visited once: widened all the same
    first[compiled.key] = compiled
    second = {}
    for op, shift in zip(ops, shifts):
        pooled = 1e-3 * (1 + shift) / 2
        rec = _rec(op, pooled, (pooled * 0.98, pooled * 1.03))
        second[rec.key] = (rec, _visit(1e-3, 4, 0.001), _visit(1e-3 * shift, 4, 0.001))
    updated, drift = revisit.settle(first, second)
    assert drift.sigma is not None and 0.03 < drift.sigma < 0.1 and drift.rows == 4 and drift.widened == 5
    assert drift.why is None and json.loads(json.dumps(drift.as_dict()))["rows"] == 4
    assert set(updated) == set(first)
    for key, rec in updated.items():
        old = second[key][0] if key in second else first[key]
        lo, hi = rec.timing.median_ci_s
        assert rec.timing.median_s == old.timing.median_s  # the second visit's pooled median, or the first's
        assert lo < old.timing.median_ci_s[0] and hi > old.timing.median_ci_s[1]
        assert hi / rec.timing.median_s - 1 >= drift_half_width(drift.sigma) * 0.999


def test_settle_without_three_revisited_rows_keeps_each_rows_own_interval() -> None:
    first = {r.key: r for r in (_rec("a", 1e-3, (0.99e-3, 1.01e-3)), _rec("b", 1e-3, (0.99e-3, 1.01e-3)))}
    second = {k: (r, _visit(1e-3, 3), _visit(1.2e-3, 3)) for k, r in first.items()}
    updated, drift = revisit.settle(first, second)
    assert drift.sigma is None and drift.widened == 0 and "3 or more" in (drift.why or "")
    assert updated == {k: r for k, (r, _, _) in second.items()}


def test_a_pooled_record_is_contended_if_either_visit_was_and_keeps_its_own_window() -> None:
    from tileops.records import RowConditions

    busy = RowConditions(window_s=0.5, contended=True, contention=["steal 12 % of the CPUs"], calls=40)
    calm = RowConditions(window_s=0.6, calls=55)
    first, second = _rec("a", 1e-3, None, conditions=busy), _rec("a", 1.1e-3, None, conditions=calm)
    merged = revisit.merge_visits(first, second).conditions
    assert merged.contended and merged.contention == ["first visit: steal 12 % of the CPUs"]
    assert (merged.window_s, merged.calls, merged.throttled) == (0.6, 55, False)  # the second visit's window
    assert revisit.merge_visits(_rec("a", 1e-3, None), second) == second  # nothing to merge


def test_two_visits_timed_alike_are_pooled_and_a_visit_that_fell_back_is_not() -> None:
    a, b = _rec("a", 1e-3, None, timer="cupti"), _rec("a", 1e-3, None, timer="cupti")
    fell_back = make_record(op="a", timer="cuda-events")
    fell_back = dataclasses.replace(fell_back, timing=dataclasses.replace(fell_back.timing,
                                                                          fallback_reason="CUPTI attribution failed"))
    assert revisit.same_timer(a, b) and not revisit.same_timer(a, fell_back)
    assert not revisit.same_timer(a, make_record(op="a", status="error"))


def test_a_record_without_an_interval_is_not_widened() -> None:
    bare = _rec("a", 1e-3, None)
    assert revisit.widen_record(bare, 0.1) is bare
    failed = make_record(status="error")
    assert revisit.widen_record(failed, 0.1) is failed


def test_only_eager_rows_that_run_are_revisited() -> None:
    from tileops.bench.select import Planned
    from tileops.ops.spec import Workload

    row = Workload(label="r", indices={}, dtypes=("float32",))
    eager, compiled = Planned("relu", row, "float32", "torch"), Planned("relu", row, "float32", "compile")
    skipped = Planned("relu", row, "float32", "torch", skip_reason="unsupported")
    assert revisit.revisited(eager, 2) and not revisit.revisited(eager, 1)
    assert not revisit.revisited(compiled, 2) and not revisit.revisited(skipped, 2)
    assert revisit.first_visit_rule(QUICK_BLOCKS, eager, 2).max_time_s == QUICK_BLOCKS.max_time_s / 2
    assert revisit.first_visit_rule(QUICK_BLOCKS, compiled, 2) == QUICK_BLOCKS


# -- the rewrite ------------------------------------------------------------------------------------


def test_replace_records_puts_each_row_in_place_and_keeps_every_other_line(tmp_path: Path) -> None:
    recs = [_rec("a", 1e-3, None), make_record(op="b", status="error"), _rec("b", 2e-3, None), _rec("c", 3e-3, None)]
    path = write_records(tmp_path / "records.jsonl", recs)
    before = path.read_bytes().split(b"\n")
    new_b = _rec("b", 2.5e-3, (2e-3, 3e-3))
    replace_records(path, {new_b.key: new_b})
    after = path.read_bytes().split(b"\n")
    assert len(after) == len(before) and after[2] != before[2]
    assert [a for i, a in enumerate(after) if i != 2] == [b for i, b in enumerate(before) if i != 2]  # byte for byte
    got = list(iter_records(path))
    assert got[2] == new_b and got[1].status == "error"  # the last record of the key, not the error before it
    with pytest.raises(ValueError, match="no record to replace for z"):
        replace_records(path, {_rec("z", 1e-3, None).key: _rec("z", 1e-3, None)})
    assert path.read_bytes().split(b"\n") == after  # a refused rewrite changes nothing


def test_a_rewrite_that_fails_leaves_the_first_pass_file_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    from tileops.records import files

    path = write_records(tmp_path / "records.jsonl", [_rec("a", 1e-3, None)])
    before = path.read_bytes()

    def full_disk(p, data) -> None:  # a full disk cannot be made here: its OSError is what write_atomic raises
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files, "write_atomic", full_disk)
    new = _rec("a", 2e-3, (1e-3, 3e-3))
    with pytest.raises(OSError):
        replace_records(path, {new.key: new})
    assert path.read_bytes() == before


# -- the host allocator ------------------------------------------------------------------------------


FAULTS = textwrap.dedent("""
    import json, resource, sys
    from tileops.bench.allocator import keep_freed_memory
    applied = keep_freed_memory() if sys.argv[1] == "keep" else None
    import torch
    x = torch.randn(256, 1024)
    for _ in range(50):
        torch.nn.functional.rms_norm(x, (1024,))  # a 1 MiB output on every call
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(100):
        torch.nn.functional.rms_norm(x, (1024,))
    print(json.dumps({"applied": applied, "faults_per_call": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                                                              - before) / 100}))
""")


@pytest.mark.skipif(allocator.describe()["policy"] is None, reason="not glibc: nothing is applied")
def test_the_workers_allocator_reuses_freed_memory_instead_of_faulting_it_in_again() -> None:
    """An eager op's 1 MiB output, allocated on every call: with the policy no call faults a page in (without
    it glibc may map it fresh each time, 256+ faults per call, or not: it depends on the process's history)."""
    r = subprocess.run([sys.executable, "-c", FAULTS, "keep"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["applied"]["applied"] is True and "32 MiB" in got["applied"]["policy"]
    assert got["faults_per_call"] < 1, got


# -- end to end ---------------------------------------------------------------------------------------


def _bench(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tileops.cli", "bench", "--device", "cpu", "--quick", "--op", "add",
                           "--out", str(out), "--no-plot", "--calibrate", "never", *extra],
                          capture_output=True, text=True, timeout=600)  # add's 3 CPU rows: the fewest a drift needs


def test_a_two_pass_bench_writes_one_record_per_row_with_the_drift_in_its_interval(tmp_path: Path) -> None:
    """... and a fleet sees its noisy hosts: the drift is one run-level metric series."""
    from prometheus_client.parser import text_string_to_metric_families

    r = _bench(tmp_path / "two", "--textfile", str(tmp_path / "tf"))
    assert r.returncode in (0, 1), r.stderr[-3000:]
    info = read_run_info(tmp_path / "two")
    recs = list(iter_records(tmp_path / "two"))
    keys = [x.key for x in recs]
    assert len(keys) == len(set(keys)) == info.rows_total == 3  # the second pass replaced, it did not append
    assert "second pass: 3 row(s) visited again" in r.stderr and "host drift between the two passes" in r.stderr
    drift = info.host_drift
    assert drift["rows"] == 3 and drift["sigma"] is not None and drift["widened"] == 3 and drift["kept_first"] == []
    (prom,) = (tmp_path / "tf").glob("tileops_cpu-*.prom")
    samples = {s.name: s.value for f in text_string_to_metric_families(prom.read_text()) for s in f.samples}
    assert samples["tileops_run_host_drift_sigma"] == pytest.approx(drift["sigma"])
    assert info.host_allocator["applied"] is (allocator.describe()["policy"] is not None)
    for rec in recs:
        t = rec.timing
        assert rec.status == "ok" and t is not None and t.median_ci_s is not None
        lo, hi = t.median_ci_s
        assert lo <= t.median_s <= hi
        # the drift is in every interval: at least its own half-width (the interval may be held to the contract)
        assert hi / t.median_s - 1 >= drift_half_width(drift["sigma"]) * 0.999 or hi >= 3600
        assert rec.conditions is not None and rec.conditions.calls > t.warmup  # the second visit's window


def test_one_pass_visits_each_row_once_and_says_no_drift(tmp_path: Path) -> None:
    r = _bench(tmp_path / "one", "--passes", "1", "--textfile", str(tmp_path / "tf"))
    assert r.returncode in (0, 1), r.stderr[-3000:]
    info = read_run_info(tmp_path / "one")
    assert info.options.passes == 1 and info.host_drift == {} and "second pass" not in r.stderr
    assert len(list(iter_records(tmp_path / "one"))) == info.rows_total == 3
    assert dataclasses.asdict(info.options)["passes"] == 1
    (prom,) = (tmp_path / "tf").glob("tileops_cpu-*.prom")
    assert "tileops_run_host_drift_sigma" not in prom.read_text()


def test_a_row_whose_second_visit_crashes_keeps_its_first_record_and_the_sweep_goes_on(tmp_path: Path) -> None:
    """A worker crash in the second pass (the op faults on its second visit only) loses nothing: that row's
    first record stands, run.json names it, and the rows after it get their second visit in a new worker."""
    import shutil

    faulty = tmp_path / "faulty_ops"
    shutil.copytree(Path(__file__).parent / "data" / "faulty_ops", faulty)
    env = {**os.environ, "TILEOPS_MANIFEST_PATH": str(faulty)}
    subprocess.run([sys.executable, "-m", "tileops.cli", "codegen", "--manifest", str(faulty)], check=True, env=env,
                   capture_output=True)
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "tileops.cli", "bench", "--device", "cpu", "--quick", "--op",
                        "second_visit_crash_op", "--op", "add", "--out", str(out), "--no-plot", "--calibrate",
                        "never"], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode in (0, 1), r.stderr[-3000:]
    assert "ERROR (crash)" in r.stderr  # the second visit's line says what happened, and the drift line after
    assert "1 row(s) keep their first visit's record" in " ".join(r.stderr.split())
    recs = {x.key: x for x in iter_records(out)}
    info = read_run_info(out)
    assert len(recs) == info.rows_total == 4 and all(x.status == "ok" for x in recs.values())
    assert info.rows_error == 0 and info.status == "completed"
    crashed = ("second_visit_crash_op", "cpu-second-visit-crash", "float32", "torch")
    assert info.host_drift["kept_first"] == [" ".join(crashed)]
    assert info.host_drift["rows"] == 3 and info.host_drift["sigma"] is not None  # the others' pairs


def test_a_sweep_stopped_in_its_second_pass_keeps_the_first_pass_records(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A real Ctrl-C as the second pass begins: every row's first record stays, whole, one per row, and
    run.json says interrupted, with no drift (none was measured)."""
    import signal

    from tileops.cli import main
    from tileops.pipeline import progress

    def ctrl_c(self, number: int, total: int) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(progress.RowProgress, "pass_started", ctrl_c)
    out = tmp_path / "run"
    code = main(["bench", "--device", "cpu", "--quick", "--op", "relu", "--out", str(out), "--no-plot",
                 "--calibrate", "never"])
    assert code == 130
    info = read_run_info(out)
    recs = list(iter_records(out))
    assert info.status == "interrupted" and info.host_drift == {}
    assert len(recs) == len({r.key for r in recs}) == info.rows_total == 2 and all(r.status == "ok" for r in recs)

