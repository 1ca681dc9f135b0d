"""Raw calibration results of one device, and the profile built from them.

A calibration run measures bytes/s and FLOP/s; the profile stores fractions of
the theoretical ceilings (§5.1). Keeping the raw run per device (by uuid) lets
the fleet see a single weak device among many of one model, and lets the
model's profile be rebuilt (median over its devices) without re-measuring.
"""

from __future__ import annotations

import datetime as dt
import secrets
import statistics
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tileops.fsutil import write_atomic
from tileops.profiles import MIXES, MemoryRoof, Profile, ProfileError, Provenance, Roof, store_dir

#: STREAM accounting: words each mix moves per element (reads + writes). STREAM
#: does not count the write-allocate read of a store's line, and neither does
#: the roofline metric (§1.2 counts each output as one write), so a ceiling
#: measured this way is in the same bytes the ops are priced in.
STREAM_WORDS = {"copy": 2, "triad": 3, "read": 1, "write": 1}

#: A measured fraction above this is not a ceiling problem but a wrong theoretical figure.
MAX_FRACTION = 1.5
RESULTS_SCHEMA = 1


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


class DeviceCalibration(BaseModel):
    """One device's raw measurements: the per-device (uuid) result of a calibration run."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # a measurement is a finite number
    schema_version: int = RESULTS_SCHEMA
    run_id: str
    started_at: dt.datetime
    finished_at: dt.datetime
    tool_version: str
    torch_version: str
    quick: bool
    kind: Literal["cpu", "cuda"]
    name: str
    uuid: str | None = None
    index: int | None = None
    hostname: str
    driver: str | None = None
    cuda: str | None = None
    cpu_model: str | None = None
    threads: int | None = None
    l2_bytes: int | None = None
    clocks_before: dict[str, Any] | None = None
    clocks_after: dict[str, Any] | None = None
    mixes: dict[str, MixMeasurement] = Field(default_factory=dict)
    roofs: dict[str, RoofMeasurement] = Field(default_factory=dict)
    not_measured: dict[str, str] = Field(default_factory=dict, description="roof key -> why it was not measured")
    latency_floor_s: float | None = Field(None, gt=0)
    latency_method: str | None = None
    warnings: list[str] = Field(default_factory=list)

    @property
    def device_key(self) -> str:
        """The per-device file stem: the GPU uuid, or ``cpu-<hostname>``."""
        return self.uuid or f"cpu-{self.hostname}"


def new_run_id() -> str:
    return "cal-" + dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


# --------------------------------------------------------------------------- per-device store


def devices_dir(store: Path | None = None) -> Path:
    return (store or store_dir()) / "devices"


def write_device_result(run: DeviceCalibration, store: Path | None = None, *, path: Path | None = None) -> Path:
    """Write one device's raw result as YAML (atomically) to ``<store>/devices/<uuid>.yaml``."""
    target = path or devices_dir(store) / f"{run.device_key}.yaml"
    write_atomic(target, yaml.safe_dump(run.model_dump(mode="json"), sort_keys=False))
    return target


def read_device_result(path: Path) -> DeviceCalibration:
    try:
        return DeviceCalibration.model_validate(yaml.safe_load(Path(path).read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise ProfileError(f"{path}: not a device calibration result ({exc})", file=path,
                           fix="re-run `tileops calibrate` on that device, or remove the file") from None


def load_device_results(store: Path | None = None) -> list[DeviceCalibration]:
    """Every per-device result in the store (the fleet's per-device calibration view)."""
    d = devices_dir(store)
    return [read_device_result(p) for p in sorted(d.glob("*.yaml"))] if d.is_dir() else []


# --------------------------------------------------------------------------- building the profile


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def build_profile(base: Profile, runs: list[DeviceCalibration]) -> tuple[Profile, list[str]]:
    """The calibrated profile: ``base``'s theoretical figures with fractions from ``runs``.

    Several runs (devices of one model) give the median of each measurement, so
    one weak device neither sets nor drags the model's ceiling. Returns the
    profile and the warnings about numbers that could not be stored.
    """
    if not runs:
        raise ValueError("build_profile needs at least one run")
    warnings: list[str] = []
    first = runs[0]
    date = first.finished_at.date()
    devices = ", ".join(r.device_key for r in runs)
    quick = " quick run (small sizes): a rough figure, not for pricing;" if any(r.quick for r in runs) else ""

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
    data["memory"] = MemoryRoof(**memory_kw)
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
            compute[key] = roof.model_copy(update={"calibration": None, "calibration_source": None})
            continue
        compute[key] = Roof(theoretical=roof.theoretical, theoretical_source=roof.theoretical_source,
                            calibration=frac, calibration_source=prov(got[0].method))
    for key in sorted({k for r in runs for k in r.roofs} - set(base.compute)):
        warnings.append(f"{key}: measured, but profile {base.name} has no theoretical figure for it, "
                        "so no fraction can be stored (the raw rate is in the per-device result)")
    data["compute"] = compute

    l2 = [r.l2_bytes for r in runs if r.l2_bytes]
    if l2:
        data["l2_bytes"] = int(_median(l2))
    floors = [r.latency_floor_s for r in runs if r.latency_floor_s]
    if floors:
        data["latency_floor_s"] = _median(floors)
        data["latency_floor_source"] = prov(first.latency_method or "trivial op")
    return Profile.model_validate(data), warnings
