"""What the exporters publish: one device's run, priced, with its health; and its latest audit.

A run directory (``tileops bench --out DIR``) holds ``records.jsonl``, ``run.json``
and, when the read-side audit was written beside it, ``audit.jsonl``. The exporters
never trust a stored verdict: they re-price the records against the device's profile
with the roofline tool, so a metric always agrees with ``tileops roofline`` on the
same files. A run is split by device (a run normally measures one), because every
series is labelled by the device it describes.

A snapshot keeps what the metrics publish, not the records: each row as a tuple
(``tileops.export.rowseries``), the run's health, its backend races, its first row's
environment and its time bounds. :class:`RunTally` gathers them one priced row at
a time and merges with the tally of a later part of the file, so a large run is
read in parallel (``tileops.report.stream.read_priced``) and never held whole.

An audit folder of its own (``tileops audit``'s default ``results/audit-<run-id>/``)
holds ``audit.jsonl`` and no records: it becomes an :class:`AuditSnapshot` of each
device its entries name. It publishes the ``tileops_audit_*`` series and nothing
else, because there is no run to report on. :func:`latest_per_device` joins a
device's newest audit to its newest run when both are known.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING
from collections.abc import Iterable, Mapping, Sequence

from tileops.errors import TileOpsError
from tileops.profiles import Profile, ProfileChooser
from tileops.records import (AUDIT_FILE, RECORDS_FILE, AuditEntry, DeviceIdentity, Environment, Record,
                             RecordFileError, RunInfo, read_audit, read_run_info)
from tileops.report.stream import read_priced
from tileops.roofline import BackendRace, Health, HealthTally, Priced, RaceTally, race_key

from .rowseries import RowSeries, from_plain, row_series, to_plain

if TYPE_CHECKING:  # the calibrate package imports torch; the exporter needs only the type
    from tileops.ledger import DeviceCalibration


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
    def of(cls, device: DeviceIdentity) -> DeviceLabels:
        """The labels of a device as records, calibrations and audit entries name it: UUID is its key."""
        return cls(hostname=device.hostname, uuid=device.key, model=device.name, kind=device.kind)

    @classmethod
    def of_audit(cls, entry: AuditEntry) -> DeviceLabels:
        """The device an audit entry names (:meth:`of`). An audit on a host without a CUDA device names none:
        its entries keep their host, with UUID and modelName empty (no device was audited, and an
        empty label is no label in Prometheus), so they never join a run of that host's CPU."""
        if entry.device is not None:
            return cls.of(entry.device)
        return cls(hostname=entry.hostname or "", uuid="", model="", kind="")

    def labels(self) -> tuple[str, str, str]:
        """Values of ``DEVICE_LABELS`` (Hostname, UUID, modelName), in that order."""
        return (self.hostname, self.uuid, self.model)


@dataclass(frozen=True)
class RunSnapshot:
    """One device's share of one run, priced; what every sink renders.

    It holds what the metrics publish, not the records: ``rows`` (one tuple per
    priced row, in run order: ``tileops.export.rowseries``),
    ``health``, ``races`` (rows run on several backends), and ``env``, the
    environment of the device's first row (what ``tileops_run_info`` reads).
    """

    run_dir: Path
    run_id: str
    device: DeviceLabels
    rows: Sequence[RowSeries]
    health: Health
    races: tuple[BackendRace, ...]
    env: Environment | None
    profile: Profile | None
    started_at: datetime
    finished_at: datetime
    status: str  # run.json's status, or "unknown" when the run file is absent
    info: RunInfo | None = None
    audit: tuple[AuditEntry, ...] = ()
    calibration: DeviceCalibration | None = None  # this device's own calibration result, when one exists
    #: Unix time of the latest successful run known for this device (:attr:`succeeded`: this one or an
    #: earlier one a sink remembered); None when none is known.
    last_success_s: float | None = None
    #: Unix time of the latest healthy run known for this device (:attr:`healthy` True: a ceiling judged, no
    #: breach), carried as ``last_success_s`` is; None when none is known.
    last_healthy_s: float | None = None

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

    @property
    def results_dir(self) -> Path:
        """The folder the snapshot was read from (what a sink's message names)."""
        return self.run_dir

    def with_last_success(self, previous_s: float | None, previous_healthy_s: float | None = None) -> RunSnapshot:
        """This run's own success time, or the latest success a sink remembered, whichever is newer; the same
        for its healthy time. A success is a run that finished without a breach, judged or not: the staleness
        alert asks whether the bench still runs. A healthy run is a success whose physics check judged a
        ceiling: the dashboard's "time since last healthy run" must not count a run nothing could be judged on."""
        end = self.finished_at.timestamp()
        return replace(self, last_success_s=_newest(end if self.succeeded else None, previous_s, self.last_success_s),
                       last_healthy_s=_newest(end if self.healthy else None, previous_healthy_s,
                                              self.last_healthy_s))


@dataclass(frozen=True)
class AuditSnapshot:
    """One device's read-side bytes audit, apart from any run: what ``tileops audit --out DIR`` wrote into
    a folder of its own, or the audit half of a run snapshot that a sink keeps in its own group.

    It invents no run: no run health, no rows, no profile; only the ``tileops_audit_*`` series.
    """

    audit_dir: Path
    device: DeviceLabels
    audit: tuple[AuditEntry, ...]
    #: When the audit finished: its newest entry's ``finished_at`` (``audit.jsonl``'s mtime when no entry
    #: carries one). Decides which audit of a device is the newest.
    finished_at: datetime

    @property
    def results_dir(self) -> Path:
        return self.audit_dir

    def with_last_success(self, previous_s: float | None, previous_healthy_s: float | None = None
                          ) -> AuditSnapshot:
        """An audit is not a run: it has no success time to carry."""
        return self


def _newest(*times: float | None) -> float | None:
    known = [t for t in times if t is not None]
    return max(known) if known else None


#: What the sinks publish: a device's run (with its audit, when joined), or its audit alone.
Snapshot = RunSnapshot | AuditSnapshot


def audit_finished_at(entries: Iterable[AuditEntry]) -> datetime | None:
    """The newest ``finished_at`` (else ``started_at``) the entries carry, or None when none does."""
    times = []
    for e in entries:
        stamp = e.finished_at or e.started_at
        if not stamp:
            continue
        try:
            t = datetime.fromisoformat(stamp)
        except ValueError:
            continue
        times.append(t if t.tzinfo else t.replace(tzinfo=timezone.utc))
    return max(times) if times else None


def resolve_run_dir(path: Path) -> Path:
    """A results folder from a directory, its ``records.jsonl`` or its ``audit.jsonl``; names the fix when none."""
    path = Path(path)
    if path.is_file() and path.name.endswith(".jsonl"):
        return path.parent
    if path.is_dir() and ((path / RECORDS_FILE).exists() or (path / AUDIT_FILE).exists()):
        return path
    raise ExportInputError(
        f"{path}: not a run directory (no {RECORDS_FILE}) nor an audit folder (no {AUDIT_FILE}); pass the folder "
        "`tileops bench --out DIR` or `tileops audit --out DIR` wrote")


def _is_audit_only(directory: Path) -> bool:
    """A folder holding an audit and no records."""
    return not (directory / RECORDS_FILE).exists() and (directory / AUDIT_FILE).exists()


class DeviceTally:
    """One device's rows, counted as they go by: what its :class:`RunSnapshot` holds (mergeable).

    The backend races are decided from the rows once all are in (:meth:`races`): gathering them row by row
    in the workers and sending them back cost more than the rest of the tally, for races a run on one
    backend does not have."""

    __slots__ = ("device", "run_id", "env", "rows", "race_devices", "health", "started", "finished")

    def __init__(self, device: DeviceLabels, first: Record) -> None:
        self.device = device
        self.run_id = first.run_id
        self.env = first.env  # the first row's: tileops_run_info's versions
        self.rows: list[RowSeries] = []
        #: (index of the first row, the race key's device part) each time it changes; one entry unless
        #: the device's records disagree on uuid or name in a way its labels do not show
        self.race_devices: list[tuple[int, str]] = []
        self.health = HealthTally()
        self.started = first.started_at
        self.finished = first.finished_at

    def add(self, p: Priced, race_device: str) -> None:
        r = p.record
        rows = self.rows
        if not self.race_devices or self.race_devices[-1][1] != race_device:
            self.race_devices.append((len(rows), race_device))
        rows.append(row_series(p))
        self.health.add(p)
        if r.started_at < self.started:
            self.started = r.started_at
        if r.finished_at > self.finished:
            self.finished = r.finished_at

    def merge(self, later: DeviceTally) -> None:
        """Add the same device's rows from a later part of the run."""
        offset = len(self.rows)
        for start, race_device in later.race_devices:
            if not self.race_devices or self.race_devices[-1][1] != race_device:
                self.race_devices.append((start + offset, race_device))
        self.rows += later.rows
        self.health.merge(later.health)
        self.started = min(self.started, later.started)
        self.finished = max(self.finished, later.finished)

    def __getstate__(self) -> dict:  # sent back from a worker: the rows as plain tuples (they pickle faster)
        return {**{k: getattr(self, k) for k in self.__slots__ if k != "rows"}, "rows": to_plain(self.rows)}

    def __setstate__(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, from_plain(v) if k == "rows" else v)

    def races(self) -> tuple[BackendRace, ...]:
        """Every row run on more than one backend (``tileops.roofline.RaceTally`` over the rows whose race key
        repeats), in the order the rows first appear."""
        rows = self.rows
        ends = [start for start, _ in self.race_devices[1:]] + [len(rows)]
        keys = [(device, *row.key[:3]) for (start, device), end in zip(self.race_devices, ends)
                for row in rows[start:end]]
        seen: set[tuple] = set()
        repeated: set[tuple] = set()
        for key in keys:
            if key in seen:
                repeated.add(key)
            seen.add(key)
        tally = RaceTally()
        if repeated:
            for key, row in zip(keys, rows):
                if key in repeated:
                    tally.add(key, row.key[3], row.sol_ratio)  # its backend
        return tuple(tally.races().values())


class RunTally:
    """A sink of priced rows (``read_priced``'s ``add``/``merge``): each device's :class:`DeviceTally`, in the
    order the devices first appear in the run."""

    __slots__ = ("devices", "_of")

    def __init__(self) -> None:
        self.devices: dict[DeviceLabels, DeviceTally] = {}
        #: a row's device and race device by its identity: DeviceLabels and race_key built once per device
        self._of: dict[DeviceIdentity, tuple[DeviceTally, str]] = {}

    def add(self, p: Priced) -> None:
        key = p.record.env.device
        hit = self._of.get(key)
        if hit is None:
            device = DeviceLabels.of(key)
            tally = self.devices.get(device)
            if tally is None:
                tally = self.devices[device] = DeviceTally(device, p.record)
            hit = self._of[key] = (tally, race_key(p.record)[0])
        hit[0].add(p, hit[1])

    def merge(self, later: RunTally) -> None:
        """Add the rows of a later part of the run (the same as adding them here one by one)."""
        for device, theirs in later.devices.items():
            mine = self.devices.get(device)
            if mine is None:
                self.devices[device] = theirs
            else:
                mine.merge(theirs)
        self._of.clear()

    def __getstate__(self) -> dict:  # sent back from a worker: the lookup cache stays behind
        return {"devices": self.devices}

    def __setstate__(self, state: dict) -> None:
        self.devices = state["devices"]
        self._of = {}

    def snapshots(self, run_dir: Path, info: RunInfo | None, chooser: ProfileChooser,
                  audit: Sequence[AuditEntry] = (),
                  calibrations: Mapping[str, DeviceCalibration] | None = None) -> list[RunSnapshot]:
        """Every device's snapshot: run.json's id, status and times where it has them, else the rows'."""
        out: list[RunSnapshot] = []
        for device, t in self.devices.items():
            snap = RunSnapshot(
                run_dir=run_dir, run_id=info.run_id if info else t.run_id, device=device, rows=t.rows,
                health=t.health.health(), races=t.races(), env=t.env,
                profile=chooser(device.model, device.uuid),
                started_at=info.started_at if info else t.started,
                finished_at=info.finished_at if info and info.finished_at else t.finished,
                status=info.status if info else "unknown", info=info, audit=tuple(audit),
                calibration=(calibrations or {}).get(device.uuid))
            out.append(snap.with_last_success(None))
        return out


def build_snapshots(run_dir: Path, info: RunInfo | None, priced: Iterable[Priced], chooser: ProfileChooser,
                    audit: Sequence[AuditEntry] = (),
                    calibrations: Mapping[str, DeviceCalibration] | None = None) -> list[RunSnapshot]:
    """Every device's snapshot of one already-priced run (a run normally measures one device)."""
    tally = RunTally()
    for p in priced:
        tally.add(p)
    return tally.snapshots(run_dir, info, chooser, audit, calibrations)


def load_run(path: Path, chooser: ProfileChooser, calibrations: Mapping[str, DeviceCalibration] | None = None,
             *, jobs: int = 1) -> list[RunSnapshot]:
    """Every device's snapshot of one run directory (or records file) on disk, priced once, row by row.

    ``chooser`` picks each device's profile (``tileops.profiles.ProfileChooser``);
    ``calibrations``: per-device calibration results by device key (uuid, or
    ``cpu-<hostname>``), as :func:`tileops.export.calibration.device_calibrations` reads them.
    ``jobs`` > 1 reads a large records file in that many processes (forked: pass it
    from a single-threaded program such as ``tileops export``, not from a server's threads).
    A bad line anywhere raises :class:`ExportInputError` naming its file and line.
    """
    path = Path(path)
    run_dir = resolve_run_dir(path)
    try:
        (tally,) = read_priced([path], chooser, lambda: [RunTally()], jobs=jobs)
        info = read_run_info(run_dir)
        audit = read_audit(run_dir)
    except (RecordFileError, FileNotFoundError) as exc:
        raise ExportInputError(str(exc)) from None
    return tally.snapshots(run_dir, info, chooser, audit, calibrations)


def load_audit(path: Path) -> list[AuditSnapshot]:
    """Each device's snapshot of an audit folder that holds no run (or of its ``audit.jsonl``)."""
    path = Path(path)
    audit_dir = path.parent if path.is_file() else path
    try:
        entries = read_audit(audit_dir)
        mtime = datetime.fromtimestamp((audit_dir / AUDIT_FILE).stat().st_mtime, timezone.utc)
    except (RecordFileError, OSError) as exc:
        raise ExportInputError(str(exc)) from None
    by_device: dict[DeviceLabels, list[AuditEntry]] = {}
    for e in entries:
        by_device.setdefault(DeviceLabels.of_audit(e), []).append(e)
    return [AuditSnapshot(audit_dir=audit_dir, device=device, audit=tuple(rows),
                          finished_at=audit_finished_at(rows) or mtime)
            for device, rows in by_device.items()]


def load_results(path: Path, chooser: ProfileChooser, calibrations: Mapping[str, DeviceCalibration] | None = None,
                 *, jobs: int = 1) -> list[Snapshot]:
    """What one results path holds: a run's snapshots (:func:`load_run`, read in ``jobs`` processes), or an audit
    folder's (:func:`load_audit`)."""
    path = Path(path)
    resolve_run_dir(path)  # the located error when it is neither
    if path.is_file() and path.name == AUDIT_FILE:
        path = path.parent  # an audit.jsonl stands for its folder: the run beside it, or the audit alone
    if path.is_dir() and _is_audit_only(path):
        return list(load_audit(path))
    return list(load_run(path, chooser, calibrations, jobs=jobs))


def find_run_dirs(root: Path, max_depth: int = 3) -> list[Path]:
    """Results folders at or under ``root`` (``root`` itself, ``root/<run-id>``, ``root/<host>/<run-id>``):
    run directories, and audit folders of their own (``audit-<run-id>``).

    Hidden folders below ``root`` are not searched: the compile caches the bench keeps beside its runs
    (``.compile-cache``, thousands of files) hold no run, and a scrape must not walk them."""
    root = Path(root)
    found: list[Path] = []
    base_depth = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root):
        depth = len(Path(dirpath).parts) - base_depth
        if RECORDS_FILE in filenames or AUDIT_FILE in filenames:
            found.append(Path(dirpath))
        if depth >= max_depth:
            dirnames[:] = []
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    return found


def _run_audit_time(s: RunSnapshot) -> datetime:
    """When a run's own audit (beside its records) finished; the run's end when its entries do not say."""
    return audit_finished_at(s.audit) or s.finished_at


def latest_per_device(snapshots: Iterable[Snapshot]) -> list[Snapshot]:
    """Each device's newest run, carrying the newest successful (and healthy) run's time, and joined
    with the device's newest audit: an audit folder of its own replaces the run's own ``audit.jsonl``
    when it finished later. A device with an audit and no run is published as its :class:`AuditSnapshot`.
    """
    newest: dict[DeviceLabels, RunSnapshot] = {}
    success: dict[DeviceLabels, float] = {}
    healthy: dict[DeviceLabels, float] = {}
    audits: dict[tuple[str, str, str], AuditSnapshot] = {}
    for s in snapshots:
        if isinstance(s, AuditSnapshot):
            key = s.device.labels()
            if key not in audits or s.finished_at > audits[key].finished_at:
                audits[key] = s
            continue
        if s.last_success_s is not None:
            success[s.device] = max(success.get(s.device, s.last_success_s), s.last_success_s)
        if s.last_healthy_s is not None:
            healthy[s.device] = max(healthy.get(s.device, s.last_healthy_s), s.last_healthy_s)
        cur = newest.get(s.device)
        if cur is None or (s.started_at, s.finished_at) > (cur.started_at, cur.finished_at):
            newest[s.device] = s
    out: list[Snapshot] = []
    for d, s in newest.items():
        a = audits.pop(d.labels(), None)
        if a is not None and (not s.audit or a.finished_at > _run_audit_time(s)):
            s = replace(s, audit=a.audit)
        out.append(s.with_last_success(success.get(d), healthy.get(d)))
    out += audits.values()  # devices audited but never benched (here)
    return sorted(out, key=lambda s: (s.device.labels(), isinstance(s, AuditSnapshot)))


def split_audit(snapshot: Snapshot) -> list[Snapshot]:
    """A snapshot as the push and textfile sinks send it: the run without its audit, then the audit alone.

    Each goes to its own Pushgateway group or textfile, so a bench run that was not audited never erases
    the device's audit verdicts, and an audit exported on its own never erases the device's run.
    """
    if isinstance(snapshot, AuditSnapshot) or not snapshot.audit:
        return [snapshot]
    return [replace(snapshot, audit=()),
            AuditSnapshot(audit_dir=snapshot.run_dir, device=snapshot.device, audit=snapshot.audit,
                          finished_at=_run_audit_time(snapshot))]

