"""The work of `tileops roofline` (every format) and `tileops export`, counted in instructions.

    python benchmarks/whole_run_instructions.py [--against DIR] [--formats table,json,csv,md]

Wall time on a machine shared with other jobs varies several-fold from minute
to minute; the number of instructions a command executes does not. This runs
each command under valgrind (cachegrind, no cache simulation) on two small
runs of benchmarks/roofline_pricing.py's records, and prints the instructions
per record and the fixed start-up cost, in units of the plain-Python
reference loop's instructions ("loops"). The quiet 2-core development VM runs
that loop in about 50 ms, which turns loops into an estimate of seconds for
100,000 records there: on one core, and with the work per record split over
two processes (what `tileops roofline` does with a large file on two CPUs).
The estimate is a floor: the loop runs more instructions per cycle than
parsing and formatting, which wait on memory (on the development VM the
measured CPU time of these commands was about twice the estimate).
``--against DIR`` counts another checkout too (``git worktree add DIR REV``).
Needs valgrind; takes a few minutes.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from roofline_pricing import profile, records

from tileops.records import RECORDS_FILE, to_json

REPO = Path(__file__).resolve().parents[1]
QUIET_LOOP_S = 0.05  # the reference loop on the quiet 2-core dev VM (best seen: 49 ms)
SMALL, LARGE = 200, 1200  # records in the two runs: their difference gives the cost per record
AT = 100_000


def instructions(cmd: list[str], src: Path, cwd: Path) -> int:
    """Instructions one command executes, run from the checkout ``src`` under valgrind."""
    env = {**os.environ, "PYTHONPATH": str(src) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                          *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    counts = re.findall(r"I\s+refs:\s+([\d,]+)", res.stderr)
    if not counts:
        raise SystemExit(f"valgrind printed no count for {' '.join(cmd)}:\n{res.stderr[-2000:]}")
    return int(counts[-1].replace(",", ""))


def write_run(root: Path, n: int) -> Path:
    run = root / f"run-{n}"
    run.mkdir()
    with open(run / RECORDS_FILE, "w", encoding="utf-8") as f:
        for r in records(n):
            f.write(to_json(r) + "\n")
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--formats", default="table,json,csv,md")
    ap.add_argument("--against", type=Path, metavar="DIR", help="another checkout to count side by side")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    tmp = Path(tempfile.mkdtemp(prefix="tileops-icount-"))
    try:
        small, large = write_run(tmp, SMALL), write_run(tmp, LARGE)
        prof = tmp / "bench-cpu.yaml"
        prof.write_text(yaml.safe_dump(profile().model_dump(mode="json", exclude_none=True)), encoding="utf-8")
        py = [sys.executable]
        bench = str(Path(__file__).parent)
        loop = (instructions([*py, "-c", f"import sys; sys.path.insert(0, {bench!r}); "
                              "from roofline_pricing import reference_loop; reference_loop()"], REPO, tmp)
                - instructions([*py, "-c", f"import sys; sys.path.insert(0, {bench!r}); "
                                "from roofline_pricing import reference_loop"], REPO, tmp))
        print(f"reference loop: {loop / 1e6:.0f} M instructions (~{QUIET_LOOP_S * 1e3:.0f} ms on the quiet dev VM); "
              f"records per run: {SMALL} and {LARGE}")
        print("each: instructions per record and fixed, in loops; the estimate for 100,000 records at the loop's "
              "speed on the quiet VM, one process / two (roofline now reads a large file in two)")
        trees = [("now", REPO)] + ([("before", args.against.resolve())] if args.against else [])
        tileops = [*py, "-m", "tileops.cli"]
        commands = [(f"roofline --format {fmt}", lambda run, fmt=fmt: [*tileops, "roofline", str(run), "--profile",
                                                                        str(prof), "--format", fmt]) for fmt in
                    args.formats.split(",")]
        commands.append(("export (stdout)", lambda run: [*tileops, "export", str(run), "--profile", str(prof)]))
        for what, make in commands:
            parts, per_loop = [], {}
            for name, src in trees:
                cmd_small, cmd_large = make(small), make(large)
                if name == "now" and what.startswith("roofline"):  # one process: the count is the whole work
                    cmd_small, cmd_large = cmd_small + ["--jobs", "1"], cmd_large + ["--jobs", "1"]
                a, b = instructions(cmd_small, src, tmp), instructions(cmd_large, src, tmp)
                per = (b - a) / (LARGE - SMALL) / loop
                fixed = (a - SMALL * (b - a) / (LARGE - SMALL)) / loop
                per_loop[name] = per
                one = (fixed + per * AT) * QUIET_LOOP_S
                split = name == "now" and what.startswith("roofline")  # reads a large file in two processes
                two = f" / {(fixed + per * AT / 2) * QUIET_LOOP_S:4.1f} s" if split else ""
                parts.append(f"{name} {per * 1e3:6.2f} m-loops/record + {fixed:4.1f} loops: ~{one:4.1f} s{two}")
            line = f"{what:23s}: " + " | ".join(parts)
            if len(trees) == 2:
                line += f" | before/now per record {per_loop['before'] / per_loop['now']:.1f}x"
            print(line, flush=True)
        help_counts = [f"{name} {instructions([*tileops, '--help'], src, tmp) / loop:.1f} loops" for name, src in trees]
        print(f"{'tileops --help':23s}: " + " | ".join(help_counts))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
