"""Fault injection against the real thing: ``python -m tileops.cli bench`` in subprocesses.

Each case of docs/reliability.md that needs a process to die, a disk to fill or
two runners to race is here: SIGTERM and ``kill -9`` mid-row then resume, two
runners on one directory, a torn last line then resume, a full disk (a small
tmpfs) and a read-only one. The rows are the test-only ops of
``tests/data/faulty_ops`` (``stall_op`` sleeps for an hour, so a run is
reliably inside a row when it is stopped) and relu's small CPU rows, with
``--quick``; no profile is needed (``--calibrate never``: SOL stays blank).

The tmpfs cases mount one (``mount -t tmpfs``): they need root, which CI has;
without it they skip locally and fail under ``CI=true``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tileops.records import iter_records, read_run_info

sys.path.insert(0, str(Path(__file__).parent))  # export_support: records and runs built from the contracts
from reliability_support import fill, tmpfs
from cli_support import tileops, tileops_argv

FAULTY = Path(__file__).parent / "data" / "faulty_ops"
STALL = ["--op", "relu", "--dtype", "float32", "--op", "stall_op"]  # one relu row, then a row that never ends
QUIET = ["--quick", "--calibrate", "never", "--no-plot"]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The test-only manifest on the search path, and an empty profile store (nothing priced, nothing leaks)."""
    d = tmp_path_factory.mktemp("faulty") / "faulty_ops"
    shutil.copytree(FAULTY, d)
    store = tmp_path_factory.mktemp("store")
    e = {**os.environ, "TILEOPS_PROFILE_DIR": str(store), "COLUMNS": "200"}
    r = tileops("codegen", "--manifest", str(d), environ=e, timeout=300)
    assert r.returncode == 0, r.stderr
    return {**e, "TILEOPS_MANIFEST_PATH": str(d)}


def without_faulty(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k != "TILEOPS_MANIFEST_PATH"}


def bench(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return tileops("bench", *args, environ=env, timeout=timeout)


def start(*args: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(tileops_argv("bench", *args), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def wait_for(what: str, cond, proc: subprocess.Popen | None = None, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the bench exited ({proc.returncode}) before {what}:\n{proc.stdout.read()}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (from /proc): the bench's worker, among others."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


def holder_pid(run_dir: Path) -> int | None:
    try:
        return json.loads((run_dir / "run.lock").read_text().split("\n", 1)[0])["pid"]
    except (OSError, ValueError, KeyError):
        return None


# --------------------------------------------------------------------------- signals, races, resume


@pytest.mark.slow
def test_sigterm_then_a_second_runner_then_kill_9_then_resume(tmp_path: Path, env: dict[str, str]) -> None:
    """SIGTERM (docker stop) mid-row: exit 143, run.json interrupted, the worker killed, the record kept.
    A resume then holds the directory: a second runner exits 2 naming it. `kill -9` of that resume takes
    its worker along and frees the lock; the last resume finishes the run with every record whole."""
    out = tmp_path / "run"
    records = out / "records.jsonl"
    p = start(*STALL, *QUIET, "--row-timeout", "600", "--out", str(out), env=env)
    try:
        wait_for("the relu record", lambda: lines(records) >= 1, p)
        wait_for("the stalling row's worker", lambda: len(children(p.pid)) >= 1, p)
        workers = children(p.pid)
        time.sleep(1)
        p.send_signal(signal.SIGTERM)
        output, _ = p.communicate(timeout=60)
    finally:
        stop(p)
    assert p.returncode == 143, output
    assert "--resume" in output and "SIGTERM" in output
    info = read_run_info(out)
    assert info.status == "interrupted" and info.exit_code == 143 and "SIGTERM" in (info.reason or "")
    assert info.options.row_timeout_s == 600 and info.options.quick  # kept for the resume
    wait_for("the worker to be gone", lambda: not any(alive(w) for w in workers), timeout=30)
    assert [r.op for r in iter_records(out)] == ["relu"]

    first = start("--resume", str(out), env=env)
    try:
        wait_for("the resume to hold the directory and run the stalling row",
                 lambda: holder_pid(out) == first.pid and len(children(first.pid)) >= 1, first)
        second = bench("--resume", str(out), env=env)
        assert second.returncode == 2, second.stdout + second.stderr
        assert f"pid {first.pid}" in second.stderr and "in use" in second.stderr

        workers = children(first.pid)
        first.kill()  # kill -9: nothing of the bench runs again
        first.wait(timeout=30)
    finally:
        stop(first)
    wait_for("the killed resume's worker to die with it", lambda: not any(alive(w) for w in workers), timeout=30)
    assert read_run_info(out).status == "running"  # kill -9 leaves no word, and the lock is free anyway

    # The last resume without the stalling op's manifest: its row is no longer planned, relu is done.
    last = bench("--resume", str(out), env=without_faulty(env))
    assert last.returncode == 0, last.stdout + last.stderr
    info = read_run_info(out)
    assert info.status == "completed" and info.reason is None
    recs = list(iter_records(out))
    assert [r.op for r in recs] == ["relu"]  # nothing ran twice, nothing was lost


def _stopped_run(out: Path, records: list, *, selection: dict, tail: bytes = b"") -> None:
    """A run directory as a stopped bench leaves it: run.json "interrupted", the records, a torn tail."""
    from tileops.records import RunInfo, RunOptions, to_json, utcnow, write_run_info

    out.mkdir(parents=True)
    (out / "records.jsonl").write_bytes(b"".join(to_json(r).encode() + b"\n" for r in records) + tail)
    write_run_info(out, RunInfo(run_id="stopped", started_at=utcnow(), status="interrupted",
                                selection={**selection, "device": "cpu"},
                                options=RunOptions(quick=True, row_timeout_s=60.0, calibrate="never", plot=False)))


@pytest.mark.slow
def test_torn_tail_is_set_aside_before_resume_appends(tmp_path: Path, env: dict[str, str]) -> None:
    """A last line cut mid-write (a crash, a full disk) is moved aside, the row it was is run again and
    appended on a line of its own, and every record reads back."""
    from export_support import record

    out = tmp_path / "run"
    done = record("relu", "cpu-512x1024", dtype="bfloat16")
    fragment = b'{"schema_version":1,"run_id":"stopped","op":"relu","family":"elementwise","label":"cpu-5'
    _stopped_run(out, [done], selection={"ops": ["relu"]}, tail=fragment)

    r = bench("--resume", str(out), env=without_faulty(env))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "torn" in r.stderr and "records.jsonl.torn-" in r.stderr  # a note: stderr
    assert "resuming: 1 row(s) already recorded OK, 1 to run" in r.stdout
    (aside,) = out.glob("records.jsonl.torn-*")
    assert aside.read_bytes() == fragment  # kept, byte for byte
    recs = list(iter_records(out))  # every line whole and valid
    assert [(x.label, x.dtype, x.status) for x in recs] == [("cpu-512x1024", "bfloat16", "ok"),
                                                              ("cpu-512x1024", "float32", "ok")]
    assert (out / "records.jsonl").read_bytes().endswith(b"\n")


def test_resume_refuses_flags_that_differ_and_a_corrupt_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`--resume` restores the run's own options: a flag that differs is exit 2 with a sentence, before any row;
    a corrupt run.json or records file is exit 2 naming the file (line) and the fix."""
    from tileops.cli import main

    out = tmp_path / "run"
    _stopped_run(out, [], selection={"ops": ["relu"]})
    assert main(["bench", "--resume", str(out), "--op", "silu", "--row-timeout", "9", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "--op (the run: relu)" in err and "--row-timeout (the run: 60.0)" in err and "Traceback" not in err
    assert "--quick" not in err.split("differ:")[1]  # given again with the run's own value: fine

    (out / "records.jsonl").write_text('{"op": "relu"}\n')
    assert main(["bench", "--resume", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{out / 'records.jsonl'}:1:" in err and "fix or remove that line" in err
    assert not list(out.glob("*.torn-*")) and read_run_info(out).status == "interrupted"  # nothing touched

    (out / "run.json").write_bytes(b"\xff\xfe{")
    assert main(["bench", "--resume", str(out)]) == 2
    err = capsys.readouterr().err
    assert "run.json" in err and "UTF-8" in err


# --------------------------------------------------------------------------- disks that refuse


@pytest.mark.slow
def test_a_full_disk_ends_the_run_failed_and_resume_finishes_it(tmp_path: Path, env: dict[str, str]) -> None:
    """ENOSPC while appending a record: the file keeps whole records only, run.json says failed with the
    reason (written from the lock's reserve), exit 2 with the path and the fix; after freeing space,
    --resume finishes the run."""
    with tmpfs(tmp_path / "disk", "size=1m") as disk:
        out = disk / "run"
        records = out / "records.jsonl"
        # wide_record_op stalls like stall_op, and its record is larger than a page: it cannot fit in the space
        # the relu record's page has left, so its append is what meets the full disk.
        p = start("--op", "relu", "--dtype", "float32", "--op", "wide_record_op", *QUIET, "--row-timeout", "6",
                  "--out", str(out), env=env)
        try:
            wait_for("the relu record", lambda: lines(records) >= 1, p)
            filler = fill(disk)  # while the stalling row runs out its 6 s
            output, _ = p.communicate(timeout=120)
        finally:
            stop(p)
        assert p.returncode == 2, output
        assert str(records) in output and "No space left on device" in output and "--resume" in output
        assert "Traceback" not in output
        info = read_run_info(out)
        assert info.status == "failed" and info.exit_code == 2
        assert "No space left on device" in info.reason and str(records) in info.reason
        assert records.read_bytes().endswith(b"\n") and [r.op for r in iter_records(out)] == ["relu"]

        filler.unlink()
        r = bench("--resume", str(out), env=env)
        assert r.returncode == 1, r.stdout + r.stderr  # the stalling row is recorded as a timeout: a failed row
        assert "resuming: 1 row(s) already recorded OK, 1 to run" in r.stdout
        info = read_run_info(out)
        assert info.status == "completed" and info.reason is None
        recs = {x.op: x for x in iter_records(out)}
        assert recs["wide_record_op"].error.kind == "timeout" and recs["relu"].status == "ok"


def test_read_only_outputs_are_refused_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--out, --textfile (bench and export) and --plot on a read-only file system, or under a file:
    exit 2 with a sentence naming the path, before any row."""
    from export_support import record, write_run

    from tileops.cli import main

    run = write_run(tmp_path / "done", [record()])
    quiet = ["--op", "relu", *QUIET]
    with tmpfs(tmp_path / "ro", "ro,size=64k") as ro:
        assert main(["bench", *quiet, "--out", str(ro / "run")]) == 2
        err = capsys.readouterr().err
        assert "read-only file system" in err.lower() and "--out" in err  # the sentence --list gives too
        assert main(["bench", *quiet, "--textfile", str(ro / "prom"), "--out", str(tmp_path / "r1")]) == 2
        assert "read-only" in capsys.readouterr().err and not (tmp_path / "r1").exists()
        assert main(["export", str(run), "--textfile", str(ro / "prom")]) == 2
        assert "read-only" in capsys.readouterr().err
        assert main(["roofline", str(run), "--plot", str(ro / "plot")]) == 2
        assert "read-only" in capsys.readouterr().err
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert main(["bench", *quiet, "--out", str(a_file / "run")]) == 2
    assert "not a directory" in capsys.readouterr().err.lower()
