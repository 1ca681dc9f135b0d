"""Best-of-N timing, the one clock every calibration microbenchmark reads (``measure``, ``gpu_fma``).

A ceiling is what the device can do, and noise only ever slows a run down, so
the best repetition is the measurement. On a CPU a call is synchronous and its
wall time is its time; on a GPU each repetition sits between two CUDA events,
after the warm-up calls have finished. Every repetition's time is kept too: how
far the median one sits from the best (:func:`spread`) is the measurement's own
noise, what a later calibration's drop is weighed against (``tileops.ledger.judge``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch


def rep_times(fn: Callable[[], object], device: torch.device, reps: int, warmup: int = 1) -> list[float]:
    """Wall (CPU) or CUDA-event (GPU) time of each of ``reps`` repetitions of ``fn``, seconds."""
    for _ in range(warmup):
        fn()
    times = []
    if device.type == "cuda":  # pragma: no cover - needs a GPU
        torch.cuda.synchronize(device)
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return times
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def best_time(fn: Callable[[], object], device: torch.device, reps: int, warmup: int = 1) -> float:
    """Best wall (CPU) or CUDA-event (GPU) time of ``fn`` over ``reps`` repetitions, seconds."""
    return min(rep_times(fn, device, reps, warmup))


def spread(times: Sequence[float]) -> float:
    """The median repetition's time over the best, less 1: how far a best-of-N measurement's repetitions
    wandered (0 for one repetition)."""
    best = min(times)
    return statistics.median(times) / best - 1.0 if best > 0 else 0.0
