"""Benchmark (issue 34, item 6): do a run's intervals cover what separate reruns give, and are they as narrow as
the reruns allow? Does a rerun of the same code compare as unchanged?

``--runs`` (default 6) separate ``tileops bench`` runs (each its own processes, one after the other) of the rows
issue 34 names: relu, add (2 labels), gemm (2 labels), softmax and rms_norm, float32, the CPU rows. Then per row:

* **coverage**: over every ordered pair of runs (i, j), whether run j's level lies inside run i's prediction
  of a rerun (``timing.median_ci_s``); goal: 90 % of the pairs or more;
* **width**: each run's prediction half-width (log) over 1.96 x the sd of the runs' log levels, the issue's
  measure; the median over runs; goal: 1.3 or less. A prediction covers the difference of two runs' levels,
  whose sd is sqrt(2) x a level's, so a 95 % prediction exactly as wide as the reruns need reads 1.41 here;
* **level width**: the level's interval (``timing.level_ci_s``) half-width over 1.96 x the same sd: 1.0 is
  exactly as wide as the runs' levels moved;

and **same code compared**: ``tileops roofline RUN_j --baseline RUN_i`` for consecutive runs (the command a user
runs), counting rows called ``slower`` or ``faster`` (goal: 0). The load average before and after is printed: on
a shared host the figures say as much about the neighbours as about the tool.

    python benchmarks/reproducibility.py [--runs 6] [--warm N] [--quick] [--out DIR] [--json OUT]
    python benchmarks/reproducibility.py --use RUN RUN ...     # runs already on disk
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROWS = ["--device", "cpu", "--tag", "cpu", "--dtype", "float32", "--op", "relu", "--op", "add", "--op", "gemm",
        "--op", "softmax", "--op", "rms_norm", "--no-plot"]
COVERAGE_GOAL = 0.90
WIDTH_GOAL = 1.3


def _tileops() -> list[str]:
    return [sys.executable, "-m", "tileops.cli"]


def bench(out: Path, quick: bool, env: dict[str, str]) -> float:
    """One ``tileops bench`` of the rows into ``out``; its wall time in seconds."""
    cmd = [*_tileops(), "bench", *ROWS, "--out", str(out)] + (["--quick"] if quick else [])
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
    if res.returncode not in (0, 1):  # 1: rows failed (reported below); anything else stops the benchmark
        sys.exit(f"tileops bench exited {res.returncode}:\n{res.stderr[-3000:]}")
    return time.perf_counter() - t0


Row = tuple[float, tuple[float, float] | None, tuple[float, float] | None]  # level, rerun prediction, level CI


def levels(run: Path) -> dict[str, Row]:
    from tileops.records import load_records
    from tileops.roofline import rerun_interval, time_interval

    out = {}
    for r in load_records([run]):
        if r.status == "ok" and r.timing is not None:
            t = r.timing
            level_ci = time_interval(t) if t.level_ci_s is not None else None
            out[f"{r.op} {r.label} {r.dtype}"] = (t.actual_time_s, rerun_interval(t), level_ci)
    return out


def half(level: float, ci: tuple[float, float]) -> float:
    """The log half-width on the wider side."""
    return max(math.log(ci[1] / level), math.log(level / ci[0]))


def per_row(runs: list[dict[str, Row]]) -> list[dict[str, Any]]:
    shared = sorted(set.intersection(*(set(r) for r in runs)))
    rows = []
    for name in shared:
        seen = [r[name] for r in runs]
        logs = [math.log(s[0]) for s in seen]
        sd = statistics.stdev(logs) if len(logs) > 1 else math.nan
        pairs = [(i, j) for i in range(len(seen)) for j in range(len(seen)) if i != j and seen[i][1] is not None]
        covered = sum(seen[i][1][0] <= seen[j][0] <= seen[i][1][1] for i, j in pairs)  # type: ignore[index]
        widths = [half(s[0], s[1]) / (1.96 * sd) for s in seen if s[1] is not None and sd > 0]
        level_widths = [half(s[0], s[2]) / (1.96 * sd) for s in seen if s[2] is not None and sd > 0]
        level_halves = [math.expm1(half(s[0], s[2])) for s in seen if s[2] is not None]
        rows.append({"row": name, "levels_s": [s[0] for s in seen], "sd_log": sd, "pairs": len(pairs),
                     "covered": covered, "width_ratio": statistics.median(widths) if widths else None,
                     "level_width_ratio": statistics.median(level_widths) if level_widths else None,
                     "rerun_half": statistics.median(math.expm1(half(s[0], s[1])) for s in seen if s[1] is not None)
                     if pairs else None,
                     "level_half": statistics.median(level_halves) if level_halves else None})
    return rows


def compared(first: Path, second: Path) -> dict[str, Any]:
    """``tileops roofline SECOND --baseline FIRST --format json``: the baseline's counts."""
    res = subprocess.run([*_tileops(), "roofline", str(second), "--baseline", str(first), "--format", "json"],
                         capture_output=True, text=True)
    if res.returncode not in (0, 1):
        sys.exit(f"tileops roofline exited {res.returncode}:\n{res.stderr[-3000:]}")
    doc = json.loads(res.stdout)["baseline"]
    return {"exit_code": res.returncode, "counts": doc["counts"],
            "changed": [f"{r['op']} [{r['label']} {r['dtype']}] {r['change']} {r['time_ratio']:.2f}x ({r['reason']})"
                        for r in doc["rows"] if r["change"] in ("slower", "faster")]}


def report(rows: list[dict[str, Any]], comparisons: list[dict[str, Any]]) -> tuple[list[str], bool]:
    lines = [f"  {'row':<44}{'levels (µs)':>40}{'sd':>7}{'rerun ±':>9}{'level ±':>9}{'cover':>8}{'width':>7}"
             f"{'level w':>8}"]
    for r in rows:
        lv = ", ".join(f"{x * 1e6:.0f}" for x in r["levels_s"])
        rh = f"{r['rerun_half'] * 100:.1f}%" if r["rerun_half"] is not None else "—"
        lh = f"{r['level_half'] * 100:.1f}%" if r["level_half"] is not None else "—"
        cov = f"{r['covered']}/{r['pairs']}"
        wr = f"{r['width_ratio']:.2f}" if r["width_ratio"] is not None else "—"
        lw = f"{r['level_width_ratio']:.2f}" if r["level_width_ratio"] is not None else "—"
        lines.append(f"  {r['row']:<44}{lv:>40}{r['sd_log'] * 100:>6.1f}%{rh:>9}{lh:>9}{cov:>8}{wr:>7}{lw:>8}")
    pairs = sum(r["pairs"] for r in rows)
    covered = sum(r["covered"] for r in rows)
    coverage = covered / pairs if pairs else math.nan
    widths = [r["width_ratio"] for r in rows if r["width_ratio"] is not None]
    width = statistics.median(widths) if widths else math.nan
    level_widths = [r["level_width_ratio"] for r in rows if r["level_width_ratio"] is not None]
    level_width = statistics.median(level_widths) if level_widths else math.nan
    moved = sum(c["counts"].get("slower", 0) + c["counts"].get("faster", 0) for c in comparisons)
    lines.append(f"coverage: {covered}/{pairs} = {coverage:.0%} of the pairs (goal >= {COVERAGE_GOAL:.0%}); "
                 f"median width ratio {width:.2f} (goal <= {WIDTH_GOAL}; a 95 % prediction as wide as the reruns "
                 f"need: 1.41); the level's interval {level_width:.2f} (1.0: as wide as the levels moved)")
    lines.append(f"same code compared ({len(comparisons)} consecutive pair(s)): {moved} row(s) slower or faster "
                 f"(goal 0); " + "; ".join(", ".join(f"{n} {k}" for k, n in sorted(c["counts"].items()))
                                           for c in comparisons))
    for c in comparisons:
        lines += [f"  {x}" for x in c["changed"]]
    met = coverage >= COVERAGE_GOAL and width <= WIDTH_GOAL and moved == 0
    return lines, met


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=6, help="separate bench runs (default 6, at least 2)")
    ap.add_argument("--use", nargs="+", type=Path, metavar="RUN", help="runs already on disk instead of new ones")
    ap.add_argument("--quick", action="store_true", help="pass --quick to every bench run")
    ap.add_argument("--warm", type=int, default=0, metavar="N",
                    help="first N runs into the same profile store, not measured: a host with a history of "
                         "reruns, as a fleet node that runs nightly has (default 0: a fresh store)")
    ap.add_argument("--out", type=Path, help="keep the runs here (default: a temporary directory)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    walls: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = args.out or Path(tmp)
        if args.use:
            runs = list(args.use)
        else:
            runs = [base / f"run-{i}" for i in range(args.runs)]
            env = {} if os.environ.get("TILEOPS_PROFILE_DIR") else {"TILEOPS_PROFILE_DIR": str(base / "store")}
            for i in range(args.warm):
                took = bench(base / f"warm-{i}", args.quick, env)
                print(f"warm-up run {i + 1}/{args.warm}: {took:.0f} s", flush=True)
            for run in runs:
                walls.append(bench(run, args.quick, env))
                print(f"run {len(walls)}/{len(runs)}: {walls[-1]:.0f} s", flush=True)
        rows = per_row([levels(r) for r in runs])
        comparisons = [compared(a, b) for a, b in zip(runs, runs[1:])]
    load1 = os.getloadavg()[0]
    print(f"reproducibility: {len(runs)} separate runs of relu, add, gemm, softmax, rms_norm (float32, CPU rows)"
          + (f" after {args.warm} warm-up run(s) into the same store" if args.warm else "")
          + (f" ({'--quick, ' if args.quick else ''}{statistics.fmean(walls):.0f} s each)" if walls else "")
          + f"; load average {load0:.2f} before, {load1:.2f} after, {os.cpu_count()} CPUs")
    lines, met = report(rows, comparisons)
    for line in lines:
        print(line)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "compared": comparisons, "load": [load0, load1],
                                         "walls_s": walls}, indent=2), encoding="utf-8")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
