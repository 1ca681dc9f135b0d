"""Benchmark (issue 39, items 4 and 5): is an interleaved race's ratio interval narrower than a sequential one's?

``--runs`` (default 3) pairs of separate ``tileops bench --backend torch --backend compile`` runs of the same rows
(relu, add and softmax, float32, the CPU rows), one ``--race sequential`` and one ``--race interleaved`` in each
pair, taken in turn so that the host's drift over the benchmark reaches both alike. For each run and row, the
ratio compile time / eager time and its interval, as each race judges the best backend:

* **sequential**: each backend visited in turn; the ratio of their levels, with the interval of a ratio of two
  independent levels (their ``timing.level_ci_s`` half-widths in log, added in quadrature: narrower than the
  overlap of the two intervals the verdict reads, so the comparison is the sequential race's best case);
* **interleaved**: the record's pairing (``Record.race``): the median of the per-block-pair ratios and its
  interval (``tileops.stats.ratio_interval``).

Printed per row: each run's ratio and its interval's half-width (log, as ±%), the median half-width per mode,
and the spread of the ratio over the runs of each mode (the sd of its log: what the drift between runs does to
the verdict, which no interval of one run sees). The load average before and after is printed: on a shared host
the figures say as much about the neighbours as about the tool. The compile cache is shared by the runs (the
first compiles; ``--warm`` runs one untimed run first so that none of the counted ones does).

    python benchmarks/race_interleave.py [--runs 3] [--quick] [--passes 1|2] [--op relu --op add ...]
                                         [--out DIR] [--json OUT]
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
from pathlib import Path
from typing import Any

OPS = ("relu", "add", "softmax")
MODES = ("sequential", "interleaved")
Row = tuple[str, str, str]  # op, label, dtype


def bench(run_dir: Path, mode: str, args: argparse.Namespace, cache: Path) -> None:
    cmd = [sys.executable, "-m", "tileops.cli", "bench", "--device", "cpu", "--tag", "cpu", "--dtype", "float32",
           "--backend", "torch", "--backend", "compile", "--race", mode, "--passes", str(args.passes),
           "--calibrate", "never", "--no-plot", "--compile-cache", str(cache), "--out", str(run_dir)]
    for op in args.op or OPS:
        cmd += ["--op", op]
    if args.quick:
        cmd.append("--quick")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: a row failed (its record says why)
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")


def log_half_width(ci: list[float] | None, level: float) -> float | None:
    """An interval's half-width in log space (the wider side), or None without one."""
    if not ci:
        return None
    return max(math.log(ci[1] / level), math.log(level / ci[0]))


def ratios(run_dir: Path) -> dict[Row, tuple[float, float | None]]:
    """Per row raced: compile's time over eager's and the half-width (log) of that ratio's interval, as the run's
    race judges it (the pairing where there is one, else the two levels' intervals in quadrature)."""
    from tileops.records import iter_records

    recs = {r.key: r for r in iter_records(run_dir / "records.jsonl")}
    out: dict[Row, tuple[float, float | None]] = {}
    for (op, label, dtype, backend), rec in recs.items():
        eager = recs.get((op, label, dtype, "torch"))
        if backend != "compile" or rec.status != "ok" or eager is None or eager.status != "ok":
            continue
        assert rec.timing is not None and eager.timing is not None
        pair = rec.race
        if pair is not None and pair.ratio is not None:
            out[(op, label, dtype)] = pair.ratio, log_half_width(pair.ratio_ci, pair.ratio)
            continue
        a = log_half_width(rec.timing.level_ci_s, rec.timing.median_s)
        b = log_half_width(eager.timing.level_ci_s, eager.timing.median_s)
        width = math.hypot(a, b) if a is not None and b is not None else None
        out[(op, label, dtype)] = rec.timing.median_s / eager.timing.median_s, width
    return out


def pct(h: float | None) -> str:
    return "   n/a" if h is None else f"±{math.expm1(h) * 100:5.1f} %"


def report(seen: dict[str, list[dict[Row, tuple[float, float | None]]]]) -> dict[str, Any]:
    rows = sorted({row for runs in seen.values() for run in runs for row in run})
    summary: dict[str, Any] = {}
    for row in rows:
        print(f"{' '.join(row)}  (compile time / eager time)")
        line: dict[str, Any] = {}
        summary[" ".join(row)] = line
        median: dict[str, float | None] = {}
        for mode in MODES:
            got = [run[row] for run in seen[mode] if row in run]
            widths = [w for _, w in got if w is not None]
            logs = [math.log(r) for r, _ in got]
            spread = statistics.stdev(logs) if len(logs) > 1 else None
            median[mode] = statistics.median(widths) if widths else None
            line[mode] = {"ratios": [r for r, _ in got], "half_widths": [w for _, w in got],
                          "median_half_width": median[mode], "sd_log_ratio_over_runs": spread}
            each = ", ".join(f"{r:.3f} {pct(w)}" for r, w in got)
            print(f"  {mode:<11}  median interval {pct(median[mode])}; over the runs sd "
                  f"{'n/a' if spread is None else f'{spread * 100:.1f} %'}; each: {each}")
        seq, inter = median["sequential"], median["interleaved"]
        if seq and inter:
            line["narrower"] = inter < seq
            print(f"  interleaved / sequential interval: {inter / seq:.2f}x")
    return summary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--runs", type=int, default=3, help="runs of each mode (default 3)")
    p.add_argument("--quick", action="store_true", help="the bench's loose stopping rule")
    p.add_argument("--passes", type=int, choices=(1, 2), default=2)
    p.add_argument("--op", action="append", help=f"an op to race (repeatable; default {', '.join(OPS)})")
    p.add_argument("--warm", action="store_true", help="one untimed run first: the compile cache filled")
    p.add_argument("--out", type=Path, default=None, help="where the runs go (default: a temporary folder)")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = p.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="race-interleave-"))
    cache = root / ".compile-cache"
    print(f"load before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; runs in {root}")
    if args.warm:
        bench(root / "warm", "interleaved", args, cache)
    seen: dict[str, list[dict[Row, tuple[float, float | None]]]] = {m: [] for m in MODES}
    for i in range(args.runs):
        for mode in MODES:
            run_dir = root / f"{mode}-{i}"
            bench(run_dir, mode, args, cache)
            seen[mode].append(ratios(run_dir))
    print(f"load after: {os.getloadavg()[0]:.2f}")
    summary = report(seen)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
