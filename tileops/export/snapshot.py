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
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from tileops.errors import TileOpsError
from tileops.profiles import Profile, ProfileChooser
from tileops.records import (RECORDS_FILE, AuditEntry, Record, RecordFileError, RunInfo, load_records,
                             read_audit, read_run_info)
from tileops.roofline import Health, Priced, health, price_all

if TYPE_CHECKING:  # the calibrate package imports torch; the exporter needs only the type
    from tileops.calibrate.results import DeviceCalibration


class ExportInputError(TileOpsError):
    """A results path the exporters cannot read; the message names the file and the fix."""


@dataclass(frozen=True)
class DeviceLabels:
    """The device a run measured, labelled as NVIDIA's dcgm-exporter labels it.

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
    def of(cls, record: Record) -> "DeviceLabels":
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
    device: DeviceLabels
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
    def succeeded(self) -> bool:
        """The run finished (a run without run.json is judged on its rows) without a physics breach."""
        return self.health.ok and self.status in ("completed", "unknown")

    @property
    def healthy(self) -> bool | None:
        """True: finished, and the physics check judged a ceiling and found no breach. False: a breach, or an
        unfinished run. None: finished without a breach, but no ceiling could be judged (no profile, no
        nominal): neither a pass nor a failure, so ``tileops_run_healthy`` is left out."""
        if not self.succeeded:
            return False
        return None if self.health.state == "not-judged" else True

    @property
    def duration_s(self) -> float:
        return max(0.0, (self.finished_at - self.started_at).total_seconds())

    def with_last_success(self, previous_s: float | None) -> "RunSnapshot":
        """This run's own success time, or the latest success a sink remembered, whichever is newer.
        A success is a run that finished without a breach, judged or not: the staleness alert asks whether
        the bench still runs; whether its formulas were judged is tileops_run_physics_check."""
        own = self.finished_at.timestamp() if self.succeeded else None
        known = [t for t in (own, previous_s, self.last_success_s) if t is not None]
        return replace(self, last_success_s=max(known) if known else None)


def resolve_run_dir(path: Path) -> Path:
    """A run directory from a directory or its ``records.jsonl``; names the fix when neither."""
    path = Path(path)
    if path.is_file() and path.name.endswith(".jsonl"):
        return path.parent
    if path.is_dir() and (path / RECORDS_FILE).exists():
        return path
    raise ExportInputError(
        f"{path}: not a run directory (no {RECORDS_FILE}); pass the folder `tileops bench --out DIR` wrote")


def build_snapshots(run_dir: Path, info: RunInfo | None, priced: Sequence[Priced], chooser: ProfileChooser,
                    audit: Sequence[AuditEntry] = (),
                    calibrations: Mapping[str, DeviceCalibration] | None = None) -> list[RunSnapshot]:
    """Every device's snapshot of one already-priced run (a run normally measures one device)."""
    by_device: dict[DeviceLabels, list[Priced]] = {}
    for p in priced:
        by_device.setdefault(DeviceLabels.of(p.record), []).append(p)
    out: list[RunSnapshot] = []
    for device, rows in by_device.items():
        recs = tuple(p.record for p in rows)
        started = info.started_at if info else min(r.started_at for r in recs)
        finished = info.finished_at if info and info.finished_at else max(r.finished_at for r in recs)
        snap = RunSnapshot(
            run_dir=run_dir, run_id=info.run_id if info else recs[0].run_id, device=device, records=recs,
            priced=tuple(rows), health=health(rows), profile=chooser(device.model), started_at=started,
            finished_at=finished, status=info.status if info else "unknown", info=info, audit=tuple(audit),
            calibration=(calibrations or {}).get(device.uuid))
        out.append(snap.with_last_success(None))
    return out


def load_run(path: Path, chooser: ProfileChooser,
             calibrations: Mapping[str, DeviceCalibration] | None = None) -> list[RunSnapshot]:
    """Every device's snapshot of one run directory (or records file) on disk, priced once.

    ``chooser`` picks each device's profile (``tileops.profiles.ProfileChooser``);
    ``calibrations``: per-device calibration results by device key (uuid, or
    ``cpu-<hostname>``), as :func:`tileops.export.calibration.device_calibrations` reads them.
    """
    path = Path(path)
    run_dir = resolve_run_dir(path)
    try:
        records = load_records([path])
        info = read_run_info(run_dir)
        audit = read_audit(run_dir)
    except (RecordFileError, FileNotFoundError) as exc:
        raise ExportInputError(str(exc)) from None
    return build_snapshots(run_dir, info, price_all(records, chooser), chooser, audit, calibrations)


def find_run_dirs(root: Path, max_depth: int = 3) -> list[Path]:
    """Run directories at or under ``root`` (``root`` itself, ``root/<run-id>``, ``root/<host>/<run-id>``).

    Hidden folders below ``root`` are not searched: the compile caches the bench keeps beside its runs
    (``.compile-cache``, thousands of files) hold no run, and a scrape must not walk them."""
    root = Path(root)
    found: list[Path] = []
    base_depth = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root):
        depth = len(Path(dirpath).parts) - base_depth
        if RECORDS_FILE in filenames:
            found.append(Path(dirpath))
        if depth >= max_depth:
            dirnames[:] = []
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    return found


def latest_per_device(snapshots: Iterable[RunSnapshot]) -> list[RunSnapshot]:
    """Each device's newest run, carrying the newest healthy run's time as its last success."""
    newest: dict[DeviceLabels, RunSnapshot] = {}
    success: dict[DeviceLabels, float] = {}
    for s in snapshots:
        if s.last_success_s is not None:
            success[s.device] = max(success.get(s.device, s.last_success_s), s.last_success_s)
        cur = newest.get(s.device)
        if cur is None or (s.started_at, s.finished_at) > (cur.started_at, cur.finished_at):
            newest[s.device] = s
    return [s.with_last_success(success.get(d)) for d, s in sorted(newest.items(), key=lambda kv: kv[0].labels())]

