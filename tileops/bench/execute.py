"""Run one workload row and produce its record. Runs inside the worker process.

The order matters (§4.2): instantiate the Op from the row's params, build its
tensors from the row's own generator, warm up, time, and only then read
``(flops, bytes)`` from ``op.eval_roofline()`` — the last timed call is the
call being priced. Nothing here computes FLOPs or bytes.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
import traceback
from dataclasses import dataclass
from typing import Any

import torch

from tileops.bench.stopping import StoppingRule, quantile, rel_noise
from tileops.bench.timers import CacheFlusher, CpuWallTimer, CudaEventTimer, CuptiTimer, cupti_available
from tileops.manifest.load import load_entries
from tileops.manifest.spec import Workload
from tileops.ops.workload import bind_row, build_inputs, instantiate
from tileops.records import Environment, ErrorInfo, Record, Timing, utcnow


@dataclass(frozen=True)
class Task:
    """One row to run: identity plus how to time it. Plain data, sent to the worker."""

    op: str
    label: str
    case: Any  # the dtype case as written in the manifest (a name or a mapping)
    case_name: str
    backend: str
    device: str
    rule: StoppingRule
    env: Environment  # fixed for the run; each record adds the clocks around its row
    timer: str = "auto"  # auto | cupti | cuda-events | cpu-wall

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.op, self.label, self.case_name, self.backend)


_FLUSHERS: dict[str, CacheFlusher] = {}


def _flusher(device: str, cache_bytes: int | None) -> CacheFlusher:
    if device not in _FLUSHERS:
        _FLUSHERS[device] = CacheFlusher(device, cache_bytes)
    return _FLUSHERS[device]


def make_timer(task: Task, cache_bytes: int | None):
    flush = _flusher(task.device, cache_bytes)
    if task.device == "cpu":
        return CpuWallTimer(flush)
    if task.timer in ("auto", "cupti") and cupti_available():  # pragma: no cover - GPU
        return CuptiTimer(flush, task.device)
    return CudaEventTimer(flush, task.device)  # pragma: no cover - GPU, labelled fallback


def measure(fn, timer, rule: StoppingRule) -> Timing:
    """Warm up (at least once and ~5 % of the budget), then sample in batches until the rule stops."""
    t_start = time.perf_counter()
    warm = 0
    while True:
        fn()
        warm += 1
        if warm >= 2 and time.perf_counter() - t_start >= min(0.05, rule.min_time_s / 4):
            break
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    samples: list[float] = []
    batch = 1
    while True:
        samples.extend(timer.sample(fn, batch))
        reason = rule.decide(samples, time.perf_counter() - t0)
        if reason:
            break
        batch = min(batch * 2, 64, max(1, rule.max_samples - len(samples)))
    s = sorted(samples)
    return Timing(
        timer=timer.kind, median_s=statistics.median(s), min_s=s[0], mean_s=statistics.fmean(s),
        p10_s=quantile(s, 0.10), p90_s=quantile(s, 0.90), n=len(s), rel_noise=rel_noise(s), warmup=warm,
        total_s=time.perf_counter() - t_start, stop_reason=reason,
    )


def _error_kind(exc: BaseException) -> str:
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or any(  # CUDA, and the CPU allocator's words
            w in str(exc).lower() for w in ("out of memory", "can't allocate memory", "cannot allocate memory")):
        return "oom"
    if "CUDA error" in str(exc) or "cuda" in type(exc).__name__.lower():
        return "cuda"
    if isinstance(exc, NotImplementedError):
        return "unsupported"
    return "exception"


def find_row(op: str, label: str) -> Workload:
    entry = load_entries()[op]
    for row in entry.workloads:
        if row.label == label:
            return row
    raise KeyError(f"{op}: no workload row labelled {label!r}")


def run_task(task: Task, cache_bytes: int | None = None) -> Record:
    """Run one row; every failure becomes an error record (never an exception)."""
    from tileops.device import read_clocks

    started = utcnow()
    entry = load_entries()[task.op]
    row = find_row(task.op, task.label)
    bound = bind_row(entry, row, task.case)
    base = dict(run_id=task.env.run_id, op=task.op, family=entry.family, label=task.label,
                dtype=task.case_name, backend=task.backend, params=dict(row.params),
                shapes={k: list(v) for k, v in bound.shapes.items()}, tags=list(row.tags))
    clocks_before = read_clocks(task.device)
    try:
        op = instantiate(entry, row, task.backend)
        inputs = build_inputs(op, bound, task.device)
        timing = measure(lambda: op(**inputs), make_timer(task, cache_bytes), task.rule)
        flops, nbytes = op.eval_roofline()
        try:
            read_bytes = op.eval_roofline_read_bytes()
        except Exception:
            read_bytes = None
        env = dataclasses.replace(task.env, clocks_before=clocks_before, clocks_after=read_clocks(task.device))
        return Record(**base, status="ok", timing=timing, flops=flops, bytes=nbytes, read_bytes=read_bytes,
                      roof_key=op.roof_key(), data_terms=op.roofline_data_terms(), env=env,
                      started_at=started, finished_at=utcnow())
    except Exception as exc:
        env = dataclasses.replace(task.env, clocks_before=clocks_before)
        return Record(**base, status="error",
                      error=ErrorInfo(kind=_error_kind(exc), message=f"{type(exc).__name__}: {exc}",
                                      traceback=traceback.format_exc(limit=8)),
                      env=env, started_at=started, finished_at=utcnow())
