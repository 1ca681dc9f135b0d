"""CUPTI device-busy time from a profile: which device activity belongs to which timed repetition.

The rule, in one paragraph (docs/timing.md gives its sources): only
``kernel``, ``gpu_memcpy`` and ``gpu_memset`` records are device activity
(never the profiler's ``gpu_user_annotation`` copies of CPU ranges, nor
``cuda_sync``); each is joined to the ``cuda_runtime``/``cuda_driver`` call
that launched it by CUPTI's correlation id (never the profiler's ``External
id``); the call belongs to the innermost of our CPU ranges whose span contains
its start -- ``tileops::iter::<i>`` or ``tileops::flush``. An iteration's time is
the union of its activities' intervals (overlap counts once); flush activity is
dropped. An orphan activity, a launch outside every range, a kernel launch
without its kernel record, a missing range, an iteration with no activity or
iterations with different activity counts raise :class:`AttributionError`.

The attribution is pure: it reads :class:`TraceEvent` tuples from a Chrome
trace (:func:`trace_events_from_chrome`). The live profiler's are read the same
way, from the trace its result writes (:func:`trace_events_of_result`), so one
rule holds on every torch from 2.11 on and the tests run the very code the
timer (``tileops.bench.timers.CuptiTimer``) runs on real GPU traces. Each
iteration's span (first launch to last activity end) is kept beside its busy
time: a span far above it is a row the host holds back.
"""

from __future__ import annotations

import bisect
import gc
import gzip
import heapq
import json
import operator
import os
import re
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

ITER_PREFIX = "tileops::iter::"
FLUSH_RANGE = "tileops::flush"

#: Kineto activity types (libkineto ActivityType names) that are device work.
DEVICE_ACTIVITY = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
#: Host calls that launch device work; their ``correlation`` is CUPTI's.
LAUNCH_CALLS = frozenset({"cuda_runtime", "cuda_driver"})
#: A CPU ``record_function`` range (its GPU-timeline copy is ``gpu_user_annotation``).
CPU_RANGE = "user_annotation"
#: Calls that always produce one kernel record: one without it means CUPTI dropped records.
KERNEL_LAUNCH = re.compile(r"^cu(da)?Launch(Cooperative)?Kernel")


class AttributionError(RuntimeError):
    """Device activity could not be attributed to timed iterations: the CUPTI timing is refused."""



# -- the live profiler: the Chrome trace Kineto writes ------------------------------------------------


def trace_events_of_result(result: Any, keep: str | None = None) -> list[TraceEvent]:
    """A finished profile's events, read from the Chrome trace its ``_ProfilerResult.save`` writes.

    One rule on every torch from 2.11 on: the trace names each event's Kineto
    activity type (``cat``) and CUPTI correlation id, which torch 2.11's event
    objects do not (``_KinetoEvent.activity_type()`` came in 2.12); ``save`` is on
    both, and the trace is what the tests read from real GPUs (:func:`trace_events_from_chrome`).
    Nothing else of the result is touched. ``keep``: also leave the trace there
    (gzip-compressed when the name ends in ``.gz``), as evidence.
    """
    with tempfile.TemporaryDirectory(prefix="tileops-cupti-") as tmp:
        path = os.path.join(tmp, "trace.json")
        result.save(path)
        with open(path, "rb") as f:
            raw = f.read()
        if keep:
            opener = gzip.open if keep.endswith(".gz") else open
            with opener(keep, "wb") as out:
                out.write(raw)
    with _no_gc():
        return trace_events_from_chrome(json.loads(raw))


# -- CUPTI attribution: pure functions over trace events ---------------------------------------------


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One profiler event, as a Chrome-trace export of the profiler describes it.

    ``kind`` is Kineto's activity type name (``kernel``, ``cuda_runtime``,
    ``user_annotation``, ``gpu_user_annotation``, ``cuda_sync``, ``cpu_op``, ...).
    ``correlation`` is CUPTI's correlation id and is set only on device activity
    and on runtime/driver calls: the profiler's own ids (``External id``, a CPU
    op's or range's correlation) are another numbering and are never read.
    """

    kind: str
    name: str
    start_ns: int
    end_ns: int
    correlation: int | None = None


def _cupti_correlation(kind: str, value: Any) -> int | None:
    if kind not in DEVICE_ACTIVITY and kind not in LAUNCH_CALLS or value is None:
        return None
    return int(value) or None  # CUPTI numbers from 1; 0 means none


def trace_events_from_chrome(trace: Mapping[str, Any]) -> list[TraceEvent]:
    """The complete (``ph: X``) events of a Chrome-trace export (``_ProfilerResult.save``).

    Timestamps are microseconds there; ``args.correlation`` is CUPTI's id.
    """
    out = []
    for e in trace.get("traceEvents", ()):
        if e.get("ph") != "X" or not isinstance(e.get("cat"), str) or "ts" not in e:
            continue
        start = round(float(e["ts"]) * 1000)
        kind = e["cat"]
        out.append(TraceEvent(kind, str(e.get("name", "")), start, start + round(float(e.get("dur", 0)) * 1000),
                              _cupti_correlation(kind, (e.get("args") or {}).get("correlation"))))
    return out


@dataclass(frozen=True)
class Classified:
    activities: list[TraceEvent]  # kernel, memcpy and memset records
    launches: dict[int, TraceEvent]  # runtime/driver calls by CUPTI correlation id
    ranges: list[TraceEvent]  # CPU ranges (record_function) the caller asked for


def classify(events: Iterable[TraceEvent], is_range: Callable[[str], bool] = lambda name: True) -> Classified:
    """Split events into device activity, launching calls (by correlation) and CPU ranges.

    Everything else is ignored: CPU ops, ``gpu_user_annotation`` spans (drawn over
    other activity, never device work), ``cuda_sync`` records. Two launch calls with
    one correlation id are accepted only nested (a driver call inside the runtime
    call it serves): the outer is kept. Otherwise the stream is not one CUPTI
    numbering, and attribution is refused.
    """
    activities: list[TraceEvent] = []
    launches: dict[int, TraceEvent] = {}
    ranges: list[TraceEvent] = []
    for e in events:
        kind = e.kind
        if kind in DEVICE_ACTIVITY:
            activities.append(e)
        elif kind in LAUNCH_CALLS and e.correlation is not None:
            prev = launches.get(e.correlation)
            if prev is None:
                launches[e.correlation] = e
            elif _contains(prev, e.start_ns) and _contains(prev, e.end_ns):
                pass
            elif _contains(e, prev.start_ns) and _contains(e, prev.end_ns):
                launches[e.correlation] = e
            else:
                raise AttributionError(
                    f"two launch calls share CUPTI correlation id {e.correlation} ({prev.name}, {e.name}) and "
                    "neither contains the other: the event stream mixes id systems")
        elif kind == CPU_RANGE and is_range(e.name):
            ranges.append(e)
    return Classified(activities, launches, ranges)


def _contains(r: TraceEvent, t_ns: int) -> bool:
    return r.start_ns <= t_ns <= r.end_ns


def join_launches(activities: Iterable[TraceEvent], launches: Mapping[int, TraceEvent]
                  ) -> list[tuple[TraceEvent, TraceEvent]]:
    """Each activity with the call that launched it. An activity without one is refused: launched before
    the profiling window (its CUPTI id precedes every launch in it: work queued when profiling began), or
    its launch record was dropped."""
    return list(zip(*_join(activities, launches)))


def _join(activities: Iterable[TraceEvent], launches: Mapping[int, TraceEvent]
          ) -> tuple[list[TraceEvent], list[TraceEvent]]:
    """:func:`join_launches` as two parallel lists (no pair objects: a profile holds ~100k activities)."""
    acts: list[TraceEvent] = []
    calls: list[TraceEvent] = []
    orphans = []
    # keyed by int ids: an activity without one (None) finds nothing
    get = cast("Callable[[int | None], TraceEvent | None]", launches.get)
    for a in activities:
        launch = get(a.correlation)
        if launch is None:
            orphans.append(a)
        else:
            acts.append(a)
            calls.append(launch)
    if orphans:
        a = orphans[0]
        first = min(launches, default=None)
        if first is not None and all(o.correlation is not None and o.correlation < first for o in orphans):
            raise AttributionError(
                f"{len(orphans)} device activities (first {a.name[:80]!r}, CUPTI correlation {a.correlation}) were "
                f"launched before the profiling window (ids below its first launch's, {first}): the window opened "
                "on queued work, so its busy time cannot be told from earlier work's")
        raise AttributionError(
            f"device activity {a.name[:80]!r} has no launch record (CUPTI correlation {a.correlation}"
            f"{f', and {len(orphans) - 1} more' if len(orphans) > 1 else ''}): records were dropped")
    return acts, calls


def enclosing_range(ranges: Sequence[TraceEvent], t_ns: int) -> TraceEvent | None:
    """The innermost range whose span contains ``t_ns`` (ranges nest: the latest-starting one)."""
    owner = owners(ranges, [t_ns])[0]
    return None if owner is None else ranges[owner]


def owners(ranges: Sequence[TraceEvent], times: Sequence[int]) -> list[int | None]:
    """For each time, the index of the innermost range containing it (None: no range does).

    Innermost is the latest-starting range whose span holds the time (the
    earliest-ending among those, then the first listed). One sweep over the
    times in order with a heap of the ranges begun so far, a range dropped once
    it has ended: O((ranges + times) log), where asking every range for every
    launch was quadratic (a MoE row: ~96k launches x 128 ranges).
    """
    by_start = sorted(range(len(ranges)), key=lambda i: ranges[i].start_ns)
    order = sorted(range(len(times)), key=times.__getitem__)
    out: list[int | None] = [None] * len(times)
    heap: list[tuple[int, int, int]] = []  # (-start, end, index): the innermost candidate on top
    nxt = 0
    for q in order:
        t = times[q]
        while nxt < len(by_start) and ranges[by_start[nxt]].start_ns <= t:
            r = ranges[by_start[nxt]]
            heapq.heappush(heap, (-r.start_ns, r.end_ns, by_start[nxt]))
            nxt += 1
        while heap and heap[0][1] < t:  # ended before t, so before every later time too
            heapq.heappop(heap)
        if heap:
            out[q] = heap[0][2]
    return out


def group_by_range(pairs: Iterable[tuple[TraceEvent, TraceEvent]], ranges: Sequence[TraceEvent]
                   ) -> dict[TraceEvent | None, list[TraceEvent]]:
    """Activities by the innermost range that contains their launch call (None: no range does)."""
    pairs = list(pairs)
    groups: dict[TraceEvent | None, list[TraceEvent]] = {}
    for (activity, _), owner in zip(pairs, owners(ranges, [launch.start_ns for _, launch in pairs])):
        groups.setdefault(None if owner is None else ranges[owner], []).append(activity)
    return groups


def union_ns(intervals: Sequence[tuple[int, int]]) -> int:
    """Total length of a set of intervals, overlaps counted once."""
    spans = sorted(intervals)
    if not spans:
        return 0
    total = 0
    cur_s, cur_e = spans[0]  # the run of overlapping intervals being merged
    for s, e in spans[1:]:
        if s > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    return total + cur_e - cur_s


def _ours(name: str) -> bool:
    return name == FLUSH_RANGE or name.startswith(ITER_PREFIX)


@dataclass(frozen=True)
class IterationTime:
    """One timed repetition on the device.

    ``busy_s``: the union of its device activity (what a record's timing reports).
    ``span_s``: from its first launch call's start to its last activity's end. A
    span well above the busy time means the device sat idle between the
    repetition's kernels, waiting on the host (syncs, Python loops): the row is
    host-bound, and a SOL computed on busy time overstates it (docs/timing.md).
    """

    busy_s: float
    span_s: float


def attribute(events: Iterable[TraceEvent], n_iters: int) -> list[float]:
    """Device-busy seconds of each timed iteration ``0 .. n_iters-1`` (the rule in this module's docstring)."""
    return [it.busy_s for it in attribute_iterations(events, n_iters)]


def attribute_iterations(events: Iterable[TraceEvent], n_iters: int) -> list[IterationTime]:
    """Busy time and span of each timed iteration ``0 .. n_iters-1``: the rule of this module's docstring,
    in O(n log n) over the events (sorting launches into ranges)."""
    with _no_gc():
        return _attribute_iterations(events, n_iters)


@contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic collector paused: attribution builds no cycles, and a profile's ~200k events would be
    traversed by each full collection its allocations set off (docs/architecture.md, "Figures behind the code")."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _attribute_iterations(events: Iterable[TraceEvent], n_iters: int) -> list[IterationTime]:
    c = classify(events, _ours)
    iteration: dict[int, int] = {}  # range index -> iteration
    seen: set[int] = set()
    for ri, r in enumerate(c.ranges):
        if r.name.startswith(ITER_PREFIX):
            i = int(r.name[len(ITER_PREFIX):])
            if i in seen:
                raise AttributionError(f"iteration {i} has two ranges in one profile")
            seen.add(i)
            iteration[ri] = i
    if seen != set(range(n_iters)):
        raise AttributionError(f"the profile holds {len(iteration)} iteration range(s), expected {n_iters}: "
                               "records were dropped")
    acts, calls = _join(c.activities, c.launches)
    busy: list[list[TraceEvent]] = [[] for _ in range(n_iters)]
    first_launch = [0] * n_iters
    which = iteration.get
    for activity, launch, owner in zip(acts, calls, owners(c.ranges, [call.start_ns for call in calls])):
        if owner is None:
            raise AttributionError(f"device activity {activity.name[:80]!r} was launched outside every timed "
                                   "and flush range")
        it = which(owner)
        if it is None:
            continue  # the flush's
        mine = busy[it]
        if not mine or launch.start_ns < first_launch[it]:
            first_launch[it] = launch.start_ns
        mine.append(activity)
    check_kernel_launches(c)
    empty = [i for i, v in enumerate(busy) if not v]
    if empty:
        raise AttributionError(f"timed iteration(s) {empty[:5]} recorded no device activity; records were dropped")
    counts = {len(v) for v in busy}
    if len(counts) > 1:
        raise AttributionError(f"iterations recorded different activity counts {sorted(counts)}: records were "
                               "dropped or the op does not launch the same work every call")
    return [IterationTime(_busy_ns(v) * 1e-9, (max(a.end_ns for a in v) - first_launch[i]) * 1e-9)
            for i, v in enumerate(busy)]


def _busy_ns(activities: list[TraceEvent]) -> int:
    """:func:`union_ns` of the activities' intervals, without building them."""
    ordered = iter(sorted(activities, key=_START))
    first = next(ordered, None)
    if first is None:
        return 0
    total = 0
    cur_s, cur_e = first.start_ns, first.end_ns  # the run of overlapping activities being merged
    for a in ordered:
        if a.start_ns > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = a.start_ns, a.end_ns
        elif a.end_ns > cur_e:
            cur_e = a.end_ns
    return total + cur_e - cur_s


_START = operator.attrgetter("start_ns")


def check_kernel_launches(c: Classified) -> None:
    """A kernel launch in a timed iteration without its kernel record means CUPTI dropped records.

    A launch call nested in (or around) another launch call that has a record is the
    same launch seen at two API levels, not a loss.
    """
    recorded = {a.correlation for a in c.activities}
    silent = [call for corr, call in c.launches.items() if corr not in recorded and KERNEL_LAUNCH.match(call.name)]
    if not silent:
        return
    served = sorted((call for corr, call in c.launches.items() if corr in recorded), key=lambda e: e.start_ns)
    starts = [s.start_ns for s in served]
    longest = max((s.end_ns - s.start_ns for s in served), default=0)
    for call, owner in zip(silent, owners(c.ranges, [call.start_ns for call in silent])):
        if owner is None or c.ranges[owner].name == FLUSH_RANGE:
            continue
        # a served call nested with this one starts within [call.start - longest, call.end]
        lo = bisect.bisect_left(starts, call.start_ns - longest)
        hi = bisect.bisect_right(starts, call.end_ns)
        if any(_nested(call, other) for other in served[lo:hi]):
            continue
        raise AttributionError(f"{call.name} in {c.ranges[owner].name} has no kernel record: CUPTI dropped records")


def _nested(a: TraceEvent, b: TraceEvent) -> bool:
    return (a.start_ns <= b.start_ns and b.end_ns <= a.end_ns) or (b.start_ns <= a.start_ns and a.end_ns <= b.end_ns)
