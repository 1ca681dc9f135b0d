"""Whole-run tools at fleet scale: `tileops roofline` (every format) and `tileops export` over N records.

    python benchmarks/whole_run_tools.py [--n 100000] [--formats table,json,csv,md] [--repeat 1]
                                         [--against DIR] [--keep]

Writes N records (benchmarks/roofline_pricing.py's mix) into a run directory
as the bench writes them, then runs each command as a user would (a
subprocess, output to /dev/null) and prints its wall time and peak memory
(maximum resident set size of the command and the workers it forks) beside
the goal (issue 18: roofline under 3 s and 600 MB in every format, export
under 5 s), and the CLI's start-up (`tileops --help`).

Next to each time: the same time in units of a plain-Python reference loop
timed just before the command, so runs on a busy machine compare (the goals
are seconds on the quiet 2-core development VM, where the loop takes about
50 ms: 3 s is about 60 loops). ``--against DIR`` runs every command from
another checkout too (``git worktree add DIR REV``; it is put first on
PYTHONPATH), interleaved with this one, and prints both and their ratio.
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

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from roofline_pricing import profile, records, reference_loop  # noqa: E402

from tileops.records import RECORDS_FILE, to_json  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


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
print(time.perf_counter() - t0, usage.ru_maxrss, os.waitstatus_to_exitcode(status), file=sys.stderr)
"""


def run(cmd: list[str], src: Path, cwd: Path) -> tuple[float, float, int]:
    """Wall seconds, peak RSS in MB, and the exit code of one command run from the checkout ``src``."""
    env = {**os.environ, "PYTHONPATH": str(src) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with open(os.devnull, "wb") as null:  # cwd: not a checkout, so PYTHONPATH decides which tileops runs
        res = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, *cmd], stdout=null, stderr=subprocess.PIPE,
                             env=env, cwd=cwd, check=True)
    wall, rss_kb, rc = res.stderr.decode().strip().splitlines()[-1].split()
    return float(wall), int(rss_kb) / 1024, int(rc)


def ref_seconds() -> float:
    """The reference loop's time now (best of three)."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        reference_loop()
        best = min(best, time.perf_counter() - t0)
    return best


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
    size_mb = (run_dir / RECORDS_FILE).stat().st_size / 2**20
    print(f"records: {args.n:,} ({size_mb:.0f} MB of JSON Lines); reference loop now {ref_seconds() * 1e3:.0f} ms "
          "(about 50 ms on the quiet dev VM)")
    trees = [("now", REPO)] + ([("before", args.against.resolve())] if args.against else [])
    tileops = [sys.executable, "-m", "tileops.cli"]
    commands = [(f"roofline --format {fmt}", [*tileops, "roofline", str(run_dir), "--profile", str(prof),
                                              "--format", fmt], 3.0, 600.0) for fmt in args.formats.split(",")]
    commands.append(("export (stdout)", [*tileops, "export", str(run_dir), "--profile", str(prof)], 5.0, None))
    commands.append(("tileops --help", [*tileops, "--help"], None, None))
    for what, cmd, goal_s, goal_mb in commands:
        best: dict[str, tuple[float, float, float, int]] = {}
        for _ in range(args.repeat):
            for name, src in trees:  # interleaved: the two trees see the same machine
                ref = ref_seconds()
                wall, rss, rc = run(cmd, src, tmp)
                if name not in best or wall / ref < best[name][0] / best[name][2]:
                    best[name] = (wall, rss, ref, rc)
        parts = []
        for name, _ in trees:
            wall, rss, ref, rc = best[name]
            parts.append(f"{name} {wall:6.2f} s = {wall / ref:5.0f} loops {rss:6.0f} MB exit {rc}")
        line = f"{what:24s}: " + " | ".join(parts)
        if len(trees) == 2:
            (w0, _, r0, _), (w1, _, r1, _) = best["now"], best["before"]
            line += f" | before/now {(w1 / r1) / (w0 / r0):.1f}x"
        if goal_s is not None:
            wall, rss, ref, _ = best["now"]
            quiet = wall / ref * 0.05  # seconds on the quiet VM, where the loop takes ~50 ms
            ok = quiet < goal_s and (goal_mb is None or rss < goal_mb)
            line += f" | goal < {goal_s:g} s" + (f", < {goal_mb:g} MB" if goal_mb else "") + \
                f": ~{quiet:.1f} s quiet, {'ok' if ok else 'MISSED'}"
        print(line, flush=True)
    if args.keep:
        print(f"(files in {tmp})")
    else:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
