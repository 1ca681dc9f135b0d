#!/usr/bin/env python3
"""How big the HTML run report is and how long it takes to write (issue 37: at most 5 MB for 500 rows, written
in at most 2 s for 2,000 rows).

    python benchmarks/report_html.py [--size-rows 500] [--n 2000] [--repeat 3]

Synthesises records as benchmarks/roofline_pricing.py does (memory- and
compute-bound rows, a few skipped and zero-byte ones), each with an interval
and the conditions a CPU row records (so the page carries what a real run's
does: error bars, the hover's sentences), prices them once, then measures
``render_report`` and the write of the file (``tileops.pipeline.report``'s
work once the rows are priced) on the last ``--n`` rows, best of
``--repeat``; the size is the page of ``--size-rows`` rows, compared with the
baseline of itself (the widest table). A fixed plain-Python loop says how fast
this machine is at the moment.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from roofline_pricing import profile, records, reference_loop

from tileops.fsutil import write_atomic
from tileops.profiles import ProfileChooser
from tileops.records import CpuConditions, RowConditions
from tileops.report.baseline import compare
from tileops.report.html import ReportInput, render_report
from tileops.report.summary import RunFacts
from tileops.roofline import price_all

SIZE_GOAL = 5_000_000
TIME_GOAL_S = 2.0


def with_intervals(recs: list) -> list:
    """The records as a real CPU run writes them: each level's interval, and what surrounded the row."""
    out = []
    for i, r in enumerate(recs):
        if r.timing is None:
            out.append(r)
            continue
        t = r.timing.median_s
        spread = 1.02 if i % 7 else 1.8  # every seventh row contended: a wide interval, unstable
        timing = dataclasses.replace(r.timing, level_ci_s=[t / spread, t * spread],
                                     median_ci_s=[t / spread ** 1.5, t * spread ** 1.5], ci_df=24.0)
        contended = not i % 7
        cond = RowConditions(window_s=0.2, contended=contended, calls=40,
                             contention=["other processes used 35% of the CPUs (limit 10%)"] if contended else [],
                             cpu=CpuConditions(cores=2, steal=0.0, others_busy=0.35 if contended else 0.01,
                                               load1_start=1.0, load1_end=1.1))
        out.append(dataclasses.replace(r, timing=timing, conditions=cond))
    return out


def page(priced: list, baseline: bool) -> str:
    facts = RunFacts.of(priced)
    comparison = compare(priced, priced) if baseline else None
    return render_report(ReportInput(priced, facts.health(), facts, [profile()], comparison, None, "bench"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-rows", type=int, default=500)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    chooser = ProfileChooser.only(profile())
    priced = price_all(with_intervals(records(max(args.n, args.size_rows))), chooser)

    size = len(page(priced[:args.size_rows], baseline=True).encode("utf-8"))
    best = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            write_atomic(Path(tmp) / "report.html", page(priced[:args.n], baseline=False))
            best = min(best, time.perf_counter() - t0)
        written = (Path(tmp) / "report.html").stat().st_size
    t0 = time.perf_counter()
    reference_loop()
    ref = time.perf_counter() - t0
    print(f"page of {args.size_rows:,} rows (with a baseline): {size / 1e6:.2f} MB "
          f"(goal <= {SIZE_GOAL / 1e6:g} MB: {'met' if size <= SIZE_GOAL else 'MISSED'})")
    print(f"written for {args.n:,} rows: {best:.2f} s, {written / 1e6:.2f} MB (best of {args.repeat}; "
          f"goal <= {TIME_GOAL_S:g} s: {'met' if best <= TIME_GOAL_S else 'MISSED'})")
    print(f"reference loop (how fast this machine is now): {ref:.3f} s")


if __name__ == "__main__":
    main()
