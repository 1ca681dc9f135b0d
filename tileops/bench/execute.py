"""Run one workload row and produce its record. Runs inside the worker process.

The order matters (§4.2): instantiate the Op from the row's params, build its
tensors from the row's own generator, warm up, time, and only then read
``(flops, bytes)`` from ``op.eval_roofline()`` — the last timed call is the
call being priced. Nothing here computes FLOPs or bytes.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import statistics
import time
import traceback
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from collections.abc import Callable, Collection, Sequence

import torch

from tileops.bench.interval import CONFIDENCE, BlockRule, fast_interval, sample_blocks, visit_of
from tileops.bench.probe import VisitProbe, compute_bound, worker_probe
from tileops.bench.sensors import RowSensors
from tileops.bench.slices import host_slice, timed_in_slices
from tileops.stats import two_sided_t
from tileops.bench.stopping import quantile, rel_noise
from tileops.bench.cupti import AttributionError
from tileops.bench.timers import (CUPTI_FIX, CacheFlusher, CpuWallTimer, CudaEventTimer, CuptiTimer, Timer,
                                  cupti_unavailable_reason)
from tileops.device import DeviceInfo
from tileops.errors import BackendUnavailableError, CompileError, TileOpsError
from tileops.ops.catalog import load_entries
from tileops.ops.spec import Workload
from tileops.ops.workload import BoundRow, bind_row, build_inputs, instantiate
from tileops.ops.base import Op, PreparedCall
from tileops.records import (MAX_TIME_S, MIN_TIME_S, Environment, ErrorInfo, ErrorKind, ProbeReading, RacePairing,
                             Record, RowConditions, Timing, utcnow)


@dataclass(frozen=True)
class Task:
    """One row to run: identity plus how to time it. Plain data, sent to the worker."""

    op: str
    label: str
    case: Any  # the dtype case as written in the manifest (a name or a mapping)
    case_name: str
    backend: str
    device: DeviceInfo  # described once by the runner, sent with every row
    rule: BlockRule
    env: Environment  # fixed for the run; each record adds the clocks around its row
    timer: str = "auto"  # auto | cupti | cuda-events | cpu-wall
    trace_dir: str | None = None  # keep each CUPTI row's last profiled batch here (``--keep-traces``)
    row: Workload | None = None  # the row itself (an ad-hoc --shape row is in no manifest); None: by its label
    #: the bench process (the worker's parent) as NVML lists it on the GPU: a GPU calibration left it a CUDA
    #: context, so it is listed, and is no other process; or why it could not be told (``own_gpu_pids``)
    parent_pids: tuple[int, ...] = ()
    parent_pids_unknown: str | None = None
    probe: bool = True  # time the reference probe between the row's blocks (``tileops.bench.probe``)

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.op, self.label, self.case_name, self.backend)

    @property
    def trace_name(self) -> str:
        """The file a kept trace of this row goes to: its key, made safe for a file name."""
        return re.sub(r"[^A-Za-z0-9_.=-]+", "_", "-".join(self.key))[:180] + ".trace.json.gz"


_FLUSHERS: dict[str, CacheFlusher] = {}


def _flusher(device: DeviceInfo, cache_bytes: int | None) -> CacheFlusher:
    """The device's one flusher in this worker (its buffer is allocated once, on the device)."""
    if device.torch_device not in _FLUSHERS:
        _FLUSHERS[device.torch_device] = CacheFlusher(device.torch_device, cache_bytes)
    return _FLUSHERS[device.torch_device]


def make_timer(task: Task, cache_bytes: int | None) -> Timer:
    """The row's timer. ``auto`` on a GPU is CUPTI when it works here, else CUDA events that say why;
    ``cupti`` without CUPTI raises (the runner's ``check_timer`` refused it before the first row)."""
    device = task.device.torch_device
    flush = _flusher(task.device, cache_bytes)
    if task.device.kind == "cpu":
        return CpuWallTimer(flush)
    if task.timer == "cuda-events":  # pragma: no cover - GPU
        return CudaEventTimer(flush, device)
    why = cupti_unavailable_reason()  # pragma: no cover - GPU
    if why is None:  # pragma: no cover - GPU
        trace = os.path.join(task.trace_dir, task.trace_name) if task.trace_dir else None
        return CuptiTimer(flush, device, trace_path=trace)
    if task.timer == "cupti":  # pragma: no cover - GPU
        raise TileOpsError(f"--timer cupti: CUPTI is unavailable here: {why}. Fix: {CUPTI_FIX}")
    return CudaEventTimer(flush, device,  # pragma: no cover - GPU
                          fallback_reason=f"CUPTI is unavailable here ({why}); fix: {CUPTI_FIX}")


def warm_up(fn: Callable[[], object], timer: Timer, rule: BlockRule) -> int:
    """Untimed calls, each synchronised (a GPU never queues hundreds of launches), until ``rule.warmup_s``.

    One call at least; the caller already made the checked call that paid first-call costs."""
    t0 = time.perf_counter()
    n = 0
    while True:
        fn()
        timer.sync()
        n += 1
        if time.perf_counter() - t0 >= rule.warmup_s:
            return n


def measure(fn: Callable[[], object], timer: Timer, rule: BlockRule) -> Timing:
    """Time ``fn`` until the rule stops (one visit of the row): :func:`measure_visit`'s timing."""
    return measure_visit(fn, timer, rule)[0]


def measure_visit(fn: Callable[[], object], timer: Timer, rule: BlockRule,
                  between_blocks: Callable[[], None] | None = None) -> tuple[Timing, list[list[float]]]:
    """Time ``fn`` until the rule stops; the visit's timing and its blocks. Any failure of a timer that can fall
    back (CUPTI: its attribution
    refused, or the profiler itself failing) re-times the row with the timer it falls back to (CUDA events),
    and the record says why (``fallback_reason``): the roofline tool prices it blank. An error of the op
    itself fails again there and becomes the row's error record; a timer with nothing to fall back to (the
    CPU's) lets it through at once. ``between_blocks``: called in each gap between blocks (the reference probe,
    ``tileops.bench.probe``), before the pause and the re-warm call."""
    try:
        return _measure(fn, timer, rule, between_blocks)
    except AttributionError as exc:
        other = timer.fallback(
            f"CUPTI attribution failed ({exc}); re-timed with CUDA events. Fix: run the bench without another "
            "profiler attached (nsys and ncu hold CUPTI); if it persists, run scripts/device-check and report "
            "its cupti trace")
        if other is None:
            raise
    except Exception as exc:
        other = timer.fallback(
            f"the CUPTI timer failed ({type(exc).__name__}: {str(exc)[:300]}); re-timed with CUDA events. Fix: "
            "run scripts/device-check on this machine and report its log and cupti trace")
        if other is None:
            raise
    return _measure(fn, other, rule, between_blocks)


def visit_timing(blocks: Sequence[Sequence[float]], **fields: Any) -> Timing:
    """A visit's (or a row's visits', pooled) timing from its blocks: the sample statistics over every sample,
    the level at the visit's centre (``interval.Visit``), and the visit's own interval from its blocks alone
    (``median_ci_s``, ``level_ci_s``): the sweep replaces both by the row's
    (``tileops.bench.revisit.finish``), which add what one visit cannot see. A CPU row whose samples are
    bimodal at the OS time slice is marked (``slices``: ``tileops.bench.slices``). ``fields``: the rest of
    Timing."""

    s = sorted(x for b in blocks for x in b)
    visit = visit_of(blocks)
    level = visit.centre_s
    se = visit.se
    ci = None
    if se is not None:
        df = max(1.0, visit.blocks - 1.0)
        h = two_sided_t(CONFIDENCE, df) * se
        ci = within_contract((level * math.exp(-h), level * math.exp(h)))
        fields.setdefault("ci_df", min(df, 1000.0))
    fast = fast_interval(blocks)
    if fields.get("timer") == "cpu-wall" and "slices" not in fields:  # a GPU timer reads the device, not threads
        fields["slices"] = timed_in_slices(blocks, *host_slice())
    return Timing(median_s=level, min_s=s[0], mean_s=statistics.fmean(s), p10_s=quantile(s, 0.10),
                  p90_s=quantile(s, 0.90), n=len(s), rel_noise=rel_noise(s),
                  median_ci_s=_around(ci, level), level_ci_s=_around(ci, level), visits_s=[level],
                  fast_ci_s=within_contract(fast) if fast is not None else None, **fields)


def _around(ci: list[float] | None, level: float) -> list[float] | None:
    """An interval held around its level (a level at a contract bound is held there too)."""
    if ci is None:
        return None
    return [min(ci[0], level), max(ci[1], level)]


def _measure(fn: Callable[[], object], timer: Timer, rule: BlockRule,
             between_blocks: Callable[[], None] | None = None) -> tuple[Timing, list[list[float]]]:
    """Warm up, then sample one visit in blocks spread over it (``tileops.bench.interval``): the rule stops on
    the visit's own precision. A block is at least the timer's first batch (a GPU timer's batch is one
    synchronisation or one profiler session: no blocks of one)."""
    t_start = time.perf_counter()
    warm = warm_up(fn, timer, rule)
    pace = (time.perf_counter() - t_start) / warm  # a warm call's time: sizes a slow row's first block
    if timer.first_batch > rule.least_block_samples:
        rule = dataclasses.replace(rule, min_block_samples=max(timer.first_batch, rule.min_block_samples),
                                   least_block_samples=timer.first_batch,
                                   max_block_samples=max(timer.first_batch, rule.max_block_samples))

    def rewarm() -> None:  # the pause between blocks lets a CPU's pool threads sleep: wake them, untimed
        fn()
        timer.sync()

    got = sample_blocks(lambda k: timer.sample(fn, k), rule, rewarm=rewarm, between=between_blocks, pace_s=pace)
    spans = timer.spans
    timing = visit_timing(got.blocks, timer=timer.kind, warmup=warm, total_s=time.perf_counter() - t_start,
                          stop_reason=got.stop_reason, fallback_reason=timer.fallback_reason,
                          span_s=statistics.median(spans) if spans else None)
    return timing, got.blocks


def within_contract(pair: tuple[float, float]) -> list[float]:
    """The interval held to the durations a record can carry: a few blocks that disagree wildly (a time cap
    on a busy host, two effective blocks) give bounds beyond any timer's. Holding them there only drops what
    no rerun can give, so the interval stays as honest, and as wide, as it was."""
    lo, hi = pair
    return [max(lo, MIN_TIME_S), min(hi, MAX_TIME_S)]


_SENSORS: dict[str, RowSensors] = {}


def row_sensors(device: DeviceInfo, parent_pids: Collection[int] = (), parent_unknown: str | None = None
                ) -> RowSensors:
    """The worker's sensors for ``device``, made once: torch's threads are the row's own (the load average
    counts them), and on a GPU one NVML probe tells this process from the others on the device (it needs the
    CUDA context the first row's inputs made); the bench process that started it (``parent_pids``, found by
    its own probe) is no other process either."""
    from tileops.device import own_gpu_pids

    if device.key not in _SENSORS:
        own: set[int] | None = None
        why = ""
        if device.kind == "cuda":
            own, why = own_gpu_pids(device)
            why = why or parent_unknown or ""
            own = None if why or own is None else own | set(parent_pids)
        _SENSORS[device.key] = RowSensors(device, threads=torch.get_num_threads(), own_pids=own,
                                          own_pids_unknown=why or None)
    return _SENSORS[device.key]


def measure_row(fn: Callable[[], object], timer: Timer, rule: BlockRule, device: DeviceInfo,
                parent_pids: Collection[int] = (), parent_unknown: str | None = None,
                between_blocks: Callable[[], None] | None = None
                ) -> tuple[Timing, RowConditions, list[list[float]]]:
    """:func:`measure_visit` with the row's sensors around it: the timing, what surrounded it (contention,
    clocks, power, energy; ``tileops.bench.sensors``) and this visit's blocks. The sensors stop whatever
    happens (their GPU thread ends). ``between_blocks``: :func:`measure_visit`'s."""
    sensors = row_sensors(device, parent_pids, parent_unknown)
    sensors.start()
    try:
        timing, blocks = measure_visit(fn, timer, rule, between_blocks)
    finally:
        conditions = sensors.stop()
    calls = timing.warmup + sum(len(b) for b in blocks) + max(0, len(blocks) - 1)  # + a re-warm call per pause
    return timing, dataclasses.replace(conditions, calls=calls), blocks


def error_kind(exc: BaseException) -> ErrorKind:
    if isinstance(exc, CompileError):  # the compile or triton backend failed on its first call
        return "compile"
    if isinstance(exc, BackendUnavailableError):
        return "unsupported"
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or any(  # CUDA, and the CPU allocator's words
            w in str(exc).lower() for w in ("out of memory", "can't allocate memory", "cannot allocate memory")):
        return "oom"
    if "CUDA error" in str(exc) or "cuda" in type(exc).__name__.lower():
        return "cuda"
    if isinstance(exc, NotImplementedError):
        return "unsupported"
    return "exception"


def load_compiler(backend: str) -> None:
    """Import torch.compile's compiler (inductor) once per worker, before its first compile row: that
    takes long, a cost of the process like importing torch, not of the row
    that happens to come first, whose compile time would otherwise not compare with the others'."""
    if backend == "compile":
        import torch._inductor.compile_fx  # noqa: F401  # imported for its cost, here: nothing of it is used


def find_row(op: str, label: str) -> Workload:
    entry = load_entries()[op]
    for row in entry.workloads:
        if row.label == label:
            return row
    raise KeyError(f"{op}: no workload row labelled {label!r}")


def visit_probe(task: Task, op: Any) -> VisitProbe | None:
    """The row's reference probe (None with ``--no-probe``), started now: the FMA probe too for a compute-bound
    row. Which one that is is read from the checked call's ``(flops, bytes)``, for this choice only: the record's
    are read again after the timing (the module's rule), and a row whose formula fails here gets the memory probe."""
    if not task.probe:
        return None
    try:
        flops, nbytes = op.eval_roofline()
    except Exception:
        flops, nbytes = None, None
    try:
        kinds, why = worker_probe(task.device).kinds(compute_bound(flops, nbytes, task.device.kind))
    except Exception as exc:  # fail closed: a probe that cannot be made leaves the row unprobed, saying why
        kinds, why = [], {"memory": f"the probe could not be made: {type(exc).__name__}: {str(exc)[:200]}"}
    probe = VisitProbe(kinds, not_run=why)
    probe.start()
    return probe


def threads_used(task: Task) -> int | None:
    """A CPU row's ``env.threads``: the intra-op threads torch ran it on in this worker (what ``--threads`` set,
    read back rather than assumed); a GPU row's stays the run's."""
    return torch.get_num_threads() if task.device.kind == "cpu" else task.env.threads


def bind(task: Task) -> BoundRow:
    """The task's row bound to its dtype case: its entry, row, shapes and dtypes (no tensor yet)."""
    row = task.row if task.row is not None else find_row(task.op, task.label)
    return bind_row(load_entries()[task.op], row, task.case)


def row_fields(task: Task, bound: BoundRow) -> dict[str, Any]:
    """The fields of a row's record that name it (op, label, dtype, backend, params, shapes, tags)."""
    row = bound.row
    return dict(run_id=task.env.run_id, op=task.op, family=bound.entry.family, label=task.label,
                dtype=task.case_name, backend=task.backend, params=dict(row.params),
                shapes={k: list(v) for k, v in bound.shapes.items()}, tags=list(row.tags))


@dataclass
class Entrant:
    """A prepared row on one backend: its task, its record's fields, its op, its checked call and its timer.
    A visit of its own times one (``time_alone``); a race (``tileops.bench.race``) alternates several."""

    task: Task
    base: dict[str, Any]
    started: datetime
    clocks_before: dict[str, Any] | None
    op: Op
    prepared: PreparedCall
    timer: Timer


def prepare(task: Task, bound: BoundRow, base: dict[str, Any], cache_bytes: int | None, started: datetime,
            clocks_before: dict[str, Any] | None) -> Entrant:
    """Build the row's op and inputs and make its first, checked call (compiled: the caller's compile allowance).
    Raises what fails; the caller turns it into the row's error record."""
    op = instantiate(bound.entry, bound.row, task.backend)
    inputs = build_inputs(op, bound, task.device.torch_device)
    timer = make_timer(task, cache_bytes)
    load_compiler(task.backend)
    prepared = op.prepare(**inputs)  # one checked call (last_call is what eval_roofline prices), compiled
    return Entrant(task, base, started, clocks_before, op, prepared, timer)


def _family(op: str) -> str:
    try:
        return load_entries()[op].family
    except KeyError:
        return "unknown"


def error_record(task: Task, exc: BaseException, started: datetime, clocks_before: dict[str, Any] | None,
                 base: dict[str, Any] | None = None) -> Record:
    """The row's error record: what failed, its kind and traceback (``base``: the row's fields, where known)."""
    env = dataclasses.replace(task.env, clocks_before=clocks_before)
    fields = base or dict(run_id=task.env.run_id, op=task.op, family=_family(task.op), label=task.label,
                          dtype=task.case_name, backend=task.backend)
    return Record(**fields, status="error",
                  error=ErrorInfo(kind=error_kind(exc), message=f"{type(exc).__name__}: {exc}",
                                  traceback="".join(traceback.format_exception(exc, limit=8))),
                  env=env, started_at=started, finished_at=utcnow())


def ok_record(e: Entrant, timing: Timing, conditions: RowConditions, race: RacePairing | None = None,
              probe: ProbeReading | None = None) -> Record:
    """The row's record once timed: ``(flops, bytes)`` read only now, from the last timed call (§4.2)."""
    from tileops.device import read_clocks

    task = e.task
    if e.prepared.setup_s is not None:
        timing = dataclasses.replace(timing, compile_s=e.prepared.setup_s)
    flops, nbytes = e.op.eval_roofline()
    try:
        read_bytes = e.op.eval_roofline_read_bytes()
    except Exception:
        read_bytes = None
    env = dataclasses.replace(task.env, clocks_before=e.clocks_before, clocks_after=read_clocks(task.device),
                              threads=threads_used(task))
    return Record(**e.base, status="ok", timing=timing, flops=flops, bytes=nbytes, read_bytes=read_bytes,
                  roof_key=e.op.roof_key(), data_terms=e.op.roofline_data_terms(), env=env,
                  started_at=e.started, finished_at=utcnow(), conditions=conditions, race=race, probe=probe)


def time_alone(e: Entrant) -> tuple[Record, list[list[float]]]:
    """Time a prepared row in a visit of its own (the reference probe between its blocks); its record and blocks
    (none for an error: every failure becomes the row's error record)."""
    try:
        probe = visit_probe(e.task, e.op)
        timing, conditions, blocks = measure_row(e.prepared.run, e.timer, e.task.rule, e.task.device,
                                                 e.task.parent_pids, e.task.parent_pids_unknown,
                                                 probe.between if probe is not None else None)
        return ok_record(e, timing, conditions, probe=probe.reading(timing.total_s) if probe is not None else None), \
            blocks
    except Exception as exc:
        return error_record(e.task, exc, e.started, e.clocks_before, e.base), []


def run_task(task: Task, cache_bytes: int | None = None, on_prepared: Callable[[], None] | None = None) -> Record:
    """Run one row; every failure becomes an error record (never an exception).

    ``on_prepared`` is called once the backend is ready (compiled) and before the timing starts: the
    worker tells its parent, whose compile time limit then gives way to the row's own.
    """
    return run_visit(task, cache_bytes, on_prepared)[0]


def run_visit(task: Task, cache_bytes: int | None = None, on_prepared: Callable[[], None] | None = None
              ) -> tuple[Record, list[list[float]]]:
    """:func:`run_task`, and the blocks this visit took (none for an error): the sweep sets each row's interval
    from its visits' blocks, pooled with the rows of its kind (``tileops.bench.hostnoise``)."""
    from tileops.device import read_clocks

    started = utcnow()
    bound = bind(task)
    base = row_fields(task, bound)
    clocks_before = read_clocks(task.device)
    try:
        entrant = prepare(task, bound, base, cache_bytes, started, clocks_before)
        if on_prepared is not None:
            on_prepared()
    except Exception as exc:
        return error_record(task, exc, started, clocks_before, base), []
    return time_alone(entrant)
