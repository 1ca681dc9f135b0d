"""A CPU row timed in scheduler slices: its samples bimodal at the OS time slice (issue 37).

Why. A parallel CPU op splits its work over its threads and waits for the last one. On a host whose CPUs
are all busy (another job, the bench's own other threads), a preempted thread waits for the scheduler to
give its CPU back: about a time slice, milliseconds, whatever the op's own time. A row timed so reads the
scheduler, not the op: its samples fall in a fast cluster (every thread ran) and one a slice or more slower,
and a visit whose blocks all hold the same mix knows the mix's median to a percent or two: a precise time of
nothing. Such a row is marked (``Timing.slices``); ``tileops.bench.revisit.finish`` widens its interval over
both clusters and the roofline words it instead of showing a ± (``tileops.roofline.noise``).

The statistic (:func:`timed_in_slices`), over a row's samples in the order they were taken:

* a slice apart: the sorted samples are cut at an empty band at least ``SLICE_SHARE`` of a slice wide, with
  at least ``MIN_FAST`` samples below and ``MIN_SLOW_SHARE`` of them (and ``MIN_FAST``) above (a few slow
  samples are any host's tail); the band is also ``SEPARATION`` times the fast cluster's own spread (a
  unimodal noisy row fills its range: no such band). The lowest such cut is taken: the fast cluster is the
  op's own time;
* spread over the visit: the smaller cluster comes in at least ``MIN_RUNS`` separate runs of consecutive
  samples. One slow burst (a neighbour's job starting and ending) is contention, which the row's
  ``conditions`` report, not a slice taken again and again.

Too few samples (``MIN_SAMPLES``) are not judged. The slice is the kernel's where it exposes one
(:func:`kernel_slice`), else the kernel's own default for this many CPUs. Standard library only (spec §5.2).
"""

from __future__ import annotations

import functools
import math
import os
import statistics
from collections.abc import Sequence
from pathlib import Path

from tileops.records import SchedulerSlices
from tileops.stats import robust_scale

#: Where a kernel says its time slice, newest first: EEVDF's base slice (Linux 6.6+, debugfs), then CFS's
#: minimum granularity (debugfs since 5.13, a sysctl before). Nanoseconds.
SLICE_FILES = ("sys/kernel/debug/sched/base_slice_ns", "proc/sys/kernel/sched_base_slice_ns",
               "sys/kernel/debug/sched/min_granularity_ns", "proc/sys/kernel/sched_min_granularity_ns")
#: The kernel's default slice before scaling: 0.75 ms, times 1 + log2 of the online CPUs (at most 8).
BASE_SLICE_S = 0.75e-3
#: Samples below which a row is not judged: a few samples cannot show two clusters and how they interleave.
MIN_SAMPLES = 12
#: The fast cluster's fewest samples: the op's own time needs a few readings.
MIN_FAST = 3
#: The slow cluster's smallest share of the samples: below it, slow samples are the host's tail.
MIN_SLOW_SHARE = 0.10
#: The empty band between the clusters, at least this share of a slice ("about a slice": a preempted thread
#: waits for what is left of another's slice, a slice at most, often nearly one).
SLICE_SHARE = 0.5
#: ... and at least this many times the fast cluster's spread (robust sd), so noise cannot open it.
SEPARATION = 8.0
#: ... and the slow cluster starts at least this many times above the fast one's top: a slice that slows a
#: call by a fraction of its own time is noise the row's interval covers; one that multiplies it is the time.
MIN_RATIO = 1.5
#: The smaller cluster's fewest separate runs in the order the samples were taken (one run: one burst).
MIN_RUNS = 3


def default_slice(cpus: int) -> float:
    """The kernel's default time slice for ``cpus`` online CPUs, seconds (its logarithmic scaling)."""
    factor = 1 + int(math.log2(max(1, min(cpus, 8))))
    return BASE_SLICE_S * factor


def kernel_slice(root: Path = Path("/")) -> tuple[float, str]:
    """The scheduler's time slice (seconds) and where it was read: the first of :data:`SLICE_FILES` under
    ``root`` that holds a positive number, else the kernel's default for this host's CPUs, saying so."""
    for name in SLICE_FILES:
        path = root / name
        try:
            ns = int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if ns > 0:
            return ns / 1e9, str(path)
    cpus = os.cpu_count() or 1
    return default_slice(cpus), (f"the kernel's default for {cpus} CPUs ({BASE_SLICE_S * 1e3:g} ms x "
                                 f"{default_slice(cpus) / BASE_SLICE_S:g}): no slice file readable")


@functools.cache
def host_slice() -> tuple[float, str]:
    """:func:`kernel_slice` of this host, read once per process."""
    return kernel_slice()


def _cuts(s: Sequence[float], slice_s: float) -> list[int]:
    """Where the sorted samples ``s`` may be cut (the index of the first slow sample), lowest first: enough
    samples on each side, and an empty band of at least ``SLICE_SHARE`` of the slice between them."""
    n = len(s)
    slow_min = max(MIN_FAST, math.ceil(MIN_SLOW_SHARE * n))
    return [i for i in range(MIN_FAST, n - slow_min + 1)
            if s[i] - s[i - 1] >= SLICE_SHARE * slice_s and s[i] >= MIN_RATIO * s[i - 1]]


def _runs(flags: Sequence[bool]) -> int:
    """Separate runs of True in ``flags``."""
    return sum(1 for i, f in enumerate(flags) if f and (i == 0 or not flags[i - 1]))


def timed_in_slices(blocks: Sequence[Sequence[float]], slice_s: float, source: str) -> SchedulerSlices | None:
    """The row's two clusters when its samples (``blocks``, in the order taken) are bimodal at the time slice
    ``slice_s`` (read from ``source``), else None: the module's tests, at the lowest cut that passes them."""
    taken = [x for b in blocks for x in b]
    n = len(taken)
    if n < MIN_SAMPLES or slice_s <= 0:
        return None
    s = sorted(taken)
    for i in _cuts(s, slice_s):  # the lowest cut that passes: the fast cluster is the op's own time
        fast, slow = s[:i], s[i:]
        if s[i] - s[i - 1] < SEPARATION * robust_scale(fast):
            continue
        is_slow = [x >= s[i] for x in taken]
        fewer_slow = len(slow) <= len(fast)
        if _runs([f == fewer_slow for f in is_slow]) < MIN_RUNS:
            continue
        return SchedulerSlices(slow=len(slow), samples=n, fast_s=statistics.median(fast),
                               slow_s=statistics.median(slow), slice_s=slice_s, slice_source=source)
    return None
