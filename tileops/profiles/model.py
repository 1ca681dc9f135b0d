"""What a device profile is (§5.1): theoretical ceilings and calibration factors, never their product.

``effective = theoretical × calibration`` is computed on read. Every figure is
bounded and finite when read, and an error names the file, the field and the
fix (:class:`ProfileError`). Where profiles live is ``tileops.profiles.store``;
which one prices a device, ``tileops.profiles.chooser``.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated, Any, Literal
from collections.abc import Iterable, Mapping

from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator,
                      model_validator)

from tileops.errors import TileOpsError

MIXES = ("copy", "triad", "read", "write")
ROOF_KEYS = (
    "cuda_core.fp32", "cuda_core.fp64", "tensor_core.tf32", "tensor_core.bf16", "tensor_core.fp16",
    "tensor_core.fp8", "tensor_core.int8",
    # CPU roofs: FMA-saturated vector path and large-matmul path (both measured, §primer).
    "cpu.fp32", "cpu.fp32_matmul",
)

#: Bounds on every rate a profile holds (bytes/s, FLOP/s): the largest machines reach about 1e18, so a
#: figure outside [1, 1e24] is a typo or an overflow (YAML reads ``1e400`` as infinity), and one that
#: is infinite or not a number would silently disable the physics check (§4.3). Refused when read.
MIN_RATE = 1.0
MAX_RATE = 1e24
#: A calibration is a measured fraction of the theoretical ceiling: 1e-9 and below is a broken measurement.
MIN_FRACTION = 1e-9
#: A calibration above this fraction of its theoretical is itself evidence that the theoretical is too low:
#: no kernel sustains more of a true peak (a BLAS micro-kernel reaches 80-90 % of a CPU's, a GPU GEMM about as
#: much of its datasheet figure), so the ceiling is *suspect* (issue 29) and a row above it is not blamed on
#: its formula.
SUSPECT_CALIBRATION = 0.95
_FINITE = ConfigDict(extra="forbid", allow_inf_nan=False)
_Rate = Annotated[float, Field(ge=MIN_RATE, le=MAX_RATE)]
_Fraction = Annotated[float, Field(ge=MIN_FRACTION, le=1.5)]


class Provenance(BaseModel):
    """Where a number came from.

    ``unknown`` exists for one case only: a CPU whose nominal DRAM bandwidth could
    not be read (no DMI/SMBIOS, no user value); ``note`` then says so and how to
    supply it.
    """

    model_config = _FINITE
    source: Literal["datasheet", "calibration", "estimate", "user", "unknown"]
    ref: str | None = None  # datasheet document / URL, or the calibration tool version
    run_id: str | None = None
    date: dt.date | None = None
    tool_version: str | None = None
    note: str | None = None


class PeakBasis(BaseModel):
    """The factors of an estimated compute peak (the primer's cores x GHz x FMA units x lanes x 2), each with
    where it came from, so a reader sees which one to doubt.

    The clock is the highest of the one the machine states and the one measured under FMA load (issue 29:
    turbo runs cores above the stated clock, and a peak on a clock below the real one is no upper bound). An
    estimate is a bound the physics check may judge against only when its clock is (:attr:`clock_bound`).
    """

    model_config = _FINITE
    cores: int = Field(ge=1)
    lanes: int = Field(ge=1, description="fp32 lanes per vector")
    isa: str
    fma_units: int = Field(ge=1, description="FMA units per core at the ISA's vector width: what the peak uses")
    fma_units_source: str = Field("table", description="'table', or the calibration that overruled it")
    fma_table: str = Field(description="the table's row for this microarchitecture, with its source")
    fma_table_units: int = Field(ge=1, description="what the table says")
    fma_candidates: list[int] = Field(default_factory=list, description="other counts parts of this row have")
    ghz: float = Field(gt=0, le=20, description="the clock the peak assumes: the highest of stated and measured")
    ghz_source: Literal["measured", "stated", "user"]
    stated_ghz: float | None = Field(None, gt=0, le=20)
    stated_source: str | None = None  # cpufreq maximum, model name, cpu MHz line, --cpu-ghz
    stated_by_user: bool = False
    measured_ghz: float | None = Field(None, gt=0, le=20)
    measurement: str | None = None  # how, on how many threads, in which calibration run
    not_measured: str | None = None  # why the clock was not measured

    @property
    def peak_flops(self) -> float:
        """cores x GHz x FMA units x lanes x 2, in FLOP/s."""
        return self.cores * self.ghz * 1e9 * self.fma_units * self.lanes * 2

    @property
    def clock_bound(self) -> bool:
        """The clock is no lower than the cores run: measured under load (and the peak uses at least that),
        or stated by the user, who answers for it."""
        if self.ghz_source == "user":
            return True
        return self.measured_ghz is not None and self.ghz >= self.measured_ghz

    def explain(self) -> str:
        """``2 cores x 3.2 GHz (measured) x 2 FMA units x 8 fp32 lanes (AVX2+FMA) x 2 = 204.8 GFLOP/s``."""
        how = {"measured": "measured under FMA load", "stated": self.stated_source or "stated",
               "user": self.stated_source or "given by the user"}[self.ghz_source]
        return (f"{self.cores} cores x {self.ghz:.4g} GHz ({how}) x {self.fma_units} FMA units x {self.lanes} fp32 "
                f"lanes ({self.isa}) x 2 = {self.peak_flops / 1e9:.1f} GFLOP/s")


class Roof(BaseModel):
    """One ceiling: theoretical (per second) and the calibrated fraction of it that is achievable."""

    model_config = _FINITE
    theoretical: float = Field(ge=MIN_RATE, le=MAX_RATE, description="bytes/s or FLOP/s, dense, no sparsity")
    calibration: float | None = Field(None, ge=MIN_FRACTION, le=1.5,
                                      description="measured fraction; None = uncalibrated")
    theoretical_source: Provenance
    calibration_source: Provenance | None = None
    peak: PeakBasis | None = Field(None, description="an estimate's factors (a CPU's peak): clock, units, lanes")
    sustained: float | None = Field(None, ge=MIN_FRACTION, le=1.5,
                                    description="fraction measured under the power cap; None = not measured")
    sustained_source: Provenance | None = None

    @property
    def effective(self) -> float | None:
        return None if self.calibration is None else self.theoretical * self.calibration

    @property
    def effective_sustained(self) -> float | None:
        """theoretical × sustained: the ceiling a power-capped row is priced against (None: not measured)."""
        return None if self.sustained is None else self.theoretical * self.sustained

    @property
    def not_a_bound(self) -> str | None:
        """Why the theoretical is no upper bound (so the physics check cannot judge against it), or None.

        A datasheet or user figure is one. An estimate is one only when its clock is (:class:`PeakBasis`):
        an estimate on a clock nobody measured may sit below what the cores do, and a correct formula
        would read above it."""
        if self.theoretical_source.source != "estimate":
            return None
        if self.peak is None:
            return ("an estimate whose factors (clock, FMA units per core) are not recorded: a profile written "
                    "before tileops measured the clock; run `tileops calibrate` to write it again")
        if self.peak.clock_bound:
            return None
        why = f": {self.peak.not_measured}" if self.peak.not_measured else ""
        return (f"an estimate on the stated clock {self.peak.ghz:.4g} GHz ({self.peak.stated_source or 'stated'}), "
                f"which was not measured under load{why}")

    @property
    def suspect(self) -> str | None:
        """Why this ceiling itself is in doubt (a calibration too close to it), naming the likely cause; or None."""
        return suspect_calibration(self.calibration, "the clock it assumes, or the FMA units per core (per SM "
                                                     "on a GPU)")

    @model_validator(mode="after")
    def _calibration_has_source(self) -> Roof:
        if self.calibration is not None and self.calibration_source is None:
            raise ValueError("a calibration needs calibration_source (run id, date, tool version)")
        _check_sustained(self.sustained, self.sustained_source, self.calibration)
        if self.peak is not None and abs(self.peak.peak_flops - self.theoretical) > 1e-6 * self.theoretical:
            raise ValueError(f"theoretical {self.theoretical:.6g} is not the product of its peak's factors "
                             f"({self.peak.explain()}); set theoretical to {self.peak.peak_flops:.6g} or fix the "
                             "factors")
        return self


def _check_sustained(sustained: float | None, source: Provenance | None, calibration: float | None) -> None:
    """A sustained fraction is measured (it says where), beside a burst one it does not exceed."""
    if sustained is None:
        return
    if source is None:
        raise ValueError("a sustained fraction needs sustained_source (where it was measured, under which power "
                         "limit)")
    if calibration is None:
        raise ValueError("a sustained fraction needs the burst one beside it (calibration): a profile holds the "
                         "burst fraction first")
    if sustained > calibration:
        raise ValueError(f"sustained {sustained} is above the burst calibration {calibration}: under a power cap "
                         "the clocks are lower, so the fraction cannot be higher; swap them or measure again")


def suspect_calibration(calibration: float | None, cause: str) -> str | None:
    """The health note for a ceiling whose calibration reached more than :data:`SUSPECT_CALIBRATION` of it."""
    if calibration is None or calibration <= SUSPECT_CALIBRATION:
        return None
    return (f"the calibration reached {calibration:.1%} of this theoretical, and no kernel sustains more than "
            f"{SUSPECT_CALIBRATION:.0%} of a true peak; the theoretical is probably too low (likely cause: {cause}); "
            "so a row above it is not blamed on its formula")


class MemoryRoof(BaseModel):
    """The DRAM/HBM roof.

    ``calibration`` is the envelope (max) over the measured mixes' fractions, and
    ``mixes`` keeps each mix's own fraction (§5.1). ``measured`` keeps each mix's
    raw bytes/s, so a CPU whose nominal bandwidth is unknown (``theoretical`` is
    None) still has a measured ceiling; every reading priced on it says the
    nominal is unknown, and the physics check cannot judge bandwidth there.
    """

    model_config = _FINITE
    theoretical: float | None = Field(None, ge=MIN_RATE, le=MAX_RATE, description="nominal bytes/s; None = unknown")
    calibration: float | None = Field(None, ge=MIN_FRACTION, le=1.5)
    theoretical_source: Provenance
    calibration_source: Provenance | None = None
    mixes: dict[str, _Fraction] = Field(default_factory=dict, description="measured fraction of theoretical per mix")
    measured: dict[str, _Rate] = Field(default_factory=dict, description="measured bytes/s per mix (STREAM counting)")
    sustained: float | None = Field(None, ge=MIN_FRACTION, le=1.5,
                                    description="envelope fraction measured under the power cap; None = not measured")
    sustained_source: Provenance | None = None

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
    def _consistent(self) -> MemoryRoof:
        if self.calibration is not None and self.calibration_source is None:
            raise ValueError("a calibration needs calibration_source (run id, date, tool version)")
        if self.theoretical is None and (self.calibration is not None or self.mixes or self.sustained is not None):
            raise ValueError("calibration, sustained and mixes are fractions of theoretical; with theoretical "
                             "unknown keep only measured (bytes/s per mix)")
        _check_sustained(self.sustained, self.sustained_source, self.calibration)
        if self.mixes and self.calibration is not None and abs(self.calibration - max(self.mixes.values())) > 1e-9:
            raise ValueError(
                f"calibration {self.calibration} is not the envelope (max) of the mixes {self.mixes}; "
                "set calibration to the best mix's fraction")
        return self

    @property
    def nominal_known(self) -> bool:
        return self.theoretical is not None

    @property
    def suspect(self) -> str | None:
        """Why this ceiling itself is in doubt (a calibration too close to the nominal), or None."""
        return suspect_calibration(self.calibration, "the nominal bandwidth: its transfer rate or channel count")

    @property
    def effective(self) -> float | None:
        """theoretical × calibration; with the nominal unknown, the measured envelope."""
        if self.theoretical is not None:
            return None if self.calibration is None else self.theoretical * self.calibration
        return max(self.measured.values()) if self.measured else None

    @property
    def effective_sustained(self) -> float | None:
        """theoretical × sustained: the bandwidth a power-capped row is priced against (None: not measured)."""
        return None if self.sustained is None or self.theoretical is None else self.theoretical * self.sustained


class Profile(BaseModel):
    model_config = _FINITE
    name: str
    kind: Literal["gpu", "cpu"]
    match: list[str] = Field(min_length=1, description="device names as the driver reports them, plus aliases")
    memory: MemoryRoof | None = Field(None, description="None when nominal bandwidth is unknown")
    memory_note: str | None = None
    compute: dict[str, Roof] = Field(default_factory=dict)
    roof_aliases: dict[str, str] = Field(
        default_factory=dict,
        description="roof key -> the key of this profile that prices it (a CPU prices cuda_core.fp32 on cpu.fp32)")
    l2_bytes: int | None = Field(None, gt=0, le=2**40, description="last-level cache size (L2 on GPU, LLC on CPU)")
    latency_floor_s: float | None = Field(None, gt=0, le=1.0, description="seconds; a floor of a second is not one")
    latency_floor_source: Provenance | None = None
    notes: str | None = None
    #: Set when a calibration its fractions come from was stored marked (measured contended, or a ceiling below
    #: the stored calibration's beyond noise, and stored with ``--force``): the sentence every row priced on it
    #: carries as a note (``tileops.ledger.CalibrationMark``)
    calibration_marked: str | None = None

    #: The file this profile was read from (None when built in memory); not serialised.
    _source_path: Path | None = PrivateAttr(None)

    @field_validator("compute")
    @classmethod
    def _known_roofs(cls, v: dict[str, Roof]) -> dict[str, Roof]:
        bad = sorted(set(v) - set(ROOF_KEYS))
        if bad:
            raise ValueError(f"unknown roof key(s) {bad}; keys are {', '.join(ROOF_KEYS)}")
        return v

    @model_validator(mode="after")
    def _aliases_resolve(self) -> Profile:
        for key, target in self.roof_aliases.items():
            if key not in ROOF_KEYS:
                raise ValueError(f"roof_aliases key {key!r} is not a roof key; keys are {', '.join(ROOF_KEYS)}")
            if target not in self.compute:
                raise ValueError(f"roof_aliases maps {key!r} to {target!r}, which is not a compute roof of this "
                                 f"profile; add compute.{target} or map {key!r} to one of {sorted(self.compute)}")
        return self

    @property
    def source_path(self) -> Path | None:
        return self._source_path

    def roof(self, key: str) -> Roof | None:
        """The compute roof that prices ``key`` on this device (through ``roof_aliases``), or None."""
        return self.compute.get(self.roof_aliases.get(key, key))

    def matches(self, device_name: str) -> bool:
        n = device_name.strip().lower()
        return any(n == m.strip().lower() for m in self.match)


# --------------------------------------------------------------------------- errors


class ProfileError(TileOpsError):
    """A profile file is unreadable or malformed, or a lookup failed; names the file, the field and the fix."""

    def __init__(self, message: str, *, file: Path | str | None = None, field: str | None = None,
                 fix: str | None = None) -> None:
        self.file = str(file) if file is not None else None
        self.field = field
        self.fix = fix
        super().__init__(message)


#: The profile file's schema. Schema 1 states no version (every profile written so far); a later schema that
#: changes the file's meaning states ``schema_version: 2`` (or more), which this tileops refuses naming the upgrade,
#: rather than misreading it or reporting its new fields as typos (docs/reliability.md, "Stores from elsewhere").
PROFILE_SCHEMA = 1


def newer_schema(data: Any, known: int, path: Path | str, what: str) -> ProfileError | None:
    """The error for a store file written by a newer schema than ``known`` (its ``schema_version``), or None.

    Said before the fields are checked: a newer file's added fields would otherwise read as unknown ones, and
    the fix offered would be to delete them."""
    found = data.get("schema_version") if isinstance(data, dict) else None
    if type(found) is not int or found <= known:
        return None
    fix = "upgrade tileops to read it, and leave the file as it is"
    return ProfileError(f"{path}: field schema_version: a {what} written by a newer tileops (schema {found}; this "
                        f"tileops reads up to {known}); {fix}", file=path, field="schema_version", fix=fix)


#: Fix hints for a field, by the last named element of the error's location.
_FIELD_FIXES = {
    "name": "give the profile a name, e.g. name: h100-sxm (the store file is <name>.yaml)",
    "kind": "set kind: gpu or kind: cpu",
    "match": "list the device names the driver reports (torch.cuda.get_device_name / nvidia-smi), "
             "e.g. match: [\"NVIDIA H100 80GB HBM3\"]",
    "theoretical": "give the dense datasheet ceiling as a plain number in bytes/s or FLOP/s, e.g. 3.35e+12",
    "calibration": "a calibration is measured / theoretical (a fraction, 0 < c <= 1.5); "
                   "re-run `tileops calibrate` or remove the field",
    "theoretical_source": "say where the number came from, e.g. theoretical_source: {source: datasheet, ref: \"...\"}",
    "calibration_source": "a calibration needs calibration_source: {source: calibration, run_id, date, "
                          "tool_version}; re-run `tileops calibrate`",
    "source": "source is one of datasheet, calibration, estimate, user, unknown",
    "l2_bytes": "give the last-level cache size in bytes as an integer, e.g. 52428800",
    "latency_floor_s": "give the latency floor in seconds, e.g. 2.5e-06",
    "mixes": "mixes are copy, triad, read, write, each a positive fraction of memory.theoretical",
    "measured": "measured holds copy, triad, read, write, each in bytes/s",
    "compute": f"compute roofs are keyed {', '.join(ROOF_KEYS)}",
    "roof_aliases": "map a roof key to a key under compute, e.g. cuda_core.fp32: cpu.fp32",
    "date": "write dates as YYYY-MM-DD",
    "sustained": "a sustained fraction is measured under the power cap (0 < s <= calibration), with "
                 "sustained_source saying where; remove it if it was not measured",
    "sustained_source": "say where the sustained fraction was measured, e.g. {source: calibration, ref: \"...\", "
                        "note: \"700 W limit\"}",
    "peak": "an estimated peak's factors (cores, lanes, isa, fma_units, ghz, ...) as `tileops calibrate` writes "
            "them; re-run it, or remove peak and state the theoretical with source user or datasheet",
}

_TYPE_FIXES = {
    "missing": "add the field",
    "extra_forbidden": "a newer tileops may have written it: upgrade tileops to read it; else remove it or fix its "
                       "spelling (see docs/profiles.md for the fields)",
    "float_parsing": "write a plain number without units, e.g. 3.35e+12",
    "float_type": "write a plain number without units, e.g. 3.35e+12",
    "int_parsing": "write a whole number without units",
    "int_type": "write a whole number without units",
    "greater_than": "the value must be positive",
    "greater_than_equal": "the value is below its allowed minimum",
    "less_than_equal": "the value is above its allowed maximum",
    "finite_number": "write a finite number (YAML reads .inf, .nan and 1e400 as infinity or not-a-number)",
    "list_type": "write a YAML list, e.g. [\"NVIDIA H100 80GB HBM3\"]",
    "too_short": "the list must not be empty",
    "dict_type": "write a YAML mapping",
    "model_type": "write a YAML mapping",
    "literal_error": "use one of the allowed values",
    "string_type": "write a string",
}


def _loc_str(loc: Iterable[Any]) -> str:
    return ".".join(str(x) for x in loc) or "(top level)"


def _fix_for(err: Mapping[str, Any]) -> str:
    loc = [str(x) for x in err.get("loc", ()) if not isinstance(x, int)]
    if err.get("type") == "value_error":
        return "see the message"
    if err.get("type") == "extra_forbidden":
        return _TYPE_FIXES["extra_forbidden"]
    for part in reversed(loc):
        if part in _FIELD_FIXES:
            hint = _FIELD_FIXES[part]
            if err.get("type") == "missing":
                return f"add {part}: {hint}"
            return hint
    return _TYPE_FIXES.get(str(err.get("type")), "see docs/profiles.md")


def _validation_error(path: Path, exc: ValidationError) -> ProfileError:
    lines = []
    first: tuple[str, str] | None = None
    for err in exc.errors():
        field = _loc_str(err.get("loc", ()))
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        fix = _fix_for(err)
        if first is None:
            first = (field, fix)
        lines.append(f"  {field}: {msg} (fix: {fix})" if fix != "see the message" else f"  {field}: {msg}")
    field, fix = first or ("(top level)", "see docs/profiles.md")
    return ProfileError(f"{path}: invalid profile\n" + "\n".join(lines), file=path, field=field, fix=fix)



def parse_profile(data: Any, path: Path | str = "<profile>") -> Profile:
    """Validate already-parsed YAML data; errors name ``path``, the field and the fix."""
    path = Path(path)
    if not isinstance(data, dict):
        found = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ProfileError(f"{path}: a profile is a YAML mapping (name, kind, match, memory, compute, ...); "
                           f"found {found} (fix: write the profile as a mapping, see docs/profiles.md)",
                           file=path, field="(top level)", fix="write the profile as a YAML mapping")
    newer = newer_schema(data, PROFILE_SCHEMA, path, "profile")
    if newer is not None:
        raise newer
    if type(data.get("schema_version", PROFILE_SCHEMA)) is int:  # schema 1 stated: nothing to check further
        data = {k: v for k, v in data.items() if k != "schema_version"}
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(path, exc) from None
    profile._source_path = path
    return profile


