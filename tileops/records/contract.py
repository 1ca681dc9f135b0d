"""The record contract every layer shares (§5.2): what the bench writes and everyone else reads.

One JSON object per (op, workload row, dtype, backend) in ``records.jsonl``,
the run file ``run.json`` beside it, and the audit's ``audit.jsonl``. These are
plain standard-library dataclasses so the benchmark layer carries no
third-party dependency (§5.2); how they are read strictly is
``tileops.records.decode``, how files of them are kept ``tileops.records.files``.

``Machine`` is the one description of where a measurement ran; a record's
``Environment`` and a calibration result both carry it. The device itself is
one nested ``DeviceIdentity`` (``tileops.records.identity``) in a machine and
in an audit entry alike; an older file's flat device fields read the same.
"""

from __future__ import annotations

import math
import statistics
import typing
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import Any, ClassVar, Literal
from collections.abc import Callable

from tileops.defaults import AUDIT_READ_SIDE, AUDIT_REPLAY_MODE, AUDIT_REPLAY_MODES
from tileops.records.identity import DeviceIdentity, nest_audit, nest_machine

SCHEMA_VERSION = 1
RECORDS_FILE = "records.jsonl"
RUN_FILE = "run.json"
AUDIT_FILE = "audit.jsonl"
#: A run file is a page of JSON; anything this large is not one (and is not read into memory).
RUN_FILE_MAX_BYTES = 16 * 2**20

TimerKind = Literal["cupti", "cuda-events", "cpu-wall"]
Status = Literal["ok", "error", "skipped"]
ErrorKind = Literal["exception", "crash", "timeout", "oom", "unsupported", "cuda", "compile"]
RunStatus = Literal["running", "completed", "interrupted", "failed"]
# PASS: measured reads within tolerance of the declared read half (tileops.audit.verdict).
AuditVerdict = Literal["PASS", "FAIL", "WARN", "EXEMPT", "SKIPPED", "ERROR", "NO-VERDICT"]
AUDIT_VERDICTS: tuple[str, ...] = typing.get_args(AuditVerdict)
#: The premises every audit reading rests on (§4.5); each verdict states them.
#: (The default replay's, from the words tileops.audit.ncu.premise gives each replay mode.)
AUDIT_PREMISE = f"{AUDIT_REPLAY_MODES[AUDIT_REPLAY_MODE]}; {AUDIT_READ_SIDE}"

#: Counts (FLOPs, bytes) above this are not a measurement of anything: int64 is what
#: every consumer (JSON readers, Prometheus, float arithmetic) can carry exactly enough.
MAX_COUNT = 2**63 - 1
#: A timed duration is between a picosecond (no timer resolves less) and about 30 years. Inside
#: these bounds every rate and ratio the roofline tool derives (count / time, time / time) is a
#: finite float, so no consumer meets an infinity or an OverflowError.
MIN_TIME_S = 1e-12
MAX_TIME_S = 1e9


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def relative_half_width(median: float, lo: float, hi: float) -> float:
    """An interval's relative half-width around its median, on the wider side: ``max(hi/m - 1, 1 - lo/m)``."""
    return max(hi / median - 1.0, 1.0 - lo / median)


def _positive(**extra: Any) -> dict[str, Any]:
    return {"gt": 0, **extra}


def _nonneg(**extra: Any) -> dict[str, Any]:
    return {"ge": 0, **extra}


def _duration() -> dict[str, Any]:
    return {"ge": MIN_TIME_S, "le": MAX_TIME_S}


# --------------------------------------------------------------------------- the contract


@dataclass(frozen=True, kw_only=True)
class Machine:
    """Where a measurement ran: the fields records and calibration results share.

    ``device`` is the device and its host: its name is what a profile matches
    (§1.2), its ``key`` what the store and the metrics name it by.
    """

    #: An older file's machine (flat ``device_kind``, ``device_name``, ... beside the rest) reads as this shape.
    older_shape: ClassVar[Callable[[dict[str, Any]], dict[str, Any]]] = staticmethod(nest_machine)
    device: DeviceIdentity
    driver: str | None = None
    cuda: str | None = None
    cpu_model: str | None = None
    #: a CPU record's: the intra-op threads torch ran its row on in the worker (``--threads``, else the CPUs the
    #: bench may use), read back there; a calibration's: the threads it measured on
    threads: int | None = field(default=None, metadata=_positive())
    l2_bytes: int | None = field(default=None, metadata=_positive())
    torch_version: str
    tileops_version: str
    git_revision: str | None = None


@dataclass(frozen=True, kw_only=True)
class Environment(Machine):
    """A record's environment: the machine, the run, and the clocks around the row."""

    #: Every row of a run carries the same one: the reader decodes it once (``_shared``).
    repeats_across_rows: ClassVar[bool] = True
    run_id: str
    clocks_before: dict[str, Any] | None = None
    clocks_after: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class CpuConditions:
    """The host during the row (``tileops.bench.sensors`` reads it). Shares are of all CPUs' time over the row."""

    cores: int | None = None  # CPUs /proc/stat lists (what the host's load average is spread over)
    steal: float | None = None  # share the hypervisor gave to other guests
    others_busy: float | None = None  # share other processes used
    load1_start: float | None = None
    load1_end: float | None = None
    energy_j: float | None = None  # RAPL package energy over the row
    blank: dict[str, str] = field(default_factory=dict)  # field -> why it is None


@dataclass(frozen=True, kw_only=True)
class GpuConditions:
    """The GPU during the row, through NVML (``tileops.bench.sensors``)."""

    other_processes: list[int] | None = None  # PIDs NVML lists on the device besides this process
    sm_mhz_min: float | None = None
    sm_mhz_max: float | None = None
    sm_mhz_readings: int = 0  # how many clock readings the min and max are over
    clock_events: list[str] = field(default_factory=list)  # every clock-event reason seen during the row
    clock_event_mask: int | None = None  # their bits, OR-ed
    power_w: float | None = None  # mean draw over the row (its energy over its time; else the polled mean)
    power_limit_w: float | None = None  # the enforced limit
    temperature_c_max: float | None = None
    energy_j: float | None = None
    power_capped_s: float | None = None  # time the power policy held the clocks down during the row
    thermal_capped_s: float | None = None  # time the thermal policy did
    blank: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class RowConditions:
    """What surrounded one row: ``contended`` with its reasons, the power flags, and the readings."""

    window_s: float
    contended: bool = False
    contention: list[str] = field(default_factory=list)  # one phrase per reason, for a person
    #: the op's calls in the window (warm-up, timed samples, the untimed re-warm call before each block but the
    #: first): what its energy is shared by. None in older records (then the timing's n + warm-up)
    calls: int | None = field(default=None, metadata={"ge": 0})
    throttled: bool = False  # a clock-event reason other than idle or applications clocks
    power_capped: bool = False
    thermal: bool = False
    cpu: CpuConditions | None = None
    gpu: GpuConditions | None = None

    def power_state(self) -> str | None:
        """``power-capped``, ``thermal``, ``power-capped+thermal`` or ``uncapped`` over the window; None where the
        GPU's clock-event reasons and violation counters were not read (a CPU, no NVML): :meth:`power_blank`."""
        if self.power_blank() is not None:
            return None
        if self.power_capped:
            return "power-capped+thermal" if self.thermal else "power-capped"
        return "thermal" if self.thermal else "uncapped"

    def power_blank(self) -> str | None:
        """Why the window has no power state, or None."""
        g = self.gpu
        if g is None:
            return "a CPU: no GPU clocks or power to read"
        if g.clock_event_mask is None and g.power_capped_s is None and g.thermal_capped_s is None:
            return g.blank.get("clock_event_mask") or "the GPU's clock-event reasons were not read"
        return None


@dataclass(frozen=True, kw_only=True)
class SchedulerSlices:
    """A row timed in scheduler slices (``tileops.bench.slices``): its samples fall in a fast cluster and one
    slower by about the OS time slice (a thread of a parallel op waited for its CPU), spread over the visit
    rather than in one burst. Its time is then the scheduler's as much as the op's: no precise interval."""

    slow: int = field(metadata={"ge": 1})  # samples in the slow cluster
    samples: int = field(metadata={"ge": 1})  # samples judged (every sample of the row)
    fast_s: float = field(metadata=_duration())  # the fast cluster's median
    slow_s: float = field(metadata=_duration())  # the slow cluster's median
    slice_s: float = field(metadata=_duration())  # the scheduler's time slice the gap was judged against
    slice_source: str  # where the slice was read (a /proc or /sys file), or the default and why

    def contract_check(self) -> tuple[str, str] | None:
        """The slow cluster is part of the samples, and slower than the fast one."""
        if self.slow > self.samples:
            return "slow", f"expected at most the {self.samples} samples judged, got {self.slow}"
        if not self.fast_s < self.slow_s:
            return "slow_s", f"expected above fast_s ({self.fast_s!r}), got {self.slow_s!r}"
        return None


@dataclass(frozen=True, kw_only=True)
class Timing:
    """Device-busy time statistics over the timed repetitions, in seconds."""

    timer: TimerKind
    #: the row's level: for a record written since issue 34, the geometric mean of its visits' centres (each the
    #: median of its blocks' medians, ``visits_s``); before, the median of every sample
    median_s: float = field(metadata=_duration())
    min_s: float = field(metadata=_duration())
    mean_s: float = field(metadata=_duration())
    #: a visit's 10th and 90th percentiles of its samples; a row visited twice: each visit's, combined as the
    #: level is (the geometric mean), so ``p10_s <= median_s <= p90_s`` holds however far its visits differ
    p10_s: float = field(metadata=_duration())
    p90_s: float = field(metadata=_duration())
    n: int = field(metadata={"ge": 1})
    rel_noise: float = field(metadata=_nonneg())  # relative standard deviation of the samples
    warmup: int = field(metadata=_nonneg())
    total_s: float = field(metadata=_nonneg(le=MAX_TIME_S))  # wall time spent timing this row
    stop_reason: str  # median precision reached | time cap | sample cap
    excluded_copies_s: float = field(default=0.0, metadata=_nonneg(le=MAX_TIME_S))  # device copies excluded (§1.2)
    fallback_reason: str | None = None  # why a GPU row was not timed by CUPTI (then SOL is blank)
    #: compile/triton backends: the first (checked) call's seconds, compilation included; never in the samples
    compile_s: float | None = field(default=None, metadata=_nonneg(le=MAX_TIME_S))
    #: CUPTI rows: the median over repetitions of the span from a repetition's first launch call to its last
    #: device activity's end. Well above ``median_s`` (busy time), the device waited on the host between
    #: kernels: the row is host-bound (``tileops.roofline.HOST_BOUND_RATIO``). None where no timer saw it.
    span_s: float | None = field(default=None, metadata=_nonneg(le=MAX_TIME_S))
    #: [lo, hi]: where a rerun's level (``median_s``) is expected to fall (95 %), under the same plan: the row's
    #: own variation within and between visits and the host's (``tileops.bench.hostnoise``), not back-to-back
    #: samples. None: not known (a record written before intervals, or not by the bench).
    median_ci_s: list[float] | None = None
    #: [lo, hi]: the 95 % interval of this run's level, what the roofline's judgments and a comparison of two runs
    #: use (narrower than ``median_ci_s`` by about sqrt(2)). None in records written before issue 34.
    level_ci_s: list[float] | None = None
    #: the degrees of freedom of both intervals' t quantile (a comparison needs it); None: not known
    ci_df: float | None = field(default=None, metadata={"ge": 1, "le": 1000})
    #: each visit's centre (the median of its blocks' medians), in visit order; ``median_s`` is their geometric
    #: mean. None in records written before issue 34.
    visits_s: list[float] | None = None
    #: [lo, hi] around the fastest block's median: the call's noise-free time is at most ``hi`` (99 %), whatever
    #: slowed the other blocks, and ``lo`` is the fastest its readings allow (``interval.fast_interval``). What
    #: the physics check judges on. None: not known (older records, one block of one sample).
    fast_ci_s: list[float] | None = None
    #: CPU rows whose samples are bimodal at the OS time slice (:class:`SchedulerSlices`); None: not seen, not
    #: judged (too few samples, a GPU timer), or a record written before issue 37
    slices: SchedulerSlices | None = None

    def contract_check(self) -> tuple[str, str] | None:
        """A check across fields the per-field bounds cannot make: (field, what is wrong), or None."""
        for name in ("median_ci_s", "level_ci_s"):
            ci = getattr(self, name)
            if ci is None:
                continue
            if len(ci) != 2 or not all(type(v) in (int, float) and math.isfinite(v) for v in ci):
                return name, "expected [lo, hi], two finite numbers of seconds"
            lo, hi = ci
            if not MIN_TIME_S <= lo <= self.median_s <= hi <= MAX_TIME_S:
                return name, (f"expected lo <= median_s <= hi within [{MIN_TIME_S:g}, {MAX_TIME_S:g}] s, "
                              f"got [{lo!r}, {hi!r}] around {self.median_s!r}")
        fast = self.fast_ci_s
        if fast is not None:
            if len(fast) != 2 or not all(type(v) in (int, float) and math.isfinite(v) for v in fast):
                return "fast_ci_s", "expected [lo, hi], two finite numbers of seconds"
            if not MIN_TIME_S <= fast[0] <= fast[1] <= MAX_TIME_S:
                return "fast_ci_s", (f"expected lo <= hi within [{MIN_TIME_S:g}, {MAX_TIME_S:g}] s, "
                                     f"got [{fast[0]!r}, {fast[1]!r}]")
        visits = self.visits_s
        if visits is not None and not (1 <= len(visits) <= 2 and all(
                type(v) in (int, float) and math.isfinite(v) and MIN_TIME_S <= v <= MAX_TIME_S for v in visits)):
            return "visits_s", f"expected one or two visit times in [{MIN_TIME_S:g}, {MAX_TIME_S:g}] s, got {visits!r}"
        return None

    @property
    def ci_precision(self) -> float | None:
        """The interval's relative half-width on its wider side (what ``--target-precision`` bounds, what a
        progress line prints as ``± x %``); None without an interval."""
        if self.median_ci_s is None:
            return None
        return relative_half_width(self.median_s, *self.median_ci_s)

    @property
    def actual_time_s(self) -> float:
        """§1.2 actual_time: device-busy time plus any device copies excluded from it."""
        return self.median_s + self.excluded_copies_s


#: The kinds of reference probe a record can carry (``tileops.bench.probe``): DRAM bandwidth, the FMA rate and,
#: on a GPU, the SM clock.
ProbeKind = Literal["memory", "fma", "sm_clock"]


class ProbeLevel(typing.NamedTuple):
    """A probe's rate during a row with its 95 % interval and that interval's degrees of freedom."""

    rate: float
    lo: float
    hi: float
    df: float


@dataclass(frozen=True, kw_only=True)
class ProbeRate:
    """One reference probe's readings during a row (issue 39): the seconds each probe took, per visit, and the
    work one probe does. Raw times rather than a summary, so the row's two visits (two processes) pool as its
    time does (:meth:`level`), and a reader can recompute anything from them."""

    kind: ProbeKind
    unit: str  # "B/s", "FLOP/s" or "Hz": what work / time is in
    work: float = field(metadata=_positive(le=float(MAX_COUNT)))  # bytes or FLOPs one probe does; 1 cycle
    #: each visit's probe times in seconds, in order (the SM clock: one cycle's period at each reading)
    times_s: list[list[float]]
    #: the profile ceiling the probe is read against: a memory mix (``read``) or a compute roof key
    reference: str | None = None
    method: str = ""  # what the probe ran, for a person

    def contract_check(self) -> tuple[str, str] | None:
        if not 1 <= len(self.times_s) <= 2 or not any(self.times_s):
            return "times_s", f"expected one or two visits' probe times with at least one time, got {self.times_s!r}"
        for visit in self.times_s:
            for t in visit:
                if not (type(t) in (int, float) and math.isfinite(t) and MIN_TIME_S <= t <= MAX_TIME_S):
                    return "times_s", f"expected times in [{MIN_TIME_S:g}, {MAX_TIME_S:g}] s, got {t!r}"
        return None

    @property
    def n(self) -> int:
        return sum(len(v) for v in self.times_s)

    def level(self, confidence: float = 0.95) -> ProbeLevel | None:
        """The probe's rate during the row and its interval, the way a row's time is leveled
        (``tileops.bench.interval``): per visit the median of the log rates and its standard error (the robust
        spread times the median's variance factor); the row's level the mean of its visits' (the geometric mean,
        as ``Timing.median_s`` is), its variance theirs over k^2 with Welch-Satterthwaite's df. A visit of one
        probe has no spread of its own: then the probes of both visits are read as one sample. None without two
        probes (no interval can be told)."""
        from tileops.stats import median_variance_factor, robust_scale, satterthwaite, two_sided_t

        visits = [[math.log(self.work / t) for t in v] for v in self.times_s if v]
        if sum(len(v) for v in visits) < 2:
            return None
        if any(len(v) < 2 for v in visits):
            visits = [[x for v in visits for x in v]]
        centres, parts = [], []
        for logs in visits:
            centre = statistics.median(logs)
            spread = robust_scale(logs, centre)
            centres.append(centre)
            parts.append((spread * spread * median_variance_factor(len(logs)), len(logs) - 1.0))
        k = len(visits)
        centre = sum(centres) / k
        var = sum(v for v, _ in parts) / (k * k)
        df = min(satterthwaite(parts), 1000.0)
        h = two_sided_t(confidence, df) * math.sqrt(var)
        return ProbeLevel(math.exp(centre), math.exp(centre - h), math.exp(centre + h), df)


@dataclass(frozen=True, kw_only=True)
class ProbeReading:
    """The reference probe of one row (``tileops.bench.probe``): each probe kind's readings, what probing cost
    the row, and why a kind was not run."""

    rates: list[ProbeRate] = field(default_factory=list)
    cost_s: float = field(default=0.0, metadata=_nonneg(le=MAX_TIME_S))  # wall seconds spent probing (all visits)
    #: cost_s over the row's timing wall time (``Timing.total_s``): what probing took from the row's budget
    cost_share: float | None = field(default=None, metadata=_nonneg(le=1.0))
    not_run: dict[str, str] = field(default_factory=dict)  # kind -> why it was not run

    def rate(self, kind: str) -> ProbeRate | None:
        return next((r for r in self.rates if r.kind == kind), None)


@dataclass(frozen=True, kw_only=True)
class RacePairing:
    """A row raced interleaved (``tileops.bench.race``): its backends' blocks alternated in one worker, so the
    host's drift reached every backend alike and cancels in their per-block ratios. Each backend's record keeps
    its own blocks' timing; this says what the race adds: the ratio of its time to the reference backend's,
    block pair by block pair, and that ratio's interval (the median of the ratios, ``tileops.stats.ratio_interval``)."""

    backends: list[str]  # every backend whose blocks alternated, in race order
    reference: str  # the backend every ratio is over (the race's first)
    #: per block pair, this backend's block median over the reference's block median of the same round; empty
    #: for the reference itself
    ratios: list[float] = field(default_factory=list)
    ratio: float | None = field(default=None, metadata=_positive())  # the ratios' centre; None for the reference
    ratio_ci: list[float] | None = None  # its 95 % interval [lo, hi]; None: fewer than two pairs, or the reference

    def contract_check(self) -> tuple[str, str] | None:
        """The reference is one of the backends; the ratios are positive numbers around their interval."""
        if self.reference not in self.backends:
            return "reference", f"expected one of the backends {self.backends!r}, got {self.reference!r}"
        if not all(type(r) in (int, float) and math.isfinite(r) and r > 0 for r in self.ratios):
            return "ratios", "expected positive finite numbers"
        ci = self.ratio_ci
        if ci is not None and not (len(ci) == 2 and self.ratio is not None and all(
                type(v) in (int, float) and math.isfinite(v) and v > 0 for v in ci) and ci[0] <= self.ratio <= ci[1]):
            return "ratio_ci", f"expected [lo, hi] around the ratio {self.ratio!r}, got {ci!r}"
        return None


@dataclass(frozen=True, kw_only=True)
class ErrorInfo:
    kind: ErrorKind
    message: str
    traceback: str | None = None


@dataclass(frozen=True, kw_only=True)
class Record:
    """One (op, workload row, dtype, backend): raw timing and the evaluator's (flops, bytes)."""

    #: at most this tileops's: a newer record is refused naming the upgrade (tileops.records.decode)
    schema_version: int = field(default=SCHEMA_VERSION, metadata={"ge": 1, "le": SCHEMA_VERSION})
    run_id: str
    op: str
    family: str
    label: str
    dtype: str  # the dtype case's name ('bfloat16', or 'ids=int64,w=bfloat16')
    backend: str
    params: dict[str, Any] = field(default_factory=dict)
    shapes: dict[str, list[int]] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    status: Status
    error: ErrorInfo | None = None
    skip_reason: str | None = None
    timing: Timing | None = None
    flops: int | None = field(default=None, metadata=_nonneg(le=MAX_COUNT))
    bytes: int | None = field(default=None, metadata=_nonneg(le=MAX_COUNT))
    read_bytes: int | None = field(default=None, metadata=_nonneg(le=MAX_COUNT))
    roof_key: str | None = None
    data_terms: dict[str, Any] = field(default_factory=dict)  # what decided a value-dependent number (§4.7)
    env: Environment
    started_at: datetime
    finished_at: datetime
    #: what surrounded the row (contention, clocks, power, energy); None in records written before it was read
    conditions: RowConditions | None = None
    #: the device's state during the row: the reference probe's rates (issue 39); None: not probed (``--no-probe``,
    #: an error record, a record written before it)
    probe: ProbeReading | None = None
    #: the row's interleaved race with its other backends (:class:`RacePairing`); None: raced sequentially (one
    #: visit after another), run on one backend, or written before issue 39
    race: RacePairing | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        """Identity of a row across runs: (op, label, dtype, backend)."""
        return (self.op, self.label, self.dtype, self.backend)


#: The fields of :class:`RunOptions` that select rows (``tileops.bench.select.Selection`` is their view).
SELECTION_FIELDS = ("ops", "families", "labels", "tags", "backends", "dtypes", "all_rows", "shapes")


@dataclass(kw_only=True)
class RunOptions:
    """Everything a user set when starting ``tileops bench``, kept in run.json: ``--resume`` restores it all.

    The one shape of a run's options: the sweep reads its view (the selection,
    how rows are timed), the outputs theirs (pricing, the plot, the metrics
    sinks). Each field is the destination of one bench flag (``--row-timeout``
    is ``row_timeout_s``, ``--op`` is ``ops``), and a test holds every flag of
    the parser to a field here. Every field has a default, so a run file written
    before a field existed still reads (and resumes with the default); None means
    "not given: the layer that uses it decides". Paths are stored absolute, so a
    run resumes from any working directory.
    """

    # what to measure: the selection (each filter repeatable; RunInfo.selection repeats it with the device)
    ops: list[str] = field(default_factory=list)
    families: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    all_rows: bool = False
    shapes: list[str] = field(default_factory=list)  # --shape: ad-hoc rows of the --op ops
    # how to measure it
    device: str = "auto"  # as asked (--device); RunInfo.selection["device"] is what it resolved to
    quick: bool = False
    row_timeout_s: float | None = field(default=None, metadata=_positive())  # None: the device's default
    timer: str = "auto"
    compile_cache: str | None = None  # absolute; None: beside the run directory (or the environment's)
    compile_timeout_s: float | None = field(default=None, metadata=_positive())  # None: the bench's default
    keep_traces: bool = False  # each CUPTI row's last profiled batch kept as a Chrome trace in <run>/traces/
    #: --threads: a CPU row's intra-op threads (torch.set_num_threads in the worker); None: not given, the CPUs
    #: this process may use (RunInfo.threads is what it resolved to)
    threads: int | None = field(default=None, metadata={"ge": 1, "le": 1 << 16})
    # the stopping rule's knobs (None: the device's preset, or --quick's); tileops.bench.interval.BlockRule
    target_precision: float | None = field(default=None, metadata={"gt": 0, "le": 1})  # the interval's half-width
    min_time_s: float | None = field(default=None, metadata=_nonneg(le=MAX_TIME_S))
    max_time_s: float | None = field(default=None, metadata=_positive(le=MAX_TIME_S))
    min_samples: int | None = field(default=None, metadata={"ge": 1, "le": 10**9})
    require_quiet: bool = False  # refuse to measure on a busy host (exit 5) instead of warning
    #: time the reference probe between each row's blocks (``tileops.bench.probe``); False: ``--no-probe``
    probe: bool = True
    #: 2: every eager row is visited again after the first pass, in a worker process of its own, and its interval
    #: set from both visits (``tileops.bench.revisit``, ``hostnoise``); 1: one visit, its interval the host's prior
    passes: int = field(default=2, metadata={"ge": 1, "le": 2})
    #: a row run on several backends: ``interleaved``, their blocks alternate in one worker (``tileops.bench.race``);
    #: ``sequential``, each backend is visited in turn, as before issue 39
    race: str = "interleaved"
    # how to price it and what to write
    profile: str | None = None  # a profile name, or a profile file's absolute path
    calibrate: str = "auto"
    calibration_max_age_s: float | None = field(default=None, metadata=_positive())  # None: the bench's default
    plot: bool = True
    # where its metrics go (None: the exporter's default)
    push_url: str | None = None
    textfile_dir: str | None = None  # absolute
    job: str | None = None
    instance: str | None = None
    push_attempts: int | None = field(default=None, metadata={"ge": 1, "le": 1000})
    push_backoff_s: float | None = field(default=None, metadata=_nonneg(le=MAX_TIME_S))
    push_timeout_s: float | None = field(default=None, metadata=_positive(le=MAX_TIME_S))
    metrics_detail: str | None = None


#: The fields of :class:`RunOptions` that only say what is done with a run's rows once measured and priced: the
#: plot, where its metrics go, under which labels, with which retries and at which detail. A resumed run may change
#: them (``--resume DIR --no-plot``): its records are the same either way. Every other field is a *measurement*
#: option (which rows, how each is timed, what its interval pools with, which profile and calibration price it,
#: what evidence each row keeps): a resumed run that changed one would mix two runs, so it must match.
OUTPUT_ONLY_FIELDS = ("plot", "push_url", "textfile_dir", "job", "instance", "push_attempts", "push_backoff_s",
                      "push_timeout_s", "metrics_detail")
#: The measurement options (above): every field of :class:`RunOptions` but the output-only ones.
MEASUREMENT_FIELDS = tuple(f.name for f in fields(RunOptions) if f.name not in OUTPUT_ONLY_FIELDS)


@dataclass(kw_only=True)
class RunInfo:
    """The run file: a run's start, end, selection and exit status (mutable while the run goes)."""

    run_id: str
    started_at: datetime
    finished_at: datetime | None = None
    status: RunStatus = "running"
    exit_code: int | None = None
    #: Why the run is "failed" or "interrupted", as a sentence (what failed, where, and the fix).
    reason: str | None = None
    argv: list[str] = field(default_factory=list)  # the command that started the run (not a resume)
    selection: dict[str, Any] = field(default_factory=dict)
    options: RunOptions = field(default_factory=RunOptions)
    rows_total: int = field(default=0, metadata=_nonneg())
    rows_ok: int = field(default=0, metadata=_nonneg())
    rows_error: int = field(default=0, metadata=_nonneg())
    rows_skipped: int = field(default=0, metadata=_nonneg())
    health: dict[str, Any] = field(default_factory=dict)
    #: the intra-op threads the CPU rows run on, as resolved when the run started (``--threads``, else the CPUs
    #: the process may use): a resumed run keeps it. None: a GPU run, or a run file written before issue 37
    threads: int | None = field(default=None, metadata={"ge": 1, "le": 1 << 16})
    #: the host before the first row (``tileops.bench.quiet.QuietCheck.as_dict``: figures, warnings, blanks)
    quiet: dict[str, Any] = field(default_factory=dict)
    #: the stopping rule the rows were timed by, every knob (``tileops.bench.interval.BlockRule``): the preset
    #: and the flags given, as this version resolved them
    stopping_rule: dict[str, Any] = field(default_factory=dict)
    #: the workers' host allocator policy (``tileops.bench.allocator.describe``): why a CPU row's time is its kernel's
    host_allocator: dict[str, Any] = field(default_factory=dict)
    #: the host's noise components as this run measured them, once per run (``tileops.bench.hostnoise.HostModel``:
    #: within a visit, between visits (= between processes), the host's shift of a pass, the second pass's common
    #: shift, each with where it came from); ``kept_first``, the rows whose second visit failed or was timed
    #: otherwise (their first record stands); ``prior``, what happened to this host's stored prior
    host_noise: dict[str, Any] = field(default_factory=dict)
    #: written by runs before issue 34 (a single drift sigma for every row); read, never written
    host_drift: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class AuditEntry:
    """One audited row of ``audit.jsonl`` (§4.5): the verdict on one (op, row, dtype, backend) and what
    it rests on. Written by ``tileops audit``, read by the exporters.

    Fields are only ever added. A reader ignores fields it does not know (an
    older exporter reading a newer audit), but checks every field it does.
    """

    ignore_unknown: ClassVar[bool] = True
    #: An older entry (flat ``device_name``, ``device_uuid``, ``hostname``) reads as this shape.
    older_shape: ClassVar[Callable[[dict[str, Any]], dict[str, Any]]] = staticmethod(nest_audit)
    op: str
    label: str
    dtype: str  # the dtype case's name, as records name it ("bfloat16", "ids=int64,weight=bfloat16")
    backend: str
    verdict: AuditVerdict
    reason: str = ""  # why: the numbers and limits, the exemption, or the error and its fix
    premise: str = AUDIT_PREMISE
    expected_read_bytes: int | None = field(default=None, metadata=_nonneg(le=MAX_COUNT))  # eval_roofline_read_bytes()
    measured_read_bytes: int | None = field(default=None, metadata=_nonneg(le=MAX_COUNT))  # dram__bytes_read.sum
    measured_write_bytes: int | None = field(default=None, metadata=_nonneg(le=MAX_COUNT))  # reported, never judged
    fail_below_bytes: int | None = None  # a reading under this is a shortfall (FAIL, or EXEMPT inside a `when`)
    warn_above_bytes: int | None = None  # a reading over this is WARN
    kernels: int | None = field(default=None, metadata=_nonneg())  # kernels profiled inside the call's range
    duration_ns: float | None = field(default=None, metadata=_nonneg())  # under the profiler: not a timing
    error_kind: str | None = None  # ERROR rows: ncu-missing, permission, profiler-busy, metric, ...
    exemption: str | None = None  # EXEMPT rows: where the condition is configured (file:line)
    params: dict[str, Any] = field(default_factory=dict)
    data_terms: dict[str, Any] = field(default_factory=dict)  # Op.roofline_data_terms() of the call
    report: str | None = None  # the ncu report, relative to the audit's output folder
    device: DeviceIdentity | None = None  # the audited GPU; None where the host had none
    hostname: str | None = None  # the host, where no device was audited (else ``device.hostname``)
    ncu_version: str | None = None
    run_id: str | None = None
    started_at: str | None = None  # ISO 8601
    finished_at: str | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.op, self.label, self.dtype, self.backend)

    def contract_check(self) -> tuple[str, str] | None:
        """The host is kept once: in ``device`` where there is one, else in ``hostname``."""
        if self.device is not None and self.hostname is not None:
            return "hostname", "the older flat device field beside `device`, which holds it: keep `device` alone"
        return None

    @property
    def read_ratio(self) -> float | None:
        """Measured / declared reads; None when either is missing or nothing is declared."""
        if self.measured_read_bytes is None or not self.expected_read_bytes:
            return None
        ratio = self.measured_read_bytes / self.expected_read_bytes
        return ratio if math.isfinite(ratio) else None  # a sub-byte expectation is no expectation

