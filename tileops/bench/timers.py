"""Device-busy timers. Each takes ``k`` samples of a call, flushing the cache before every one.

* ``cpu-wall``: the wall time of a synchronous call on the host, the last-level
  cache flushed before each repetition (outside the timed span).
* ``cupti``: device-busy time from CUPTI activity records (through
  ``torch.profiler``, which drives CUPTI): every kernel, memcpy and memset is
  attributed to the timed iteration whose host range issued it, by its launch
  correlation id — not by GPU timestamps — and overlapping intervals inside an
  iteration are counted once. The L2 flush runs in its own range, so its
  kernels are excluded. Attribution fails closed (:class:`AttributionError`)
  when an activity cannot be tied to a range, or when iterations disagree on
  how many activities they recorded (the sign of dropped records).
* ``cuda-events``: a labelled fallback for when CUPTI is unavailable; the
  roofline tool prices such rows blank.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

ITER_PREFIX = "tileops::iter::"
FLUSH_RANGE = "tileops::flush"


class AttributionError(RuntimeError):
    """A device activity could not be attributed to a timed iteration: the timing is refused."""


class CacheFlusher:
    """Evicts the last-level cache (CPU LLC, GPU L2) by writing a buffer twice its size."""

    def __init__(self, device: str, cache_bytes: int | None) -> None:
        size = max(int(cache_bytes or 32 * 2**20) * 2, 8 * 2**20)
        self.buf = torch.empty(size // 4, dtype=torch.float32, device=device)

    def __call__(self) -> None:
        self.buf.fill_(1.0)  # a pure write over 2x the cache: nothing of the op's data stays resident


class CpuWallTimer:
    kind = "cpu-wall"

    def __init__(self, flush: CacheFlusher) -> None:
        self.flush = flush

    def sample(self, fn: Callable[[], object], k: int) -> list[float]:
        out = []
        for _ in range(k):
            self.flush()
            t0 = time.perf_counter_ns()
            fn()
            out.append((time.perf_counter_ns() - t0) * 1e-9)
        return out


class CudaEventTimer:  # pragma: no cover - needs a GPU
    kind = "cuda-events"

    def __init__(self, flush: CacheFlusher, device: str) -> None:
        self.flush = flush
        self.device = device

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


# -- CUPTI attribution (pure; unit-tested on synthetic activity records) ------------------------


@dataclass(frozen=True)
class DeviceActivity:
    name: str
    start_ns: int
    end_ns: int
    correlation: int | None  # the CUPTI correlation id of the host call that issued it


@dataclass(frozen=True)
class HostRange:
    label: str  # "tileops::iter::<i>" or "tileops::flush"
    start_ns: int
    end_ns: int


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


def attribute(activities: Sequence[DeviceActivity], launch_ns: dict[int, int],
              ranges: Sequence[HostRange], n_iters: int) -> list[float]:
    """Device-busy seconds per timed iteration.

    ``launch_ns`` maps a correlation id to the host timestamp of the call that
    issued the activity; the iteration is the host range containing it.
    """
    iters: dict[int, list[tuple[int, int]]] = {i: [] for i in range(n_iters)}
    for a in activities:
        if a.correlation is None or a.correlation not in launch_ns:
            raise AttributionError(
                f"device activity {a.name!r} has no launch record (correlation {a.correlation}); records were dropped")
        ts = launch_ns[a.correlation]
        owner = next((r for r in ranges if r.start_ns <= ts <= r.end_ns), None)
        if owner is None:
            raise AttributionError(f"device activity {a.name!r} was launched outside every timed and flush range")
        if owner.label == FLUSH_RANGE:
            continue
        i = int(owner.label[len(ITER_PREFIX):])
        iters[i].append((a.start_ns, a.end_ns))
    counts = {len(v) for v in iters.values()}
    if 0 in counts:
        empty = [i for i, v in iters.items() if not v]
        raise AttributionError(f"timed iteration(s) {empty[:5]} recorded no device activity; records were dropped")
    if len(counts) > 1:
        raise AttributionError(f"iterations recorded different activity counts {sorted(counts)}; "
                               "records were dropped or the op is not deterministic in its launches")
    return [union_ns(iters[i]) * 1e-9 for i in range(n_iters)]


class CuptiTimer:  # pragma: no cover - needs a GPU; exercised by scripts/device-check
    kind = "cupti"

    def __init__(self, flush: CacheFlusher, device: str) -> None:
        self.flush = flush
        self.device = device

    def sample(self, fn: Callable[[], object], k: int) -> list[float]:
        from torch.profiler import ProfilerActivity, profile, record_function

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for i in range(k):
                with record_function(FLUSH_RANGE):
                    self.flush()
                with record_function(f"{ITER_PREFIX}{i}"):
                    fn()
            torch.cuda.synchronize(self.device)
        activities, launches, ranges = _from_kineto(prof)
        return attribute(activities, launches, ranges, k)


def _from_kineto(prof: object) -> tuple[list[DeviceActivity], dict[int, int], list[HostRange]]:  # pragma: no cover
    """Split the profiler's Kineto events into device activities, host launches and our ranges."""
    events = prof.profiler.kineto_results.events()  # type: ignore[attr-defined]
    activities: list[DeviceActivity] = []
    launches: dict[int, int] = {}
    ranges: list[HostRange] = []
    for e in events:
        name = e.name()
        start = int(e.start_ns())
        end = start + int(e.duration_ns())
        if e.device_type() == torch.autograd.DeviceType.CUDA:
            corr = int(e.linked_correlation_id()) or int(e.correlation_id()) or None
            activities.append(DeviceActivity(name, start, end, corr))
        elif name.startswith(ITER_PREFIX) or name == FLUSH_RANGE:
            ranges.append(HostRange(name, start, end))
        elif int(e.correlation_id()):
            launches[int(e.correlation_id())] = start
    return activities, launches, ranges


def cupti_available() -> bool:
    """Whether CUPTI activity tracing works here (a GPU and a profiler build that records CUDA)."""
    if not torch.cuda.is_available():
        return False
    try:
        from torch.profiler import ProfilerActivity

        return ProfilerActivity.CUDA in torch.profiler.supported_activities()
    except Exception:
        return False
