"""Each device's calibration on disk: ``<store>/devices/<key>.yaml`` (the newest), its history, and
whether it is fresh enough to stand in for a new one."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from tileops.durations import format_age
from tileops import fsutil
from tileops.fsutil import read_regular, unlink, unwritable_dir, unwritable_file, write_atomic
from tileops.ledger.model import RESULT_MAX_BYTES, RESULTS_SCHEMA, DeviceCalibration, check_device_key
from tileops.profiles import ProfileError, newer_schema, store_dir
from tileops.yamlfile import YamlError, read_yaml, refuse_duplicates

# --------------------------------------------------------------------------- per-device store


#: Results kept per device in ``devices/history/<device key>/``: enough to see a trend, bounded so a
#: nightly calibration never fills the volume.
HISTORY_KEEP = 20


def devices_dir(store: Path | None = None) -> Path:
    return (store or store_dir()) / "devices"


def history_dir(device_key: str, store: Path | None = None) -> Path:
    """``<store>/devices/history/<device key>/``: one ``<run id>.yaml`` per calibration of that device."""
    return devices_dir(store) / "history" / device_key


def _dump(run: DeviceCalibration) -> str:
    return yaml.safe_dump(run.model_dump(mode="json"), sort_keys=False)


def write_device_result(run: DeviceCalibration, store: Path | None = None, *, path: Path | None = None,
                        force: bool = False) -> Path:
    """Write one device's raw result as YAML (atomically) to ``<store>/devices/<uuid>.yaml``, the newest, and
    keep it in the device's history beside the earlier ones (the newest ``HISTORY_KEEP``). In a store written
    before history existed, the current file is copied into the history first, so its result becomes the
    previous one. ``path``: write only there (a child process's raw result).

    A current file this tileops cannot read, or may not write, is never replaced unsaid: ProfileError naming it
    (:func:`rewrite_problem`), unless ``force`` (the person's ``--force``) for an unreadable one, which is then
    moved aside, byte for byte, to ``<key>.yaml.unreadable-<UTC time>``."""
    if path is not None:
        write_atomic(path, _dump(run))
        return path
    target = devices_dir(store) / f"{check_device_key(run.device_key, 'device calibration result')}.yaml"
    hist = history_dir(run.device_key, store)
    problem = rewrite_problem(run.device_key, store, force=force)
    if problem is not None:
        raise problem
    if target.exists():
        try:
            old = read_device_result(target)
        except ProfileError:  # --force: kept aside, not replaced
            old = None
            fsutil.replace(target, target.with_name(f"{target.name}.unreadable-{_stamp()}"))
        if old is not None and not (hist / f"{old.run_id}.yaml").exists():
            write_atomic(hist / f"{old.run_id}.yaml", read_regular(target, RESULT_MAX_BYTES))
    write_atomic(hist / f"{run.run_id}.yaml", _dump(run))
    write_atomic(target, _dump(run))
    for stale in load_device_history(run.device_key, store)[HISTORY_KEEP:]:
        unlink(hist / f"{stale.run_id}.yaml")
    return target


def _stamp() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


#: What a person is told to do about a stored result a calibration would replace but cannot read.
UNREADABLE_FIX = ("move it away (or upgrade tileops, if a newer one wrote it), or calibrate with --force to keep it "
                  "aside as <file>.unreadable-<time> and store the new result")


def rewrite_problem(key: str, store: Path | None = None, *, force: bool = False) -> ProfileError | None:
    """Why a calibration of device ``key`` may not be stored (None: it may): a folder it writes, or the device's
    current result, is not writable by this user; or the current result does not read as one (a newer schema,
    cut short, a field of the wrong type) and ``force`` was not given. Asked before anything is measured, and
    again before the write: a store this tileops cannot read or may not write is never replaced unsaid."""
    current = devices_dir(store) / f"{key}.yaml"
    for why in (unwritable_file(current), unwritable_dir(devices_dir(store)), unwritable_dir(history_dir(key, store))):
        if why is not None:
            return ProfileError(f"cannot store a calibration of {key}: {why}; fix the permissions (chmod, chown), "
                                "or give a profile store of your own (--profile-dir, TILEOPS_PROFILE_DIR); nothing "
                                "was written", file=current, field="permissions",
                                fix="fix the permissions, or give another --profile-dir")
    if force or not current.is_file():
        return None
    try:
        read_device_result(current)
    except ProfileError as exc:
        return ProfileError(f"{exc}; a calibration would replace it, so nothing is measured or written: "
                            f"{UNREADABLE_FIX}", file=current, field=exc.field, fix=UNREADABLE_FIX)
    return None


def history_problems(key: str, store: Path | None = None) -> list[ProfileError]:
    """The files of device ``key``'s history that do not read as results (:func:`load_device_history` leaves
    them out): named to the person, never rewritten or removed (a calibration adds a file beside them)."""
    d = history_dir(key, store)
    out: list[ProfileError] = []
    for p in sorted(d.glob("*.yaml")) if d.is_dir() else []:
        try:
            read_device_result(p)
        except ProfileError as exc:
            out.append(exc)
    return out


def read_device_result(path: Path) -> DeviceCalibration:
    """One stored result, read by the package's YAML reader: a regular file of bounded size, aliases bounded
    (its summary expands the tree), every key once. ProfileError naming the file otherwise."""
    fix = "re-run `tileops calibrate` on that device, or remove the file"
    try:
        data = refuse_duplicates(read_yaml(path, RESULT_MAX_BYTES, whole=True), path)
    except YamlError as exc:
        raise ProfileError(f"not a device calibration result: {exc}", file=path, fix=fix) from None
    newer = newer_schema(data, RESULTS_SCHEMA, path, "device calibration result")
    if newer is not None:
        raise newer
    try:
        return DeviceCalibration.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise ProfileError(f"{path}: not a device calibration result: field {where}: {err['msg']} (fix: {fix}; "
                           f"{len(exc.errors())} problem(s) in all)", file=path, field=where, fix=fix) from None


def load_device_results(store: Path | None = None) -> list[DeviceCalibration]:
    """Every per-device result in the store (the fleet's per-device calibration view)."""
    d = devices_dir(store)
    return [read_device_result(p) for p in sorted(d.glob("*.yaml"))] if d.is_dir() else []


# --------------------------------------------------------------------------- staleness (--max-age)

#: A stored result may finish this far in the future (clocks of a host drift) and still count.
CLOCK_SLACK = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class Freshness:
    """Whether a device's stored calibration can stand in for a new one, and why (said to the user)."""

    key: str
    fresh: bool
    reason: str
    result: DeviceCalibration | None = None


def stored_freshness(key: str, max_age: dt.timedelta, *, store: Path | None = None, quick: bool = False,
                     now: dt.datetime | None = None) -> Freshness:
    """Is ``<store>/devices/<key>.yaml`` newer than ``max_age``?

    Fresh means: the file reads as a calibration result, it finished less than
    ``max_age`` ago, and it is no rougher than what is asked for (a quick result
    never stands in for a full calibration; a full one does for a quick). Anything
    else is stale, with the reason, and the device is measured again.
    """
    path = devices_dir(store) / f"{key}.yaml"
    if not path.is_file():
        return Freshness(key, False, f"no stored calibration ({path})")
    try:
        stored = read_device_result(path)
    except ProfileError as exc:
        return Freshness(key, False, f"the stored calibration is unreadable: {exc}")
    now = now or dt.datetime.now(dt.timezone.utc)
    finished = stored.finished_at if stored.finished_at.tzinfo else stored.finished_at.replace(tzinfo=dt.timezone.utc)
    age = now - finished
    when = finished.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    how = "quick" if stored.quick else "full"
    if stored.quick and not quick:
        return Freshness(key, False, f"the stored calibration ({when}) is a quick one and a full one is asked for",
                         stored)
    if age < -CLOCK_SLACK:
        return Freshness(key, False, f"the stored calibration finished in the future ({when}): the clock moved",
                         stored)
    ago = f"calibrated {format_age(age)} ago"
    if age > max_age:
        return Freshness(key, False, f"{ago} ({when}), over the maximum age {format_age(max_age)}", stored)
    return Freshness(key, True, f"{ago} ({when}, {how}), under the maximum age {format_age(max_age)}", stored)


def load_device_history(device_key: str, store: Path | None = None) -> list[DeviceCalibration]:
    """A device's kept calibrations, newest first; an unreadable file is skipped (the rest still tell)."""
    d = history_dir(device_key, store)
    runs: list[DeviceCalibration] = []
    for p in sorted(d.glob("*.yaml")) if d.is_dir() else []:
        try:
            runs.append(read_device_result(p))
        except ProfileError:
            continue
    return sorted(runs, key=lambda r: r.finished_at, reverse=True)


def with_previous(run: DeviceCalibration, history: list[DeviceCalibration]) -> DeviceCalibration:
    """``run`` knowing its predecessor: the newest result in ``history`` of the same mode (quick or full)
    that finished before it. Quick and full runs measure different sizes, so only like is compared."""
    earlier = [h for h in history if h.run_id != run.run_id and h.quick == run.quick
               and h.finished_at < run.finished_at]
    out = run.model_copy()
    out._previous = max(earlier, key=lambda h: h.finished_at) if earlier else None
    return out




def is_stored(run: DeviceCalibration, store: Path | None = None) -> bool:
    """``run`` is its device's stored result (a --max-age skip handed back unmeasured), not a new one."""
    path = devices_dir(store) / f"{run.device_key}.yaml"
    try:
        return path.is_file() and read_device_result(path).run_id == run.run_id
    except ProfileError:
        return False
