"""Benchmark (issue 38, item 2): a hundred random kills. Does ``--resume`` finish any run ``kill -9`` stopped, with
nothing lost or duplicated?

First one uninterrupted ``tileops bench`` (a real CPU run of a few cheap rows, ``--quick``, its own profile store
so it calibrates first, a textfile so it exports last): its rows are the reference. Then each trial starts the
same bench in a fresh directory (and a fresh store), sends SIGKILL to the runner or to its worker subprocess
(drawn at random) at a random moment spread over a run's whole wall time (the median of the runs seen to their
end so far: the reference's, then each trial's that nothing stopped, so a host whose load changes does not push
the kills past the end; ``--seed`` fixes both draws), lets a runner whose worker was killed go on to its end,
then runs ``tileops bench --resume DIR`` to completion and compares:

* **rows**: the newest record of each row key (op, label, dtype, backend) are the reference's keys with the
  reference's status: none lost, none extra;
* **no duplicate**: no row with two OK records (an error record a killed worker left, then its row's OK record
  from the resume, is the file's history, not a duplicate: readers take the newest);
* **every line whole**: each line of records.jsonl is a complete record and the file ends in a newline;
* **run.json complete**: ``completed``, the reference's exit code and row counts, its health, and the second
  pass settled (``host_noise``) where the reference's was; every file the reference run wrote is there, the
  metrics textfile included.

A kill before the run wrote its run.json leaves nothing to resume: ``--resume`` refuses, saying so, and the
trial does what that sentence says (the same command again, ``--out`` the same directory), which must then
finish as the reference did. Any other refusal fails the trial. Where the kill landed is read off the run's own
progress events (``--output-format jsonl``, each written and flushed before the work it announces): start-up,
calibration, first pass, second pass, pricing, plotting (the plot and the page), export, or after the run had
already ended. The load average before and after is printed: on a shared host it says how long trials took and
why.

    python benchmarks/random_kills.py [--trials 100] [--seed 0] [--op relu --op add] [--out DIR] [--json OUT]

Exit 1 when any trial fails.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PHASES = ("start-up", "calibration", "first pass", "second pass", "pricing", "plotting", "export", "after the end")
#: the bench every run is: CPU rows of the cheap ops, --quick, a quick calibration (a full one on a CPU takes tens
#: of seconds of the trial for no other fault), float32 only
BENCH = ["--device", "cpu", "--quick", "--calibrate", "quick", "--dtype", "float32"]
DEFAULT_OPS = ["relu", "add"]
NOT_STARTED = "nothing to resume"  # the sentence of a resume of a directory the run never wrote run.json into
RUN_TIMEOUT_S = 600.0


def _tileops() -> list[str]:
    return [sys.executable, "-m", "tileops.cli"]


def bench_command(run: Path, textfile: Path, ops: list[str]) -> list[str]:
    """The whole ``tileops bench`` a trial starts (the reference's too)."""
    return [*_tileops(), "bench", *BENCH, *[a for op in ops for a in ("--op", op)], "--out", str(run),
            "--textfile", str(textfile), "--output-format", "jsonl"]


def env_for(store: Path) -> dict[str, str]:
    """The run's environment: its own profile store, so it calibrates first as a new host's run does."""
    return {**os.environ, "TILEOPS_PROFILE_DIR": str(store)}


# --------------------------------------------------------------------------- where the run is


def phases_of(events: list[dict[str, Any]]) -> list[str]:
    """The phases a run's events walk through, in order (each once)."""
    seen = ["start-up"]
    for event in events:
        phase = phase_after(seen[-1], event)
        if phase != seen[-1]:
            seen.append(phase)
    return seen


def phase_after(phase: str, event: dict[str, Any]) -> str:
    """The phase the run is in once it has written ``event`` (one of its ``--output-format jsonl`` objects)."""
    kind, what, text = event.get("kind"), event.get("event"), str(event.get("text") or "")
    if kind == "progress" and event.get("label") == "calibrating" or kind == "message" and \
            text.startswith("calibrating "):
        return "calibration"
    if kind == "progress" and what == "pass":
        return "second pass"
    if kind == "progress" and what == "started":
        return phase if phase == "second pass" else "first pass"
    if phase in ("first pass", "second pass") and kind != "progress":
        return "pricing"  # the sweep has returned: what the run says next is priced from its records
    if kind == "summary":
        return "plotting"  # the table is out: roofline.json, the plot, then the page
    if kind == "message" and text.startswith("report: "):
        return "export"
    return phase


class Events:
    """The run's stdout read as it comes: its progress events, and so the phase it is in."""

    def __init__(self, stream: Any) -> None:
        self.phase = "start-up"
        self.lines = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                self.phase = phase_after(self.phase, event)
                self.lines += 1

    def now(self) -> str:
        with self._lock:
            return self.phase

    def finish(self, timeout: float = 30.0) -> str:
        """The phase once the stream has ended (every event the run wrote before it died has been read)."""
        self._thread.join(timeout)
        return self.now()


def workers_of(pid: int) -> list[int]:
    """The runner's worker processes (multiprocessing's spawned children: not its resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


# --------------------------------------------------------------------------- the reference and the judge


@dataclass
class Reference:
    """What the uninterrupted run left: each row's status, its run file's figures, and the files it wrote."""

    status: dict[tuple[str, str, str, str], str]
    exit_code: int
    counts: tuple[int, int, int, int]  # rows total, ok, error, skipped
    settled: bool  # its second pass settled (run.json host_noise)
    files: list[str]
    wall_s: float


def reference_of(run: Path, exit_code: int, wall_s: float) -> Reference:
    from tileops.records import iter_records, read_run_info

    info = read_run_info(run)
    if info is None:
        raise SystemExit(f"the reference run wrote no run.json in {run}")
    latest = {r.key: r.status for r in iter_records(run, fast_json=False)}
    files = sorted(p.name for p in run.iterdir() if p.name != "run.lock" and not p.name.startswith("."))
    return Reference(latest, exit_code, (info.rows_total, info.rows_ok, info.rows_error, info.rows_skipped),
                     bool(info.host_noise), files, wall_s)


def judge_records(run: Path, ref: Reference) -> list[str]:
    """What is wrong with the run's records.jsonl against the reference: torn or broken lines, rows lost, extra,
    of another status, or recorded OK twice. Empty: nothing."""
    from tileops.records import RecordFileError, parse_record

    path = run / "records.jsonl"
    if not path.is_file():
        return [f"{path}: missing"]
    raw = path.read_bytes()
    torn = len(raw) - raw.rfind(b"\n") - 1
    problems = [f"{path}: ends in a torn line ({torn} bytes)"] if torn else []
    latest: dict[tuple[str, str, str, str], str] = {}
    ok: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
    for n, line in enumerate(raw.split(b"\n")[:-1] if raw.endswith(b"\n") else raw.split(b"\n"), 1):
        try:
            rec = parse_record(line.decode("utf-8"), f"{path}:{n}")
        except (RecordFileError, UnicodeDecodeError) as exc:
            problems.append(f"line {n} is not a whole record ({exc})")
            continue
        latest[rec.key] = rec.status
        ok[rec.key] += rec.status == "ok"
    name = " ".join
    problems += [f"row lost: {name(k)}" for k in sorted(set(ref.status) - set(latest))]
    problems += [f"row not in the reference: {name(k)}" for k in sorted(set(latest) - set(ref.status))]
    problems += [f"row {name(k)} ended {latest[k]}, the reference {s}" for k, s in sorted(ref.status.items())
                 if k in latest and latest[k] != s]
    problems += [f"row duplicated: {name(k)} recorded OK {n} times" for k, n in sorted(ok.items()) if n > 1]
    return problems


def judge_run_file(run: Path, ref: Reference) -> list[str]:
    """What is wrong with the run's run.json, or the files beside it, against the reference."""
    from tileops.records import RecordFileError, read_run_info

    try:
        info = read_run_info(run)
    except RecordFileError as exc:
        return [f"run.json unreadable: {exc}"]
    if info is None:
        return ["run.json missing"]
    problems = []
    if info.status != "completed" or info.finished_at is None:
        problems.append(f"run.json says {info.status}" + (f" ({info.reason})" if info.reason else ""))
    if info.exit_code != ref.exit_code:
        problems.append(f"run.json exit code {info.exit_code}, the reference {ref.exit_code}")
    counts = (info.rows_total, info.rows_ok, info.rows_error, info.rows_skipped)
    if counts != ref.counts:
        problems.append(f"run.json rows (total, ok, error, skipped) {counts}, the reference {ref.counts}")
    if not info.health:
        problems.append("run.json has no health")
    if ref.settled and not info.host_noise:
        problems.append("run.json has no host_noise: the second pass never settled")
    problems += [f"{name} missing (the reference wrote it)" for name in ref.files if not (run / name).exists()]
    return problems


# --------------------------------------------------------------------------- a trial


@dataclass
class Trial:
    number: int
    target: str  # drawn: runner or worker
    at_s: float  # drawn: when, after the bench started
    killed: str = ""  # what was killed: runner, worker, or nothing (the run had ended)
    phase: str = ""
    first_exit: int | None = None
    resume_exit: int | None = None
    rerun: bool = False  # killed before run.json: the same command again, as the refusal said
    run_s: float | None = None  # the first run's whole wall time, where nothing stopped it (a worker kill, or none)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.problems


def start(cmd: list[str], env: dict[str, str], err: Path) -> tuple[subprocess.Popen[str], Events]:
    with open(err, "w", encoding="utf-8") as stderr:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    assert proc.stdout is not None
    return proc, Events(proc.stdout)


def kill_at(trial: Trial, proc: subprocess.Popen[str], events: Events) -> None:
    """Wait until the trial's moment, then SIGKILL its target (the runner where a worker was drawn and none
    lives then); say what was killed and in which phase."""
    try:
        proc.wait(timeout=trial.at_s)
        trial.killed, trial.phase = "nothing", "after the end"
        return
    except subprocess.TimeoutExpired:
        pass
    workers = workers_of(proc.pid)
    if trial.target == "worker" and workers:
        trial.phase = events.now()  # the runner waits on its worker: every event of the phase is out
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        trial.killed = "worker"
        return
    os.kill(proc.pid, signal.SIGKILL)
    trial.killed = "runner" if trial.target == "runner" else "runner (no worker alive then)"
    proc.wait()
    trial.phase = events.finish()
    deadline = time.monotonic() + 10
    while any(alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    orphans = [w for w in workers if alive(w)]
    for pid in orphans:
        os.kill(pid, signal.SIGKILL)
    if orphans:
        trial.problems.append(f"worker(s) {orphans} outlived the killed runner by 10 s")


def finish(trial: Trial, cmd: list[str], run: Path, env: dict[str, str], base: Path, expected: int) -> None:
    """``--resume`` the run to its end (or, killed before its run.json, the same command again): it must exit as
    the reference did."""
    res = subprocess.run([*_tileops(), "bench", "--resume", str(run), "--output-format", "jsonl"],
                         capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT_S)
    trial.resume_exit = res.returncode
    if res.returncode == 2 and NOT_STARTED in res.stderr and not (run / "run.json").exists():
        trial.rerun = True
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT_S)
        trial.resume_exit = res.returncode
    (base / "resume.err").write_text(res.stderr, encoding="utf-8")
    if res.returncode != expected:
        said = [line for line in res.stderr.splitlines() if line.strip()][-1:] or ["(nothing on stderr)"]
        trial.problems.append(f"{'the rerun' if trial.rerun else '--resume'} exited {res.returncode}: {said[0]}")


def run_trial(trial: Trial, base: Path, ref: Reference, ops: list[str]) -> Trial:
    base.mkdir(parents=True)
    run, textfile, env = base / "run", base / "textfile", env_for(base / "store")
    cmd = bench_command(run, textfile, ops)
    t0 = time.monotonic()
    proc, events = start(cmd, env, base / "bench.err")
    kill_at(trial, proc, events)
    try:
        trial.first_exit = proc.wait(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        trial.problems.append(f"the killed run did not end within {RUN_TIMEOUT_S:g} s")
        return trial
    if trial.killed in ("nothing", "worker"):
        trial.run_s = time.monotonic() - t0
    events.finish()
    finish(trial, cmd, run, env, base, ref.exit_code)
    trial.problems += judge_records(run, ref) + judge_run_file(run, ref)
    if not list(textfile.glob("*.prom")):
        trial.problems.append(f"no metrics textfile in {textfile}")
    trial.notes += [p.name for p in (run.iterdir() if run.is_dir() else []) if p.name.startswith(".") or ".torn-" in p.name]
    trial.wall_s = time.monotonic() - t0
    return trial


def said(trial: Trial, total: int) -> str:
    how = {"nothing": "no kill (the run had ended)"}.get(trial.killed, f"killed the {trial.killed}")
    line = (f"trial {trial.number}/{total}: {how} at {trial.at_s:.1f} s ({trial.phase}); first run exit "
            f"{trial.first_exit}, " + ("killed before run.json: --resume refused (nothing to resume), the same "
                                       "command again" if trial.rerun else "--resume")
            + f" exit {trial.resume_exit}; {trial.wall_s:.0f} s: ")
    line += "ok" if trial.passed else "FAILED: " + "; ".join(trial.problems)
    if trial.notes:
        line += f" (left in the run directory: {', '.join(trial.notes)})"
    return line


# --------------------------------------------------------------------------- the benchmark


def reference(base: Path, ops: list[str]) -> Reference:
    run = base / "run"
    base.mkdir(parents=True)
    t0 = time.monotonic()
    res = subprocess.run(bench_command(run, base / "textfile", ops), capture_output=True, text=True,
                         env=env_for(base / "store"), timeout=RUN_TIMEOUT_S)
    wall = time.monotonic() - t0
    (base / "bench.out").write_text(res.stdout, encoding="utf-8")  # its events: the phases a run goes through
    if res.returncode not in (0, 1, 3):
        raise SystemExit(f"the reference bench exited {res.returncode}:\n{res.stderr[-3000:]}")
    return reference_of(run, res.returncode, wall)


def summary(trials: list[Trial]) -> list[str]:
    phases = collections.Counter(t.phase for t in trials)
    killed = collections.Counter(t.killed for t in trials)
    passed = sum(t.passed for t in trials)
    return [f"trials passed: {passed}/{len(trials)}",
            "kills per phase: " + ", ".join(f"{p} {phases.get(p, 0)}" for p in PHASES),
            "killed: " + ", ".join(f"{k} {n}" for k, n in sorted(killed.items()))
            + f"; {sum(t.rerun for t in trials)} killed before run.json (the same command again)",
            f"trials that left a temporary or set-aside file in the run directory: {sum(bool(t.notes) for t in trials)}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100, help="kills (default 100)")
    ap.add_argument("--seed", type=int, default=0, help="draws the moment and the target of every kill")
    ap.add_argument("--op", action="append", dest="ops", help=f"the ops benched (default {', '.join(DEFAULT_OPS)})")
    ap.add_argument("--out", type=Path, help="keep every run here (default: a temporary directory, removed)")
    ap.add_argument("--json", type=Path, help="write every trial's figures here")
    args = ap.parse_args()
    ops = args.ops or DEFAULT_OPS
    rng = random.Random(args.seed)
    load0 = os.getloadavg()[0]
    tmp = None
    if args.out is None:
        tmp = tempfile.mkdtemp(prefix="tileops-kills-")
    base = args.out or Path(tmp or ".")
    try:
        ref = reference(base / "reference", ops)
        print(f"reference: {len(ref.status)} rows ({', '.join(ops)}; {' '.join(BENCH)}), exit {ref.exit_code}, "
              f"{ref.wall_s:.1f} s; seed {args.seed}", flush=True)
        trials: list[Trial] = []
        whole = [ref.wall_s]  # the runs that went to their end: how long a run takes on this host now
        for i in range(1, args.trials + 1):
            trial = Trial(i, rng.choice(["runner", "worker"]), rng.random() * statistics.median(whole))
            trials.append(run_trial(trial, base / f"trial-{i:03d}", ref, ops))
            whole += [trial.run_s] if trial.run_s is not None else []
            print(said(trial, args.trials), flush=True)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    load1 = os.getloadavg()[0]
    for line in summary(trials):
        print(line)
    print(f"load average {load0:.2f} before, {load1:.2f} after, {os.cpu_count()} CPUs; "
          f"{sum(t.wall_s for t in trials) / max(1, len(trials)):.0f} s a trial")
    if args.json:
        args.json.write_text(json.dumps({"reference": asdict(ref) | {"status": {" ".join(k): v for k, v in
                                                                                ref.status.items()}},
                                         "trials": [asdict(t) for t in trials], "load": [load0, load1]},
                                        indent=2), encoding="utf-8")
    return 0 if all(t.passed for t in trials) else 1


if __name__ == "__main__":
    sys.exit(main())
