"""Whole-run tools at fleet scale: `tileops roofline` (every format) and `tileops export` over N records.

    python benchmarks/whole_run_tools.py [--n 100000] [--formats table,json,csv,md] [--repeat 1]
                                         [--against DIR] [--keep]

Writes N records (benchmarks/roofline_pricing.py's mix) into a run directory
as the bench writes them, then runs each command as a user would (a
subprocess, output to /dev/null) and prints its wall time and peak memory
(maximum resident set size of the command and the workers it forks) beside
the goal (issue 18: roofline under 3 s and 600 MB in every format, export
under 5 s: to stdout, and into a textfile directory, first empty, then
holding the file of the run before, as a cron job finds it), and the CLI's
start-up (`tileops --help`). Each checkout's bytecode is compiled first, as
an installed package's is.

Next to each time: the same time in units of a plain-Python reference loop
timed just before the command, so runs on a busy machine compare (the goals
are seconds on the quiet 2-core development VM, where the loop takes about
50 ms: 3 s is about 60 loops), and the CPU time of the command with its
workers in units of the loop's CPU time (steadier than wall time when other
jobs share the cores; a command that reads in two processes can finish in
about half its CPU time when both cores are free). ``--against DIR`` runs
every command from another checkout too (``git worktree add DIR REV``; it is
put first on PYTHONPATH), interleaved with this one, and prints both and
their ratio.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from roofline_pricing import profile, records, reference_loop

from tileops.records import RECORDS_FILE, to_json

REPO = Path(__file__).resolve().parents[1]
QUIET_LOOP_S = 0.05  # the reference loop on the quiet 2-core dev VM (best seen: 49 ms)


# Runs the command from a small launcher process: Linux counts a process's peak memory from the memory
# of the process it was forked from, so a command forked straight from this script (holding N records
# while it writes them) would inherit this script's peak. The launcher times the command and reports
# its peak (and that of the workers it forks: the largest of them).
_LAUNCHER = """
import os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(time.perf_counter() - t0, usage.ru_utime + usage.ru_stime, usage.ru_maxrss, os.waitstatus_to_exitcode(status),
      file=sys.stderr)
"""


class Result(NamedTuple):
    wall: float  # seconds
    cpu: float  # CPU seconds of the command and its workers
    rss: float  # peak resident MB (the largest process)
    rc: int
    ref_wall: float  # the reference loop just before, wall and CPU seconds
    ref_cpu: float


def run(cmd: list[str], src: Path, cwd: Path) -> tuple[float, float, float, int]:
    """Wall seconds, CPU seconds, peak RSS in MB and the exit code of one command run from the checkout ``src``."""
    env = {**os.environ, "PYTHONPATH": str(src) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with open(os.devnull, "wb") as null:  # cwd: not a checkout, so PYTHONPATH decides which tileops runs
        res = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, *cmd], stdout=null, stderr=subprocess.PIPE,
                             env=env, cwd=cwd, check=True)
    wall, cpu, rss_kb, rc = res.stderr.decode().strip().splitlines()[-1].split()
    return float(wall), float(cpu), int(rss_kb) / 1024, int(rc)


def compile_bytecode(src: Path) -> None:
    """Write the checkout's bytecode (``__pycache__``, ignored by git), so each command starts as it does
    installed (pip compiles a package at install, the image's included) and not by compiling every module
    from source: a fifth of a second per command where PYTHONDONTWRITEBYTECODE is set, as on the dev VM."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(src / "tileops")], env=env, check=True,
                   stdout=subprocess.DEVNULL)


def ref_seconds() -> tuple[float, float]:
    """The reference loop's wall and CPU time now (best of three)."""
    wall = cpu = float("inf")
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.process_time()
        reference_loop()
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--formats", default="table,json,csv,md")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each command; the fastest is shown")
    ap.add_argument("--against", type=Path, metavar="DIR", help="another checkout to run side by side")
    ap.add_argument("--keep", action="store_true", help="keep the generated run directory")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tileops-scale-"))
    run_dir = tmp / "run"
    run_dir.mkdir()
    with open(run_dir / RECORDS_FILE, "w", encoding="utf-8") as f:
        for r in records(args.n):
            f.write(to_json(r) + "\n")
    gc.collect()
    prof = tmp / "bench-cpu.yaml"
    prof.write_text(yaml.safe_dump(profile().model_dump(mode="json", exclude_none=True)), encoding="utf-8")
    (tmp / "textfile").mkdir()
    size_mb = (run_dir / RECORDS_FILE).stat().st_size / 2**20
    print(f"records: {args.n:,} ({size_mb:.0f} MB of JSON Lines); reference loop now {ref_seconds()[0] * 1e3:.0f} ms "
          f"(about {QUIET_LOOP_S * 1e3:.0f} ms on the quiet dev VM)")
    print("each: wall s (= loops of the reference timed just before), CPU s of the command and its workers "
          "(= loops of the reference's CPU), peak MB, exit code")
    trees = [("now", REPO)] + ([("before", args.against.resolve())] if args.against else [])
    for _, src in trees:  # as an installed package runs: pip compiles the bytecode at install
        compile_bytecode(src)
    tileops = [sys.executable, "-m", "tileops.cli"]
    commands = [(f"roofline --format {fmt}", [*tileops, "roofline", str(run_dir), "--profile", str(prof),
                                              "--format", fmt], 3.0, 600.0) for fmt in args.formats.split(",")]
    commands.append(("export (stdout)", [*tileops, "export", str(run_dir), "--profile", str(prof)], 5.0, None))
    textfile = [*tileops, "export", str(run_dir), "--profile", str(prof), "--textfile", str(tmp / "textfile")]
    commands.append(("export --textfile", textfile, 5.0, None))
    commands.append(("export --textfile again", textfile, 5.0, None))  # reads the last success from the file
    commands.append(("tileops --help", [*tileops, "--help"], None, None))
    for what, cmd, goal_s, goal_mb in commands:
        best: dict[str, Result] = {}
        for _ in range(args.repeat):
            for name, src in trees:  # interleaved: the two trees see the same machine
                ref_wall, ref_cpu = ref_seconds()
                r = Result(*run(cmd, src, tmp), ref_wall, ref_cpu)
                if name not in best or r.wall / r.ref_wall < best[name].wall / best[name].ref_wall:
                    best[name] = r
        parts = []
        for name, _ in trees:
            r = best[name]
            parts.append(f"{name} {r.wall:6.2f} s ={r.wall / r.ref_wall:5.0f} loops, CPU {r.cpu:6.2f} s ="
                         f"{r.cpu / r.ref_cpu:5.0f} loops, {r.rss:5.0f} MB, exit {r.rc}")
        line = f"{what:23s}: " + " | ".join(parts)
        if len(trees) == 2:
            now, before = best["now"], best["before"]
            line += (f" | before/now: wall {(before.wall / before.ref_wall) / (now.wall / now.ref_wall):.1f}x, "
                     f"CPU {(before.cpu / before.ref_cpu) / (now.cpu / now.ref_cpu):.1f}x")
        if goal_s is not None:
            r = best["now"]
            quiet = r.wall / r.ref_wall * QUIET_LOOP_S  # seconds on the quiet VM
            ok = quiet < goal_s and (goal_mb is None or r.rss < goal_mb)
            line += (f" | goal < {goal_s:g} s" + (f", < {goal_mb:g} MB" if goal_mb else "")
                     + f": ~{quiet:.1f} s at the quiet VM's loop, {'ok' if ok else 'MISSED'}")
        print(line, flush=True)
    if args.keep:
        print(f"(files in {tmp})")
    else:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
