"""How one repetition of a row is timed: device-busy seconds with a cold last-level cache.

Three timers share one interface (:class:`Timer`); each evicts the cache before
every repetition, outside the timed span:

* ``cpu-wall``: the wall time of a synchronous call on the host.
* ``cupti``: device-busy time from CUPTI activity records, which ``torch.profiler``
  (Kineto) collects, attributed to repetitions by ``tileops.bench.cupti``.
* ``cuda-events``: CUDA events around each call. They include launch gaps, so the
  roofline tool prices such rows blank; a record says why a row fell back to them.
"""

from __future__ import annotations

import time
from typing import Protocol
from collections.abc import Callable

import torch

from tileops.bench.cupti import FLUSH_RANGE, ITER_PREFIX, attribute_iterations, trace_events_of_result
from tileops.errors import TileOpsError
from tileops.records import TimerKind

CUPTI_FIX = ("use a CUDA build of torch whose profiler records CUDA activity (the PyPI CUDA wheels do: "
             "CUPTI comes with them as nvidia-cuda-cupti), or pass --timer cuda-events (those rows are "
             "recorded but priced blank)")


class Timer(Protocol):
    """What ``tileops.bench.execute`` asks of a timer: everything it reads is declared here."""

    #: the record's ``timing.timer``: cpu-wall, cupti or cuda-events
    kind: TimerKind
    #: repetitions in the first ``sample`` call (a batch amortises a per-call cost such as a profiler session)
    first_batch: int
    #: why this timer stands in for the one asked for (the record says it; the roofline tool prices it blank)
    fallback_reason: str | None
    #: each timed repetition's span, first launch call to last device activity's end (seconds); empty where the
    #: timer cannot see one
    spans: list[float]

    def sync(self) -> None:
        """Wait until the device has finished what was queued (nothing on a CPU)."""

    def sample(self, fn: Callable[[], object], k: int) -> list[float]:
        """``k`` repetitions of ``fn``, the cache evicted before each: each one's seconds."""

    def fallback(self, reason: str) -> Timer | None:
        """The timer that re-times the row when this one fails (saying ``reason``), or None: no other."""


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
    kind: TimerKind = "cpu-wall"
    first_batch = 1
    fallback_reason: str | None = None

    def __init__(self, flush: Callable[[], None]) -> None:
        self.flush = flush
        self.spans: list[float] = []  # a wall-clock timer sees no launches

    def sync(self) -> None:
        pass

    def fallback(self, reason: str) -> Timer | None:
        return None  # the wall clock is the CPU's only timer

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
    kind: TimerKind = "cuda-events"
    first_batch = 10  # one synchronisation per batch

    def __init__(self, flush: Callable[[], None], device: str, fallback_reason: str | None = None) -> None:
        self.flush = flush
        self.device = device
        self.fallback_reason = fallback_reason
        self.spans: list[float] = []  # events bracket a call; they do not see its launches

    def sync(self) -> None:
        torch.cuda.synchronize(self.device)

    def fallback(self, reason: str) -> Timer | None:
        return None  # events are the last resort

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
    kind: TimerKind = "cupti"
    fallback_reason: str | None = None
    first_batch = 10  # a profiler session per batch costs milliseconds: no batches of one

    def __init__(self, flush: Callable[[], None], device: str, trace_path: str | None = None) -> None:
        self.flush = flush
        self.device = device
        self.trace_path = trace_path  # where to keep the last batch's Chrome trace (``.gz``: compressed)
        #: each timed repetition's span, first launch call to last activity end (seconds), as sampled
        self.spans: list[float] = []

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
        its = attribute_iterations(trace_events_of_result(prof.profiler.kineto_results, keep=self.trace_path), k)
        self.spans.extend(it.span_s for it in its)
        return [it.busy_s for it in its]

    def fallback(self, reason: str) -> Timer | None:
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
    if not callable(getattr(torch._C._autograd._ProfilerResult, "save", None)):
        return (f"torch {torch.__version__}'s profiler result cannot write its trace "
                "(_ProfilerResult.save), which the CUPTI timer reads")
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


