"""Device profiles (§5.1): theoretical ceilings and calibration factors, never their product.

``effective = theoretical × calibration`` is computed on read. A profile is
selected by matching the measured device name; no match leaves SOL blank
(§1.2). An uncalibrated roof prices as blank too, with that reason.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MIXES = ("copy", "triad", "read", "write")
ROOF_KEYS = (
    "cuda_core.fp32", "cuda_core.fp64", "tensor_core.tf32", "tensor_core.bf16", "tensor_core.fp16",
    "tensor_core.fp8", "tensor_core.int8",
    # CPU roofs: FMA-saturated vector path and large-matmul path (both measured, §primer).
    "cpu.fp32", "cpu.fp32_matmul",
)


class Provenance(BaseModel):
    """Where a number came from."""

    model_config = ConfigDict(extra="forbid")
    source: Literal["datasheet", "calibration", "estimate", "user"]
    ref: str | None = None  # datasheet document / URL, or the calibration tool version
    run_id: str | None = None
    date: dt.date | None = None
    tool_version: str | None = None
    note: str | None = None


class Roof(BaseModel):
    """One ceiling: theoretical (per second) and the calibrated fraction of it that is achievable."""

    model_config = ConfigDict(extra="forbid")
    theoretical: float = Field(gt=0, description="bytes/s or FLOP/s, dense, no sparsity")
    calibration: float | None = Field(None, gt=0, le=1.5, description="measured fraction; None = uncalibrated")
    theoretical_source: Provenance
    calibration_source: Provenance | None = None

    @property
    def effective(self) -> float | None:
        return None if self.calibration is None else self.theoretical * self.calibration

    @model_validator(mode="after")
    def _calibration_has_source(self) -> "Roof":
        if self.calibration is not None and self.calibration_source is None:
            raise ValueError("a calibration needs calibration_source (run id, date, tool version)")
        return self


class MemoryRoof(BaseModel):
    """The DRAM/HBM roof.

    ``calibration`` is the envelope (max) over the measured mixes' fractions, and
    ``mixes`` keeps each mix's own fraction (§5.1). ``measured`` keeps each mix's
    raw bytes/s, so a CPU whose nominal bandwidth is unknown (``theoretical`` is
    None) still has a measured ceiling; every reading priced on it says the
    nominal is unknown, and the physics check cannot judge bandwidth there.
    """

    model_config = ConfigDict(extra="forbid")
    theoretical: float | None = Field(None, gt=0, description="nominal bytes/s; None = unknown")
    calibration: float | None = Field(None, gt=0, le=1.5)
    theoretical_source: Provenance
    calibration_source: Provenance | None = None
    mixes: dict[str, float] = Field(default_factory=dict, description="measured fraction of theoretical per mix")
    measured: dict[str, float] = Field(default_factory=dict, description="measured bytes/s per mix (STREAM counting)")

    @field_validator("mixes", "measured")
    @classmethod
    def _known_mixes(cls, v: dict[str, float]) -> dict[str, float]:
        bad = sorted(set(v) - set(MIXES))
        if bad:
            raise ValueError(f"unknown mix(es) {bad}; mixes are {', '.join(MIXES)}")
        if any(x <= 0 for x in v.values()):
            raise ValueError("every mix value must be positive")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "MemoryRoof":
        if self.calibration is not None and self.calibration_source is None:
            raise ValueError("a calibration needs calibration_source (run id, date, tool version)")
        if self.theoretical is None and (self.calibration is not None or self.mixes):
            raise ValueError("calibration and mixes are fractions of theoretical; with theoretical unknown keep "
                             "only measured (bytes/s per mix)")
        if self.mixes and self.calibration is not None and abs(self.calibration - max(self.mixes.values())) > 1e-9:
            raise ValueError(
                f"calibration {self.calibration} is not the envelope (max) of the mixes {self.mixes}; "
                "set calibration to the best mix's fraction")
        return self

    @property
    def nominal_known(self) -> bool:
        return self.theoretical is not None

    @property
    def effective(self) -> float | None:
        """theoretical × calibration; with the nominal unknown, the measured envelope."""
        if self.theoretical is not None:
            return None if self.calibration is None else self.theoretical * self.calibration
        return max(self.measured.values()) if self.measured else None


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    kind: Literal["gpu", "cpu"]
    match: list[str] = Field(min_length=1, description="device names as the driver reports them, plus aliases")
    memory: MemoryRoof | None = Field(None, description="None when nominal bandwidth is unknown")
    memory_note: str | None = None
    compute: dict[str, Roof] = Field(default_factory=dict)
    roof_aliases: dict[str, str] = Field(
        default_factory=dict,
        description="roof key -> the key of this profile that prices it (a CPU prices cuda_core.fp32 on cpu.fp32)")
    l2_bytes: int | None = Field(None, gt=0, description="last-level cache size (L2 on GPU, LLC on CPU)")
    latency_floor_s: float | None = Field(None, gt=0)
    latency_floor_source: Provenance | None = None
    notes: str | None = None

    @field_validator("compute")
    @classmethod
    def _known_roofs(cls, v: dict[str, Roof]) -> dict[str, Roof]:
        bad = sorted(set(v) - set(ROOF_KEYS))
        if bad:
            raise ValueError(f"unknown roof key(s) {bad}; keys are {', '.join(ROOF_KEYS)}")
        return v

    def roof(self, key: str) -> Roof | None:
        """The compute roof that prices ``key`` on this device (through ``roof_aliases``), or None."""
        return self.compute.get(self.roof_aliases.get(key, key))

    def matches(self, device_name: str) -> bool:
        n = device_name.strip().lower()
        return any(n == m.strip().lower() for m in self.match)
