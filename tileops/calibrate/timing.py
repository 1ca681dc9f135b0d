"""Best-of-N timing, the one clock every calibration microbenchmark reads (``measure``, ``gpu_fma``).

A ceiling is what the device can do, and noise only ever slows a run down, so
the best repetition is the measurement. On a CPU a call is synchronous and its
wall time is its time; on a GPU each repetition sits between two CUDA events,
after the warm-up calls have finished.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def best_time(fn: Callable[[], object], device: torch.device, reps: int, warmup: int = 1) -> float:
    """Best wall (CPU) or CUDA-event (GPU) time of ``fn`` over ``reps`` repetitions, seconds."""
    for _ in range(warmup):
        fn()
    if device.type == "cuda":  # pragma: no cover - needs a GPU
        torch.cuda.synchronize(device)
        best = float("inf")
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / 1e3)
        return best
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best
