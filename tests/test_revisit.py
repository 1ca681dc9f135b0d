"""The sweep's second pass (``tileops.bench.revisit``) and the workers' host allocator (``tileops.bench.allocator``).

Issue 34: each row's interval comes from its own visits, the second in a fresh worker process, pooled with rows
of its kind (``tileops.bench.hostnoise``). The pieces are checked on deterministic blocks and records (the pooled
record, the one-visit rows, the kinds, the one-record-per-row rewrite), then end to end on real CPU rows: a
two-pass bench writes one record per row with both intervals and run.json states the host's components, and
``--passes 1`` writes none.
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
from tileops.bench.hostnoise import prior_model
from tileops.bench.interval import QUICK_BLOCKS, visit_of
from tileops.records import iter_records, read_run_info, replace_records
from cli_support import tileops


def _visit(level: float, n: int, wiggle: float = 0.01) -> list[list[float]]:
    """``n`` blocks around ``level`` seconds, alternating by ``wiggle`` (deterministic)."""
    return [[level * (1 + wiggle * (-1) ** i)] * 3 for i in range(n)]


def _rec(op: str, median_s: float, ci: tuple[float, float] | None, backend: str = "torch", **extra):
    return make_record(op=op, median_s=median_s, median_ci_s=ci, backend=backend, **extra)


# -- settle: the records that replace the first pass's ----------------------------------------------


def test_settle_pools_each_revisited_row_and_finishes_every_row_under_one_model() -> None:
    ops = ["a", "b", "c", "d"]
    shifts = [1.10, 0.92, 1.05, 0.95]  # each row's second visit against its first
    first = {}
    second = {}
    for op, shift in zip(ops, shifts):
        rec = _rec(op, 1e-3, None)
        first[rec.key] = (rec, _visit(1e-3, 4, 0.001))
        second[rec.key] = (_rec(op, 1e-3 * shift, None), _visit(1e-3 * shift, 4, 0.001))
    compiled = _rec("e", 2e-3, None, backend="compile")  # visited once: its kind's between-visit sd
    first[compiled.key] = (compiled, _visit(2e-3, 4, 0.001))
    updated, model = revisit.settle(first, second, "cpu")
    assert set(updated) == set(first) and model.pairs == 4 and model.rows_by_kind == {"memory": 5}
    assert 0.03 < model.between["memory"].sigma < 0.12 and model.between["memory"].source == "this run (4 rows)"
    for op, shift in zip(ops, shifts):
        t = updated[_rec(op, 1e-3, None).key].timing
        assert t.visits_s == pytest.approx([1e-3, 1e-3 * shift])
        assert t.median_s == pytest.approx(1e-3 * math.sqrt(shift))  # the level: the visits' geometric mean
        assert t.n == 24 and t.level_ci_s[0] < t.median_s < t.level_ci_s[1]
        assert t.median_ci_s[0] < t.level_ci_s[0] and t.median_ci_s[1] > t.level_ci_s[1]  # a rerun: wider
        assert t.ci_df is not None and t.fast_ci_s is not None
    one = updated[compiled.key].timing
    assert one.visits_s == pytest.approx([2e-3]) and one.median_s == pytest.approx(2e-3)
    h = math.log(one.level_ci_s[1] / one.median_s)
    assert h > 1.5 * model.between["memory"].sigma  # at least the kind's between-visit sd


def test_a_row_whose_visits_differ_tenfold_keeps_its_level_between_its_p10_and_p90() -> None:
    """A neighbour's burst in one visit (16 ms against 1.6 ms, as a loaded CI host once gave moe_ffn): the level,
    the visits' geometric mean, lay above the pooled samples' p90. Each visit's quantiles combined as the level
    is keep min <= p10 <= level <= p90, however far the visits differ."""
    from tileops.bench.execute import visit_timing

    def timed(op: str, blocks: list[list[float]]):
        t = visit_timing(blocks, timer="cpu-wall", warmup=1, total_s=0.1, stop_reason="median precision reached")
        return dataclasses.replace(_rec(op, t.median_s, None), timing=t)

    slow = [[16e-3 * (1 + 0.02 * i)] * 2 for i in range(3)]  # equal time, so the slow visit has few samples
    fast = [[1.56e-3 * (1 + 0.02 * i)] * 10 for i in range(8)]
    rec1, rec2 = timed("a", slow), timed("a", fast)
    updated, _ = revisit.settle({rec1.key: (rec1, slow)}, {rec2.key: (rec2, fast)}, "cpu")
    t = updated[rec1.key].timing
    assert t.median_s == pytest.approx(math.sqrt(t.visits_s[0] * t.visits_s[1]))
    pooled = sorted(x for b in slow + fast for x in b)
    assert pooled[int(0.9 * len(pooled))] < t.median_s  # the pooled samples' p90 would sit below the level
    assert t.min_s <= t.p10_s <= t.median_s <= t.p90_s and t.n == len(pooled) == 86


def test_settle_with_few_rows_says_so_and_uses_the_documented_default() -> None:
    first = {r.key: (r, _visit(1e-3, 3)) for r in (_rec("a", 1e-3, None), _rec("b", 1e-3, None))}
    second = {k: (r, _visit(1.2e-3, 3)) for k, (r, _) in first.items()}
    updated, model = revisit.settle(first, second, "cpu")
    assert "documented default" in model.between["memory"].source
    assert model.shift["memory"] == pytest.approx(math.log(1.2), rel=1e-3)  # no shift of every row: their mean
    assert any("fewer than the 3" in n for n in model.notes)
    assert all(r.timing.level_ci_s is not None for r in updated.values())


def test_a_row_is_pooled_with_its_kind() -> None:
    memory = make_record(flops=100, bytes=800)
    compute = make_record(flops=10**9, bytes=10**6)
    assert revisit.kind_by_intensity(memory) == "memory" and revisit.kind_by_intensity(compute) == "compute"
    gpu_mid = make_record(flops=10**8, bytes=10**7, device_kind="cuda")  # 10 FLOP/B: memory-bound on a GPU
    assert revisit.kind_by_intensity(gpu_mid) == "memory"
    assert revisit.kind_by_intensity(make_record(flops=10, bytes=0)) == "compute"
    first = {compute.key: (compute, _visit(1e-3, 4))}
    _, model = revisit.settle(first, {}, "cpu", kind_of=lambda r: "nonsense")  # an unknown kind: by intensity
    assert model.rows_by_kind == {"compute": 1}


def test_finish_gives_a_one_visit_row_the_priors_interval() -> None:
    rec = _rec("a", 1e-3, None)
    done = revisit.finish(rec, [visit_of(_visit(1e-3, 6, 0.02))], "memory", prior_model("cpu"))
    t = done.timing
    assert t.level_ci_s is not None and t.median_ci_s is not None and t.visits_s == pytest.approx([1e-3], rel=1e-3)
    assert t.median_ci_s[1] / t.median_s > 1.15  # the documented default: 15 % a visit on a CPU memory row
    failed = make_record(status="error")
    assert revisit.finish(failed, [visit_of(_visit(1e-3, 3))], "memory", prior_model("cpu")) is failed


def test_a_pooled_record_is_contended_if_either_visit_was_and_keeps_its_own_window() -> None:
    from tileops.records import RowConditions

    busy = RowConditions(window_s=0.5, contended=True, contention=["steal 12 % of the CPUs"], calls=40)
    calm = RowConditions(window_s=0.6, calls=55)
    merged = revisit.merge_conditions(busy, calm)
    assert merged.contended and merged.contention == ["first visit: steal 12 % of the CPUs"]
    assert (merged.window_s, merged.calls, merged.throttled) == (0.6, 55, False)  # the second visit's window
    assert revisit.merge_conditions(None, calm) is calm  # nothing to merge


def test_two_visits_timed_alike_are_pooled_and_a_visit_that_fell_back_is_not() -> None:
    a, b = _rec("a", 1e-3, None, timer="cupti"), _rec("a", 1e-3, None, timer="cupti")
    fell_back = make_record(op="a", timer="cuda-events")
    fell_back = dataclasses.replace(fell_back, timing=dataclasses.replace(fell_back.timing,
                                                                          fallback_reason="CUPTI attribution failed"))
    assert revisit.same_timer(a, b) and not revisit.same_timer(a, fell_back)
    assert not revisit.same_timer(a, make_record(op="a", status="error"))


def test_only_eager_rows_that_run_are_revisited_and_both_visits_get_half() -> None:
    from tileops.bench.select import Planned
    from tileops.ops.spec import Workload

    row = Workload(label="r", indices={}, dtypes=("float32",))
    eager, compiled = Planned("relu", row, "float32", "torch"), Planned("relu", row, "float32", "compile")
    skipped = Planned("relu", row, "float32", "torch", skip_reason="unsupported")
    assert revisit.revisited(eager, 2) and not revisit.revisited(eager, 1)
    assert not revisit.revisited(compiled, 2) and not revisit.revisited(skipped, 2)
    assert revisit.first_visit_rule(QUICK_BLOCKS, eager, 2) == revisit.second_visit_rule(QUICK_BLOCKS)
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
    faults = []
    for _ in range(100):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        torch.nn.functional.rms_norm(x, (1024,))
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    faults.sort()
    print(json.dumps({"applied": applied, "faults_per_call": faults[50], "faults_most": faults[-1],
                      "faults_total": sum(faults)}))
""")


@pytest.mark.skipif(allocator.describe()["policy"] is None, reason="not glibc: nothing is applied")
def test_the_workers_allocator_reuses_freed_memory_instead_of_faulting_it_in_again() -> None:
    """An eager op's 1 MiB output, allocated on every call: with the policy a call faults no page in (without
    it glibc may map it fresh each time, 256+ faults per call, or not: it depends on the process's history). The
    median call is judged: a one-off growth of the heap (one 1 MiB fault in a hundred calls, seen in a clean-clone
    CI run beside a browser test) is not the output mapped fresh on every call."""
    r = subprocess.run([sys.executable, "-c", FAULTS, "keep"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["applied"]["applied"] is True and "32 MiB" in got["applied"]["policy"]
    assert got["faults_per_call"] < 1, got


def test_first_visits_read_back_exactly_and_a_torn_line_is_passed_over_then_cut_off(tmp_path: Path) -> None:
    """What a resumed second pass pools: each row's first visit, its samples exactly as measured (the visit's
    statistics then equal), the newest per row; a line a crash cut short is passed over, and cut off before a
    resumed run appends, so the next line is whole."""
    from tileops.bench.firstvisits import append_first_visit, read_first_visits

    path = tmp_path / "first-visits.jsonl"
    a, b = ("relu", "x", "float32", "torch"), ("add", "y", "float32", "torch")
    blocks = [[1.234567890123e-4, 1.1e-4 / 3], [9.87654321e-5]]
    append_first_visit(path, a, _visit(1e-3, 4))
    append_first_visit(path, b, blocks)
    append_first_visit(path, a, blocks)  # the row run again (an error, then ok): the newest counts
    with path.open("ab") as f:
        f.write(b'{"key": ["gelu", "z", "float32", "torch"], "blocks": [[0.00')  # a crash mid-write
    got = read_first_visits(path)
    assert set(got) == {a, b} and got[b] == blocks and visit_of(got[a]) == visit_of(blocks)
    assert not path.read_bytes().endswith(b"\n")  # reading alone changes nothing
    assert read_first_visits(path, repair=True) == got and path.read_bytes().endswith(b"\n")
    append_first_visit(path, ("gelu", "z", "float32", "torch"), [[2e-3]])
    assert len(read_first_visits(path)) == 3
    assert read_first_visits(tmp_path / "none.jsonl") == {}


# -- end to end ---------------------------------------------------------------------------------------


def _bench(out: Path, *extra: str) -> subprocess.CompletedProcess:
    """add's 3 CPU rows (the fewest a kind's pool needs), with a profile store of the run's own beside it."""
    return tileops("bench", "--device", "cpu", "--quick", "--op", "add", "--out", str(out), "--no-plot",
                   "--calibrate", "never", *extra, env={"TILEOPS_PROFILE_DIR": str(out.parent / "profiles")})


@pytest.mark.slow
def test_a_two_pass_bench_writes_one_record_per_row_with_both_intervals(tmp_path: Path) -> None:
    """... run.json states the host's components, the host's prior is stored, and a fleet sees its noisy hosts:
    one run-level metric series per component and kind."""
    from prometheus_client.parser import text_string_to_metric_families

    r = _bench(tmp_path / "two", "--textfile", str(tmp_path / "tf"))
    assert r.returncode in (0, 1), r.stderr[-3000:]
    info = read_run_info(tmp_path / "two")
    recs = list(iter_records(tmp_path / "two"))
    keys = [x.key for x in recs]
    assert len(keys) == len(set(keys)) == info.rows_total == 3  # the second pass replaced, it did not append
    assert "second pass: 3 row(s) visited again in a fresh worker process" in " ".join(r.stderr.split())
    assert "between visits (one sd of a visit, each in its own process; run.json: host_noise):\n  memory-bound rows" \
        in r.stderr
    noise = info.host_noise
    assert noise["pairs"] == 3 and noise["kept_first"] == [] and noise["rows_by_kind"] == {"memory": 3}
    assert noise["between_visits"]["memory"]["source"] == "this run (3 rows)"
    assert "updated" in noise["prior"] and (tmp_path / "profiles" / "noise").is_dir()
    (prom,) = (tmp_path / "tf").glob("tileops_cpu-*.prom")
    samples = {(s.name, s.labels.get("component"), s.labels.get("kind")): s.value
               for f in text_string_to_metric_families(prom.read_text()) for s in f.samples}
    assert samples[("tileops_run_host_noise_sigma", "between_visits", "memory")] == pytest.approx(
        noise["between_visits"]["memory"]["sigma"])
    assert info.host_allocator["applied"] is (allocator.describe()["policy"] is not None)
    for rec in recs:
        t = rec.timing
        assert rec.status == "ok" and t is not None and t.median_ci_s is not None and t.level_ci_s is not None
        assert t.median_ci_s[0] <= t.level_ci_s[0] <= t.median_s <= t.level_ci_s[1] <= t.median_ci_s[1]
        assert len(t.visits_s) == 2 and t.median_s == pytest.approx(math.sqrt(t.visits_s[0] * t.visits_s[1]))
        assert rec.conditions is not None and 0 < rec.conditions.calls < t.n + t.warmup  # the second visit's window


@pytest.mark.slow
def test_one_pass_visits_each_row_once_with_the_priors_interval(tmp_path: Path) -> None:
    r = _bench(tmp_path / "one", "--passes", "1", "--textfile", str(tmp_path / "tf"))
    assert r.returncode in (0, 1), r.stderr[-3000:]
    info = read_run_info(tmp_path / "one")
    assert info.options.passes == 1 and info.host_noise == {} and "second pass" not in r.stderr
    recs = list(iter_records(tmp_path / "one"))
    assert len(recs) == info.rows_total == 3
    assert all(len(x.timing.visits_s) == 1 and x.timing.level_ci_s is not None for x in recs)
    assert dataclasses.asdict(info.options)["passes"] == 1
    (prom,) = (tmp_path / "tf").glob("tileops_cpu-*.prom")
    assert "tileops_run_host_noise_sigma{" not in prom.read_text()


@pytest.mark.slow
def test_a_row_whose_second_visit_crashes_keeps_its_first_visit_and_the_sweep_goes_on(tmp_path: Path) -> None:
    """A worker crash in the second pass (the op faults on its second visit only) loses nothing: that row keeps
    its first visit, run.json names it, and the rows after it get their second visit in a new worker."""
    import shutil

    faulty = tmp_path / "faulty_ops"
    shutil.copytree(Path(__file__).parent / "data" / "faulty_ops", faulty)
    env = {**os.environ, "TILEOPS_MANIFEST_PATH": str(faulty), "TILEOPS_PROFILE_DIR": str(tmp_path / "profiles"),
           "SECOND_VISIT_MARK": str(tmp_path / "first-visit-done")}
    tileops("codegen", "--manifest", str(faulty), check=True, environ=env)
    out = tmp_path / "run"
    r = tileops("bench", "--device", "cpu", "--quick", "--op",
                "second_visit_crash_op", "--op", "add", "--out", str(out), "--no-plot", "--calibrate",
                "never", timeout=600, environ=env)
    assert r.returncode in (0, 1), r.stderr[-3000:]
    assert "ERROR (crash)" in r.stderr  # the second visit's line says what happened
    assert "1 row(s) keep their first visit alone" in " ".join(r.stderr.split())
    recs = {x.key: x for x in iter_records(out)}
    info = read_run_info(out)
    assert len(recs) == info.rows_total == 4 and all(x.status == "ok" for x in recs.values())
    assert info.rows_error == 0 and info.status == "completed"
    crashed = ("second_visit_crash_op", "cpu-second-visit-crash", "float32", "torch")
    assert info.host_noise["kept_first"] == [" ".join(crashed)]
    assert info.host_noise["pairs"] == 3  # the others' pairs
    assert len(recs[crashed].timing.visits_s) == 1 and recs[crashed].timing.level_ci_s is not None


@pytest.mark.slow
def test_a_sweep_stopped_in_its_second_pass_keeps_the_first_pass_records(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A real Ctrl-C as the second pass begins: every row's first record stays, whole, one per row, with the
    prior's interval, and run.json says interrupted, with no host components (none was measured)."""
    import signal

    from tileops.cli import main
    from tileops.pipeline import progress

    def ctrl_c(self, number: int, total: int) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(progress.RowProgress, "pass_started", ctrl_c)
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(tmp_path / "profiles"))
    out = tmp_path / "run"
    code = main(["bench", "--device", "cpu", "--quick", "--op", "relu", "--out", str(out), "--no-plot",
                 "--calibrate", "never"])
    assert code == 130
    info = read_run_info(out)
    recs = list(iter_records(out))
    assert info.status == "interrupted" and info.host_noise == {}
    assert len(recs) == len({r.key for r in recs}) == info.rows_total == 2 and all(r.status == "ok" for r in recs)
    assert all(r.timing.level_ci_s is not None and len(r.timing.visits_s) == 1 for r in recs)
