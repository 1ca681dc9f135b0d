"""What the exporters publish: one device's run, priced, with its health.

A run directory (``tileops bench --out DIR``) holds ``records.jsonl``, ``run.json``
and, when the read-side audit ran, ``audit.jsonl``. The exporters never trust a
stored verdict: they re-price the records against the device's profile with the
roofline tool, so a metric always agrees with ``tileops roofline`` on the same
files. A run is split by device (a run normally measures one), because every
series is labelled by the device it describes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

from tileops.bench.records import (RECORDS_FILE, RUN_FILE, Record, RecordFileError, RunInfo, load_records,
                                   read_run_info)
from tileops.errors import TileOpsError
from tileops.profiles import Profile, find_profile, load_profiles, select_profile
from tileops.roofline import Health, Priced, health, price_all

if TYPE_CHECKING:  # the calibrate package imports torch; the exporter needs only the type
    from tileops.calibrate.results import DeviceCalibration

AUDIT_FILE = "audit.jsonl"

# PASS: measured reads within tolerance of the declared read half (tileops.audit.verdict).
AuditVerdict = Literal["PASS", "FAIL", "WARN", "EXEMPT", "SKIPPED", "ERROR", "NO-VERDICT"]
AUDIT_VERDICTS: tuple[str, ...] = ("PASS", "FAIL", "WARN", "EXEMPT", "SKIPPED", "ERROR", "NO-VERDICT")


class ExportInputError(TileOpsError):
    """A results path the exporters cannot read; the message names the file and the fix."""


class AuditEntry(BaseModel):
    """One audited row as the exporter reads it from ``audit.jsonl``.

    Only the fields the metrics need; anything else the audit writes is ignored,
    so the audit's own schema can grow without breaking the exporter.
    """

    model_config = ConfigDict(extra="ignore")
    op: str
    label: str
    dtype: str
    backend: str
    verdict: AuditVerdict
    measured_read_bytes: float | None = None
    expected_read_bytes: float | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.op, self.label, self.dtype, self.backend)

    @property
    def read_bytes_ratio(self) -> float | None:
        if self.measured_read_bytes is None or not self.expected_read_bytes:
            return None
        return self.measured_read_bytes / self.expected_read_bytes


@dataclass(frozen=True)
class Device:
    """The device a run measured, named as NVIDIA's dcgm-exporter names it.

    dcgm-exporter labels its series ``Hostname``, ``UUID`` and ``modelName``; ours
    carry the same names and values so a PromQL join needs no relabelling. A CPU
    has no UUID: it gets ``cpu-<hostname>``, stable across runs on that host and
    the same key ``tileops calibrate`` files that CPU's calibration under.
    """

    hostname: str
    uuid: str
    model: str
    kind: str

    @classmethod
    def of(cls, record: Record) -> "Device":
        env = record.env
        uuid = env.device_uuid or f"cpu-{env.hostname}"
        return cls(hostname=env.hostname, uuid=uuid, model=env.device_name, kind=env.device_kind)

    def labels(self) -> tuple[str, str, str]:
        """Values of ``DEVICE_LABELS`` (Hostname, UUID, modelName), in that order."""
        return (self.hostname, self.uuid, self.model)


@dataclass(frozen=True)
class RunSnapshot:
    """One device's share of one run, priced; what every sink renders."""

    run_dir: Path
    run_id: str
    device: Device
    records: tuple[Record, ...]
    priced: tuple[Priced, ...]
    health: Health
    profile: Profile | None
    started_at: datetime
    finished_at: datetime
    status: str  # run.json's status, or "unknown" when the run file is absent
    info: RunInfo | None = None
    audit: tuple[AuditEntry, ...] = ()
    calibration: DeviceCalibration | None = None  # this device's own calibration result, when one exists
    #: Unix time of the latest healthy run known for this device (this one or an
    #: earlier one a sink remembered); None when none is known.
    last_success_s: float | None = None

    @property
    def healthy(self) -> bool:
        """No physics breach, and the run finished (a run without run.json is judged on its rows)."""
        return self.health.ok and self.status in ("completed", "unknown")

    @property
    def duration_s(self) -> float:
        return max(0.0, (self.finished_at - self.started_at).total_seconds())

    def with_last_success(self, previous_s: float | None) -> "RunSnapshot":
        """This run's own success time, or the latest success a sink remembered, whichever is newer."""
        own = self.finished_at.timestamp() if self.healthy else None
        known = [t for t in (own, previous_s, self.last_success_s) if t is not None]
        return replace(self, last_success_s=max(known) if known else None)


ProfileSource = Profile | Sequence[Profile] | None


def resolve_run_dir(path: Path) -> Path:
    """A run directory from a directory or its ``records.jsonl``; names the fix when neither."""
    path = Path(path)
    if path.is_file() and path.name.endswith(".jsonl"):
        return path.parent
    if path.is_dir() and (path / RECORDS_FILE).exists():
        return path
    raise ExportInputError(
        f"{path}: not a run directory (no {RECORDS_FILE}); pass the folder `tileops bench --out DIR` wrote")


def _records_path(path: Path) -> Path:
    return path if path.is_file() else path / RECORDS_FILE


def read_audit(run_dir: Path) -> list[AuditEntry]:
    """``audit.jsonl`` beside the records, when the audit ran; a bad line names the file and line."""
    p = Path(run_dir) / AUDIT_FILE
    if not p.exists():
        return []
    out: list[AuditEntry] = []
    for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(AuditEntry.model_validate_json(line))
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(x) for x in first.get("loc", ()))
            raise ExportInputError(f"{p}:{i}: not a valid audit entry ({loc}: {first.get('msg')}); "
                                   "fix or remove that line, or re-run `tileops audit`") from None
    return out


def resolve_profiles(choice: str | Path | None = None) -> ProfileSource:
    """``--profile NAME|FILE`` as one Profile; without it every known profile (the store before shipped)."""
    return find_profile(choice) if choice else load_profiles()


def _choose(profiles: ProfileSource, device_name: str) -> Profile | None:
    if profiles is None or isinstance(profiles, Profile):
        return profiles
    return select_profile(device_name, profiles)


def load_run(path: Path, profiles: ProfileSource,
             calibrations: Mapping[str, DeviceCalibration] | None = None) -> list[RunSnapshot]:
    """Every device's snapshot of one run directory (or records file), priced.

    ``profiles``: one Profile (prices every row), a sequence (each device's is
    selected by its name, as ``tileops roofline`` does), or None (every row blank).
    ``calibrations``: per-device calibration results by device key (uuid, or
    ``cpu-<hostname>``), as :func:`tileops.export.calibration.device_calibrations` reads them.
    """
    path = Path(path)
    run_dir = resolve_run_dir(path)
    try:
        records = load_records([_records_path(path)])
    except (RecordFileError, FileNotFoundError) as exc:
        raise ExportInputError(str(exc)) from None
    try:
        info = read_run_info(run_dir)
    except ValidationError as exc:
        raise ExportInputError(f"{run_dir / RUN_FILE}: not a valid run file ({exc.errors()[0].get('msg')}); "
                               "re-run the bench or remove the file") from None
    audit = read_audit(run_dir)
    by_device: dict[Device, list[Record]] = {}
    for r in records:
        by_device.setdefault(Device.of(r), []).append(r)
    out: list[RunSnapshot] = []
    for device, recs in by_device.items():
        profile = _choose(profiles, device.model)
        priced = price_all(recs, profile)
        started = info.started_at if info else min(r.started_at for r in recs)
        finished = (info.finished_at if info and info.finished_at else max(r.finished_at for r in recs))
        snap = RunSnapshot(
            run_dir=run_dir, run_id=info.run_id if info else recs[0].run_id, device=device,
            records=tuple(recs), priced=tuple(priced), health=health(priced), profile=profile,
            started_at=started, finished_at=finished, status=info.status if info else "unknown", info=info,
            audit=tuple(audit), calibration=(calibrations or {}).get(device.uuid))
        out.append(snap.with_last_success(None))
    return out


def find_run_dirs(root: Path, max_depth: int = 3) -> list[Path]:
    """Run directories at or under ``root`` (``root`` itself, ``root/<run-id>``, ``root/<host>/<run-id>``)."""
    root = Path(root)
    found: list[Path] = []
    base_depth = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root):
        depth = len(Path(dirpath).parts) - base_depth
        if RECORDS_FILE in filenames:
            found.append(Path(dirpath))
        if depth >= max_depth:
            dirnames[:] = []
        dirnames.sort()
    return found


def latest_per_device(snapshots: Iterable[RunSnapshot]) -> list[RunSnapshot]:
    """Each device's newest run, carrying the newest healthy run's time as its last success."""
    newest: dict[Device, RunSnapshot] = {}
    success: dict[Device, float] = {}
    for s in snapshots:
        if s.last_success_s is not None:
            success[s.device] = max(success.get(s.device, s.last_success_s), s.last_success_s)
        cur = newest.get(s.device)
        if cur is None or (s.started_at, s.finished_at) > (cur.started_at, cur.finished_at):
            newest[s.device] = s
    return [s.with_last_success(success.get(d)) for d, s in sorted(newest.items(), key=lambda kv: kv[0].labels())]

