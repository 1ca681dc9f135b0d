"""One audited row as ``audit.jsonl`` stores it: a standard-library record, JSON-simple.

``tileops export`` reads these lines (``tileops.export.snapshot.AuditEntry``:
``op``, ``label``, ``dtype``, ``backend``, ``verdict``, ``measured_read_bytes``,
``expected_read_bytes``; other fields are ignored), so those names never
change; fields are only ever added.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

AUDIT_FILE = "audit.jsonl"

#: Every verdict, worst first. PASS: measured reads within tolerance of the declared read half.
VERDICTS: tuple[str, ...] = ("ERROR", "FAIL", "WARN", "EXEMPT", "NO-VERDICT", "SKIPPED", "PASS")
#: Verdicts that make ``tileops audit`` exit 1.
FAILING: frozenset[str] = frozenset({"FAIL", "ERROR"})

#: The premises every reading rests on (§4.5); each verdict line states them.
PREMISE = ("cold caches on each kernel replay (ncu --cache-control all --replay-mode kernel); "
           "read side only: DRAM writes are measured and reported, never judged")


@dataclass
class AuditEntry:
    """The verdict on one (op, row, dtype case, backend), with what it rests on."""

    op: str
    label: str
    dtype: str  # the dtype case's name, as records name it ("bfloat16", "ids=int64,weight=bfloat16")
    backend: str
    verdict: str
    reason: str  # why this verdict: the numbers and limits, the exemption, or the error and its fix
    premise: str = PREMISE
    expected_read_bytes: int | None = None  # Op.eval_roofline_read_bytes() of the measured call
    measured_read_bytes: int | None = None  # sum of dram__bytes_read.sum over every kernel of the call
    measured_write_bytes: int | None = None  # sum of dram__bytes_write.sum (reported, never judged)
    fail_below_bytes: int | None = None  # a reading under this is a shortfall (FAIL, or EXEMPT inside a `when`)
    warn_above_bytes: int | None = None  # a reading over this is WARN
    kernels: int | None = None  # kernels ncu profiled inside the call's NVTX range
    duration_ns: float | None = None  # sum of gpu__time_duration.sum (under the profiler: not a timing)
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
    started_at: str | None = None
    finished_at: str | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.op, self.label, self.dtype, self.backend)

    @property
    def read_ratio(self) -> float | None:
        """Measured / declared reads; None when either is missing or nothing is declared."""
        if self.measured_read_bytes is None or not self.expected_read_bytes:
            return None
        return self.measured_read_bytes / self.expected_read_bytes

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "read_ratio": self.read_ratio}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AuditEntry":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def start_file(out_dir: Path) -> Path:
    """An empty ``audit.jsonl`` in ``out_dir``; a previous one is kept as ``audit.jsonl.prev``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / AUDIT_FILE
    if path.exists() and path.stat().st_size:
        os.replace(path, out_dir / (AUDIT_FILE + ".prev"))
    path.write_text("", encoding="utf-8")
    return path


def append_entry(path: Path, entry: AuditEntry) -> None:
    """Append one entry as one line, fsync'd, so a crash later in the run loses nothing judged."""
    line = json.dumps(entry.to_dict(), sort_keys=False, default=str) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def read_entries(path: Path) -> list[AuditEntry]:
    """The entries of an ``audit.jsonl`` (or of the one in a folder)."""
    path = path / AUDIT_FILE if path.is_dir() else path
    return [AuditEntry.from_dict(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def counts(entries: Iterable[AuditEntry]) -> dict[str, int]:
    """How many rows got each verdict, worst first, verdicts with no row left out."""
    out = {v: 0 for v in VERDICTS}
    for e in entries:
        out[e.verdict] = out.get(e.verdict, 0) + 1
    return {k: n for k, n in out.items() if n}
