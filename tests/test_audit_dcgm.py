"""The audit beside DCGM: a profiler held by DCGM's profiling metrics, and `--pause-dcgm`'s pause and resume.

ncu and dcgmi cannot run here, so both are stand-ins written into the test's folder and put first on PATH:
each logs its calls (one line each, in one file, so the order of the calls is the order of the lines) and
answers as the real one does in the situation tested. The audit itself runs for real, in this process or
(for a signal) in its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cli_support import tileops_argv
from tileops import interrupts
from tileops.audit import dcgm
from tileops.audit.entry import AUDIT_FILE, AuditEntry, read_entries
from tileops.cli import main

RELU = ["--op", "relu", "--dtype", "bfloat16"]  # several rows (the gVisor test in test_audit_cli.py counts them)
ROW = ["--op", "embedding", "--label", "cpu-small-2k-tokens", "--dtype", "float32"]  # one row
BUSY = ("==ERROR== Profiling failed because a driver resource was unavailable. Ensure that no other tool "
        "(like DCGM) is concurrently collecting profiling data.")
VERSION = "Version 2025.2.1.0 (build 35987062) (public-release)"


def fake_ncu(bin_dir: Path, log: Path, *, sleep_s: float = 0) -> None:
    """An ncu that logs each call, answers --version, and then either sleeps (a row still running) or prints
    the driver's refusal of a profiler already held (DCGM's) and exits 1, as the real one does."""
    then = f"exec sleep {sleep_s}" if sleep_s else f"echo '{BUSY}'\nexit 1"
    _script(bin_dir / "ncu", f'echo "ncu $1" >> "{log}"\n'
                             f'if [ "$1" = --version ]; then echo "{VERSION}"; exit 0; fi\n{then}\n')


def fake_dcgmi(bin_dir: Path, log: Path, *, pause_rc: int = 0, resume_rc: int = 0) -> None:
    """A dcgmi that logs each call and answers `profile --pause` and `profile --resume` with the given status
    (on failure with what dcgmi says when it cannot reach the host engine)."""
    _script(bin_dir / "dcgmi", f'echo "dcgmi $*" >> "{log}"\n'
                               f'case "$*" in\n'
                               f'  "profile --pause") rc={pause_rc} ;;\n'
                               f'  "profile --resume") rc={resume_rc} ;;\n'
                               f'  *) rc=9 ;;\n'
                               f'esac\n'
                               f'[ "$rc" = 0 ] || echo "Error: unable to establish a connection to the host engine"\n'
                               f'exit $rc\n')


def _script(path: Path, body: str) -> None:
    path.parent.mkdir(exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch) -> Path:
    """A folder first on PATH for the stand-ins."""
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.setenv("PATH", f"{d}{os.pathsep}{os.environ['PATH']}")
    return d


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def rows(out: Path) -> list[AuditEntry]:
    return read_entries(out / AUDIT_FILE)


def test_a_profiler_held_by_dcgm_is_an_error_on_every_row_said_once(bin_dir: Path, tmp_path: Path,
                                                                     capsys) -> None:
    """Every row: ERROR, kind profiler-busy, one sentence naming DCGM and the fix; ncu refused once is the
    node's state, so it is not started again for each row; the summary says the reason once; exit 1."""
    log, out = tmp_path / "calls.log", tmp_path / "out"
    fake_ncu(bin_dir, log)
    assert main(["audit", *RELU, "--out", str(out)]) == 1
    entries = rows(out)
    assert len(entries) >= 4 and {(r.verdict, r.error_kind) for r in entries} == {("ERROR", "profiler-busy")}
    for r in entries:
        assert "DCGM" in r.reason and "`dcgmi profile --pause`" in r.reason and "`dcgmi profile --resume`" in r.reason
        assert "--pause-dcgm" in r.reason
        assert r.reason.split(" (not run:")[0].count(". ") == 0  # one sentence
    assert calls(log) == ["ncu --version", "ncu --target-processes"]  # ncu profiled once, for the first row
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert captured.out.count("dcgmi profile --pause") == 1  # the reason, once for all rows
    assert f"ERROR {len(entries)} rows (relu)" in captured.out
    assert f"{len(entries)} ERROR" in captured.err


def test_pause_dcgm_pauses_before_the_first_ncu_call_and_resumes_after_the_last(bin_dir: Path, tmp_path: Path,
                                                                                capsys) -> None:
    log, out = tmp_path / "calls.log", tmp_path / "out"
    fake_ncu(bin_dir, log)
    fake_dcgmi(bin_dir, log)
    assert main(["audit", *ROW, "--out", str(out), "--pause-dcgm"]) == 1  # this ncu still refuses: the row's ERROR
    assert calls(log) == ["dcgmi profile --pause", "ncu --version", "ncu --target-processes",
                          "dcgmi profile --resume"]
    err = capsys.readouterr().err
    assert "DCGM's profiling paused" in err and "DCGM's profiling resumed" in err


def test_dcgmi_is_the_one_named_by_the_flag(tmp_path: Path, monkeypatch) -> None:
    log, out, tools = tmp_path / "calls.log", tmp_path / "out", tmp_path / "tools"
    fake_ncu(tools, log)
    fake_dcgmi(tools, log)
    (tools / "dcgmi").rename(tools / "dcgmi-4.2")
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    assert main(["audit", *ROW, "--out", str(out), "--pause-dcgm", "--dcgmi", str(tools / "dcgmi-4.2")]) == 1
    assert calls(log)[0] == "dcgmi profile --pause" and calls(log)[-1] == "dcgmi profile --resume"


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_mid_run_still_resumes_dcgm(tmp_path: Path, sig: signal.Signals, code: int) -> None:
    """`docker stop` (SIGTERM) or Ctrl-C while a row runs under ncu: the row is stopped, every row is written
    SKIPPED, and DCGM's profiling is resumed before the audit exits with the signal's code."""
    bin_dir, log, out = tmp_path / "bin", tmp_path / "calls.log", tmp_path / "out"
    fake_ncu(bin_dir, log, sleep_s=120)
    fake_dcgmi(bin_dir, log)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen(tileops_argv("audit", *ROW, "--out", str(out), "--pause-dcgm"), env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while "ncu --target-processes" not in calls(log):  # the row is running under ncu
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    assert calls(log)[0] == "dcgmi profile --pause" and calls(log)[-1] == "dcgmi profile --resume"
    assert calls(log).count("dcgmi profile --resume") == 1
    assert "Traceback" not in err and "interrupted" in err
    assert {r.verdict for r in rows(out)} == {"SKIPPED"}


def test_without_dcgmi_nothing_is_audited(bin_dir: Path, tmp_path: Path, capsys) -> None:
    log, out = tmp_path / "calls.log", tmp_path / "out"
    fake_ncu(bin_dir, log)
    assert main(["audit", *ROW, "--out", str(out), "--pause-dcgm", "--dcgmi", str(tmp_path / "no-dcgmi")]) == 2
    err = capsys.readouterr().err
    assert "`dcgmi` was not found" in err and "--dcgmi PATH" in err and "Traceback" not in err
    assert calls(log) == [] and not (out / AUDIT_FILE).exists()


def test_a_pause_that_fails_audits_nothing_and_says_why(bin_dir: Path, tmp_path: Path, capsys) -> None:
    log, out = tmp_path / "calls.log", tmp_path / "out"
    fake_ncu(bin_dir, log)
    fake_dcgmi(bin_dir, log, pause_rc=3)
    assert main(["audit", *ROW, "--out", str(out), "--pause-dcgm"]) == 2
    err = capsys.readouterr().err
    assert "dcgmi profile --pause` exited 3" in err and "host engine" in err and "nothing was audited" in err
    assert calls(log) == ["dcgmi profile --pause"]  # no ncu, and no resume of a pause that did not happen
    assert not (out / AUDIT_FILE).exists()


def test_a_resume_that_fails_is_said_loudly_and_fails_the_run(bin_dir: Path, tmp_path: Path, capsys) -> None:
    log, out = tmp_path / "calls.log", tmp_path / "out"
    fake_ncu(bin_dir, log)
    fake_dcgmi(bin_dir, log, resume_rc=4)
    assert main(["audit", *ROW, "--out", str(out), "--pause-dcgm"]) == 1
    err = capsys.readouterr().err
    assert "dcgmi profile --resume` exited 4" in err and "still PAUSED" in err
    assert "DCGM's profiling left paused; exit 1" in err
    assert calls(log)[-1] == "dcgmi profile --resume"


def test_a_resume_that_fails_fails_a_run_whose_rows_passed() -> None:
    from tileops.pipeline.audit import AuditResult

    passed = [AuditEntry(op="relu", label="l", dtype="d", backend="torch", verdict="PASS")]
    assert AuditResult(None, passed).exit_code == 0  # type: ignore[arg-type]  # no run needed to judge
    assert AuditResult(None, passed, dcgm_left_paused=True).exit_code == 1  # type: ignore[arg-type]


def test_an_interrupt_during_the_pause_waits_for_it_and_resumes(tmp_path: Path) -> None:
    """Ctrl-C while `dcgmi profile --pause` runs: the pause finishes (so the node is known to be paused), the
    audit never starts, and the resume runs."""
    log = tmp_path / "calls.log"
    _script(tmp_path / "dcgmi", f'[ "$2" = --pause ] && kill -INT $PPID && sleep 0.3\necho "dcgmi $*" >> "{log}"\n')
    ran = []
    with interrupts.handled(), pytest.raises(KeyboardInterrupt):
        with dcgm.profiling_paused(str(tmp_path / "dcgmi"), lambda f: pytest.fail(f.message)):
            ran.append("audit")
    assert ran == [] and calls(log) == ["dcgmi profile --pause", "dcgmi profile --resume"]


def test_a_dcgmi_that_hangs_is_a_failure_not_a_hang(tmp_path: Path, monkeypatch) -> None:
    _script(tmp_path / "dcgmi", "exec sleep 30\n")
    monkeypatch.setattr(dcgm, "DCGMI_TIMEOUT_S", 0.5)
    failure = dcgm.resume(str(tmp_path / "dcgmi"))
    assert failure is not None and "did not answer within 0.5 s" in failure.message
    assert "dcgmi profile --resume" in failure.message
