"""How one repetition of a row is timed: device-busy seconds with a cold last-level cache.

Three timers share one interface (``kind``, ``sync()``, ``sample(fn, k)`` -> ``k`` seconds);
each evicts the cache before every repetition, outside the timed span:

* ``cpu-wall``: the wall time of a synchronous call on the host.
* ``cupti``: device-busy time from CUPTI activity records, which ``torch.profiler``
  (Kineto) collects. The rule, in one paragraph (docs/timing.md gives its sources):
  only ``kernel``, ``gpu_memcpy`` and ``gpu_memset`` records are device activity
  (never the profiler's ``gpu_user_annotation`` copies of CPU ranges, nor
  ``cuda_sync``); each is joined to the ``cuda_runtime``/``cuda_driver`` call that
  launched it by CUPTI's correlation id (never the profiler's ``External id``);
  the call belongs to the innermost of our CPU ranges whose span contains its
  start -- ``tileops::iter::<i>`` or ``tileops::flush``. An iteration's time is
  the union of its activities' intervals (overlap counts once); flush activity
  is dropped. An orphan activity, a launch outside every range, a kernel launch
  without its kernel record, a missing range, an iteration with no activity or
  iterations with different activity counts raise :class:`AttributionError`.
* ``cuda-events``: CUDA events around each call. They include launch gaps, so the
  roofline tool prices such rows blank; a record says why a row fell back to them.

The attribution is pure: it reads :class:`TraceEvent` tuples, which come either
from live Kineto events (:func:`trace_events_from_kineto`) or from a Chrome-trace
export (:func:`trace_events_from_chrome`), so the same code runs on real traces
in the tests and on the live profiler.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import torch

from tileops.errors import TileOpsError

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

CUPTI_FIX = ("use a CUDA build of torch whose profiler records CUDA activity (the PyPI CUDA wheels do: "
             "CUPTI comes with them as nvidia-cuda-cupti), or pass --timer cuda-events (those rows are "
             "recorded but priced blank)")


class AttributionError(RuntimeError):
    """Device activity could not be attributed to timed iterations: the CUPTI timing is refused."""


class Timer(Protocol):
    kind: str

    def sync(self) -> None: ...

    def sample(self, fn: Callable[[], object], k: int) -> list[float]: ...


# -- cache eviction --------------------------------------------------------------------------------


class CacheFlusher:
    """Evicts the last-level cache (CPU LLC, GPU L2) by sweeping a buffer twice its size.

    ``read`` (the default) sums the buffer: the cache ends full of *clean* lines that
    the op's data displaces for free. ``write`` fills it, as triton's ``do_bench``
    does: the cache ends full of dirty lines and the op pays their write-back to
    memory when its own data evicts them -- harness traffic charged to the op
    (docs/timing.md has the measurement). ``write`` exists to compare like for
    like with such tools. The buffer is written once here, so its pages are
    resident: an untouched page reads as the shared zero page and evicts nothing.
    """

    def __init__(self, device: str, cache_bytes: int | None, mode: str = "read") -> None:
        if mode not in ("read", "write"):
            raise ValueError(f"flush mode {mode!r}: use read or write")
        size = max(int(cache_bytes or 32 * 2**20) * 2, 8 * 2**20)
        self.buf = torch.ones(size // 4, dtype=torch.float32, device=device)
        self.mode = mode

    def __call__(self) -> None:
        if self.mode == "read":
            self.buf.sum()
        else:
            self.buf.fill_(1.0)


# -- the timers ------------------------------------------------------------------------------------


class CpuWallTimer:
    kind = "cpu-wall"
    fallback_reason: str | None = None

    def __init__(self, flush: Callable[[], None]) -> None:
        self.flush = flush

    def sync(self) -> None:
        pass

    def sample(self, fn: Callable[[], object], k: int) -> list[float]:
        out = []
        clock = time.perf_counter_ns
        for _ in range(k):
            self.flush()
            t0 = clock()
            fn()
            out.append((clock() - t0) * 1e-9)
        return out


class CudaEventTimer:  # pragma: no cover - needs a GPU
    kind = "cuda-events"
    first_batch = 10  # one synchronisation per batch

    def __init__(self, flush: Callable[[], None], device: str, fallback_reason: str | None = None) -> None:
        self.flush = flush
        self.device = device
        self.fallback_reason = fallback_reason

    def sync(self) -> None:
        torch.cuda.synchronize(self.device)

    def sample(self, fn: Callable[[], object], k: int) -> list[float]:
        pairs = []
        for _ in range(k):
            self.flush()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            pairs.append((a, b))
        torch.cuda.synchronize(self.device)
        return [a.elapsed_time(b) * 1e-3 for a, b in pairs]


class CuptiTimer:  # pragma: no cover - needs a GPU; exercised by scripts/device-check
    kind = "cupti"
    fallback_reason: str | None = None
    first_batch = 10  # a profiler session per batch costs milliseconds: no batches of one

    def __init__(self, flush: Callable[[], None], device: str, trace_path: str | None = None) -> None:
        self.flush = flush
        self.device = device
        self.trace_path = trace_path  # where to export the last batch's raw events (Chrome trace)

    def sync(self) -> None:
        torch.cuda.synchronize(self.device)

    def sample(self, fn: Callable[[], object], k: int) -> list[float]:
        from torch.profiler import ProfilerActivity, profile, record_function

        torch.cuda.synchronize(self.device)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for i in range(k):
                with record_function(FLUSH_RANGE):
                    self.flush()
                with record_function(f"{ITER_PREFIX}{i}"):
                    fn()
            torch.cuda.synchronize(self.device)
        if self.trace_path:
            prof.export_chrome_trace(self.trace_path)
        return attribute(trace_events_from_kineto(prof.profiler.kineto_results.events()), k)

    def fallback(self, reason: str) -> CudaEventTimer:
        return CudaEventTimer(self.flush, self.device, fallback_reason=reason)


def cupti_unavailable_reason() -> str | None:
    """Why the CUPTI timer cannot run here, or None when it can."""
    if not torch.cuda.is_available():
        return "no CUDA device is visible (torch.cuda.is_available() is False)"
    try:
        from torch.profiler import ProfilerActivity, supported_activities

        activities = supported_activities()
    except Exception as exc:  # a broken profiler build
        return f"torch.profiler failed to start: {type(exc).__name__}: {exc}"
    if ProfilerActivity.CUDA not in activities:
        return (f"torch {torch.__version__} cannot record CUDA activity "
                "(torch.profiler.supported_activities() lacks CUDA: built without Kineto/CUPTI)")
    if not hasattr(torch._C._autograd._KinetoEvent, "activity_type"):
        return (f"torch {torch.__version__}'s profiler events carry no activity type "
                "(_KinetoEvent.activity_type), which telling kernels from annotations needs")
    return None


def check_timer(timer: str, device_kind: str) -> None:
    """Refuse, before the first row, a timer this run cannot honour (the CLI exits 2).

    ``--timer cupti`` must never quietly become CUDA events: without CUPTI every
    GPU row would be priced blank, which the user did not ask for.
    """
    if timer != "cupti":
        return
    if device_kind != "cuda":
        raise TileOpsError("--timer cupti times GPU rows; this run is on the CPU, whose rows are timed by "
                           "wall clock (cpu-wall): drop --timer or pass --device cuda")
    reason = cupti_unavailable_reason()
    if reason is not None:
        raise TileOpsError(f"--timer cupti: CUPTI is unavailable here: {reason}. Fix: {CUPTI_FIX}")


# -- CUPTI attribution: pure functions over trace events ---------------------------------------------


@dataclass(frozen=True)
class TraceEvent:
    """One profiler event, as both the live profiler and a Chrome-trace export describe it.

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
    """The complete (``ph: X``) events of a Chrome-trace export (``prof.export_chrome_trace``).

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


def trace_events_from_kineto(events: Iterable[Any]) -> list[TraceEvent]:
    """The live profiler's events (``prof.profiler.kineto_results.events()``).

    ``activity_type()`` is Kineto's activity name; ``correlation_id()`` is CUPTI's id
    for device activity and runtime/driver calls (Kineto's ``correlationId()`` of a
    ``GpuActivity`` or ``RuntimeActivity``), and the profiler's own id for CPU ops
    and ranges -- which is why it is kept only for the former.
    ``linked_correlation_id()`` (the launching op's profiler id) is never used.
    """
    out = []
    for e in events:
        kind = str(e.activity_type())
        start = int(e.start_ns())
        out.append(TraceEvent(kind, e.name(), start, start + int(e.duration_ns()),
                              _cupti_correlation(kind, e.correlation_id())))
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
        if e.kind in DEVICE_ACTIVITY:
            activities.append(e)
        elif e.kind in LAUNCH_CALLS and e.correlation is not None:
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
        elif e.kind == CPU_RANGE and is_range(e.name):
            ranges.append(e)
    return Classified(activities, launches, ranges)


def _contains(r: TraceEvent, t_ns: int) -> bool:
    return r.start_ns <= t_ns <= r.end_ns


def join_launches(activities: Iterable[TraceEvent], launches: Mapping[int, TraceEvent]
                  ) -> list[tuple[TraceEvent, TraceEvent]]:
    """Each activity with the call that launched it. An activity without one is an orphan: refused."""
    pairs = []
    for a in activities:
        launch = launches.get(a.correlation) if a.correlation is not None else None
        if launch is None:
            raise AttributionError(
                f"device activity {a.name[:80]!r} has no launch record (CUPTI correlation {a.correlation}): "
                "records were dropped")
        pairs.append((a, launch))
    return pairs


def enclosing_range(ranges: Sequence[TraceEvent], t_ns: int) -> TraceEvent | None:
    """The innermost range whose span contains ``t_ns`` (ranges nest: the latest-starting one)."""
    best = None
    for r in ranges:
        if _contains(r, t_ns) and (best is None or (r.start_ns, -r.end_ns) > (best.start_ns, -best.end_ns)):
            best = r
    return best


def group_by_range(pairs: Iterable[tuple[TraceEvent, TraceEvent]], ranges: Sequence[TraceEvent]
                   ) -> dict[TraceEvent | None, list[TraceEvent]]:
    """Activities by the innermost range that contains their launch call (None: no range does)."""
    groups: dict[TraceEvent | None, list[TraceEvent]] = {}
    for activity, launch in pairs:
        groups.setdefault(enclosing_range(ranges, launch.start_ns), []).append(activity)
    return groups


def union_ns(intervals: Sequence[tuple[int, int]]) -> int:
    """Total length of a set of intervals, overlaps counted once."""
    total = 0
    cur_s = cur_e = None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s  # type: ignore[operator]
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s  # type: ignore[operator]
    return total


def _ours(name: str) -> bool:
    return name == FLUSH_RANGE or name.startswith(ITER_PREFIX)


def attribute(events: Iterable[TraceEvent], n_iters: int) -> list[float]:
    """Device-busy seconds of each timed iteration ``0 .. n_iters-1`` (the rule in this module's docstring)."""
    c = classify(events, _ours)
    index: dict[TraceEvent, int] = {}
    for r in c.ranges:
        if r.name.startswith(ITER_PREFIX):
            i = int(r.name[len(ITER_PREFIX):])
            if i in index.values():
                raise AttributionError(f"iteration {i} has two ranges in one profile")
            index[r] = i
    if sorted(index.values()) != list(range(n_iters)):
        raise AttributionError(f"the profile holds {len(index)} iteration range(s), expected {n_iters}: "
                               "records were dropped")
    busy: dict[int, list[tuple[int, int]]] = {i: [] for i in range(n_iters)}
    for owner, acts in group_by_range(join_launches(c.activities, c.launches), c.ranges).items():
        if owner is None:
            raise AttributionError(f"device activity {acts[0].name[:80]!r} was launched outside every timed "
                                   "and flush range")
        if owner.name != FLUSH_RANGE:
            busy[index[owner]].extend((a.start_ns, a.end_ns) for a in acts)
    check_kernel_launches(c)
    empty = [i for i, v in busy.items() if not v]
    if empty:
        raise AttributionError(f"timed iteration(s) {empty[:5]} recorded no device activity; records were dropped")
    counts = {len(v) for v in busy.values()}
    if len(counts) > 1:
        raise AttributionError(f"iterations recorded different activity counts {sorted(counts)}: records were "
                               "dropped or the op does not launch the same work every call")
    return [union_ns(busy[i]) * 1e-9 for i in range(n_iters)]


def check_kernel_launches(c: Classified) -> None:
    """A kernel launch in a timed iteration without its kernel record means CUPTI dropped records.

    A launch call nested in (or around) another launch call that has a record is the
    same launch seen at two API levels, not a loss.
    """
    recorded = {a.correlation for a in c.activities}
    served = [call for corr, call in c.launches.items() if corr in recorded]
    for corr, call in c.launches.items():
        if corr in recorded or not KERNEL_LAUNCH.match(call.name):
            continue
        owner = enclosing_range(c.ranges, call.start_ns)
        if owner is None or owner.name == FLUSH_RANGE:
            continue
        if any(_nested(call, other) for other in served):
            continue
        raise AttributionError(f"{call.name} in {owner.name} has no kernel record: CUPTI dropped records")


def _nested(a: TraceEvent, b: TraceEvent) -> bool:
    return (a.start_ns <= b.start_ns and b.end_ns <= a.end_ns) or (b.start_ns <= a.start_ns and a.end_ns <= b.end_ns)
