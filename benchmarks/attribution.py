"""Benchmark of the CUPTI attribution (issue 24): launches sorted into timed ranges in O(n log n).

A synthetic profile of N timed repetitions, each after a flush range, with L kernel launches each
(every launch with its kernel record), goes through ``attribute_iterations``, the rule the CUPTI
timer applies to every profiled batch. Beside it, on smaller profiles, the per-launch scan over
every range that it replaced (``enclosing_range`` asked once per launch), so the two are compared
as a ratio in one run. The issue's bound: 100,000 launches over 1,000 ranges in under a second.

    python benchmarks/attribution.py [--ranges 1000] [--per-range 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from typing import Callable, Sequence

from tileops.bench.cupti import FLUSH_RANGE, ITER_PREFIX, TraceEvent, attribute_iterations, classify, join_launches


def synthetic_launches(n_ranges: int, per_range: int) -> list[TraceEvent]:
    """``n_ranges`` timed iterations (each after a flush), ``per_range`` kernel launches in each: each launch
    1 us, its kernel 2 us, the kernels 3 us apart on the device, the first starting 500 us after its range."""
    evs: list[TraceEvent] = []
    corr = 0
    for i in range(n_ranges):
        t0 = i * 1_000_000
        evs.append(TraceEvent("user_annotation", FLUSH_RANGE, t0, t0 + 1_000))
        evs.append(TraceEvent("user_annotation", f"{ITER_PREFIX}{i}", t0 + 2_000, t0 + 2_000 + per_range * 2_000))
        for j in range(per_range):
            corr += 1
            t = t0 + 2_000 + j * 2_000 + 100
            evs.append(TraceEvent("cuda_runtime", "cudaLaunchKernel", t, t + 1_000, corr))
            evs.append(TraceEvent("kernel", "k", t0 + 500_000 + j * 3_000, t0 + 502_000 + j * 3_000, corr))
    return evs


def scan_every_range(events: Sequence[TraceEvent], n_iters: int) -> list[int]:
    """The attribution's costly part as it was: each launch asks every range whether it holds it (the
    innermost, latest-starting one wins). Returns each iteration's activity count."""
    c = classify(events, lambda n: n == FLUSH_RANGE or n.startswith(ITER_PREFIX))
    counts = [0] * n_iters
    for _, launch in join_launches(c.activities, c.launches):
        best = None
        for r in c.ranges:
            if r.start_ns <= launch.start_ns <= r.end_ns and (
                    best is None or (r.start_ns, -r.end_ns) > (best.start_ns, -best.end_ns)):
                best = r
        if best is not None and best.name.startswith(ITER_PREFIX):
            counts[int(best.name[len(ITER_PREFIX):])] += 1
    return counts


def best_of(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranges", type=int, default=1000, help="timed repetitions (default 1000)")
    ap.add_argument("--per-range", type=int, default=100, help="launches per repetition (default 100)")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many (default 3)")
    args = ap.parse_args()
    n, per = args.ranges, args.per_range
    evs = synthetic_launches(n, per)
    t = best_of(lambda: attribute_iterations(evs, n), args.repeat)
    print(f"attribute_iterations: {n * per:,} launches over {n:,} ranges: {t:.3f} s, best of {args.repeat} "
          f"({t / (n * per) * 1e6:.2f} us per launch; goal < 1 s at 100,000 launches over 1,000 ranges)")
    print(f"{'launches':>9} {'ranges':>7} {'sorted (s)':>11} {'scan (s)':>10} {'scan/sorted':>12}")
    for ranges in (max(1, n // 100), max(1, n // 30), max(1, n // 10)):  # the scan is quadratic: small sizes only
        small = synthetic_launches(ranges, per)
        ours = best_of(lambda: attribute_iterations(small, ranges), args.repeat)
        scan = best_of(lambda: scan_every_range(small, ranges), args.repeat)
        print(f"{ranges * per:>9,} {ranges:>7,} {ours:>11.4f} {scan:>10.4f} {scan / ours:>12.1f}")
    print("scan: each launch asks every range (the attribution before issue 24); both include classifying and "
          "joining, so the ratio understates the range lookup's own gain")


if __name__ == "__main__":
    main()
