"""A hundred random kills (issue 38, item 2): the benchmark runs, and its judge cannot pass a run that lost, doubled
or tore a record; what its kills found is held here too.

``benchmarks/random_kills.py`` kills a real CPU bench at seeded random moments and resumes it; the hundred trials
are the benchmark's (docs/reliability.md, "A hundred random kills"). Two trials here hold that it runs to its
verdict, that its phase reading follows a real run through every phase, and that its comparison finds a
planted loss: a deleted line, a duplicated record, a torn tail, a run file that never completed.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from cli_support import tileops

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "random_kills.py"


def _benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("random_kills", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["random_kills"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def two_trials(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("kills")
    res = subprocess.run([sys.executable, str(BENCH), "--trials", "2", "--seed", "3", "--op", "relu",
                          "--out", str(out)], capture_output=True, text=True, timeout=600)
    return out, res


@pytest.mark.slow
def test_two_random_kills_resume_to_the_reference_rows(two_trials: tuple[Path, subprocess.CompletedProcess[str]]
                                                       ) -> None:
    out, res = two_trials
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = res.stdout.splitlines()
    assert lines[0].startswith("reference: 1 rows (relu;")
    assert [line.split(":")[0] for line in lines[1:3]] == ["trial 1/2", "trial 2/2"]
    assert all(line.endswith(": ok") or ": ok (" in line for line in lines[1:3]), lines
    assert "trials passed: 2/2" in lines
    counts = next(line for line in lines if line.startswith("kills per phase: "))
    assert sum(int(part.rsplit(" ", 1)[1]) for part in counts.split(": ", 1)[1].split(", ")) == 2


@pytest.mark.slow
def test_the_phases_are_read_off_a_real_run_in_order(two_trials: tuple[Path, subprocess.CompletedProcess[str]]
                                                     ) -> None:
    """The reference run's own events walk through every phase the benchmark counts, once each, in order: a
    printer that changed what it says would leave kills counted in the wrong phase."""
    out, _ = two_trials
    rk = _benchmark()
    events = [json.loads(line) for line in (out / "reference" / "bench.out").read_text().splitlines()]
    assert rk.phases_of(events) == list(rk.PHASES[:-1])


@pytest.mark.slow
def test_the_judge_finds_a_planted_loss_duplicate_tear_and_unfinished_run(
        two_trials: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    out, _ = two_trials
    rk = _benchmark()
    ref_run = out / "reference" / "run"
    ref = rk.reference_of(ref_run, 0, 1.0)
    trial = out / "trial-001" / "run"
    assert rk.judge_records(trial, ref) == [] and rk.judge_run_file(trial, ref) == []

    def planted(name: str) -> Path:
        run = tmp_path / name
        shutil.copytree(trial, run, ignore=shutil.ignore_patterns("run.lock"))
        return run

    records = (trial / "records.jsonl").read_bytes()
    ok_line = next(line for line in records.splitlines(keepends=True) if b'"status": "ok"' in line
                   or b'"status":"ok"' in line)
    row = " ".join(next(iter(ref.status)))

    lost = planted("lost")
    (lost / "records.jsonl").write_bytes(records.replace(ok_line, b""))
    assert f"row lost: {row}" in rk.judge_records(lost, ref)

    doubled = planted("doubled")
    (doubled / "records.jsonl").write_bytes(records + ok_line)
    assert f"row duplicated: {row} recorded OK 2 times" in rk.judge_records(doubled, ref)

    torn = planted("torn")
    (torn / "records.jsonl").write_bytes(records + ok_line[:40])
    assert any("ends in a torn line (40 bytes)" in p for p in rk.judge_records(torn, ref))

    broken = planted("broken")
    (broken / "records.jsonl").write_bytes(ok_line[:40] + b"\n" + records)
    assert any(p.startswith("line 1 is not a whole record") for p in rk.judge_records(broken, ref))

    running = planted("running")
    info = json.loads((running / "run.json").read_text())
    info.update(status="running", host_noise={})
    (running / "run.json").write_text(json.dumps(info))
    (running / "roofline.svg").unlink()
    said = rk.judge_run_file(running, ref)
    assert "run.json says running" in said and "roofline.svg missing (the reference wrote it)" in said
    assert "run.json has no host_noise: the second pass never settled" in said


@pytest.mark.slow
def test_a_start_killed_before_its_run_file_leaves_a_directory_a_new_run_takes(tmp_path: Path) -> None:
    """Found building the random kills (the states a kill at each step of a start leaves): a bench killed after
    it created its records file but before its run.json left a directory `--resume` refuses ("nothing to resume;
    start a new run with --out") and a new run refused too ("already holds a run; use --resume"). A records file
    left empty beside no run file holds no run."""
    from tileops.bench import sweep

    run = tmp_path / "run"
    sweep._open_new(run).release()  # what the kill leaves: the lock file and an empty records file, no run.json
    assert (run / "records.jsonl").read_bytes() == b"" and not (run / "run.json").exists()
    refused = tileops("bench", "--resume", str(run))
    assert refused.returncode == 2 and "no run.json, so nothing to resume; start a new run with --out" in \
        refused.stderr
    listed = tileops("bench", "--list", "--out", str(run), "--device", "cpu", "--op", "relu", "--dtype", "float32")
    assert listed.returncode == 0, listed.stderr
    sweep._open_new(run).release()  # taken again under the lock, as the run does

    (run / "records.jsonl").write_text("{}\n")  # a records file with something in it is a run's, run file or not
    with pytest.raises(sweep.TileOpsError, match="already holds a run"):
        sweep._open_new(run)
    (run / "records.jsonl").write_bytes(b"")
    (run / "run.json").write_text("{}")
    with pytest.raises(sweep.TileOpsError, match="already holds a run"):
        sweep.check_run_dir(run, None)


@pytest.mark.slow
def test_a_kill_between_the_second_pass_rewrite_and_run_json_keeps_the_pass_figures(
        two_trials: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    """Found by kills timed just after the second pass's last row: the pass rewrites records.jsonl (both visits in each row), then stores
    the host's prior, removes first-visits.jsonl and closes its worker before run.json gets ``host_noise``; a
    kill in that window (tenths of a second on a loaded host) resumed to a run.json without the pass's figures,
    and nothing owed to bring them back. The pass now keeps its figures in second-pass.json before the rewrite
    and removes it once run.json holds them; a resumed run whose records hold the pass takes them from it.

    The state is built from a real finished run: run.json as the run saved it before its rows (``running``, no
    ``host_noise``), beside the rewritten records and the file the pass writes."""
    from tileops.bench.firstvisits import SETTLED_PASS_FILE, settled_pass, write_settled_pass
    from tileops.records import iter_records

    out, _ = two_trials
    done = out / "reference" / "run"
    assert not (done / SETTLED_PASS_FILE).exists()  # a finished run leaves none
    run = tmp_path / "run"
    shutil.copytree(done, run, ignore=shutil.ignore_patterns("run.lock"))
    info = json.loads((run / "run.json").read_text())
    figures = {k: v for k, v in info["host_noise"].items() if k != "prior"}
    keys = [r.key for r in iter_records(run, fast_json=False)]
    info.update(status="running", host_noise={}, finished_at=None, exit_code=None, health={})
    (run / "run.json").write_text(json.dumps(info))
    write_settled_pass(run, figures, keys)
    assert settled_pass(run, {k: 1 for k in keys}) is None  # records not rewritten yet: the pass is owed again
    records = (run / "records.jsonl").read_bytes()

    res = tileops("bench", "--resume", str(run), env={"TILEOPS_PROFILE_DIR": str(out / "reference" / "store")})
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"run.json takes the pass's figures from {SETTLED_PASS_FILE}" in res.stderr
    after = json.loads((run / "run.json").read_text())
    assert after["status"] == "completed" and after["health"]
    assert {k: v for k, v in after["host_noise"].items() if k != "prior"} == figures
    assert after["host_noise"]["prior"].startswith("unknown: the run stopped between")
    assert (run / "records.jsonl").read_bytes() == records  # nothing visited again, nothing appended
    assert not (run / SETTLED_PASS_FILE).exists() and not (run / "first-visits.jsonl").exists()


def test_the_settled_pass_is_taken_only_when_the_records_hold_it(tmp_path: Path) -> None:
    """second-pass.json is taken only when every row it settled holds two visits in the records (else the
    rewrite never happened and the pass is owed again); a file that is not one it wrote, or not a regular file
    (a FIFO would hang the resume), gives nothing."""
    import os

    from tileops.bench.firstvisits import SETTLED_PASS_FILE, settled_pass, write_settled_pass

    key, other = ("relu", "cpu-512x1024", "float32", "torch"), ("add", "cpu-512x1024", "float32", "torch")
    assert settled_pass(tmp_path, {key: 2}) is None  # no file
    write_settled_pass(tmp_path, {"second_pass_shift": {"memory": 0.01}}, [key, other])
    assert settled_pass(tmp_path, {key: 2, other: 2}) == {"second_pass_shift": {"memory": 0.01}}
    assert settled_pass(tmp_path, {key: 2, other: 1}) is None and settled_pass(tmp_path, {key: 2}) is None
    (tmp_path / SETTLED_PASS_FILE).write_text('{"host_noise": {}, "settled": [["relu"]]}')
    assert settled_pass(tmp_path, {key: 2}) is None
    (tmp_path / SETTLED_PASS_FILE).unlink()
    os.mkfifo(tmp_path / SETTLED_PASS_FILE)
    assert settled_pass(tmp_path, {key: 2}) is None
