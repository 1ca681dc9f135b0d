"""Whole-run tools at fleet scale: `tileops roofline` (every format) and `tileops export` over N records.

    python benchmarks/whole_run_tools.py [--n 100000] [--formats table,json,csv,md]

Writes N records (benchmarks/roofline_pricing.py's mix) into a run directory
as the bench writes them, then runs each command as a user would (a
subprocess, output to /dev/null) and prints its wall time and peak memory
(maximum resident set size) beside the goal (issue 18: roofline under 3 s and
600 MB in every format, export under 5 s). A plain-Python reference loop
timed in the same run says how fast the machine is at the moment.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from roofline_pricing import profile, records, reference_loop  # noqa: E402

from tileops.records import RECORDS_FILE, to_json  # noqa: E402


def run(cmd: list[str]) -> tuple[float, float, int]:
    """Wall seconds, peak RSS in MB, and the exit code of one command."""
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen(cmd, stdout=null, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--formats", default="table,json,csv,md")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tileops-scale-"))
    run_dir = tmp / "run"
    run_dir.mkdir()
    with open(run_dir / RECORDS_FILE, "w", encoding="utf-8") as f:
        for r in records(args.n):
            f.write(to_json(r) + "\n")
    prof = tmp / "bench-cpu.yaml"
    prof.write_text(yaml.safe_dump(profile().model_dump(mode="json", exclude_none=True)), encoding="utf-8")
    size_mb = (run_dir / RECORDS_FILE).stat().st_size / 2**20
    t0 = time.perf_counter()
    reference_loop()
    ref = time.perf_counter() - t0
    print(f"records: {args.n:,} ({size_mb:.0f} MB of JSON Lines); reference loop {ref * 1e3:.0f} ms")
    tileops = [sys.executable, "-m", "tileops.cli"]
    for fmt in args.formats.split(","):
        wall, rss, rc = run([*tileops, "roofline", str(run_dir), "--profile", str(prof), "--format", fmt])
        ok = "ok" if wall < 3 and rss < 600 else "MISSED"
        print(f"roofline --format {fmt:5s}: {wall:6.2f} s  {rss:6.0f} MB peak  exit {rc}  goal < 3 s, < 600 MB: {ok}")
    wall, rss, rc = run([*tileops, "export", str(run_dir), "--profile", str(prof)])
    print(f"export (stdout)         : {wall:6.2f} s  {rss:6.0f} MB peak  exit {rc}  goal < 5 s: "
          f"{'ok' if wall < 5 else 'MISSED'}")
    print(f"(self: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB; files in {tmp})")


if __name__ == "__main__":
    main()
