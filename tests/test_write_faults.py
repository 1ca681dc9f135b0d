"""Every write failure point (issue 38; docs/reliability.md, "Every write failure point").

Every write of the appliance goes through one seam (``tileops.fsutil``: open, write, truncate, fsync, replace,
the directory's fsync, unlink), which counts its calls and can make the N-th fail
(:func:`tileops.fsutil.arm_fault`, or ``TILEOPS_FAULT`` for another process). Each test here runs one command
for N = 1, 2, ... with its N-th write op failing (ENOSPC, EIO, EACCES in turn) until a run no longer meets the
fault, so every write op of a clean run has failed once. After each it checks that the command exits with its
documented code (tileops/exitcodes.py) and says what failed in one line naming the file and the error, that
every file it owns is the old version or the new one (never a mix, a truncation or a temp file left behind),
and that ``--resume`` (or a rerun) then completes with no record lost or duplicated.

The commands run in this process (``tileops.cli.main``): the runner is the writer, and it is the process armed.
Two things keep each sweep within its minute on two cores, neither standing in for a part under test: the
bench's worker is forked from this process (which has imported torch once) rather than spawned, so a run does
not wait for torch's import; and the bench's look at the host before its rows watches the steal for 0.02 s,
not 0.5 s. The worker still runs every row for real in its own process; it writes nothing (the seam's trace of
a clean run shows every write in the runner). ``calibrate`` measures for real twice (its quickest real mode,
``--quick``); each faulted run replays the second measurement's outcome, since the measurement writes nothing
and every write op follows it.
"""

from __future__ import annotations

import errno
import functools
import json
import multiprocessing as mp
import os
import re
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable

import pytest
import yaml

from tileops import fsutil
from tileops.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from export_support import profile, record, write_profile_file, write_run

ERRNOS = (errno.ENOSPC, errno.EIO, errno.EACCES)
STUBS = Path(__file__).parent / "data" / "audit" / "ncu-stubs"
TEMP = re.compile(r"^\.(?P<name>.+)\.\d+\.[0-9a-f]{8}\.tmp$")  # write_atomic's temp file beside its target


@dataclass
class Faulted:
    """One run of a sweep: the write op that failed, and what the command did about it."""

    n: int
    primitive: str
    path: Path  # the path the failed op was given (a temp file, a folder for dirsync)
    rc: int
    err: str

    @property
    def strerror(self) -> str:
        return os.strerror(ERRNOS[(self.n - 1) % len(ERRNOS)])

    @property
    def owner(self) -> Path:
        """The file the failed op was writing (a temp file's target; a folder for its fsync)."""
        m = TEMP.match(self.path.name)
        return self.path.with_name(m["name"]) if m else self.path


@pytest.fixture(autouse=True)
def _disarmed() -> object:
    yield
    fsutil.disarm_fault()


def sweep(capsys: pytest.CaptureFixture[str], prepare: Callable[[int], list[str]],
          check: Callable[[Faulted], None]) -> tuple[list[Faulted], int]:
    """Run ``prepare(n)``'s command line with its n-th write op failing, for n = 1, 2, ... until a run meets no
    fault; ``check`` each faulted run. The faulted runs, and the exit code of the clean one that ended it."""
    capsys.readouterr()
    done: list[Faulted] = []
    n = 0
    while True:
        n += 1
        assert n <= 400, "the sweep does not end: a run makes more write ops than any clean run should"
        argv = prepare(n)
        fsutil.arm_fault(n, ERRNOS[(n - 1) % len(ERRNOS)])
        try:
            rc = main(argv)
        finally:
            met = fsutil.fault_met()
            fsutil.disarm_fault()
        err = capsys.readouterr().err
        if met is None:
            assert fsutil.seam_calls() == n - 1, "a clean run makes the write ops its faulted runs met"
            return done, rc
        f = Faulted(n, met[0], Path(met[1]), rc, err)
        assert "Traceback" not in err, f"N={n} ({f.primitive} {f.path}): a traceback\n{err}"
        check(f)
        capsys.readouterr()
        done.append(f)


def said_in_one_line(f: Faulted) -> str:
    """The one line of stderr that says the failure: the error's words and the file (or its folder)."""
    lines = [line for line in f.err.splitlines() if f.strerror in line]
    assert len(lines) == 1, f"N={f.n} ({f.primitive} {f.path}): not one line with {f.strerror!r}:\n{f.err}"
    line = lines[0]
    assert str(f.owner) in line or str(f.owner.parent) in line, f"N={f.n}: names neither {f.owner} nor its folder: {line}"
    return line


# --------------------------------------------------------------------------- the seam itself


def test_the_hook_fails_the_nth_op_and_a_clean_run_is_counted(tmp_path: Path) -> None:
    """Counting only, an atomic write is five ops; armed, its N-th fails with the errno asked, the error names
    the file written (not its temp file), and the old file stays, with no temp file beside it."""
    target = tmp_path / "f.json"
    fsutil.arm_fault(None, trace=True)
    fsutil.write_atomic(target, "old\n")
    assert fsutil.seam_calls() == 5 and fsutil.fault_met() is None
    assert [p for p, _ in fsutil.seam_trace()] == ["open", "write", "fsync", "replace", "dirsync"]
    for n in range(1, 5):  # before the rename: the old file
        fsutil.arm_fault(n, ERRNOS[n % 3])
        with pytest.raises(OSError) as exc:
            fsutil.write_atomic(target, "new\n")
        assert (exc.value.errno, exc.value.filename) == (ERRNOS[n % 3], str(target))
        assert fsutil.fault_met() is not None and target.read_text() == "old\n"
        assert [p.name for p in tmp_path.iterdir()] == ["f.json"]
    fsutil.arm_fault(2, errno.EIO, "fsync")  # the second fsync: a later write's
    fsutil.write_atomic(target, "one\n")
    with pytest.raises(OSError):
        fsutil.write_atomic(target, "two\n")
    met = fsutil.fault_met()
    assert met is not None and met[0] == "fsync" and fsutil.seam_calls() == 8  # five ops, then the third fails
    assert target.read_text() == "one\n"


def test_the_environment_arms_another_process(tmp_path: Path) -> None:
    """``TILEOPS_FAULT=N:ERRNO[:PRIMITIVE]`` arms a process from its start and ``TILEOPS_FAULT_TRACE`` lists its
    ops (how a sweep counts a subprocess's); a value that is not one fails every write, naming the variable."""
    import subprocess

    code = ("import sys; from pathlib import Path; from tileops import fsutil, records\n"
            "try:\n    records.files.append_line(Path(sys.argv[1]), b'{}\\n')\n"
            "except OSError as e:\n    print(e.errno, e.strerror)\n")
    root = Path(__file__).resolve().parents[1]

    def run(fault: str) -> str:
        env = {**os.environ, "PYTHONPATH": str(root), fsutil.FAULT_ENV: fault,
               fsutil.TRACE_ENV: str(tmp_path / "trace")}
        return subprocess.run([sys.executable, "-c", code, str(tmp_path / "r.jsonl")], env=env, capture_output=True,
                              text=True, timeout=60, check=True).stdout

    assert run("2:ENOSPC") == f"{errno.ENOSPC} {os.strerror(errno.ENOSPC)}\n"
    assert (tmp_path / "r.jsonl").read_bytes() == b""  # the failed append was cut back
    assert run("1:EIO:fsync").startswith(f"{errno.EIO} ")
    assert run("9:EIO") == ""  # three ops: never met
    assert (tmp_path / "r.jsonl").read_bytes() == b"{}\n"
    trace = (tmp_path / "trace").read_text().splitlines()
    assert [line.split()[1] for line in trace[-3:]] == ["open", "write", "fsync"]
    assert "TILEOPS_FAULT='x:EIO' is not N:ERRNO" in run("x:EIO")


#: Calls that write a file without the seam; none may appear in the package outside tileops/fsutil.py.
BYPASS = re.compile(r"os\.(replace|rename|fsync|ftruncate|pwrite|write|unlink)\(|\.write_(text|bytes)\("
                    r"|\.savefig\((?!buf)|\bmkstemp\(|(?<![\w.])open\([^)]*[\"'](w|a|r\+|x)b?[\"']"
                    r"|(?<!fsutil)\.truncate\(|\.extractall\(|os\.open\([^)]*O_(WRONLY|RDWR)")
#: The exceptions, each with why it is not a file the appliance owns.
NOT_OURS = {
    ("tileops/cli.py", "os.open("),  # /dev/null put in place of a closed stdout
    ("tileops/calibrate/measure.py", "mkstemp("),  # torch.profiler's scratch trace in /tmp (GPU only), read, removed
    ("tileops/calibrate/measure.py", "os.unlink("),
    ("tileops/calibrate/ckernels.py", "os.write("),  # a compiled kernel copied into an anonymous memory file
    ("tileops/report/stream.py", "os.unlink("),  # a forked reader's scratch part in a temp folder, read and removed
}


def test_no_writer_goes_around_the_seam() -> None:
    """Every write of the package goes through tileops.fsutil: a new writer that calls ``os``, ``open(.., "w")``
    or ``Path.write_text`` directly would be a failure point the sweeps above cannot reach."""
    root = Path(fsutil.__file__).resolve().parent
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = str(path.relative_to(root.parent))
        if rel == "tileops/fsutil.py":
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            for m in BYPASS.finditer(code):
                if not any(rel == f and m.group(0).startswith(w) for f, w in NOT_OURS):
                    found.append(f"{rel}:{i}: {line.strip()}")
    assert not found, "writes around the seam (use tileops.fsutil):\n" + "\n".join(found)


def test_fleet_collects_a_containers_files_through_the_seam(tmp_path: Path) -> None:
    """A container's volume (a tar the engine streams) is unpacked file by file through ``write_atomic``: each
    copy whole or absent when a write op fails, no temp file; a member that would land outside the folder is
    refused, as tarfile's ``data`` filter refuses it."""
    import io
    import tarfile

    from tileops.fleet import _extract

    def archive(members: dict[str, bytes]) -> tarfile.TarFile:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        buf.seek(0)
        return tarfile.open(fileobj=buf)

    files = {"run/records.jsonl": b'{"a": 1}\n', "run/run.json": b'{"status": "completed"}\n'}
    fsutil.arm_fault(None)
    got = _extract(archive(files), tmp_path / "ok")
    assert {str(p.relative_to(tmp_path / "ok")): p.read_bytes() for p in got} == files
    clean = fsutil.seam_calls()
    for n in range(1, clean + 1):
        fsutil.arm_fault(n, ERRNOS[n % 3])
        with pytest.raises(OSError):
            _extract(archive(files), tmp_path / f"n{n}")
        fsutil.disarm_fault()
        every_file_whole(tmp_path / f"n{n}")
        assert all(tree(tmp_path / f"n{n}")[k] == files[k] for k in tree(tmp_path / f"n{n}"))
    with pytest.raises(tarfile.FilterError):
        _extract(archive({"../escaped": b"x"}), tmp_path / "bad")
    assert not (tmp_path / "escaped").exists()


# --------------------------------------------------------------------------- what "whole" means, per file


def whole(path: Path) -> None:
    """``path`` is a file its writer could have finished: no temp file, no cut line, no half a picture."""
    data = path.read_bytes()
    name = path.name
    assert not TEMP.match(name), f"a temp file left behind: {path}"
    if name.endswith(".jsonl") or name.endswith(".jsonl.prev"):
        assert not data or data.endswith(b"\n"), f"{path}: a torn last line"
        for line in data.splitlines():
            json.loads(line)
    elif name.endswith(".json"):
        json.loads(data)
    elif name.endswith(".yaml"):
        assert yaml.safe_load(data) is not None, f"{path}: empty"
    elif name.endswith(".html"):
        assert data.rstrip().endswith(b"</html>"), f"{path}: cut short"
    elif name.endswith(".svg"):
        assert data.rstrip().endswith(b"</svg>"), f"{path}: cut short"
    elif name.endswith(".png"):
        assert data.startswith(b"\x89PNG") and data.endswith(b"IEND\xaeB`\x82"), f"{path}: cut short"
    elif name.endswith(".prom"):
        from prometheus_client.parser import text_string_to_metric_families

        assert data.endswith(b"\n"), f"{path}: cut short"
        list(text_string_to_metric_families(data.decode("utf-8")))


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def every_file_whole(*roots: Path, scratch: tuple[str, ...] = ("run.lock",)) -> None:
    for root in roots:
        for p in root.rglob("*") if root.exists() else ():
            if p.is_file() and p.name not in scratch and not p.name.endswith(".log"):
                whole(p)
            elif p.is_file():
                assert not TEMP.match(p.name), f"a temp file left behind: {p}"


def old_or_new(root: Path, old: dict[str, bytes], new: dict[str, bytes], f: Faulted) -> None:
    """Each file under ``root`` is byte for byte its old version or its new one (or absent, when it had none)."""
    now = tree(root)
    for name, data in now.items():
        assert data in (old.get(name), new.get(name)), f"N={f.n} ({f.primitive} {f.path}): {name} is neither " \
                                                       "its old version nor its new one"
    for name in old:
        assert name in now or f.primitive in ("replace", "open", "unlink"), f"N={f.n}: {name} went missing"


# --------------------------------------------------------------------------- bench


#: One thread: the forked worker never enters an OpenMP region, whatever pool this process's earlier tests left.
BENCH = ["bench", "--quick", "--op", "relu", "--dtype", "float32", "--device", "cpu", "--calibrate", "never",
         "--threads", "1", "--max-time", "0.01", "--min-time", "0", "--min-samples", "2"]
#: What a bench may fail to write and still finish (exit 0): the lock's holder line and its disk reserve, the
#: host's noise prior and its said-once notes (the next run writes them), the settled first visits' removal.
BEST_EFFORT = re.compile(r"(run\.lock|/noise(/[^/]+\.json)?|/said(/[^/]+\.json)?|first-visits\.jsonl)$")


@pytest.fixture
def fast_bench(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch  # noqa: F401  (imported once here, so each forked worker starts with it)

    from tileops.bench import quiet, sweep as bench_sweep, worker

    monkeypatch.setattr(worker, "_CTX", mp.get_context("fork"))
    monkeypatch.setattr(bench_sweep, "check_quiet", functools.partial(quiet.check_quiet, window_s=0.02))


@pytest.mark.slow
def test_bench_every_write_op_fails_in_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str], fast_bench: None) -> None:
    """A failed write of the records, run.json, roofline.json or the report stops the run (exit 2, one line
    naming the file and the fix, run.json says failed); the lock's holder line, the noise prior and the notes
    are best effort (exit 0). Every file is whole, no temp file is left, and ``--resume`` (a rerun where no
    run.json was written) finishes the run: one record per row, each visited twice, run.json completed."""
    from tileops.records import iter_records, read_run_info

    resumed: dict[int, list[tuple[str, str, str, str]]] = {}

    def prepare(n: int) -> list[str]:
        monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(tmp_path / f"store{n}"))
        return [*BENCH, "--out", str(tmp_path / f"run{n}")]

    def check(f: Faulted) -> None:
        run_dir, store = tmp_path / f"run{f.n}", tmp_path / f"store{f.n}"
        info = read_run_info(run_dir) if (run_dir / "run.json").exists() else None
        if f.rc == 0:
            # second-pass.json's removal is best effort too (run.json holds its figures by then); its write is not
            settled_removal = f.primitive == "unlink" and str(f.path).endswith("second-pass.json")
            assert settled_removal or BEST_EFFORT.search(str(f.owner)), \
                f"N={f.n} ({f.primitive} {f.path}): exit 0 after a failed write"
            assert info is not None and info.status == "completed"
        else:
            assert f.rc == 2, f"N={f.n} ({f.primitive} {f.path}): exit {f.rc}\n{f.err}"
            said_in_one_line(f)
            assert info is None or (info.status, info.exit_code) == ("failed", 2), f"N={f.n}: run.json {info}"
        every_file_whole(run_dir, store)
        if info is None or info.status != "completed":
            argv = ["bench", "--resume", str(run_dir)] if info is not None else [*BENCH, "--out", str(run_dir)]
            assert main(argv) == 0, capsys.readouterr().err
        info = read_run_info(run_dir)
        assert info is not None and info.status == "completed" and info.reason is None
        every_file_whole(run_dir, store)
        recs = list(iter_records(run_dir))
        assert all(r.status == "ok" and len(r.timing.visits_s or ()) == 2 for r in recs), f"N={f.n}: one visit"
        assert not (run_dir / "first-visits.jsonl").exists() or f.primitive == "unlink"
        resumed[f.n] = [r.key for r in recs]

    faulted, rc = sweep(capsys, prepare, check)
    assert rc == 0
    clean = tmp_path / f"run{len(faulted) + 1}"
    keys = [r.key for r in iter_records(clean)]
    assert len(keys) == len(set(keys)) == 1
    for n, got in resumed.items():
        assert got == keys, f"N={n}: rows {got} after the resume, {keys} in a clean run"
    assert {f.primitive for f in faulted} == set(fsutil.PRIMITIVES)
    owners = {f.owner.name for f in faulted}
    assert {"run.lock", "run.json", "records.jsonl", "first-visits.jsonl", "roofline.json", "report.html"} <= owners
    assert any(f.owner.parent.name == "noise" for f in faulted)  # the host's prior, in the profile store


# --------------------------------------------------------------------------- calibrate


@pytest.mark.slow
def test_calibrate_every_write_op_fails_in_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A store holding calibration A; calibration B's writes (the profile, B in the device's history, the
    device's newest result) fail in turn: exit 2 and one line naming the file, each store file A's version or
    B's, no temp file; calibrating again stores B once, A kept once in the history."""
    from tileops.calibrate import run as calibrate_run
    from tileops.ledger import load_device_history, load_device_results

    argv = ["calibrate", "--device", "cpu", "--quick", "--force"]
    old_store = tmp_path / "old"
    assert main([*argv, "--profile-dir", str(old_store)]) == 0  # calibration A, measured
    outcomes = []

    def measured(*args: object, **kwargs: object) -> object:
        outcomes.append(real(*args, **kwargs))
        return outcomes[-1]

    real = calibrate_run.calibrate_device
    monkeypatch.setattr(calibrate_run, "calibrate_device", measured)
    new_store = tmp_path / "new"
    shutil.copytree(old_store, new_store)
    assert main([*argv, "--profile-dir", str(new_store)]) == 0  # calibration B, measured
    monkeypatch.setattr(calibrate_run, "calibrate_device", lambda *a, **k: outcomes[0])  # B again, replayed
    old, new = tree(old_store), tree(new_store)
    assert len(new) == len(old) + 1  # B's history file

    def prepare(n: int) -> list[str]:
        store = tmp_path / f"store{n}"
        shutil.copytree(old_store, store)
        return [*argv, "--profile-dir", str(store)]

    def check(f: Faulted) -> None:
        store = tmp_path / f"store{f.n}"
        assert f.rc == 2, f"N={f.n} ({f.primitive} {f.path}): exit {f.rc}\n{f.err}"
        assert "calibrate again" in said_in_one_line(f)
        old_or_new(store, old, new, f)
        assert main([*argv, "--profile-dir", str(store)]) == 0, capsys.readouterr().err
        assert tree(store) == new, f"N={f.n}: calibrating again did not give the clean run's store"
        (device,) = load_device_results(store)
        history = [r.run_id for r in load_device_history(device.device_key, store)]
        assert len(history) == len(set(history)) == 2

    faulted, rc = sweep(capsys, prepare, check)
    assert rc == 0 and tree(tmp_path / f"store{len(faulted) + 1}") == new
    assert len(faulted) >= 15 and {"open", "write", "fsync", "replace", "dirsync"} <= {f.primitive for f in faulted}


# --------------------------------------------------------------------------- audit (a stand-in ncu)


def test_audit_every_write_op_fails_in_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """An audit folder holding an earlier audit; a new one's writes (the earlier file kept as .prev, the new
    audit.jsonl, a row's stale report removed, its ncu log, each entry) fail in turn: exit 2 and one line
    naming the file; the earlier entries are in audit.jsonl or audit.jsonl.prev, whole; the new file holds
    whole lines; running the audit again gives every row once."""
    from tileops.audit.entry import read_entries

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(STUBS / "ncu-gvisor", bin_dir / "ncu")  # ncu that cannot profile (a container without counters)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    argv = ["audit", "--op", "embedding", "--label", "cpu-small-2k-tokens"]  # two dtype cases: two rows
    earlier = tmp_path / "earlier"
    clean_rc = main([*argv, "--out", str(earlier)])
    old = (earlier / "audit.jsonl").read_bytes()
    rows = sorted((e.op, e.label, e.dtype, e.backend) for e in read_entries(earlier))
    assert len(rows) == 2

    def prepare(n: int) -> list[str]:
        out = tmp_path / f"audit{n}"
        shutil.copytree(earlier, out)
        return [*argv, "--out", str(out)]

    def check(f: Faulted) -> None:
        out = tmp_path / f"audit{f.n}"
        assert f.rc == 2, f"N={f.n} ({f.primitive} {f.path}): exit {f.rc}\n{f.err}"
        assert "tileops audit` again" in said_in_one_line(f)
        every_file_whole(out)
        current, prev = out / "audit.jsonl", out / "audit.jsonl.prev"
        assert old in [p.read_bytes() for p in (current, prev) if p.exists()], f"N={f.n}: the earlier audit is gone"
        assert main([*argv, "--out", str(out)]) == clean_rc, capsys.readouterr().err
        got = [(e.op, e.label, e.dtype, e.backend) for e in read_entries(out)]
        assert sorted(got) == rows, f"N={f.n}: {got}"

    faulted, rc = sweep(capsys, prepare, check)
    assert rc == clean_rc
    assert {"audit.jsonl", "audit.jsonl.prev"} <= {f.owner.name for f in faulted}
    assert {"open", "write", "fsync", "replace", "unlink", "dirsync"} <= {f.primitive for f in faulted}


# --------------------------------------------------------------------------- export --textfile, roofline --plot


def _runs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """An earlier run and a later one of the same device, and a profile pricing both."""
    earlier = write_run(tmp_path / "earlier", [record(seconds=2e-3)])
    later = write_run(tmp_path / "later", [record(seconds=1e-3), record("gelu", seconds=3e-3)])
    return earlier, later, write_profile_file(tmp_path / "profile.yaml", profile())


def _deterministic_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], earlier: list[str],
                         flag: str, rc_failed: int) -> list[Faulted]:
    """``command + [flag, DIR]`` over a DIR holding the output of ``earlier``'s: its files old or new byte for
    byte after each fault, and the clean output after a rerun."""
    before = tmp_path / "before"
    assert main([*earlier, flag, str(before)]) == 0
    after = tmp_path / "after"
    shutil.copytree(before, after)
    assert main([*command, flag, str(after)]) == 0
    old, new = tree(before), tree(after)
    assert old.keys() == new.keys() and old != new

    def prepare(n: int) -> list[str]:
        out = tmp_path / f"out{n}"
        shutil.copytree(before, out)
        return [*command, flag, str(out)]

    def check(f: Faulted) -> None:
        out = tmp_path / f"out{f.n}"
        assert f.rc == rc_failed, f"N={f.n} ({f.primitive} {f.path}): exit {f.rc}\n{f.err}"
        said_in_one_line(f)
        old_or_new(out, old, new, f)
        every_file_whole(out)
        assert main([*command, flag, str(out)]) == 0, capsys.readouterr().err
        assert tree(out) == new, f"N={f.n}: the rerun did not give the clean run's files"

    faulted, rc = sweep(capsys, prepare, check)
    assert rc == 0 and tree(tmp_path / f"out{len(faulted) + 1}") == new
    assert {"open", "write", "fsync", "replace", "dirsync"} <= {f.primitive for f in faulted}
    assert Counter(f.owner.name for f in faulted if f.primitive != "dirsync").keys() == new.keys()
    return faulted


def test_export_textfile_every_write_op_fails_in_turn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A textfile folder holding an earlier run's metrics; the later run's export fails at each write op in
    turn: exit 2, one line naming the file; each .prom file is the earlier or the later exposition, whole (a
    scrape never reads half); exporting again gives the clean export's files."""
    from tileops import exitcodes

    earlier, later, _ = _runs(tmp_path)
    _deterministic_sweep(tmp_path, capsys, ["export", str(later)], ["export", str(earlier)], "--textfile",
                         exitcodes.USAGE)


@pytest.mark.slow
def test_roofline_plot_every_write_op_fails_in_turn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A plot folder holding an earlier run's roofline.png and .svg; the later run's plot fails at each write op
    in turn: exit 2, one line naming the folder; each picture is the earlier one or the later one, whole;
    plotting again gives the clean plot."""
    from tileops import exitcodes

    earlier, later, prof = _runs(tmp_path)
    _deterministic_sweep(tmp_path, capsys, ["roofline", str(later), "--profile", str(prof)],
                         ["roofline", str(earlier), "--profile", str(prof)], "--plot", exitcodes.USAGE)
