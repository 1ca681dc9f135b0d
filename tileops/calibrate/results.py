"""Raw calibration results of one device, and the profile built from them.

A calibration run measures bytes/s and FLOP/s; the profile stores fractions of
the theoretical ceilings (§5.1). Keeping the raw run per device (by uuid) lets
the fleet see a single weak device among many of one model, and lets the
model's profile be rebuilt (median over its devices) without re-measuring.
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from tileops.durations import format_age
from tileops.fsutil import read_regular, write_atomic
from tileops.profiles import MIXES, MemoryRoof, Profile, ProfileError, Provenance, Roof, store_dir
from tileops.records import Machine, RowConditions
from tileops.yamlfile import YamlError, read_yaml, refuse_duplicates

#: STREAM accounting: words each mix moves per element (reads + writes). STREAM
#: does not count the write-allocate read of a store's line, and neither does
#: the roofline metric (§1.2 counts each output as one write), so a ceiling
#: measured this way is in the same bytes the ops are priced in.
STREAM_WORDS = {"copy": 2, "triad": 3, "read": 1, "write": 1}

#: A measured fraction above this is not a ceiling problem but a wrong theoretical figure.
MAX_FRACTION = 1.5
#: A stored result is a page of YAML; anything this large is not one (and is not read into memory).
RESULT_MAX_BYTES = 2**20
#: 2: the device is described by ``machine`` (tileops.records.Machine, as in every record's environment);
#: 1 (read still): the same facts as flat fields.
RESULTS_SCHEMA = 2


class MixMeasurement(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # a measurement is a finite number
    bytes_per_s: float = Field(gt=0)
    bytes: int = Field(gt=0, description="bytes one repetition moves, STREAM counting")
    array_bytes: int = Field(gt=0)
    best_s: float = Field(gt=0)
    reps: int = Field(ge=1)
    kernel: str


class RoofMeasurement(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # a measurement is a finite number
    flops_per_s: float = Field(gt=0)
    flops: float = Field(gt=0, description="FLOPs one repetition performs")
    best_s: float = Field(gt=0)
    reps: int = Field(ge=1)
    method: str


class ClockMeasurement(BaseModel):
    """The clock a CPU's cores reached under FMA load (``tileops.calibrate.clock``): a dependent add chain,
    one add per cycle, timed on every thread the bench uses."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # a measurement is a finite number
    ghz: float = Field(gt=0, le=20, description="the highest per-thread rate: the clock the cores reached")
    per_thread_ghz: list[float] = Field(min_length=1)
    threads: int = Field(ge=1)
    load: str = Field(description="the vector load run beside the chain")
    method: str


class DeviceCalibration(BaseModel):
    """One device's raw measurements: the per-device (uuid) result of a calibration run.

    ``machine`` is the same description of the device a record's environment
    carries (``tileops.records.Machine``), so a calibration and the rows priced
    on it name the device, driver and versions the same way.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # a measurement is a finite number
    schema_version: int = RESULTS_SCHEMA
    run_id: str
    started_at: dt.datetime
    finished_at: dt.datetime
    quick: bool  # how: small sizes and few repetitions (seconds), or the full calibration
    machine: Machine  # on what: device, uuid, driver, CUDA, threads, cache, host, versions
    clocks_before: dict[str, Any] | None = None  # and in what state: clocks, temperature, power (limit)
    clocks_after: dict[str, Any] | None = None
    mixes: dict[str, MixMeasurement] = Field(default_factory=dict)
    roofs: dict[str, RoofMeasurement] = Field(default_factory=dict)
    not_measured: dict[str, str] = Field(default_factory=dict, description="roof key -> why it was not measured")
    latency_floor_s: float | None = Field(None, gt=0)
    latency_method: str | None = None
    #: A CPU's clock under FMA load (None on a GPU, and where it could not be measured: ``clock_not_measured``).
    clock: ClockMeasurement | None = None
    clock_not_measured: str | None = None
    warnings: list[str] = Field(default_factory=list)
    #: What surrounded the measurement, as the bench's sensors read a row (``tileops.bench.sensors``): the SM
    #: clock's range, clock-event reasons, power draw and limit, temperature, energy; None in a result written
    #: before calibrations read them
    conditions: RowConditions | None = None
    #: Its power state (``RowConditions.power_state``: power-capped, thermal, ...), or why there is none
    power_state: str | None = None
    power_blank: str | None = None

    #: The device's calibration before this one, as :func:`with_previous` found it in the store's history;
    #: not part of the file.
    _previous: DeviceCalibration | None = PrivateAttr(None)

    @model_validator(mode="before")
    @classmethod
    def _schema_1(cls, data: Any) -> Any:
        """A result written before the machine description was shared (schema 1: flat fields) reads the same."""
        if not isinstance(data, dict) or "machine" in data or "name" not in data:
            return data
        flat = dict(data)
        tool = str(flat.pop("tool_version", ""))
        flat["machine"] = {
            "device_kind": flat.pop("kind", None), "device_name": flat.pop("name", None),
            "device_uuid": flat.pop("uuid", None), "device_index": flat.pop("index", None),
            "driver": flat.pop("driver", None), "cuda": flat.pop("cuda", None),
            "cpu_model": flat.pop("cpu_model", None), "threads": flat.pop("threads", None),
            "l2_bytes": flat.pop("l2_bytes", None), "hostname": flat.pop("hostname", None),
            "torch_version": flat.pop("torch_version", ""), "tileops_version": tool.removeprefix("tileops "),
        }
        flat["schema_version"] = RESULTS_SCHEMA
        return flat

    # The device's facts, read through ``machine`` (what most callers want to name).
    @property
    def kind(self) -> str:
        return self.machine.device_kind

    @property
    def name(self) -> str:
        return self.machine.device_name

    @property
    def uuid(self) -> str | None:
        return self.machine.device_uuid

    @property
    def index(self) -> int | None:
        return self.machine.device_index

    @property
    def hostname(self) -> str:
        return self.machine.hostname

    @property
    def driver(self) -> str | None:
        return self.machine.driver

    @property
    def l2_bytes(self) -> int | None:
        return self.machine.l2_bytes

    @property
    def threads(self) -> int | None:
        return self.machine.threads

    @property
    def tool_version(self) -> str:
        return f"tileops {self.machine.tileops_version}"

    @property
    def device_key(self) -> str:
        """The per-device file stem: the GPU uuid, or ``cpu-<hostname>``."""
        return self.machine.device_key

    @property
    def previous(self) -> DeviceCalibration | None:
        """This device's previous calibration of the same mode (quick or full), or None (no history read)."""
        return self._previous


#: The real forms of a device key: an NVML GPU or MIG uuid, or ``cpu-`` and a host name (at most 64
#: letters, digits, '-', '.' and '_'), so a key is always a plain file name inside the store.
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
DEVICE_KEY = re.compile(rf"(?:GPU|MIG)-{_UUID}|cpu-[A-Za-z0-9](?:[A-Za-z0-9_-]|\.(?!\.)){{0,63}}")


def check_device_key(key: str, where: str) -> str:
    """``key`` when it has a device key's real form; else a ProfileError naming ``where`` it came from."""
    if not isinstance(key, str) or not DEVICE_KEY.fullmatch(key) or key.endswith("."):
        raise ProfileError(f"{where}: {key!r} is not a device id (GPU-<uuid>, MIG-<uuid> or cpu-<hostname>)",
                           file=where, field="uuid",
                           fix="use the uuid NVML reports, or a host name of letters, digits, '.', '-' and '_'")
    return key


def new_run_id() -> str:
    return "cal-" + dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


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


def write_device_result(run: DeviceCalibration, store: Path | None = None, *, path: Path | None = None) -> Path:
    """Write one device's raw result as YAML (atomically) to ``<store>/devices/<uuid>.yaml``, the newest, and
    keep it in the device's history beside the earlier ones (the newest ``HISTORY_KEEP``). In a store written
    before history existed, the current file is copied into the history first, so its result becomes the
    previous one. ``path``: write only there (a child process's raw result)."""
    if path is not None:
        write_atomic(path, _dump(run))
        return path
    target = devices_dir(store) / f"{check_device_key(run.device_key, 'device calibration result')}.yaml"
    hist = history_dir(run.device_key, store)
    if target.exists():
        try:
            old = read_device_result(target)
        except ProfileError:
            old = None  # an unreadable current file is replaced, not kept
        if old is not None and not (hist / f"{old.run_id}.yaml").exists():
            write_atomic(hist / f"{old.run_id}.yaml", read_regular(target, RESULT_MAX_BYTES))
    write_atomic(hist / f"{run.run_id}.yaml", _dump(run))
    write_atomic(target, _dump(run))
    for stale in load_device_history(run.device_key, store)[HISTORY_KEEP:]:
        (hist / f"{stale.run_id}.yaml").unlink(missing_ok=True)
    return target


def read_device_result(path: Path) -> DeviceCalibration:
    """One stored result, read by the package's YAML reader: a regular file of bounded size, aliases bounded
    (its summary expands the tree), every key once. ProfileError naming the file otherwise."""
    fix = "re-run `tileops calibrate` on that device, or remove the file"
    try:
        data = refuse_duplicates(read_yaml(path, RESULT_MAX_BYTES), path)
    except YamlError as exc:
        raise ProfileError(f"not a device calibration result: {exc}", file=path, fix=fix) from None
    try:
        return DeviceCalibration.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(f"{path}: not a device calibration result ({exc})", file=path, fix=fix) from None


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


# --------------------------------------------------------------------------- building the profile


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def _decide_cpu_peak(base: Profile, runs: list[DeviceCalibration]) -> tuple[Profile, list[str]]:
    """``base`` with its CPU peak decided by ``runs`` (``cpupeak.decide_peak``): the clock the highest of the
    stated one and the one measured under FMA load, the FMA units overruled by a rate the table cannot hold.
    The CPU's roofs share one peak; a profile without a peak's factors (a GPU, a user's figure) is unchanged."""
    from tileops.calibrate.cpupeak import decide_peak, peak_provenance

    keys = [k for k, r in base.compute.items() if r.peak is not None and r.theoretical_source.source == "estimate"]
    if not keys:
        return base, []
    basis = base.compute[keys[0]].peak
    assert basis is not None
    measured = [r for r in runs if r.clock is not None]
    best = max(measured, key=lambda r: r.clock.ghz if r.clock else 0.0) if measured else None
    rates = [_median([r.roofs[k].flops_per_s for r in runs if k in r.roofs]) for k in keys
             if any(k in r.roofs for r in runs)]
    why_not = next((r.clock_not_measured for r in runs if r.clock_not_measured), None) or (
        "this calibration did not measure it (a result written before tileops measured the clock)")
    decided, notes = decide_peak(
        basis, measured_ghz=best.clock.ghz if best and best.clock else None,
        measurement=(f"{best.clock.method}; calibration {best.run_id} on {best.device_key}, "
                     f"{best.finished_at.date()}") if best and best.clock else None,
        not_measured=why_not, achieved_rate=max(rates) if rates else None)
    if not decided.clock_bound:
        notes.append(f"the clock was not measured ({decided.not_measured}): the peak is an estimate on the stated "
                     f"{decided.ghz:.4g} GHz ({decided.stated_source}), which turbo can exceed, so the physics check "
                     "will not judge FLOPs against it (NOT JUDGED, estimate); give a C compiler with OpenMP (the "
                     "clock kernel is C) and calibrate again, or state the all-core clock with --cpu-ghz")
    label = ", ".join(keys)
    compute = dict(base.compute)
    for k in keys:
        compute[k] = compute[k].model_copy(update={"theoretical": decided.peak_flops, "peak": decided,
                                                   "theoretical_source": peak_provenance(decided)})
    return base.model_copy(update={"compute": compute}), [f"{label} peak: {n}" for n in notes]


def build_profile(base: Profile, runs: list[DeviceCalibration]) -> tuple[Profile, list[str]]:
    """The calibrated profile: ``base``'s theoretical figures with fractions from ``runs``.

    Several runs (devices of one model) give the median of each measurement, so
    one weak device neither sets nor drags the model's ceiling. A CPU's peak is
    decided here, from the runs' measured clocks and rates (``_decide_cpu_peak``).
    Returns the profile and the warnings about numbers that could not be stored
    or ceilings in doubt.
    """
    if not runs:
        raise ValueError("build_profile needs at least one run")
    base, warnings = _decide_cpu_peak(base, runs)
    first = runs[0]
    date = first.finished_at.date()
    devices = ", ".join(r.device_key for r in runs)
    quick = (" quick run (smaller sizes, fewer repetitions): a first figure, which `tileops calibrate` "
             "replaces with the full one;" if any(r.quick for r in runs) else "")

    def prov(method: str) -> Provenance:
        return Provenance(source="calibration", run_id=first.run_id, date=date, tool_version=first.tool_version,
                          ref=f"{len(runs)} device(s): {devices}",
                          note=(quick + " " + method).strip() + (" (median over devices)" if len(runs) > 1 else ""))

    data = base.model_dump()
    data.pop("memory", None)

    # memory
    measured = {m: _median([r.mixes[m].bytes_per_s for r in runs if m in r.mixes])
                for m in MIXES if any(m in r.mixes for r in runs)}
    mem = base.memory
    theo = mem.theoretical if mem is not None else None
    theo_src = mem.theoretical_source if mem is not None else Provenance(
        source="unknown", note="no nominal bandwidth known for this device")
    memory_kw: dict[str, Any] = {"theoretical": theo, "theoretical_source": theo_src, "measured": measured}
    if theo is not None and measured:
        fractions = {m: v / theo for m, v in measured.items()}
        if max(fractions.values()) > MAX_FRACTION:
            worst = max(fractions, key=fractions.__getitem__)
            warnings.append(f"memory: the {worst} mix measured {fractions[worst]:.2f}x the theoretical "
                            f"{theo / 1e9:.1f} GB/s, so that figure is not a ceiling; memory left uncalibrated "
                            "(fix the theoretical: --dram-bandwidth, or the profile's memory.theoretical)")
        else:
            memory_kw.update(mixes=fractions, calibration=max(fractions.values()),
                             calibration_source=prov("envelope (max) over the STREAM-counted mixes "
                                                     + ", ".join(fractions)))
    if mem is not None:
        memory_kw.update(_kept_sustained("memory", mem.sustained, mem.sustained_source,
                                         memory_kw.get("calibration"), warnings))
    data["memory"] = MemoryRoof(**memory_kw)
    if data["memory"].suspect:
        warnings.append(f"memory ceiling suspect: {data['memory'].suspect}")
    if theo is None:
        data["memory_note"] = ("nominal memory bandwidth unknown (" + (theo_src.note or "not given") + "): readings "
                               "are priced on the measured envelope and the physics check cannot judge bandwidth; "
                               "give it with `tileops calibrate --dram-bandwidth`")

    # compute
    compute: dict[str, Roof] = {}
    for key, roof in base.compute.items():
        got = [r.roofs[key] for r in runs if key in r.roofs]
        if not got:
            compute[key] = roof
            continue
        rate = _median([g.flops_per_s for g in got])
        frac = rate / roof.theoretical
        if frac > MAX_FRACTION:
            warnings.append(f"{key}: measured {rate / 1e12:.3g} TFLOP/s is {frac:.2f}x the theoretical "
                            f"{roof.theoretical / 1e12:.3g}: the theoretical figure is wrong; roof left uncalibrated")
            compute[key] = roof.model_copy(update={"calibration": None, "calibration_source": None,
                                                   "sustained": None, "sustained_source": None})
            continue
        compute[key] = Roof(theoretical=roof.theoretical, theoretical_source=roof.theoretical_source,
                            calibration=frac, calibration_source=prov(got[0].method), peak=roof.peak,
                            **_kept_sustained(key, roof.sustained, roof.sustained_source, frac, warnings))
        if compute[key].suspect:
            warnings.append(f"{key} ceiling suspect: {compute[key].suspect}")
    for key in sorted({k for r in runs for k in r.roofs} - set(base.compute)):
        warnings.append(f"{key}: measured, but profile {base.name} has no theoretical figure for it, "
                        "so no fraction can be stored (the raw rate is in the per-device result)")
    data["compute"] = compute

    l2 = [r.l2_bytes for r in runs if r.l2_bytes]
    if l2:
        data["l2_bytes"] = int(_median([float(x) for x in l2]))
    floors = [r.latency_floor_s for r in runs if r.latency_floor_s]
    if floors:
        data["latency_floor_s"] = _median(floors)
        data["latency_floor_source"] = prov(first.latency_method or "trivial op")
    return Profile.model_validate(data), warnings


def _kept_sustained(ceiling: str, sustained: float | None, source: Provenance | None, burst: float | None,
                    warnings: list[str]) -> dict[str, Any]:
    """A ceiling's sustained fraction (measured under the power cap, docs/profiles.md) carried over a new burst
    calibration while it is still at most the burst one; dropped with a warning otherwise."""
    if sustained is None:
        return {}
    if burst is not None and sustained <= burst:
        return {"sustained": sustained, "sustained_source": source}
    warnings.append(f"{ceiling}: the profile's sustained fraction {sustained:.3f} (under the power cap) is "
                    + (f"above the new burst calibration {burst:.3f}" if burst is not None else
                       "left without a burst calibration")
                    + ", so it is dropped; measure it again under the cap")
    return {}


# --------------------------------------------------------------------------- pricing each device on its own


def device_profile_reader(store: Path | None = None) -> Callable[[str, Profile], Profile | None]:
    """What :class:`tileops.profiles.ProfileChooser` asks for one device (``per_device=``): the device's
    own calibration (``<store>/devices/<key>.yaml``) on its model's theoretical ceilings (``base``).

    Calibration is a per-device input (§5.1): two H200s of one fleet reach different
    bandwidths, and each row is priced on the ceiling its own device reached. None
    (the model's profile then prices the row) when the device has no readable result
    or its result names another model (a card swapped under the same uuid cannot
    happen; a result copied between hosts can). Reads one file per device, when asked.
    """

    def read(key: str, base: Profile) -> Profile | None:
        if not DEVICE_KEY.fullmatch(key or ""):
            return None
        path = devices_dir(store) / f"{key}.yaml"
        try:
            if not path.is_file():
                return None
            run = read_device_result(path)
        except (OSError, ProfileError):
            return None
        if not base.matches(run.name):
            return None
        profile, _ = build_profile(base, [run])
        return profile

    return read
