#!/usr/bin/env python3
"""How long the roofline plot of a whole run takes, and how big its files are (issue 18: 2,000 rows
in under 5 s, each file under 2 MB).

    python benchmarks/roofline_plot.py [--n 2000] [--repeat 2]

Synthesises N records as benchmarks/roofline_pricing.py does (memory- and
compute-bound rows, a few skipped and zero-byte ones), prices them once, then
times ``write_plot`` (PNG and SVG) for them and, in the same run, for the first
10 rows: the fixed cost (figure, axes, fonts) on this machine right now, so the
per-row cost can be read off a shared, noisy host. Best of ``--repeat``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from roofline_pricing import profile, records

from tileops.profiles import ProfileChooser
from tileops.report.plot import write_plot
from tileops.roofline import price_all

TIME_GOAL_S = 5.0
SIZE_GOAL = 2 << 20


def timed(priced: list, prof, repeat: int) -> tuple[float, float, dict[str, int]]:
    """(best wall seconds, best CPU seconds of this process, file sizes)."""
    best, best_cpu, sizes = float("inf"), float("inf"), {}
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            t0, c0 = time.perf_counter(), time.process_time()
            paths = write_plot(priced, prof, Path(tmp))
            best = min(best, time.perf_counter() - t0)
            best_cpu = min(best_cpu, time.process_time() - c0)
            sizes = {p.suffix[1:]: p.stat().st_size for p in paths}
    return best, best_cpu, sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    prof = profile()
    priced = price_all(records(args.n), ProfileChooser.only(prof))  # every row on this profile
    t_small, c_small, s_small = timed(priced[:10], prof, args.repeat)
    t_big, c_big, s_big = timed(priced, prof, args.repeat)
    print(f"rows: {args.n:,}  (best of {args.repeat}; CPU = this process's CPU time, which other load on a "
          "shared host inflates less than wall time)")
    print(f"plot of 10 rows:    {t_small:6.2f} s wall {c_small:6.2f} s CPU  png {s_small['png'] / 1e3:6.0f} kB  "
          f"svg {s_small['svg'] / 1e3:6.0f} kB  (the fixed cost on this machine right now)")
    print(f"plot of {args.n:,} rows: {t_big:6.2f} s wall {c_big:6.2f} s CPU  png {s_big['png'] / 1e3:6.0f} kB  "
          f"svg {s_big['svg'] / 1e3:6.0f} kB")
    print(f"{args.n:,} rows / 10 rows: {t_big / t_small:.1f}x the time")
    ok_t = t_big < TIME_GOAL_S
    ok_s = max(s_big.values()) < SIZE_GOAL
    print(f"goal < {TIME_GOAL_S:g} s: {'met' if ok_t else 'MISSED'}; goal < {SIZE_GOAL >> 20} MB per file: "
          f"{'met' if ok_s else 'MISSED'}")


if __name__ == "__main__":
    main()
