"""The record contract every layer shares (§5.2): what the bench writes and everyone else reads.

One JSON object per (op, workload row, dtype, backend) in ``records.jsonl``,
the run file ``run.json`` beside it, and the audit's ``audit.jsonl``. These are
plain standard-library dataclasses so the benchmark layer carries no
third-party dependency (§5.2), and reading them is strict: a field of the
wrong type, a missing one, an unknown one or a number that is not finite is an
error naming the file, the line and the field, never a silently dropped row
or an ``inf`` that crashes a consumer later.

``Machine`` is the one description of where a measurement ran; a record's
``Environment`` and a calibration result both carry it.

Reading is built for files of 100,000 records: where msgspec is installed a
line is parsed and checked in C against a mirror of its class
(``tileops.typed_json``), and a line that mirror declines is read field by
field below, which accepts it after all or words the error; both accept
exactly the same objects. ``iter_jsonl(span=...)`` reads one part of a file
(``jsonl_spans``) so a large file can be read by several processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import errno
import json
import json.scanner
import math
import os
import types
import typing
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Iterator, Literal, TypeVar

from tileops.errors import TileOpsError
from tileops.fsutil import FileRefused, open_regular, read_regular, write_atomic

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
#: (The default replay's: tileops.audit.ncu.premise gives each replay mode's, and a test holds them equal.)
AUDIT_PREMISE = ("cold caches at the start of the call, its kernels sharing the caches as in a real run "
                 "(ncu --cache-control all --replay-mode app-range); read side only: DRAM writes are measured and "
                 "reported, never judged")

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

    The device name is what a profile matches (§1.2). A CPU has no uuid; its
    stable key is ``cpu-<hostname>`` (:attr:`device_key`).
    """

    device_kind: Literal["cpu", "cuda"]
    device_name: str
    device_uuid: str | None = None
    device_index: int | None = None
    driver: str | None = None
    cuda: str | None = None
    cpu_model: str | None = None
    threads: int | None = field(default=None, metadata=_positive())
    l2_bytes: int | None = field(default=None, metadata=_positive())
    hostname: str
    torch_version: str
    tileops_version: str
    git_revision: str | None = None

    @property
    def device_key(self) -> str:
        """The device's stable key: the GPU uuid, or ``cpu-<hostname>``."""
        return self.device_uuid or f"cpu-{self.hostname}"


@dataclass(frozen=True, kw_only=True)
class Environment(Machine):
    """A record's environment: the machine, the run, and the clocks around the row."""

    #: Every row of a run carries the same one: the reader decodes it once (``_shared``).
    repeats_across_rows: ClassVar[bool] = True
    run_id: str
    clocks_before: dict[str, Any] | None = None
    clocks_after: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class Timing:
    """Device-busy time statistics over the timed repetitions, in seconds."""

    timer: TimerKind
    median_s: float = field(metadata=_duration())
    min_s: float = field(metadata=_duration())
    mean_s: float = field(metadata=_duration())
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

    @property
    def actual_time_s(self) -> float:
        """§1.2 actual_time: device-busy time plus any device copies excluded from it."""
        return self.median_s + self.excluded_copies_s


@dataclass(frozen=True, kw_only=True)
class ErrorInfo:
    kind: ErrorKind
    message: str
    traceback: str | None = None


@dataclass(frozen=True, kw_only=True)
class Record:
    """One (op, workload row, dtype, backend): raw timing and the evaluator's (flops, bytes)."""

    schema_version: int = SCHEMA_VERSION
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

    @property
    def key(self) -> tuple[str, str, str, str]:
        """Identity of a row across runs: (op, label, dtype, backend)."""
        return (self.op, self.label, self.dtype, self.backend)


@dataclass(kw_only=True)
class RunOptions:
    """The options a run was started with, beyond its selection: ``--resume`` restores them.

    Every field has the bench's default, so a run file written before these
    were stored still reads (and resumes with the defaults). Paths are stored
    absolute, so a run resumes from any working directory.
    """

    device: str = "auto"  # as asked (--device); RunInfo.selection["device"] is what it resolved to
    quick: bool = False
    row_timeout_s: float | None = field(default=None, metadata=_positive())  # None: the device's default
    timer: str = "auto"
    profile: str | None = None  # a profile name, or a profile file's absolute path
    calibrate: str = "auto"
    plot: bool = True
    push_url: str | None = None
    textfile_dir: str | None = None
    job: str | None = None
    instance: str | None = None
    compile_cache: str | None = None  # absolute; None: beside the run directory (or the environment's)
    compile_timeout_s: float | None = field(default=None, metadata=_positive())  # None: the bench's default
    keep_traces: bool = False  # each CUPTI row's last profiled batch kept as a Chrome trace in <run>/traces/


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


@dataclass(kw_only=True)
class AuditEntry:
    """One audited row of ``audit.jsonl`` (§4.5): the verdict on one (op, row, dtype, backend) and what
    it rests on. Written by ``tileops audit``, read by the exporters.

    Fields are only ever added. A reader ignores fields it does not know (an
    older exporter reading a newer audit), but checks every field it does.
    """

    ignore_unknown: ClassVar[bool] = True
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
    device_name: str | None = None
    device_uuid: str | None = None
    hostname: str | None = None
    ncu_version: str | None = None
    run_id: str | None = None
    started_at: str | None = None  # ISO 8601
    finished_at: str | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.op, self.label, self.dtype, self.backend)

    @property
    def read_ratio(self) -> float | None:
        """Measured / declared reads; None when either is missing or nothing is declared."""
        if self.measured_read_bytes is None or not self.expected_read_bytes:
            return None
        ratio = self.measured_read_bytes / self.expected_read_bytes
        return ratio if math.isfinite(ratio) else None  # a sub-byte expectation is no expectation

    @property
    def read_bytes_ratio(self) -> float | None:
        return self.read_ratio


# --------------------------------------------------------------------------- strict decoding


class RecordFileError(TileOpsError, ValueError):
    """A results file (records, run file, audit) holds something that is not the contract;
    the message names the file, the line and the field."""


class _Invalid(Exception):
    """A value does not fit its field; ``path`` is filled in on the way out."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str] = []


_Decoder = Callable[[Any], Any]
T = TypeVar("T")


def _describe(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _bounds(meta: dict[str, Any]) -> Callable[[Any], None] | None:
    gt, ge, le = meta.get("gt"), meta.get("ge"), meta.get("le")
    if gt is None and ge is None and le is None:
        return None

    def check(v: Any) -> None:
        if gt is not None and not v > gt:
            raise _Invalid(f"must be > {gt}, got {_describe(v)}")
        if ge is not None and not v >= ge:
            raise _Invalid(f"must be >= {ge}, got {_describe(v)}")
        if le is not None and not v <= le:
            raise _Invalid(f"must be <= {le}, got {_describe(v)}")

    return check


def _number_decoder(kind: type, meta: dict[str, Any]) -> _Decoder:
    check = _bounds(meta)

    if kind is int:
        def dec(v: Any) -> Any:
            if type(v) is not int:
                raise _Invalid(f"expected a whole number, got {_describe(v)}")
            if check:
                check(v)
            return v
        return dec

    def dec_float(v: Any) -> Any:
        t = type(v)
        if t is not float and t is not int:
            raise _Invalid(f"expected a number, got {_describe(v)}")
        if t is int:
            try:
                v = float(v)
            except OverflowError:  # a whole number past float's range
                raise _Invalid(f"expected a finite number, got {_describe(v)}") from None
        if not math.isfinite(v):
            raise _Invalid(f"expected a finite number, got {v!r}")
        if check:
            check(v)
        return v
    return dec_float


def parse_time(text: str) -> datetime:
    """An ISO 8601 time as the contract reads it; ValueError otherwise."""
    return datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)  # 3.10 reads no 'Z'


def _datetime(v: Any) -> datetime:
    if type(v) is not str:
        raise _Invalid(f"expected an ISO 8601 time, got {_describe(v)}")
    try:
        return parse_time(v)
    except ValueError:
        raise _Invalid(f"expected an ISO 8601 time, got {_describe(v)}") from None


def _json_value(v: Any) -> Any:
    """Any JSON value, with every number in it finite."""
    t = type(v)
    if t is float:
        if not math.isfinite(v):
            raise _Invalid(f"expected a finite number, got {v!r}")
    elif t is dict:
        for k, x in v.items():
            try:
                _json_value(x)
            except _Invalid as exc:
                exc.path.insert(0, str(k))
                raise
    elif t is list:
        for i, x in enumerate(v):
            try:
                _json_value(x)
            except _Invalid as exc:
                exc.path.insert(0, str(i))
                raise
    return v


def _simple(kind: type, what: str) -> _Decoder:
    def dec(v: Any) -> Any:
        if type(v) is not kind:
            raise _Invalid(f"expected {what}, got {_describe(v)}")
        return v
    return dec


def _decoder(tp: Any, meta: dict[str, Any]) -> _Decoder:
    origin = typing.get_origin(tp)
    if tp is Any:
        return _json_value
    if tp is str:
        return _simple(str, "a string")
    if tp is bool:
        return _simple(bool, "true or false")
    if tp is int or tp is float:
        return _number_decoder(tp, meta)
    if tp is datetime:
        return _datetime
    if origin is Literal:
        allowed = typing.get_args(tp)

        def lit(v: Any) -> Any:
            if v not in allowed or type(v) is not str:
                raise _Invalid(f"expected one of {', '.join(map(str, allowed))}, got {_describe(v)}")
            return v
        return lit
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported union {tp}")
        inner = _decoder(args[0], meta)

        def optional(v: Any) -> Any:
            return None if v is None else inner(v)
        return optional
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        item = _decoder(item_tp, {})

        def lst(v: Any) -> Any:
            if type(v) is not list:
                raise _Invalid(f"expected a list, got {_describe(v)}")
            out = []
            for i, x in enumerate(v):
                try:
                    out.append(item(x))
                except _Invalid as exc:
                    exc.path.insert(0, str(i))
                    raise
            return out
        return lst
    if origin is dict:
        key_tp, val_tp = typing.get_args(tp)
        if key_tp is not str:
            raise TypeError(f"unsupported mapping key {key_tp}")
        val = _decoder(val_tp, {})

        def mapping(v: Any) -> Any:
            if type(v) is not dict:
                raise _Invalid(f"expected an object, got {_describe(v)}")
            out = {}
            for k, x in v.items():
                try:
                    out[k] = val(x)
                except _Invalid as exc:
                    exc.path.insert(0, str(k))
                    raise
            return out
        return mapping
    if dataclasses.is_dataclass(tp):
        return _dataclass_decoder(tp)
    raise TypeError(f"no decoder for {tp!r}")


_DATACLASS_DECODERS: dict[type, _Decoder] = {}


def _dataclass_decoder(cls: type) -> _Decoder:
    """The decoder of a contract class, field by field (an environment shared by the rows that repeat it)."""
    hit = _DATACLASS_DECODERS.get(cls)
    if hit is None:
        hit = _field_decoder(cls)
        if getattr(cls, "repeats_across_rows", False):
            hit = _shared(hit)
        _DATACLASS_DECODERS[cls] = hit
    return hit


#: Distinct objects a :func:`_shared` decoder remembers (a run has one environment per device).
SHARED_LIMIT = 64


def _shared(decode: _Decoder) -> _Decoder:
    """``decode``, answering an object it has decoded before with the same (frozen) instance.

    Every record of a run carries the same environment; decoding it once per run
    instead of once per row saves a fifth of the reading time, and the rows then
    share one copy in memory. The key holds each value's type as well as the
    value, because ``1``, ``1.0`` and ``True`` are equal keys but not the same
    input (a field check may take one and refuse another). An object holding a
    list or an object (GPU clocks) is unhashable and decoded every time.
    """
    seen: dict[tuple, Any] = {}
    last: list[Any] = [None, (), None]  # the last object's data, its value types, and what it decoded to

    def dec(v: Any) -> Any:
        if type(v) is not dict:
            return decode(v)
        types_ = tuple(map(type, v.values()))
        if v == last[0] and types_ == last[1]:  # the usual case: the row before's (a dict compare is cheap)
            return last[2]
        try:
            key = (tuple(v.items()), types_)
            hit = seen.get(key)
        except TypeError:
            return decode(v)
        if hit is None:
            hit = decode(v)  # raises for an invalid object: nothing is remembered
            if len(seen) < SHARED_LIMIT:
                seen[key] = hit
        last[:] = (v, types_, hit)
        return hit

    return dec


def _field_decoder(cls: type) -> _Decoder:
    """Field by field, in declaration order: the reference decoder, and the one that words every error."""
    hints = typing.get_type_hints(cls)
    specs = []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        specs.append((f.name, _decoder(hints[f.name], dict(f.metadata)), required))
    names = frozenset(s[0] for s in specs)
    required_names = [s[0] for s in specs if s[2]]
    required = frozenset(required_names)
    ignore_unknown = bool(getattr(cls, "ignore_unknown", False))

    def dec(v: Any) -> Any:
        if type(v) is not dict:
            raise _Invalid(f"expected an object, got {_describe(v)}")
        if not ignore_unknown and not names.issuperset(v):
            unknown = sorted(set(v) - names)
            exc = _Invalid("unknown field (remove it, or fix its spelling)")
            exc.path.insert(0, str(unknown[0]))
            raise exc
        kwargs = {}
        for name, d, _ in specs:
            if name in v:
                try:
                    kwargs[name] = d(v[name])
                except _Invalid as exc:
                    exc.path.insert(0, name)
                    raise
        if not required.issubset(kwargs):
            exc = _Invalid("missing (a required field)")
            exc.path.insert(0, next(n for n in required_names if n not in kwargs))
            raise exc
        return cls(**kwargs)

    return dec


def from_data(cls: type[T], data: Any) -> T:
    """Build ``cls`` from parsed JSON, strictly; ValueError naming the field otherwise."""
    try:
        return _dataclass_decoder(cls)(data)
    except _Invalid as exc:
        where = ".".join(exc.path) or "(top level)"
        raise ValueError(f"{where}: {exc.message}") from None


# --------------------------------------------------------------------------- encoding


def to_data(obj: Any) -> Any:
    """A contract object as JSON-ready data: dataclasses to objects, times to ISO 8601."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_data(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, datetime):
        return obj.isoformat()
    if isinstance(obj, dict):
        return {k: to_data(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_data(v) for v in obj]
    return obj


def to_json(obj: Any) -> str:
    """One line of JSON (no NaN or Infinity: they are not JSON and the readers refuse them)."""
    return json.dumps(to_data(obj), separators=(",", ":"), allow_nan=False)


# --------------------------------------------------------------------------- files


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict, refusing a key given twice: JSON readers disagree on which value counts
    (``json`` and msgspec keep the last, others the first), so the line is not one record but two."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        exc = _Invalid("declared twice in one object (JSON readers disagree on which value counts); keep one")
        exc.path.append(key)
        raise exc
    return obj


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)
_scan = json.scanner.make_scanner(_DECODER)  # the C scanner json.loads calls, without its wrappers


def _not_text(data: Any) -> list[str] | None:
    """The path to the first string (or key) holding a lone surrogate (``"\\ud800"``: valid JSON, not text,
    so no output can encode it), or None."""
    stack: list[tuple[Any, list[str]]] = [(data, [])]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:
                    return path
        elif isinstance(value, dict):
            for k, v in value.items():
                stack.append((k, path))
                stack.append((v, [*path, str(k)]))
        elif isinstance(value, list):
            stack.extend((v, [*path, str(i)]) for i, v in enumerate(value))
    return None


def _checked_text(data: Any, text: str) -> Any:
    """``data`` when every string in it is text; _Invalid naming the field otherwise. Only a line with a
    ``\\u`` escape can hold a lone surrogate, so the others are not walked."""
    if "\\u" in text:
        where = _not_text(data)
        if where is not None:
            exc = _Invalid("holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape without its pair), which is "
                           "not text; write the character itself, or its escaped pair")
            exc.path.extend(where)
            raise exc
    return data


def _json_line(text: str) -> Any:
    """One JSON value filling the line (json.loads's rules; its message on an error), each key once, every
    string text."""
    try:
        data, end = _scan(text, 0)
        if end == len(text) or text[end:].isspace():
            return _checked_text(data, text)
    except (StopIteration, ValueError, RecursionError):
        pass
    try:  # leading whitespace (valid), or not JSON: the decoder decides and words it
        return _checked_text(_DECODER.decode(text), text)
    except (ValueError, RecursionError) as exc:
        raise _Invalid(f"not JSON ({exc})") from None


def _parse_line(cls: type[T], raw: bytes | str) -> T:
    """Parse and check one object; NaN/Infinity (and 1e400) parse to floats the field checks then refuse."""
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    return _dataclass_decoder(cls)(_json_line(text.strip()))


def _located(path: Path, line: int | None, exc: _Invalid, what: str, fix: str) -> RecordFileError:
    where = ".".join(exc.path)
    detail = f"{where}: {exc.message}" if where else exc.message
    at = f"{path}:{line}" if line is not None else str(path)
    return RecordFileError(f"{at}: not a valid {what} ({detail}); {fix}")


def iter_jsonl(path: Path, cls: type[T], *, what: str, fix: str,
               span: tuple[int, int] | None = None, fast_json: bool = True) -> Iterator[T]:
    """Objects of one JSON Lines file, streamed.

    A torn last line — one without its newline, which is what a writer killed
    mid-line leaves — is skipped (``torn_tail`` reports it); any other line that
    is not the contract raises RecordFileError naming file:line and the field.
    ``span``: only the lines starting in this byte range (from :func:`jsonl_spans`),
    still numbered as lines of the whole file. ``fast_json``: read with msgspec where it is installed
    (``tileops.typed_json``: the same objects in a third to a quarter of the time, a line it declines read
    as below); False, the standard library alone (the benchmark layer, §5.2).
    """
    decode = _dataclass_decoder(cls)
    fast = _fast_reader(cls) if fast_json else None
    try:
        f = open_regular(path)
    except FileNotFoundError:
        raise
    except OSError as exc:  # FileRefused (a FIFO, a device), permissions
        raise RecordFileError(str(exc) if isinstance(exc, FileRefused) else
                              f"{path}: cannot read ({exc.strerror or exc}); {fix}") from None
    with f:
        first, pos, end = 1, 0, None
        if span is not None:
            pos, end = span
            first += _newlines_before(f, pos)
            f.seek(pos)
        for i, raw in enumerate(f, first):
            if end is not None:
                if pos >= end:
                    return
                pos += len(raw)
            if raw[-1:] != b"\n":
                return  # the torn tail of an interrupted write: not a record yet
            if fast is not None:
                obj = fast(raw)
                if obj is not None:
                    yield obj
                    continue
            if raw.isspace():
                continue
            try:
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise RecordFileError(f"{path}:{i}: not UTF-8 text; {fix}") from None
                obj = decode(_json_line(text))
            except _Invalid as exc:
                raise _located(path, i, exc, what, fix) from None
            yield obj


def _fast_reader(cls: type[T]) -> Callable[[bytes], T | None] | None:
    """``tileops.typed_json``'s reader of ``cls`` where msgspec is installed, else None. Imported here, not at
    module level: the benchmark layer writes and reads records with the standard library alone (§5.2)."""
    try:
        from tileops.typed_json import line_reader
    except ImportError:
        return None
    return line_reader(cls)


def _newlines_before(f: Any, offset: int) -> int:
    f.seek(0)
    count = 0
    while offset > 0:
        block = f.read(min(offset, 1 << 20))
        if not block:
            break
        count += block.count(b"\n")
        offset -= len(block)
    return count


def jsonl_spans(path: Path | str, parts: int, *, min_bytes: int = 1 << 22) -> list[tuple[int, int]]:
    """Byte ranges splitting a JSON Lines file into up to ``parts`` pieces of at least ``min_bytes``,
    each starting at the start of a line (to read a large file in parallel with ``iter_jsonl(span=...)``)."""
    try:
        f = open_regular(path)  # a FIFO would block this open forever: refused with its name instead
    except FileNotFoundError:
        raise
    except OSError as exc:  # FileRefused (a FIFO, a device), permissions
        raise RecordFileError(str(exc) if isinstance(exc, FileRefused) else
                              f"{path}: cannot read ({exc.strerror or exc})") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        n = max(1, min(parts, size // max(1, min_bytes)))
        cuts = [0]
        for k in range(1, n):
            f.seek(size * k // n)
            f.readline()  # on to the start of the next line
            pos = f.tell()
            if cuts[-1] < pos < size:
                cuts.append(pos)
    cuts.append(size)
    return list(zip(cuts, cuts[1:]))


def torn_tail(path: Path) -> bytes | None:
    """The bytes after the last newline of a JSON Lines file (an interrupted write), or None."""
    try:
        f = open_regular(path)
    except FileNotFoundError:
        return None
    except FileRefused as exc:
        raise RecordFileError(str(exc)) from None
    try:
        with f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if size == 0:
                return None
            pos = size
            chunk = b""
            while pos > 0:
                step = min(65536, pos)
                pos -= step
                f.seek(pos)
                chunk = f.read(step) + chunk
                nl = chunk.rfind(b"\n")
                if nl >= 0:
                    tail = chunk[nl + 1:]
                    return tail or None
            return chunk or None
    except OSError as exc:
        raise RecordFileError(f"{path}: cannot read ({exc.strerror or exc})") from None


def resolve_records_path(path: Path | str) -> Path:
    """``records.jsonl`` of a run directory, or the file itself; FileNotFoundError naming the fix."""
    path = Path(path)
    if path.is_dir():
        path = path / RECORDS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path}: no records file (run `tileops bench --out DIR` first)")
    return path  # anything but a regular file is refused, with its name, when it is opened


_RECORD_FIX = "fix or remove that line, or re-run the bench for that row"


def iter_records(path: Path | str, *, span: tuple[int, int] | None = None,
                 fast_json: bool = True) -> Iterator[Record]:
    """The records of a run directory or records file, streamed (see :func:`iter_jsonl`)."""
    return iter_jsonl(resolve_records_path(path), Record, what="record", fix=_RECORD_FIX, span=span,
                      fast_json=fast_json)


@contextlib.contextmanager
def collecting_rarely() -> Iterator[None]:
    """While reading a whole run, let the cyclic garbage collector run rarely.

    Records are plain data without reference cycles, yet each full pass of the
    collector walks every live object: with a run of 100,000 records held (the
    exporter holds one) the passes took a quarter to a third of reading and
    pricing it. Inside this block the objects alive at its start (the imports)
    are out of the collector's way and the first generation is collected every
    100,000 allocations instead of 700; both are restored on the way out.
    """
    threshold, frozen = gc.get_threshold(), gc.get_freeze_count()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        if not frozen:  # someone else's frozen objects stay frozen
            gc.unfreeze()


def load_records(paths: Iterable[Path | str]) -> list[Record]:
    out: list[Record] = []
    for p in paths:
        out.extend(iter_records(p))
    return out


def parse_record(text: str, where: str = "<record>") -> Record:
    """One record from one JSON text (a worker's reply, a test)."""
    try:
        return _parse_line(Record, text)
    except _Invalid as exc:
        raise RecordFileError(f"{where}: not a valid record ({'.'.join(exc.path)}: {exc.message})") from None


def append_record(path: Path, record: Record) -> None:
    """Append one record as one whole line (one write, unless the disk cuts it short), then fsync.

    A write that fails (a full disk, a quota, an I/O error) or comes up short is
    undone: the file is cut back to where it was, so it holds whole lines only,
    and the OSError is raised. Only a crash between the write and the cut can
    leave a torn last line without its newline, which readers skip and a resumed
    run sets aside (:func:`set_aside_torn_tail`).
    """
    line = (to_json(record) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.fstat(fd).st_size
        try:
            rest = memoryview(line)
            while rest:  # a short write (a nearly full disk) goes on until the kernel says why it cannot
                written = os.write(fd, rest)
                if written <= 0:
                    raise OSError(errno.EIO, f"wrote nothing of the last {len(rest)} bytes", str(path))
                rest = rest[written:]
            os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass  # the torn tail stays; readers skip it and --resume sets it aside
            raise
    finally:
        os.close(fd)


def set_aside_torn_tail(path: Path, now: datetime | None = None) -> Path | None:
    """Move a torn last line (an interrupted write) out of a JSON Lines file, before appending to it.

    Appending after a fragment would glue the next record onto it and lose both;
    so the fragment is copied, fsync'd, to ``<file>.torn-<UTC time>`` beside the
    file, and only then cut off. Returns that file, or None when the file ends
    whole. Call it only while holding the run's lock.
    """
    tail = torn_tail(path)
    if tail is None:
        return None
    stamp = (now or utcnow()).strftime("%Y%m%dT%H%M%S.%fZ")
    aside = path.with_name(f"{path.name}.torn-{stamp}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        if os.write(fd, tail) != len(tail):
            raise OSError(errno.ENOSPC, "short write of the torn fragment", str(aside))
        os.fsync(fd)
    finally:
        os.close(fd)
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size - len(tail))
        f.flush()
        os.fsync(f.fileno())
    return aside


def write_run_info(run_dir: Path, info: RunInfo) -> None:
    """Write run.json atomically: a reader never sees half of it."""
    write_atomic(Path(run_dir) / RUN_FILE, json.dumps(to_data(info), indent=2, allow_nan=False) + "\n")


def read_run_info(run_dir: Path | str) -> RunInfo | None:
    """The run file of a run directory, or None when there is none; RecordFileError when it is bad."""
    p = Path(run_dir) / RUN_FILE
    fix = "re-run the bench, or remove the file"
    try:
        raw = read_regular(p, RUN_FILE_MAX_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:  # FileRefused, permissions
        raise RecordFileError(str(exc) if isinstance(exc, FileRefused) else
                              f"{p}: cannot read the run file ({exc.strerror or exc})") from None
    try:
        return _parse_line(RunInfo, raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise RecordFileError(f"{p}: not UTF-8 text; {fix}") from None
    except _Invalid as exc:
        raise _located(p, None, exc, "run file", fix) from None


def read_audit(run_dir: Path | str) -> list[AuditEntry]:
    """``audit.jsonl`` beside the records, when the audit ran."""
    p = Path(run_dir) / AUDIT_FILE
    if not p.exists():
        return []
    return list(iter_jsonl(p, AuditEntry, what="audit entry",
                           fix="fix or remove that line, or re-run `tileops audit`"))
