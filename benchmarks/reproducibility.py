"""Benchmark (issue 26, item 7): does a run's SOL interval cover a rerun, and does a rerun of the same code compare
as unchanged?

Two ``tileops bench`` runs back to back of the CPU memory-bound rows (relu, add, softmax, rms_norm, silu_and_mul in
float32 and bfloat16), then:

* **coverage**: the share of rows whose second SOL lies inside the first run's SOL interval (``sol_ci``). Both runs
  are priced against the same profile, so SOL = sol_time / time and the second SOL lies in the first's interval
  exactly when the second time lies in the first's time interval: it is counted on times, so it needs no
  calibration and holds for rows whose SOL is blank. Goal: 90 % or more on a quiet host.
* **same code compared**: ``tileops roofline SECOND --baseline FIRST --format json`` (the command a user runs), and
  its count of ``slower`` and ``faster`` rows. Goal: 0. ``ambiguous`` rows are counted beside it: honest, and never
  a failure.

A record without an interval (written before the bench measured them) is counted as ``no interval`` and left out
of the coverage; its rows are compared on their medians (``point-rule``), which the output says. The load average
before and after is printed: on a shared host the figures say as much about the neighbours as about the tool.

    python benchmarks/reproducibility.py [--quick] [--out DIR] [--json OUT]
    python benchmarks/reproducibility.py --runs FIRST SECOND     # two runs already on disk
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

OPS = ("relu", "add", "softmax", "rms_norm", "silu_and_mul")
DTYPES = ("float32", "bfloat16")
COVERAGE_GOAL = 0.90


def _tileops() -> list[str]:
    return [sys.executable, "-m", "tileops.cli"]


def bench(out: Path, quick: bool) -> float:
    """One ``tileops bench`` of the rows into ``out``; its wall time in seconds."""
    import time

    cmd = [*_tileops(), "bench", "--device", "cpu", "--out", str(out), "--no-plot", "--calibrate", "never"]
    for op in OPS:
        cmd += ["--op", op]
    for dtype in DTYPES:
        cmd += ["--dtype", dtype]
    if quick:
        cmd.append("--quick")
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode not in (0, 1):  # 1: rows failed (reported below); anything else stops the benchmark
        sys.exit(f"tileops bench exited {res.returncode}:\n{res.stderr[-3000:]}")
    return time.perf_counter() - t0


def coverage(first: Path, second: Path) -> dict[str, Any]:
    """Per row key: whether the second run's time lies in the first's interval; rows without an interval apart."""
    from tileops.records import load_records
    from tileops.roofline import time_interval

    def times(run: Path) -> dict[tuple, tuple[float, tuple[float, float] | None]]:
        out = {}
        for r in load_records([run]):
            if r.status == "ok" and r.timing is not None:
                out[r.key] = (r.timing.actual_time_s, time_interval(r.timing))
        return out

    a, b = times(first), times(second)
    rows: list[dict[str, Any]] = []
    for key in a.keys() & b.keys():
        (t1, ci), (t2, _) = a[key], b[key]
        rows.append({"row": " ".join(key), "first_s": t1, "second_s": t2, "interval_s": list(ci) if ci else None,
                     "covered": None if ci is None else ci[0] <= t2 <= ci[1],
                     "half_width": None if ci is None else max(ci[1] / t1 - 1, 1 - ci[0] / t1)})
    rows.sort(key=lambda r: r["row"])
    judged = [r for r in rows if r["covered"] is not None]
    return {"rows": rows, "shared": len(rows), "with_interval": len(judged),
            "covered": sum(r["covered"] for r in judged),
            "coverage": (sum(r["covered"] for r in judged) / len(judged)) if judged else None}


def compared(first: Path, second: Path) -> dict[str, Any]:
    """``tileops roofline SECOND --baseline FIRST --format json``: the baseline's counts and rows."""
    res = subprocess.run([*_tileops(), "roofline", str(second), "--baseline", str(first), "--format", "json"],
                         capture_output=True, text=True)
    if res.returncode not in (0, 1):
        sys.exit(f"tileops roofline exited {res.returncode}:\n{res.stderr[-3000:]}")
    doc = json.loads(res.stdout)["baseline"]
    return {"exit_code": res.returncode, "counts": doc["counts"],
            "point_rule": sum(1 for r in doc["rows"] if r["basis"] == "point"),
            "changed": [{k: r[k] for k in ("op", "label", "dtype", "change", "reason", "time_ratio", "ratio_interval")}
                        for r in doc["rows"] if r["change"] in ("slower", "faster", "ambiguous")]}


def report(cov: dict[str, Any], cmp: dict[str, Any]) -> list[str]:
    lines = []
    for r in cov["rows"]:
        if r["interval_s"] is None:
            lines.append(f"  {r['row']:<44} {r['first_s'] * 1e6:9.1f} µs -> {r['second_s'] * 1e6:9.1f} µs  no interval")
        else:
            lo, hi = r["interval_s"]
            mark = "inside" if r["covered"] else "OUTSIDE"
            lines.append(f"  {r['row']:<44} {r['first_s'] * 1e6:9.1f} µs ±{r['half_width'] * 100:5.1f} % "
                         f"[{lo * 1e6:.1f}, {hi * 1e6:.1f}] -> {r['second_s'] * 1e6:9.1f} µs  {mark}")
    if cov["coverage"] is None:
        lines.append(f"coverage: no interval: none of the {cov['shared']} shared row(s) has one (records written "
                     f"before intervals); goal >= {COVERAGE_GOAL:.0%}")
    else:
        missing = cov["shared"] - cov["with_interval"]
        lines.append(f"coverage: {cov['covered']}/{cov['with_interval']} = {cov['coverage']:.0%} of the rows' second "
                     f"SOL inside the first's interval (goal >= {COVERAGE_GOAL:.0%})"
                     + (f"; {missing} row(s) with no interval left out" if missing else ""))
    counts = cmp["counts"]
    moved = counts.get("slower", 0) + counts.get("faster", 0)
    lines.append(f"same code compared (tileops roofline SECOND --baseline FIRST): {counts.get('slower', 0)} slower, "
                 f"{counts.get('faster', 0)} faster (goal 0; {moved} now), {counts.get('same', 0)} same, "
                 f"{counts.get('ambiguous', 0)} ambiguous; exit {cmp['exit_code']}"
                 + (f"; {cmp['point_rule']} row(s) on the medians alone (no interval)" if cmp["point_rule"] else ""))
    for r in cmp["changed"]:
        ri = r["ratio_interval"]
        allowed = f" (allowed {ri[0]:.2f}-{ri[1]:.2f}x)" if ri else ""
        lines.append(f"  {r['change']:<9} {r['op']} [{r['label']} {r['dtype']}] {r['time_ratio']:.2f}x{allowed}: "
                     f"{r['reason']}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs=2, type=Path, metavar=("FIRST", "SECOND"),
                    help="two runs already on disk (run directories or records.jsonl) instead of two new ones")
    ap.add_argument("--quick", action="store_true", help="pass --quick to both bench runs")
    ap.add_argument("--out", type=Path, help="keep the two runs here (default: a temporary directory)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    walls: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.runs:
            first, second = args.runs
        else:
            base = args.out or Path(tmp)
            first, second = base / "first", base / "second"
            for run in (first, second):
                walls.append(bench(run, args.quick))
        cov, cmp = coverage(first, second), compared(first, second)
    load1 = os.getloadavg()[0]
    print(f"reproducibility: {', '.join(OPS)} x {', '.join(DTYPES)} on the CPU"
          + (f"; two bench runs back to back ({'--quick, ' if args.quick else ''}"
             f"{walls[0]:.0f} s and {walls[1]:.0f} s wall)" if walls else f"; runs {args.runs[0]} and {args.runs[1]}")
          + f"; load average {load0:.2f} before, {load1:.2f} after, {os.cpu_count()} CPUs")
    for line in report(cov, cmp):
        print(line)
    if args.json:
        args.json.write_text(json.dumps({"coverage": cov, "compared": cmp, "load": [load0, load1], "walls_s": walls},
                                        indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
