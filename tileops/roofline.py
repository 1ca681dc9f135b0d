"""Roofline tool (M5, §4.3): price benchmark records against a device profile.

Pure functions over records and a profile. It never instantiates an op and
imports no op code (§4.4.5): every number it needs is in the record, so old
records re-price under an updated profile without running anything (§5.2).

CONTRACT (shared with tileops.export and tileops.report; keep these names):

    select_profile(device_name, profiles) -> Profile | None
    price(record, profile) -> Priced
    price_all(records, profile_or_none_or_callable) -> list[Priced]
    health(priced) -> Health

The model (§1.2)::

    memory_time  = bytes / profile.memory.effective
    compute_time = flops / profile.roof(record.roof_key).effective   (0 when flops is 0)
    sol_time     = max(memory_time, compute_time)       a tie is memory-bound
    efficiency   = sol_time / record.timing.actual_time_s

Verdicts, checked in this order: an error/skipped record is ``error``; a row
the model cannot price honestly is ``blank`` with a named reason (``BLANK_*``,
never guessed); ``latency-bound`` when sol_time and the measured time are both
below the profile's latency floor; ``anomaly`` above 105 %; ``at-ceiling`` at
80 % or more; otherwise ``below``.

The physics check compares each row's implied rates (bytes / time, flops /
time) with the *theoretical* ceilings of its roofs. A breach is physically
impossible, so it is a formula error (never a fast kernel) and fails health.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Literal, Sequence

from tileops.bench.records import Record
from tileops.profiles import Profile
from tileops.profiles import select_profile as _profiles_select

Verdict = Literal[
    "at-ceiling",  # efficiency >= 80 %
    "below",  # priced, under 80 %
    "anomaly",  # > 105 %: the formula or the calibration is wrong; never "at ceiling"
    "latency-bound",  # sol_time and measured time both below the profile's latency floor
    "blank",  # not priced; blank_reason says why (never guessed)
    "error",  # an error/skipped record
]
Bound = Literal["memory", "compute"]

VERDICTS: tuple[str, ...] = ("at-ceiling", "below", "anomaly", "latency-bound", "blank", "error")

AT_CEILING = 0.80
ANOMALY = 1.05
#: Float noise allowance at the verdict lines: 80 % computed as 0.7999999999999999 is still 80 %.
_EPS = 1e-9

# Blank reasons: stable, low-cardinality names (they become metric labels); the
# sentence with the particulars is ``Priced.blank_detail``.
BLANK_ERROR = "error"  # an error record (verdict "error")
BLANK_SKIPPED = "skipped"  # a skipped record (verdict "error")
BLANK_NO_PROFILE = "no-profile"  # no profile matches the device
BLANK_NO_TIMING = "no-timing"  # an ok record without timing
BLANK_NO_CUPTI = "no-cupti"  # a GPU row timed without CUPTI (CUDA events include launch gaps)
BLANK_NO_ROOFLINE = "no-roofline"  # the record carries no (flops, bytes)
BLANK_BYTES_ZERO = "bytes-zero"  # the bytes formula yields zero
BLANK_MEMORY_UNCALIBRATED = "memory-uncalibrated"  # the profile's memory roof has no effective value
BLANK_ROOF_ABSENT = "roof-absent"  # the record's roof key (or its alias) is not in the profile
BLANK_ROOF_UNCALIBRATED = "roof-uncalibrated"  # the roof exists but has no calibration

BLANK_REASONS: dict[str, str] = {
    BLANK_ERROR: "the row failed in the bench (an error record)",
    BLANK_SKIPPED: "the bench skipped the row",
    BLANK_NO_PROFILE: "no profile matches the device name",
    BLANK_NO_TIMING: "the record has no timing",
    BLANK_NO_CUPTI: "timed without CUPTI on a GPU: CUDA-event time is not device-busy time",
    BLANK_NO_ROOFLINE: "the record carries no (flops, bytes)",
    BLANK_BYTES_ZERO: "the bytes formula yields zero",
    BLANK_MEMORY_UNCALIBRATED: "the profile's memory roof is uncalibrated",
    BLANK_ROOF_ABSENT: "the record's roof key is absent from the profile",
    BLANK_ROOF_UNCALIBRATED: "the record's compute roof is uncalibrated in the profile",
}

NOTE_NOMINAL_UNKNOWN = ("nominal memory bandwidth unknown: priced on the measured envelope, "
                        "and the physics check cannot judge bandwidth")


_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))


def si(value: float | None, unit: str) -> str:
    """``41.2 GB/s``, ``1.21 TFLOP/s``: three significant figures and an SI prefix (``—`` for None)."""
    if value is None or not math.isfinite(value):
        return "—"
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


@dataclass(frozen=True, slots=True)
class Breach:
    """A physics-check breach: an implied rate above a theoretical ceiling (§4.3)."""

    ceiling: str  # "memory" or a roof key such as "tensor_core.bf16"
    implied_per_s: float  # bytes/s or FLOP/s the row implies
    theoretical_per_s: float

    @property
    def ratio(self) -> float:
        return self.implied_per_s / self.theoretical_per_s

    @property
    def unit(self) -> str:
        return "B/s" if self.ceiling == "memory" else "FLOP/s"

    def describe(self, record: Record | None = None) -> str:
        """The sentence a person reads: a FORMULA ERROR, never a fast kernel."""
        who = f"{record.op} [{record.label} {record.dtype} {record.backend}]: " if record is not None else ""
        return (f"FORMULA ERROR: {who}implies {si(self.implied_per_s, self.unit)} on {self.ceiling}, "
                f"{self.ratio:.0%} of its theoretical {si(self.theoretical_per_s, self.unit)}; "
                "physically impossible, so the roofline formula (flops/bytes) or roof key overstates the work")


@dataclass(frozen=True, slots=True)
class Priced:
    record: Record
    profile: str | None  # the profile's name, None when no profile matched
    verdict: Verdict
    blank_reason: str | None = None  # a BLANK_* name; set for "blank" and "error" verdicts
    actual_time_s: float | None = None
    memory_time_s: float | None = None
    compute_time_s: float | None = None
    sol_time_s: float | None = None
    efficiency: float | None = None  # sol_time / actual_time, a ratio (1.0 = 100 %)
    bound: Bound | None = None
    achieved_bytes_per_s: float | None = None
    achieved_flops_per_s: float | None = None
    effective_bandwidth: float | None = None  # bytes/s
    effective_peak: float | None = None  # FLOP/s of the record's roof
    breaches: tuple[Breach, ...] = ()
    blank_detail: str | None = None  # the blank/error reason as a sentence with its particulars
    roof: str | None = None  # the profile key that priced record.roof_key (after roof_aliases)
    notes: tuple[str, ...] = ()  # caveats on the reading (e.g. nominal bandwidth unknown)

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity, FLOP per byte (None without bytes)."""
        r = self.record
        if r.flops is None or not r.bytes:
            return None
        return r.flops / r.bytes

    @property
    def formula_error(self) -> bool:
        return bool(self.breaches)


@dataclass(frozen=True)
class Health:
    ok: bool  # False when any row breaches the physics check
    rows: int
    by_verdict: dict[str, int] = field(default_factory=dict)
    blanks_by_reason: dict[str, int] = field(default_factory=dict)
    breaches: int = 0  # rows with at least one breach
    errors: int = 0  # error records (skipped rows are not errors)

    @property
    def at_ceiling(self) -> int:
        return self.by_verdict.get("at-ceiling", 0)

    @property
    def anomalies(self) -> int:
        return self.by_verdict.get("anomaly", 0)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "rows": self.rows, "by_verdict": dict(self.by_verdict),
                "blanks_by_reason": dict(self.blanks_by_reason), "breaches": self.breaches,
                "errors": self.errors}


def select_profile(device_name: str, profiles: Iterable[Profile]) -> Profile | None:
    """The profile whose ``match`` names the device; None leaves SOL blank (§1.2).

    Delegates to ``tileops.profiles.select_profile`` so the tool and ``tileops
    profile`` agree: a store (calibrated) profile wins over a shipped one, and
    two profiles claiming one device raise ProfileError rather than guess.
    """
    return _profiles_select(device_name, list(profiles))


@dataclass
class _Ceilings:
    """A profile's ceilings resolved once, so pricing many records stays cheap."""

    profile: Profile
    bandwidth: float | None
    bandwidth_theoretical: float | None
    notes: tuple[str, ...]
    name: str = ""
    latency_floor_s: float | None = None
    _roofs: dict[str, tuple[str | None, float | None, float | None]] = field(default_factory=dict)

    @classmethod
    def of(cls, profile: Profile) -> "_Ceilings":
        mem = profile.memory
        notes: tuple[str, ...] = ()
        if mem is not None and not mem.nominal_known:
            notes = (NOTE_NOMINAL_UNKNOWN,)
        return cls(profile, mem.effective if mem else None, mem.theoretical if mem else None, notes,
                   profile.name, profile.latency_floor_s)

    def roof(self, key: str) -> tuple[str | None, float | None, float | None]:
        """(resolved key or None when absent, effective, theoretical) for a record's roof key."""
        hit = self._roofs.get(key)
        if hit is None:
            resolved = self.profile.roof_aliases.get(key, key)
            r = self.profile.compute.get(resolved)
            hit = (resolved, r.effective, r.theoretical) if r is not None else (None, None, None)
            self._roofs[key] = hit
        return hit


def price(record: Record, profile: Profile | None) -> Priced:
    """Price one record against one profile (None: no profile matched the device)."""
    return _price(record, _Ceilings.of(profile) if profile is not None else None)


def _blank(record: Record, profile: str | None, reason: str, detail: str, *,
           verdict: Verdict = "blank", actual: float | None = None, breaches: tuple[Breach, ...] = (),
           notes: tuple[str, ...] = ()) -> Priced:
    return Priced(record=record, profile=profile, verdict=verdict, blank_reason=reason, blank_detail=detail,
                  actual_time_s=actual, breaches=breaches, notes=notes)


_NO_ROOF: tuple[str | None, float | None, float | None] = (None, None, None)


def _physics(flops: int | None, nbytes: int | None, actual: float, bw_theoretical: float | None,
             roof: tuple[str | None, float | None, float | None]) -> tuple[Breach, ...]:
    """Implied rates against theoretical ceilings, wherever a theoretical value exists."""
    out: tuple[Breach, ...] = ()
    if nbytes and bw_theoretical is not None and nbytes / actual > bw_theoretical:
        out = (Breach("memory", nbytes / actual, bw_theoretical),)
    resolved, _, theo = roof
    if flops and resolved is not None and theo is not None and flops / actual > theo:
        out += (Breach(resolved, flops / actual, theo),)
    return out


def _price(r: Record, c: _Ceilings | None) -> Priced:
    if r.status != "ok":
        if r.status == "skipped":
            return _blank(r, c.profile.name if c else None, BLANK_SKIPPED,
                          f"skipped: {r.skip_reason or 'no reason recorded'}", verdict="error")
        msg = f"{r.error.kind}: {r.error.message}" if r.error else "no error detail recorded"
        return _blank(r, c.profile.name if c else None, BLANK_ERROR, f"error: {msg}", verdict="error")
    timing = r.timing
    if c is None:
        return _blank(r, None, BLANK_NO_PROFILE,
                      f"no profile matches device {r.env.device_name!r}; calibrate it (`tileops calibrate`) "
                      "or pass --profile", actual=timing.actual_time_s if timing else None)
    name = c.name
    if timing is None:
        return _blank(r, name, BLANK_NO_TIMING, "an ok record without timing; re-run the bench for this row")
    actual = timing.actual_time_s
    flops, nbytes, key = r.flops, r.bytes, r.roof_key
    roof = c.roof(key) if key else _NO_ROOF
    breaches = _physics(flops, nbytes, actual, c.bandwidth_theoretical, roof)
    if timing.timer != "cupti" and r.env.device_kind == "cuda":
        why = timing.fallback_reason or ("the run asked for it; re-run with --timer auto or cupti for "
                                         "device-busy time")
        return _blank(r, name, BLANK_NO_CUPTI, f"timed with {timing.timer} on a GPU, not CUPTI device-busy "
                      f"time: {why}", actual=actual, breaches=breaches, notes=c.notes)
    if nbytes is None or flops is None:
        return _blank(r, name, BLANK_NO_ROOFLINE, "the record carries no (flops, bytes) from eval_roofline()",
                      actual=actual, breaches=breaches, notes=c.notes)
    if nbytes == 0:
        return _blank(r, name, BLANK_BYTES_ZERO, "the bytes formula yields zero; SOL is undefined",
                      actual=actual, breaches=breaches, notes=c.notes)
    bw = c.bandwidth
    if bw is None:
        return _blank(r, name, BLANK_MEMORY_UNCALIBRATED,
                      f"profile {name!r} has no calibrated memory roof; run `tileops calibrate`",
                      actual=actual, breaches=breaches, notes=c.notes)
    memory_time = nbytes / bw
    resolved, peak, _ = roof
    if flops == 0:
        compute_time = 0.0  # no arithmetic: the compute roof is not needed, nothing is guessed
    else:
        if not key:
            return _blank(r, name, BLANK_ROOF_ABSENT, "the record has FLOPs but no roof key",
                          actual=actual, breaches=breaches, notes=c.notes)
        if resolved is None:
            return _blank(r, name, BLANK_ROOF_ABSENT,
                          f"roof key {key!r} is absent from profile {name!r} (no roof, no alias)",
                          actual=actual, breaches=breaches, notes=c.notes)
        if peak is None:
            via = f" (via alias {resolved!r})" if resolved != key else ""
            return _blank(r, name, BLANK_ROOF_UNCALIBRATED,
                          f"roof {key!r}{via} is uncalibrated in profile {name!r}; run `tileops calibrate`",
                          actual=actual, breaches=breaches, notes=c.notes)
        compute_time = flops / peak
    if memory_time >= compute_time:  # a tie is memory-bound
        sol, bound = memory_time, "memory"
    else:
        sol, bound = compute_time, "compute"
    eff = sol / actual
    floor = c.latency_floor_s
    verdict: Verdict
    if floor is not None and sol < floor and actual < floor:
        verdict = "latency-bound"
    elif eff > ANOMALY + _EPS:
        verdict = "anomaly"
    elif eff >= AT_CEILING - _EPS:
        verdict = "at-ceiling"
    else:
        verdict = "below"
    return Priced(
        record=r, profile=name, verdict=verdict, actual_time_s=actual, memory_time_s=memory_time,
        compute_time_s=compute_time, sol_time_s=sol, efficiency=eff, bound=bound,  # type: ignore[arg-type]
        achieved_bytes_per_s=nbytes / actual, achieved_flops_per_s=flops / actual,
        effective_bandwidth=bw, effective_peak=peak, breaches=breaches, roof=resolved, notes=c.notes)


ProfileChoice = Profile | None | Sequence[Profile] | Callable[[Record], Profile | None]


def price_all(records: Iterable[Record], profile: ProfileChoice) -> list[Priced]:
    """Price many records.

    ``profile`` is one Profile (every record priced on it), None (every row blank:
    no profile), a sequence of profiles (each record's by ``select_profile`` on its
    ``env.device_name``), or a callable ``record -> Profile | None``.
    """
    if profile is None or isinstance(profile, Profile):
        c = _Ceilings.of(profile) if profile is not None else None
        return [_price(r, c) for r in records]
    if callable(profile):
        chooser = profile
    else:
        profiles = list(profile)
        by_name: dict[str, Profile | None] = {}

        def chooser(rec: Record) -> Profile | None:
            n = rec.env.device_name
            if n not in by_name:
                by_name[n] = select_profile(n, profiles)
            return by_name[n]

    cache: dict[int, _Ceilings] = {}
    out: list[Priced] = []
    for r in records:
        p = chooser(r)
        if p is None:
            out.append(_price(r, None))
            continue
        c = cache.get(id(p))
        if c is None or c.profile is not p:
            c = cache[id(p)] = _Ceilings.of(p)
        out.append(_price(r, c))
    return out


def health(priced: Iterable[Priced]) -> Health:
    """Counts by verdict and blank reason; ``ok`` is False when any row breaches the physics check."""
    by_verdict: dict[str, int] = {}
    blanks: dict[str, int] = {}
    breaches = errors = rows = 0
    for p in priced:
        rows += 1
        by_verdict[p.verdict] = by_verdict.get(p.verdict, 0) + 1
        if p.verdict == "blank" and p.blank_reason:
            blanks[p.blank_reason] = blanks.get(p.blank_reason, 0) + 1
        if p.breaches:
            breaches += 1
        if p.verdict == "error" and p.blank_reason == BLANK_ERROR:
            errors += 1
    return Health(ok=breaches == 0, rows=rows, by_verdict=by_verdict, blanks_by_reason=blanks,
                  breaches=breaches, errors=errors)
