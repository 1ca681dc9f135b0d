"""What one calibration of one device measured: its raw rates, as stored per device (§5.1).

A calibration measures bytes/s and FLOP/s; the profile stores fractions of the
theoretical ceilings. Keeping the raw run per device (by uuid) lets the fleet
see a single weak device among many of one model, and lets the model's profile
be rebuilt (the median over its devices) without measuring again.
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from tileops.profiles import ProfileError
from tileops.records import DeviceIdentity, Machine, RowConditions
from tileops.records.identity import ShapeError, nest_machine

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
    #: the measurement's own noise: its median repetition's time over its best, less 1 (None in a result
    #: written before it was kept): what a later calibration's drop is weighed against (``tileops.ledger.judge``)
    spread: float | None = Field(None, ge=0)


class RoofMeasurement(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # a measurement is a finite number
    flops_per_s: float = Field(gt=0)
    flops: float = Field(gt=0, description="FLOPs one repetition performs")
    best_s: float = Field(gt=0)
    reps: int = Field(ge=1)
    method: str
    spread: float | None = Field(None, ge=0)  # as MixMeasurement.spread


class ClockMeasurement(BaseModel):
    """The clock a CPU's cores reached under FMA load (``tileops.calibrate.clock``): a dependent add chain,
    one add per cycle, timed on every thread the bench uses."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # a measurement is a finite number
    ghz: float = Field(gt=0, le=20, description="the highest per-thread rate: the clock the cores reached")
    per_thread_ghz: list[float] = Field(min_length=1)
    threads: int = Field(ge=1)
    load: str = Field(description="the vector load run beside the chain")
    method: str


class HostCheck(BaseModel):
    """What a calibration saw of its host, as the bench looks at it (``tileops.calibrate.host``): a look before
    the first step (load, steal; other processes on a GPU), each step's share of this calibration's own CPUs
    that other processes took, and the whole measurement's window (the bench's sensors). ``contended``: a
    reason was found; a contended calibration is refused, or stored marked (``CalibrationMark``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    contended: bool
    reasons: list[str] = Field(default_factory=list, description="one phrase per reason, naming when it was seen")
    cpus: list[int] = Field(default_factory=list, description="the CPUs this calibration could run on")
    #: the look before the first step (``tileops.bench.quiet.QuietCheck.as_dict``)
    before: dict[str, Any] | None = None
    #: step -> other processes' share of this calibration's CPUs during it (None: too short to tell)
    steps: dict[str, float | None] = Field(default_factory=dict)
    #: other processes' share of this calibration's CPUs from its first step to its last (None: not told)
    others_busy: float | None = None
    blank: dict[str, str] = Field(default_factory=dict, description="what could not be read, and why")


#: How a mark's contention reason starts (``judge.Judgement.reasons``): what ``CalibrationMark.cause`` reads.
CONTENDED_REASON = "measured contended: "


class CalibrationMark(BaseModel):
    """Why a calibration was stored although it should not price rows unsaid: it was measured contended, or a
    ceiling fell below the stored calibration's by more than their noise. Stored so with ``--force`` (or by the
    bench's own calibration step, which cannot refuse its run); every row priced on it says so."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    reasons: list[str] = Field(min_length=1)
    by: str = Field(description="what stored it anyway: `tileops calibrate --force`, or the bench's calibration step")
    compared_with: str | None = Field(None, description="the run id of the stored calibration it fell below")

    @property
    def cause(self) -> str:
        """What marked it, as a metric label: ``contended``, ``below-stored``, both joined by ``+``, or ``other``."""
        causes = (["contended"] if any(r.startswith(CONTENDED_REASON) for r in self.reasons) else []) \
            + (["below-stored"] if self.compared_with is not None else [])
        return "+".join(causes) or "other"

    def sentence(self, run_id: str, device_key: str) -> str:
        """The note a row priced on it carries (one string for every row of the device: a summary prints it once)."""
        return (f"priced on calibration {run_id} of {device_key}, stored marked ({self.by}): "
                + "; ".join(self.reasons) + "; calibrate again on an idle host (docs/profiles.md)")


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
    #: What the calibration saw of its host (None in a result written before calibrations looked)
    host: HostCheck | None = None
    #: Set when it was stored although contended or below the stored one beyond noise (None: stored clean)
    marked: CalibrationMark | None = None

    #: The device's calibration before this one, as :func:`with_previous` found it in the store's history;
    #: not part of the file.
    _previous: DeviceCalibration | None = PrivateAttr(None)

    @model_validator(mode="before")
    @classmethod
    def _older_schemas(cls, data: Any) -> Any:
        """A result written before the machine description was shared (schema 1: flat fields), or before its
        device was nested (schema 2's first files: ``machine.device_kind``, ...), reads the same."""
        if not isinstance(data, dict):
            return data
        if "machine" not in data and "name" in data:
            flat = dict(data)
            tool = str(flat.pop("tool_version", ""))
            flat["machine"] = {
                "device": {"kind": flat.pop("kind", None), "name": flat.pop("name", None),
                           "uuid": flat.pop("uuid", None), "index": flat.pop("index", None),
                           "hostname": flat.pop("hostname", None)},
                "driver": flat.pop("driver", None), "cuda": flat.pop("cuda", None),
                "cpu_model": flat.pop("cpu_model", None), "threads": flat.pop("threads", None),
                "l2_bytes": flat.pop("l2_bytes", None),
                "torch_version": flat.pop("torch_version", ""), "tileops_version": tool.removeprefix("tileops "),
            }
            flat["schema_version"] = RESULTS_SCHEMA
            return flat
        if isinstance(data.get("machine"), dict):
            try:
                return {**data, "machine": nest_machine(data["machine"])}
            except ShapeError as exc:
                raise ValueError(f"machine.{exc}") from None
        return data

    # The device's facts, read through ``machine`` (what most callers want to name).
    @property
    def device(self) -> DeviceIdentity:
        return self.machine.device

    @property
    def kind(self) -> str:
        return self.machine.device.kind

    @property
    def name(self) -> str:
        return self.machine.device.name

    @property
    def uuid(self) -> str | None:
        return self.machine.device.uuid

    @property
    def index(self) -> int | None:
        return self.machine.device.index

    @property
    def hostname(self) -> str:
        return self.machine.device.hostname

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
        return self.machine.device.key

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


