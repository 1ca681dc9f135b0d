"""Benchmark (issue 39, item 5): does SOL against the device's state hold still where the time moves?

``--runs`` (default 6) separate ``tileops bench`` runs (each its own processes, one after the other) of relu, add,
softmax and rms_norm, float32, the CPU rows, each row probed between its blocks (``tileops.bench.probe``). Each
run is priced by ``tileops roofline --format json`` (the command a user runs). Then per row, over the runs:

* **spread(time)**: the sd of the runs' log times (``actual_time_s``);
* **spread(SOL vs calibration)**: the sd of the log SOL against the calibrated ceiling (``efficiency``): the same
  as the time's on one profile, shown because it is the fleet's view;
* **spread(SOL vs state)**: the sd of the log SOL against the device's state during the row
  (``state_efficiency``: efficiency / probe_ratio);
* **probe cost**: the share of the row's timing wall time its probes took (``probe_cost_share``): median and
  most over the runs; goal <= 10 %;

and the issue's goal per row: spread(SOL vs state) <= 0.5 x spread(time). The load average before and after is
printed: on a shared host the figures say as much about the neighbours as about the tool.

    python benchmarks/device_state.py [--runs 6] [--quick] [--out DIR] [--json OUT]
    python benchmarks/device_state.py --use RUN RUN ...     # runs already on disk
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

OPS = ("relu", "add", "softmax", "rms_norm")
ROWS = ["--device", "cpu", "--tag", "cpu", "--dtype", "float32", *(a for op in OPS for a in ("--op", op)),
        "--no-plot"]
STATE_GOAL = 0.5  # spread(SOL vs state) / spread(time)
COST_GOAL = 0.10


def _tileops() -> list[str]:
    return [sys.executable, "-m", "tileops.cli"]


def bench(out: Path, quick: bool) -> float:
    """One ``tileops bench`` of the rows into ``out``; its wall time in seconds."""
    cmd = [*_tileops(), "bench", *ROWS, "--out", str(out)] + (["--quick"] if quick else [])
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
    if res.returncode not in (0, 1):  # 1: rows failed (reported below); anything else stops the benchmark
        sys.exit(f"tileops bench exited {res.returncode}:\n{res.stderr[-3000:]}")
    return time.perf_counter() - t0


Reading = dict[str, float | None]


def priced(run: Path) -> dict[str, Reading]:
    """Each ok row of a run as ``tileops roofline --format json`` prices it: time, both SOLs, probe ratio, cost."""
    res = subprocess.run([*_tileops(), "roofline", str(run), "--format", "json"], capture_output=True, text=True)
    if res.returncode not in (0, 1, 3):
        sys.exit(f"tileops roofline {run} exited {res.returncode}:\n{res.stderr[-3000:]}")
    out = {}
    for r in json.loads(res.stdout)["rows"]:
        if r["status"] == "ok" and r["actual_time_s"]:
            out[f"{r['op']} {r['label']} {r['dtype']}"] = {
                "time": r["actual_time_s"], "sol": r["efficiency"], "state": r["state_efficiency"],
                "ratio": r["probe_ratio"], "cost": r["probe_cost_share"]}
    return out


def log_sd(values: list[float | None]) -> float | None:
    """The sd of the logs of the positive values; None with fewer than two."""
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return statistics.stdev(logs) if len(logs) >= 2 else None


def per_row(runs: list[dict[str, Reading]]) -> list[dict[str, Any]]:
    shared = sorted(set.intersection(*(set(r) for r in runs))) if runs else []
    rows = []
    for key in shared:
        got = [run[key] for run in runs]
        costs = [g["cost"] for g in got if g["cost"] is not None]
        t, sol, state = (log_sd([g[k] for g in got]) for k in ("time", "sol", "state"))
        rho = drift_correlation(got)
        rows.append({"row": key, "runs": len(got), "spread_time": t, "spread_sol": sol, "spread_state": state,
                     "state_over_time": state / t if state is not None and t else None,
                     "rho": rho, "best_state_over_time": None if rho is None else math.sqrt(max(0.0, 1 - rho * rho)),
                     "probe_ratio_median": _median([g["ratio"] for g in got]),
                     "cost_median": statistics.median(costs) if costs else None,
                     "cost_max": max(costs) if costs else None})
    return rows


def drift_correlation(got: list[Reading]) -> float | None:
    """How much of a row's run-to-run drift its probe saw: the correlation, over the runs, of the log time with the
    log of the probe's slowness (1 / probe ratio). Whatever multiple of the probe a correction divides by, the
    spread it leaves is at least spread(time) x sqrt(1 - rho^2): the bound this probe sets on the goal."""
    pairs = [(math.log(g["time"]), -math.log(g["ratio"])) for g in got
             if g["time"] and g["ratio"] and g["time"] > 0 and g["ratio"] > 0]
    if len(pairs) < 3:
        return None
    try:
        return statistics.correlation([a for a, _ in pairs], [b for _, b in pairs])
    except statistics.StatisticsError:  # one of them constant
        return None


def _median(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:.1f} %"


def report(rows: list[dict[str, Any]]) -> list[str]:
    head = (f"{'row':<34} {'spread time':>11} {'SOL vs cal':>10} {'SOL vs state':>12} {'state/time':>10} "
            f"{'probe ratio':>11} {'probe cost':>10} {'max cost':>8} {'rho':>5} {'bound':>5}  goal")
    lines = [head, "-" * len(head)]
    met = 0
    for r in rows:
        ratio = r["state_over_time"]
        ok = ratio is not None and ratio <= STATE_GOAL
        met += ok
        lines.append(f"{r['row'][:34]:<34} {_pct(r['spread_time']):>11} {_pct(r['spread_sol']):>10} "
                     f"{_pct(r['spread_state']):>12} {'—' if ratio is None else f'{ratio:.2f}':>10} "
                     f"{_pct(r['probe_ratio_median']):>11} {_pct(r['cost_median']):>10} {_pct(r['cost_max']):>8} "
                     f"{_num(r.get('rho')):>5} {_num(r.get('best_state_over_time')):>5}  "
                     f"{'met' if ok else 'NOT met'}")
    costs = [r["cost_max"] for r in rows if r["cost_max"] is not None]
    lines.append("rho: the correlation over the runs of a row's log time with its probe's log slowness; bound: "
                 "sqrt(1 - rho^2), the least state/time any multiple of this probe could leave")
    lines.append(f"goal spread(SOL vs state) <= {STATE_GOAL} x spread(time): {met} of {len(rows)} row(s)")
    lines.append(f"goal probe cost <= {COST_GOAL:.0%} of a row's time: most {_pct(max(costs) if costs else None)} "
                 f"({'met' if costs and max(costs) <= COST_GOAL else 'NOT met' if costs else 'no probe cost read'})")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--quick", action="store_true", help="--quick runs: a smoke test of this script, no figures")
    ap.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary directory)")
    ap.add_argument("--use", type=Path, nargs="+", default=None, help="read these runs instead of running")
    ap.add_argument("--json", type=Path, default=None, help="write the per-row figures here")
    args = ap.parse_args(argv)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        base = args.out or Path(tmp)
        if args.use:
            dirs = list(args.use)
        else:
            dirs = []
            for i in range(args.runs):
                d = base / f"run{i + 1}"
                took = bench(d, args.quick)
                print(f"run {i + 1}/{args.runs}: {took:.0f} s")
                dirs.append(d)
        rows = per_row([priced(d) for d in dirs])
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{len(dirs)} run(s), {len(rows)} row(s) in every run")
    for line in report(rows):
        print(line)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
