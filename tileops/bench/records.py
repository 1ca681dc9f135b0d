"""Benchmark records (§5.2): one JSON object per (op, workload row, dtype, backend).

Records carry raw timing and the (flops, bytes) the op's generated evaluator
returned, so the roofline tool (M5) and every other consumer re-analyse them
without instantiating an op. Errors are records too. Files are JSON Lines,
appended one whole line at a time and fsync'd, so an interrupted run leaves a
valid file.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tileops.fsutil import write_atomic

SCHEMA_VERSION = 1
RECORDS_FILE = "records.jsonl"
RUN_FILE = "run.json"

TimerKind = Literal["cupti", "cuda-events", "cpu-wall"]
Status = Literal["ok", "error", "skipped"]


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Timing(BaseModel):
    """Device-busy time statistics over the timed repetitions, in seconds."""

    model_config = ConfigDict(extra="forbid")
    timer: TimerKind
    median_s: float = Field(gt=0)
    min_s: float = Field(gt=0)
    mean_s: float = Field(gt=0)
    p10_s: float = Field(gt=0)
    p90_s: float = Field(gt=0)
    n: int = Field(ge=1)
    rel_noise: float = Field(ge=0, description="relative standard deviation of the samples")
    warmup: int = Field(ge=0)
    total_s: float = Field(ge=0, description="wall time spent timing this row")
    stop_reason: str = Field(description="median precision reached | time cap | sample cap")
    excluded_copies_s: float = Field(0.0, ge=0, description="device copies excluded from busy time (§1.2 actual_time)")
    fallback_reason: str | None = Field(
        None, description="why a GPU row was timed with CUDA events instead of CUPTI (None: it was not, "
                          "or the run asked for CUDA events); says what to fix")

    @property
    def actual_time_s(self) -> float:
        """§1.2 actual_time: device-busy time plus any device copies excluded from it."""
        return self.median_s + self.excluded_copies_s


class ErrorInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["exception", "crash", "timeout", "oom", "unsupported", "cuda"]
    message: str
    traceback: str | None = None


class Environment(BaseModel):
    """Where and with what a record was measured."""

    model_config = ConfigDict(extra="forbid")
    device_kind: Literal["cpu", "cuda"]
    device_name: str
    device_uuid: str | None = None
    driver: str | None = None
    cuda: str | None = None
    cpu_model: str | None = None
    threads: int | None = None
    clocks_before: dict[str, Any] | None = None
    clocks_after: dict[str, Any] | None = None
    torch_version: str
    tileops_version: str
    git_revision: str | None = None
    hostname: str
    run_id: str


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: int = SCHEMA_VERSION
    run_id: str
    op: str
    family: str
    label: str
    dtype: str  # the dtype case's name (see tileops.manifest.spec.dtype_case_name)
    backend: str
    params: dict[str, Any] = Field(default_factory=dict)
    shapes: dict[str, list[int]] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)
    status: Status
    error: ErrorInfo | None = None
    skip_reason: str | None = None
    timing: Timing | None = None
    flops: int | None = Field(None, ge=0)
    bytes: int | None = Field(None, ge=0)
    read_bytes: int | None = Field(None, ge=0)
    roof_key: str | None = None
    data_terms: dict[str, Any] = Field(default_factory=dict)
    env: Environment
    started_at: datetime
    finished_at: datetime

    @property
    def key(self) -> tuple[str, str, str, str]:
        """Identity of a row across runs: (op, label, dtype, backend)."""
        return (self.op, self.label, self.dtype, self.backend)


class RunInfo(BaseModel):
    """The run file: a run's start, end and exit status."""

    model_config = ConfigDict(extra="forbid")
    run_id: str
    started_at: datetime
    finished_at: datetime | None = None
    status: Literal["running", "completed", "interrupted", "failed"] = "running"
    exit_code: int | None = None
    argv: list[str] = Field(default_factory=list)
    selection: dict[str, Any] = Field(default_factory=dict)
    rows_total: int = 0
    rows_ok: int = 0
    rows_error: int = 0
    rows_skipped: int = 0
    health: dict[str, Any] = Field(default_factory=dict)


class RecordFileError(ValueError):
    """A records file has a line that is not a valid record; names the file and line."""


def append_record(path: Path, record: Record) -> None:
    """Append one record as one line, flushed and fsync'd: a crash never leaves half a line."""
    line = record.model_dump_json() + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def iter_records(path: Path, *, strict: bool = True) -> Iterator[Record]:
    """Records of one JSON Lines file (or of ``records.jsonl`` in a run directory).

    A torn last line (a run killed mid-write on a filesystem without atomic
    appends) is skipped; any other bad line raises RecordFileError naming it.
    """
    path = resolve_records_path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield Record.model_validate_json(line)
        except ValidationError as exc:
            if i == len(lines) and not strict:
                return
            first = exc.errors()[0]
            loc = ".".join(str(x) for x in first.get("loc", ()))
            raise RecordFileError(
                f"{path}:{i}: not a valid record ({loc}: {first.get('msg')}); "
                "fix or remove that line, or re-run the bench for it") from None


def load_records(paths: Iterable[Path]) -> list[Record]:
    out: list[Record] = []
    for p in paths:
        out.extend(iter_records(Path(p), strict=False))
    return out


def resolve_records_path(path: Path) -> Path:
    path = Path(path)
    if path.is_dir():
        path = path / RECORDS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path}: no records file (run `tileops bench --out DIR` first)")
    return path


def write_run_info(run_dir: Path, info: RunInfo) -> None:
    """Write run.json atomically: a reader never sees half of it."""
    write_atomic(run_dir / RUN_FILE, json.dumps(info.model_dump(mode="json"), indent=2) + "\n")


def read_run_info(run_dir: Path) -> RunInfo | None:
    p = Path(run_dir) / RUN_FILE
    if not p.exists():
        return None
    return RunInfo.model_validate_json(p.read_text(encoding="utf-8"))
