"""The benchmark runner (M4) on the CPU: records, isolation, resume, the stopping rule.

How one row is timed (timers, CUPTI attribution, warm-up, fallback) is tested in test_timers.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from health_support import assert_judged_but_for_noise

from tileops.records import iter_records, parse_record, read_run_info, to_json
from tileops.bench.stopping import NOISE_REACHED, SAMPLE_CAP, TIME_CAP, StoppingRule, quantile, rel_noise
from cli_support import tileops, tileops_argv

FAULTY = Path(__file__).parent / "data" / "faulty_ops"


@pytest.fixture(scope="module")
def profile_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An isolated profile store holding a quick CPU calibration, so pricing has a measured profile. The nominal
    bandwidth is stated (as a fleet of known hardware does) so the physics check judges memory on any host,
    DMI readable or not."""
    store = tmp_path_factory.mktemp("profiles")
    env = {"TILEOPS_PROFILE_DIR": str(store)}
    # --force: on a busy host (the suite's other worker) the calibration is stored marked, not refused (exit 5)
    r = tileops("calibrate", "--device", "cpu", "--quick", "--force", env={**env, "TILEOPS_DRAM_BANDWIDTH": "1TB/s"})
    assert r.returncode == 0, r.stdout + r.stderr
    return env


@pytest.fixture(scope="module")
def faulty_path(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The test-only manifest directory, with its generated evaluators, on the search path."""
    d = tmp_path_factory.mktemp("faulty") / "faulty_ops"
    shutil.copytree(FAULTY, d)
    r = tileops("codegen", "--manifest", str(d))
    assert r.returncode == 0, r.stderr
    return {"TILEOPS_MANIFEST_PATH": str(d)}


# -- end to end --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_set_run(tmp_path_factory: pytest.TempPathFactory,
                profile_store: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One real quick run of the whole `cpu` row set, which the tests below each read for something else (the
    records and the table; the file's JSON lines): the run is the cost, the checks are cheap."""
    out = tmp_path_factory.mktemp("cpu-set") / "run"
    return tileops("bench", "--quick", "--out", str(out), env=profile_store), out


@pytest.mark.slow
def test_cpu_set_end_to_end(cpu_set_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """The whole `cpu` row set: every row recorded OK with a valid schema, then the SOL table and plot."""
    r, out = cpu_set_run
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    recs = list(iter_records(out))
    assert recs, "no records"
    for rec in recs:
        assert rec.status == "ok", (rec.op, rec.label, rec.error)
        assert "cpu" in rec.tags
        assert rec.timing is not None and rec.timing.timer == "cpu-wall" and rec.timing.n >= 1
        assert rec.timing.min_s <= rec.timing.median_s <= rec.timing.p90_s
        assert rec.flops is not None and rec.bytes is not None and rec.roof_key
        assert rec.env.device.kind == "cpu" and rec.env.threads and rec.env.run_id == out.name or rec.env.run_id
        assert parse_record(to_json(rec)) == rec  # round trip
    from tileops.ops.catalog import load_entries

    cpu_rows = {(e.name, w.label) for e in load_entries().values() if e.status == "implemented"
                for w in e.workloads if "cpu" in w.tags}
    assert {(x.op, x.label) for x in recs} == cpu_rows
    info = read_run_info(out)
    assert info.status == "completed" and info.exit_code == 0 and info.rows_ok == len(recs)
    assert "SOL efficiency" in r.stdout
    assert_judged_but_for_noise(r.stdout)  # the nominal bandwidth came in: nothing NOT JUDGED but for noise
    assert (out / "roofline.png").stat().st_size > 0 and (out / "roofline.json").exists()


@pytest.mark.slow
def test_crash_hang_and_exception_become_error_records(tmp_path: Path, faulty_path: dict[str, str],
                                                       profile_store: dict[str, str]) -> None:
    out = tmp_path / "run"
    r = tileops("bench", "--quick", "--op", "crash_op", "--op", "stall_op", "--op", "raise_op", "--op", "relu",
                "--row-timeout", "8", "--out", str(out), "--no-plot", env={**faulty_path, **profile_store})
    assert r.returncode == 1, r.stdout + r.stderr  # some rows failed, the run finished
    by_op = {}
    for rec in iter_records(out):
        by_op.setdefault(rec.op, []).append(rec)
    assert by_op["crash_op"][0].status == "error" and by_op["crash_op"][0].error.kind == "crash"
    assert "signal 11" in by_op["crash_op"][0].error.message
    assert by_op["stall_op"][0].error.kind == "timeout"
    assert by_op["raise_op"][0].error.kind == "exception"
    assert "deliberate failure" in by_op["raise_op"][0].error.message
    assert by_op["relu"] and all(x.status == "ok" for x in by_op["relu"])  # the sweep went on
    info = read_run_info(out)
    assert info.status == "completed" and info.rows_error == 3 and info.exit_code == 1
    # The table on stdout; the errors (each failed row, the count) and the progress on stderr.
    assert "SOL efficiency" in r.stdout and "SOL efficiency" not in r.stderr
    assert "ERROR (crash)" in r.stderr and "ERROR (timeout)" in r.stderr and "deliberate failure" in r.stderr
    assert "error: 3 row(s) failed" in r.stderr
    assert "ERROR (" not in r.stdout and "row(s) failed" not in r.stdout and "deliberate failure" not in r.stdout


@pytest.mark.slow
def test_interrupt_leaves_a_valid_file_and_resume_finishes(tmp_path: Path, faulty_path: dict[str, str],
                                                           profile_store: dict[str, str]) -> None:
    out = tmp_path / "run"
    env = {**os.environ, **faulty_path, **profile_store}
    cmd = tileops_argv("bench", "--quick", "--op", "relu", "--op", "stall_op", "--row-timeout", "120", "--out",
                       str(out), "--no-plot")
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 180
    records = out / "records.jsonl"
    while time.time() < deadline and not (records.exists() and records.read_text().count("\n") >= 1):
        time.sleep(0.2)
    time.sleep(3)  # relu rows first (op-name order), then inside the stalling row
    p.send_signal(signal.SIGINT)
    output, _ = p.communicate(timeout=60)
    assert p.returncode == 130, output
    info = read_run_info(out)
    assert info.status == "interrupted"
    first = list(iter_records(out))  # every line is a whole, valid record
    assert "--resume" in output

    # Resume without the hanging op's manifest: only relu rows remain to run, nothing is run twice.
    r = tileops("bench", "--resume", str(out), "--no-plot", env=profile_store)
    recs = list(iter_records(out))
    ok_keys = [x.key for x in recs if x.status == "ok"]
    assert len(ok_keys) == len(set(ok_keys)), "a row recorded OK was run again"
    done_before = {x.key for x in first if x.status == "ok"}
    assert done_before and done_before <= set(ok_keys)
    assert any(k[0] == "relu" for k in ok_keys)
    info = read_run_info(out)
    assert info.status == "completed", r.stdout + r.stderr


def test_new_run_refuses_to_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "records.jsonl").write_text("")
    (out / "run.json").write_text("{}")  # a run's, even before its first row (an empty records file alone is
    # a start killed before its run file: tests/test_random_kills.py)
    r = tileops("bench", "--op", "relu", "--out", str(out))
    assert r.returncode == 2 and "--resume" in r.stderr


def test_no_matching_row_is_a_clear_error() -> None:
    r = tileops("bench", "--op", "no_such_op")
    assert r.returncode == 2 and "tileops ops" in r.stderr


# -- the stopping rule ---------------------------------------------------------------------------


def test_stops_when_median_precision_and_minimum_time_are_met() -> None:
    rule = StoppingRule(target_precision=0.01, min_time_s=0.5, max_time_s=10, min_samples=5)
    steady = [1.0, 1.001, 0.999, 1.0, 1.0]
    assert rule.decide(steady, elapsed_s=0.1) is None  # quiet but too soon
    assert rule.decide(steady[:3], elapsed_s=1.0) is None  # too few samples
    assert rule.decide(steady, elapsed_s=0.6) == NOISE_REACHED


def test_noisy_stream_runs_to_the_time_cap_and_reports_its_noise() -> None:
    rule = StoppingRule(target_precision=0.01, min_time_s=0.1, max_time_s=2.0, min_samples=3)
    noisy = [1.0, 2.0, 0.5, 3.0, 1.0, 0.7]
    assert rule.decide(noisy, elapsed_s=1.0) is None
    assert rule.decide(noisy, elapsed_s=2.0) == TIME_CAP
    assert rel_noise(noisy) > 0.5


def test_sample_cap() -> None:
    rule = StoppingRule(target_precision=0.0, min_time_s=100, max_time_s=100, max_samples=10)
    assert rule.decide([1.0, 2.0] * 5, elapsed_s=0.01) == SAMPLE_CAP


def test_quantile_interpolates() -> None:
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == 3.0
    assert quantile([1.0, 2.0], 0.1) == pytest.approx(1.1)
    assert rel_noise([2.0]) == 0.0


@pytest.mark.slow
def test_records_in_a_run_are_json_lines(cpu_set_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """records.jsonl is one JSON object per line, each the record the reader makes of it, in the order written.
    (The run of the whole `cpu` set, shared; what `--op relu --dtype float32` selects, which this test's own run
    used to show, is checked on the plan below.)"""
    r, out = cpu_set_run
    assert r.returncode == 0, r.stderr[-3000:]
    lines = (out / "records.jsonl").read_text().splitlines()
    records = list(iter_records(out))
    assert len(lines) == len(records) >= 1
    for line, rec in zip(lines, records):
        obj = json.loads(line)
        assert (obj["op"], obj["label"], obj["dtype"], obj["status"]) == (rec.op, rec.label, rec.dtype, "ok")
        assert parse_record(line) == rec
    assert {(o["op"], o["dtype"]) for o in map(json.loads, lines)} >= {("relu", "float32")}


def test_op_and_dtype_select_only_those_rows() -> None:
    """`--op relu --dtype float32`: relu's CPU rows, each in float32 only (the plan the bench runs)."""
    from tileops.bench.select import Selection
    from tileops.bench.sweep import plan_rows
    from tileops.device import describe_device

    planned = plan_rows(Selection(ops=["relu"], dtypes=["float32"]), describe_device("cpu"))
    assert planned and {(p.op, p.case_name) for p in planned} == {("relu", "float32")}
    assert len(plan_rows(Selection(ops=["relu"]), describe_device("cpu"))) > len(planned)  # the filter filtered
