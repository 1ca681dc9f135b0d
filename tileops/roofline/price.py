"""Pricing one record against one profile (§1.2, §4.3): SOL time, efficiency, bound, verdict, physics check.

The model::

    memory_time  = bytes / profile.memory.effective
    compute_time = flops / profile.roof(record.roof_key).effective   (0 when flops is 0)
    sol_time     = max(memory_time, compute_time)       a tie is memory-bound
    efficiency   = sol_time / record.timing.actual_time_s

Verdicts, checked in this order: an error/skipped record is ``error``; a row
the model cannot price honestly is ``blank`` with a named reason (``BLANK_*``,
never guessed); ``latency-bound`` when sol_time and the measured time are both
below the profile's latency floor; ``unstable`` when the row's time is not
known well enough to judge (its interval wider than ±5 % on a CPU, ±2 % on a
GPU, or the row ran contended or throttled: ``tileops.roofline.noise``), unless
even its SOL interval's low end is an anomaly; ``anomaly`` above 105 %;
``at-ceiling`` at 80 % or more; otherwise ``below``. A priced row carries its
SOL interval (``sol_ci``) where its record has a time interval.

The physics check compares each row's implied rates (bytes / time, flops /
time) with the *theoretical* ceilings of its roofs. A breach is physically
impossible, so it is a formula error (never a fast kernel). A ceiling with no
theoretical figure (a CPU whose nominal bandwidth is unknown, a roof key the
profile lacks, no profile at all) cannot be judged: each row records that as a
:class:`Check` with a ``NOT_JUDGED_*`` reason. A theoretical figure is judged
against only when it is an upper bound (issue 29): an estimate on a clock
nobody measured (``Roof.not_a_bound``) still prices rows but is
``NOT_JUDGED_ESTIMATE``; and a row above a ceiling in doubt (a calibration above
95 % of it) is ``NOT_JUDGED_SUSPECT``, never a FORMULA ERROR. Noise only ever slows a
timed call (a neighbour's slice, throttling, a page fault), so a row is judged
on its *fast end* (``Timing.fast_ci_s``: the fastest block's median with the
call's own jitter, ``tileops.bench.interval.fast_interval``), which no noise can
make faster than the call runs: a breach when even the top of the fast end
(the noise-free call takes at most that long) implies a rate above the ceiling
plus the ceiling's own uncertainty (``ceiling_tolerance``), so noise cannot
invent one, however busy the host (the top of the level's interval and the
measured level itself bound the noise-free time too, and where one is the
lower, as for a row of a few samples whose jitter cannot be told, it counts
instead); held when even the bottom of the fast end
implies a rate at most the ceiling, so no breach hides within the row's stated
uncertainty; ``NOT_JUDGED_NOISE`` only between the two, and the check then
carries both rates (the numbers that would decide it). A record without a fast
end (written before issue 34) is judged on its time interval's ends the same
way, and one without any interval on its median.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, NamedTuple
from collections.abc import Iterable, Iterator

from tileops.profiles import Profile, ProfileChooser
from tileops.records import AuditEntry, Record, Timing
from tileops.roofline.gap import GapBlank, GapSplit, gap_for
from tileops.roofline.noise import CI_NO_INTERVAL, fast_times, sol_interval, time_interval, unstable_reasons
from tileops.roofline.power import BURST, SUSTAINED, Basis, burst_note, wants_sustained
from tileops.roofline.state import state_sol

Verdict = Literal[
    "at-ceiling",  # efficiency >= 80 %
    "below",  # priced, under 80 %
    "unstable",  # priced, but its time is not known well enough (or was disturbed) to judge it (issue 26)
    "anomaly",  # > 105 %: the formula or the calibration is wrong; never "at ceiling"
    "latency-bound",  # sol_time and measured time both below the profile's latency floor
    "blank",  # not priced; blank_reason says why (never guessed)
    "error",  # an error/skipped record
]
Bound = Literal["memory", "compute"]

VERDICTS: tuple[str, ...] = ("at-ceiling", "below", "unstable", "anomaly", "latency-bound", "blank", "error")

AT_CEILING = 0.80
ANOMALY = 1.05
#: A row is host-bound when a repetition's span (first launch to last device activity) exceeds its device-busy
#: time by more than 20 %: the device sat idle waiting on the host (syncs, a Python loop over launches), so a
#: SOL ratio of busy time overstates what a caller of the op gets (docs/roofline.md, "Host-bound rows").
HOST_BOUND_RATIO = 1.20
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

# Why the physics check could not judge a ceiling of a row: stable names (metric labels).
NOT_JUDGED_NO_PROFILE = "no-profile"  # no profile matches the device: no ceiling at all
NOT_JUDGED_NOMINAL_UNKNOWN = "nominal-unknown"  # the memory roof has no nominal (theoretical) bandwidth
NOT_JUDGED_THEORETICAL_MISSING = "theoretical-missing"  # the profile has no memory roof at all
NOT_JUDGED_ROOF_ABSENT = "roof-absent"  # the row's roof key is not in the profile (nor aliased), or none given
NOT_JUDGED_NO_TIMING = "no-timing"  # an ok record without timing: no implied rate
NOT_JUDGED_NO_ROOFLINE = "no-roofline"  # the record carries no flops (or bytes): no implied rate
NOT_JUDGED_ESTIMATE = "estimate"  # the compute peak is an estimate on an unmeasured clock: no upper bound
NOT_JUDGED_SUSPECT = "ceiling-suspect"  # the row is above a ceiling its own calibration puts in doubt
NOT_JUDGED_NOISE = "within-noise"  # the row's fast end straddles the ceiling: neither a breach nor a pass shown

NOT_JUDGED_REASONS: dict[str, str] = {
    NOT_JUDGED_NO_PROFILE: "no profile matches the device, so there is no theoretical ceiling to compare with; "
                           "calibrate the device (`tileops calibrate`) or pass --profile",
    NOT_JUDGED_NOMINAL_UNKNOWN: "the nominal memory bandwidth is unknown (no DMI/SMBIOS data, none given); give it "
                                "with TILEOPS_DRAM_BANDWIDTH or `tileops calibrate --dram-bandwidth`, or price with "
                                "--profile FILE stating memory.theoretical",
    NOT_JUDGED_THEORETICAL_MISSING: "the profile has no memory roof, so no theoretical bandwidth; add "
                                    "memory.theoretical to the profile (docs/profiles.md)",
    NOT_JUDGED_ROOF_ABSENT: "the row's roof key is not in the profile (no roof, no alias), so no theoretical peak",
    NOT_JUDGED_NO_TIMING: "the record has no timing, so no implied rate",
    NOT_JUDGED_NO_ROOFLINE: "the record carries no (flops, bytes), so no implied rate",
    NOT_JUDGED_ESTIMATE: "the compute peak is an estimate on a clock that was not measured (turbo runs cores above "
                         "the stated clock), so it is no upper bound: shown and used for pricing, never judged; "
                         "calibrate again with a C compiler with OpenMP (the clock is measured in C), or state the "
                         "all-core clock with `tileops calibrate --cpu-ghz`",
    NOT_JUDGED_SUSPECT: "the row is above a ceiling its own calibration puts in doubt (the calibration reached over "
                        "95% of it): the theoretical is more likely wrong than the formula; see the ceiling's "
                        "SUSPECT line, fix the theoretical (clock, units per core, nominal) and price again",
    NOT_JUDGED_NOISE: "the row's fastest blocks straddle the ceiling: the slowest the call can be (noise aside) "
                      "implies a rate under the theoretical plus its uncertainty, the fastest its readings allow one "
                      "above; so neither a breach nor a pass is shown; re-run the row with more time (--max-time) "
                      "for more blocks",
}


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


class Check(NamedTuple):
    """One ceiling of one row as the physics check saw it: judged (a theoretical figure and an implied
    rate were both there) or not, with the reason. A row has one per ceiling its work touches: memory when
    its bytes are not zero, its compute roof when its FLOPs are not zero. (A named tuple: pricing 100,000
    records builds up to 200,000 of them.) A row not judged against an estimate or a suspect ceiling keeps
    its implied rate, so the health can tell a row above 100 % of it."""

    ceiling: str  # "memory", or the roof key (the profile's key after roof_aliases; the record's when absent)
    theoretical_per_s: float | None = None
    implied_per_s: float | None = None
    not_judged: str | None = None  # a NOT_JUDGED_* name; None when judged
    suspect: str | None = None  # why the profile puts this ceiling in doubt (Roof.suspect), one shared string
    #: within-noise: the most the row's readings allow it to imply (``implied_per_s`` then holds the least)
    implied_most_per_s: float | None = None

    @property
    def judged(self) -> bool:
        return self.not_judged is None

    @property
    def breached(self) -> bool:
        return (self.not_judged is None and self.implied_per_s is not None and self.theoretical_per_s is not None
                and self.implied_per_s > self.theoretical_per_s)

    @property
    def ratio(self) -> float | None:
        """implied / theoretical when judged."""
        if self.not_judged is not None or not self.theoretical_per_s or self.implied_per_s is None:
            return None
        return self.implied_per_s / self.theoretical_per_s


# Not frozen: a frozen __init__ sets each field through object.__setattr__, which made building one cost several
# times as much (a run prices 100,000; docs/architecture.md, "Figures behind the code"), and nothing changes a
# priced row. It was never hashable (its record holds dicts).
@dataclass(slots=True)
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
    checks: tuple[Check, ...] = ()  # the physics check per ceiling (none for error/skipped records)
    sol_ci: tuple[float, float] | None = None  # the SOL ratio's 95 % interval (tileops.roofline.noise)
    sol_ci_blank: str | None = None  # why a priced row has no sol_ci (noise.CI_REASONS); None otherwise
    unstable: tuple[str, ...] = ()  # why the verdict is "unstable", one phrase each
    #: which fraction of its bounding ceiling a priced row was priced against (issue 28): ``sustained`` for a
    #: power-capped row whose profile holds one, else ``burst``; None for a row not priced
    ceiling_basis: Basis | None = None
    #: the SOL gap split by the row's audit entry (``tileops.roofline.gap``), or why not; None when the run has
    #: no audit entries at all (``price_iter``'s ``audit``)
    gap: GapSplit | GapBlank | None = None
    #: issue 39, the device's state during the row, read by the reference probe timed between the row's blocks:
    #: the probe's rate over the calibrated ceiling's rate of the same kind (1.0 = the device runs as calibrated),
    #: with its 95 % interval; ``probe_kind`` names the probe ("memory", or "fma" for a compute-bound row). None
    #: where the record carries no probe or the profile no matching ceiling.
    probe_ratio: float | None = None
    probe_ratio_ci: tuple[float, float] | None = None
    probe_kind: str | None = None
    #: SOL against the device's state during the row (efficiency / probe_ratio): the kernel's own efficiency,
    #: which a slow device does not move; with its 95 % interval. None without ``probe_ratio``.
    state_efficiency: float | None = None
    state_efficiency_ci: tuple[float, float] | None = None

    @property
    def physics(self) -> str | None:
        """The row's physics state: ``breach``, ``held`` (every ceiling judged), ``not-judged`` (some ceiling
        could not be), or None when there was nothing to check (an error or skipped record)."""
        if self.breaches:
            return "breach"
        if not self.checks:
            return None
        for c in self.checks:  # a loop, not all(...): the exporter asks every row of a large run
            if c.not_judged is not None:
                return "not-judged"
        return "held"

    @property
    def span_s(self) -> float | None:
        """The timing's span, first launch to last device activity (None where no timer saw it)."""
        t = self.record.timing
        return None if t is None else t.span_s

    @property
    def host_bound(self) -> bool | None:
        """True when the span exceeds the device-busy time by more than ``HOST_BOUND_RATIO``; None when the
        row has no span (CPU rows, CUDA events, error rows)."""
        return host_bound(self.record)

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



_RoofView = tuple[str | None, float | None, float | None, str | None, str | None, float]
_NO_ROOF: _RoofView = (None, None, None, None, None, 0.0)


@dataclass
class _Ceilings:
    """A profile's ceilings resolved once, so pricing many records stays cheap."""

    profile: Profile
    bandwidth: float | None
    bandwidth_theoretical: float | None
    notes: tuple[str, ...]
    name: str = ""
    latency_floor_s: float | None = None
    memory_not_judged: str | None = None  # why the memory ceiling cannot be judged on this profile
    memory_suspect: str | None = None  # why the memory ceiling is in doubt (MemoryRoof.suspect)
    _roofs: dict[str, _RoofView] = field(default_factory=dict)
    #: this view prices power-capped rows: each ceiling's sustained fraction where the profile holds one
    sustained_view: bool = False
    memory_sustained: bool = False  # the bandwidth above is the sustained one
    _roofs_sustained: set[str] = field(default_factory=set)  # resolved roof keys whose effective is sustained
    _capped: _Ceilings | None = None

    def capped(self) -> _Ceilings:
        """The same profile's ceilings for a power-capped row (built once)."""
        if self._capped is None:
            mem = self.profile.memory
            sustained_bw = mem.effective_sustained if mem is not None else None
            self._capped = _Ceilings(self.profile, sustained_bw or self.bandwidth, self.bandwidth_theoretical,
                                     self.notes, self.name, self.latency_floor_s, self.memory_not_judged,
                                     self.memory_suspect, sustained_view=True,
                                     memory_sustained=sustained_bw is not None)
        return self._capped

    @classmethod
    def of(cls, profile: Profile) -> _Ceilings:
        mem = profile.memory
        notes: tuple[str, ...] = ()
        if mem is not None and not mem.nominal_known:
            notes = (NOTE_NOMINAL_UNKNOWN,)
        if profile.calibration_marked:  # priced on a calibration stored although contended or dropped: said
            notes += (profile.calibration_marked,)
        why = (NOT_JUDGED_THEORETICAL_MISSING if mem is None
               else NOT_JUDGED_NOMINAL_UNKNOWN if mem.theoretical is None else None)
        return cls(profile, mem.effective if mem else None, mem.theoretical if mem else None, notes,
                   profile.name, profile.latency_floor_s, why, mem.suspect if mem else None)

    def roof(self, key: str) -> _RoofView:
        """(resolved key or None when absent, effective, theoretical, why it cannot be judged, why it is
        suspect) for a record's roof key."""
        hit = self._roofs.get(key)
        if hit is None:
            resolved = self.profile.roof_aliases.get(key, key)
            r = self.profile.compute.get(resolved)
            effective = r.effective if r is not None else None
            if r is not None and self.sustained_view and r.effective_sustained is not None:
                effective = r.effective_sustained
                self._roofs_sustained.add(resolved)
            hit = ((resolved, effective, r.theoretical, NOT_JUDGED_ESTIMATE if r.not_a_bound else None, r.suspect,
                    ceiling_tolerance(r)) if r is not None else _NO_ROOF)
            self._roofs[key] = hit
        return hit


def host_bound(r: Record) -> bool | None:
    """Whether a record's timing shows the host holding the device back (``HOST_BOUND_RATIO``); None without
    a span to judge by."""
    t = r.timing
    if t is None or t.span_s is None or not t.median_s:
        return None
    return t.span_s > HOST_BOUND_RATIO * t.median_s


def host_bound_note(r: Record) -> str:
    """The sentence a host-bound row's SOL carries."""
    t = r.timing
    assert t is not None and t.span_s is not None
    return (f"host-bound: a call spans {si(t.span_s, 's')} from its first launch to its last kernel's end, "
            f"{t.span_s / t.median_s:.2f}x its {si(t.median_s, 's')} of device-busy time; the device waits on "
            "the host between kernels, so this SOL (of busy time) overstates the op as a caller sees it")


def price(record: Record, profile: Profile | None) -> Priced:
    """Price one record against one profile (None: no profile matched the device)."""
    return _price(record, _Ceilings.of(profile) if profile is not None else None)


def _blank(record: Record, profile: str | None, reason: str, detail: str, *,
           verdict: Verdict = "blank", actual: float | None = None, checks: tuple[Check, ...] = (),
           notes: tuple[str, ...] = ()) -> Priced:
    return Priced(record=record, profile=profile, verdict=verdict, blank_reason=reason, blank_detail=detail,
                  actual_time_s=actual, breaches=_breaches(checks), notes=notes, checks=checks)


#: How far a measured clock may sit under the clock a CPU's cores reach in some moment of a row (a few hundred
#: MHz of turbo between an all-core FMA load and a row's own): a compute peak on a measured clock is a bound
#: only to within this, so a breach must clear it. Datasheet, user and nominal figures are exact (0).
MEASURED_CLOCK_TOLERANCE = 0.02


def ceiling_tolerance(roof: object) -> float:
    """The ceiling's own relative uncertainty: :data:`MEASURED_CLOCK_TOLERANCE` for a compute peak built on a
    measured clock, else 0 (a stated figure is a bound as stated)."""
    peak = getattr(roof, "peak", None)
    return MEASURED_CLOCK_TOLERANCE if peak is not None and peak.ghz_source == "measured" else 0.0


def _judge(ceiling: str, theo: float, implied: float, unbound: str | None, suspect: str | None,
           rates: tuple[float, float] | None = None, tolerance: float = 0.0) -> Check:
    """A ceiling with a theoretical figure and an implied rate: judged, unless the figure is no upper bound
    (``unbound``: an estimate) or the row is above a ceiling in doubt (``suspect``), which is no formula error.
    ``rates``: the least and the most the row's readings imply (its fast end's top and bottom; older records:
    its interval's slow and fast ends). A breach is judged on the least, above the ceiling plus ``tolerance``
    (and the check carries that rate); held on the most, at most the ceiling; between the two the row is
    ``NOT_JUDGED_NOISE``, the check carrying both."""
    if unbound is not None:
        return Check(ceiling, theo, implied, unbound, suspect)
    least, most = rates if rates is not None else (implied, implied)
    if suspect is not None and least > theo:
        return Check(ceiling, theo, least, NOT_JUDGED_SUSPECT, suspect)
    if least > theo * (1.0 + tolerance):
        return Check(ceiling, theo, least, None, suspect)
    if most > theo:
        return Check(ceiling, theo, least, NOT_JUDGED_NOISE, suspect, most)
    return Check(ceiling, theo, implied, None, suspect)


def _checks(r: Record, actual: float | None, c: _Ceilings | None, roof: _RoofView) -> tuple[Check, ...]:
    """The physics check of each ceiling the row's work touches: its implied rate against the ceiling's
    theoretical figure where both exist and the figure is a bound, else the reason it could not be judged
    (never a pass). On the row's fast end where it has one, else its interval's ends (:func:`_judge`)."""
    flops, nbytes = r.flops, r.bytes
    t = r.timing
    times = None
    if actual and t is not None:  # (fast, slow) times: the most and the least rate the row implies
        fast, level = fast_times(t), time_interval(t)
        times = fast or level
        if times is not None:
            # Every top bounds the noise-free time, the lowest counts: the fast end's and the level interval's
            # (statistical, and wide where a busy host left few blocks) and the measured level itself (at
            # least half the calls ran that fast, and noise only slows a call).
            top = min(times[1], level[1] if level is not None else times[1], actual)
            times = (min(times[0], top), top)
    row_reason = NOT_JUDGED_NO_PROFILE if c is None else NOT_JUDGED_NO_TIMING if not actual else None
    out: list[Check] = []
    if nbytes != 0:  # no traffic: the memory ceiling is not involved
        theo = c.bandwidth_theoretical if c is not None else None
        why = row_reason or (NOT_JUDGED_NO_ROOFLINE if nbytes is None else c.memory_not_judged if c else None)
        if why is None and nbytes and actual and theo is not None:  # memory_not_judged is None: theo is known
            out.append(_judge("memory", theo, nbytes / actual, None, c.memory_suspect if c else None,
                              (nbytes / times[1], nbytes / times[0]) if times else None))
        else:
            out.append(Check("memory", theo, None, why))
    if flops != 0:  # no arithmetic: no compute ceiling is involved
        resolved, _, theo, unbound, suspect, tolerance = roof
        why = row_reason or (NOT_JUDGED_NO_ROOFLINE if flops is None
                             else NOT_JUDGED_ROOF_ABSENT if resolved is None or theo is None else None)
        name = resolved or r.roof_key or "compute"
        if why is None and flops and actual and theo is not None:
            out.append(_judge(name, theo, flops / actual, unbound, suspect,
                              (flops / times[1], flops / times[0]) if times else None, tolerance))
        else:
            out.append(Check(name, theo, None, why))
    return tuple(out)


def _breaches(checks: tuple[Check, ...]) -> tuple[Breach, ...]:
    out: tuple[Breach, ...] = ()
    for ceiling, theo, implied, why, _, _ in checks:
        if why is None and implied is not None and theo is not None and implied > theo:
            out += (Breach(ceiling, implied, theo),)
    return out


class _Unpriced(NamedTuple):
    """Why an ok, timed row gets no SOL: its blank reason and the words that say so."""

    reason: str
    detail: str


class _Work(NamedTuple):
    """An ok, timed row's work and the time each roof allows it."""

    moved_bytes: float  # the row's bytes (its record's)
    flops: float
    bandwidth: float
    memory_time_s: float
    compute_time_s: float


def _price(r: Record, c: _Ceilings | None) -> Priced:
    if r.status != "ok":
        return _price_not_ok(r, c)
    timing = r.timing
    key = r.roof_key
    if c is not None and wants_sustained(r):
        c = c.capped()
    if c is None:
        actual = timing.actual_time_s if timing else None
        return _blank(r, None, BLANK_NO_PROFILE,
                      f"no profile matches device {r.env.device.name!r}; calibrate it (`tileops calibrate`) "
                      "or pass --profile", actual=actual, checks=_checks(r, actual, None, _NO_ROOF))
    name = c.name
    roof = c.roof(key) if key else _NO_ROOF
    if timing is None:
        return _blank(r, name, BLANK_NO_TIMING, "an ok record without timing; re-run the bench for this row",
                      checks=_checks(r, None, c, roof))
    actual = timing.actual_time_s
    checks = _checks(r, actual, c, roof)
    work = _work(r, c, roof, timing)
    if isinstance(work, _Unpriced):
        return _blank(r, name, work.reason, work.detail, actual=actual, checks=checks, notes=c.notes)
    resolved, peak = roof[0], roof[1]
    bound: Bound
    if work.memory_time_s >= work.compute_time_s:  # a tie is memory-bound
        sol, bound = work.memory_time_s, "memory"
    else:
        sol, bound = work.compute_time_s, "compute"
    eff = sol / actual
    sol_ci = sol_interval(sol, timing)
    basis, why = _basis(c, bound, resolved)
    verdict, unstable = _verdict(r, c, sol, actual, eff, sol_ci, basis)
    notes = c.notes
    if timing.span_s is not None and timing.span_s > HOST_BOUND_RATIO * timing.median_s:
        notes = notes + (host_bound_note(r),)
    if why:
        notes = notes + (why,)
    priced = Priced(
        record=r, profile=name, verdict=verdict, actual_time_s=actual, memory_time_s=work.memory_time_s,
        compute_time_s=work.compute_time_s, sol_time_s=sol, efficiency=eff, bound=bound,
        achieved_bytes_per_s=work.moved_bytes / actual, achieved_flops_per_s=work.flops / actual,
        effective_bandwidth=work.bandwidth, effective_peak=peak, breaches=_breaches(checks), roof=resolved,
        notes=notes, checks=checks, sol_ci=sol_ci, sol_ci_blank=None if sol_ci else CI_NO_INTERVAL,
        unstable=unstable if verdict == "unstable" else (), ceiling_basis=basis)
    if r.probe is not None:  # issue 39: SOL against the device's state during the row (tileops.roofline.state)
        state = state_sol(r, c.profile, bound, eff, sol_ci)
        if state is not None:
            (priced.probe_kind, priced.probe_ratio, priced.probe_ratio_ci, priced.state_efficiency,
             priced.state_efficiency_ci) = state
    return priced


def _price_not_ok(r: Record, c: _Ceilings | None) -> Priced:
    """A skipped or failed row: an error verdict saying why."""
    if r.status == "skipped":
        return _blank(r, c.profile.name if c else None, BLANK_SKIPPED,
                      f"skipped: {r.skip_reason or 'no reason recorded'}", verdict="error")
    msg = f"{r.error.kind}: {r.error.message}" if r.error else "no error detail recorded"
    return _blank(r, c.profile.name if c else None, BLANK_ERROR, f"error: {msg}", verdict="error")


def _work(r: Record, c: _Ceilings, roof: _RoofView, timing: Timing) -> _Work | _Unpriced:
    """The row's work and its memory and compute times on the profile's roofs, or why it cannot be priced: a
    GPU row not timed by CUPTI, no work formula, no traffic, or a roof the profile lacks or has not measured."""
    name = c.name
    if timing.timer != "cupti" and r.env.device.kind == "cuda":
        why = timing.fallback_reason or ("the run asked for it; re-run with --timer auto or cupti for "
                                         "device-busy time")
        return _Unpriced(BLANK_NO_CUPTI, f"timed with {timing.timer} on a GPU, not CUPTI device-busy time: {why}")
    flops, nbytes = r.flops, r.bytes
    if nbytes is None or flops is None:
        return _Unpriced(BLANK_NO_ROOFLINE, "the record carries no (flops, bytes) from eval_roofline()")
    if nbytes == 0:
        return _Unpriced(BLANK_BYTES_ZERO, "the bytes formula yields zero; SOL is undefined")
    bw = c.bandwidth
    if bw is None:
        return _Unpriced(BLANK_MEMORY_UNCALIBRATED,
                         f"profile {name!r} has no calibrated memory roof; run `tileops calibrate`")
    if flops == 0:  # no arithmetic: the compute roof is not needed, nothing is guessed
        return _Work(nbytes, flops, bw, nbytes / bw, 0.0)
    key, (resolved, peak) = r.roof_key, roof[:2]
    if not key:
        return _Unpriced(BLANK_ROOF_ABSENT, "the record has FLOPs but no roof key")
    if resolved is None:
        return _Unpriced(BLANK_ROOF_ABSENT, f"roof key {key!r} is absent from profile {name!r} (no roof, no alias)")
    if peak is None:
        via = f" (via alias {resolved!r})" if resolved != key else ""
        return _Unpriced(BLANK_ROOF_UNCALIBRATED,
                         f"roof {key!r}{via} is uncalibrated in profile {name!r}; run `tileops calibrate`")
    return _Work(nbytes, flops, bw, nbytes / bw, flops / peak)


def _verdict(r: Record, c: _Ceilings, sol: float, actual: float, eff: float,
             sol_ci: tuple[float, float] | None, basis: Basis) -> tuple[Verdict, tuple[str, ...]]:
    """The row's verdict, with the reasons it is unstable (empty unless it is)."""
    floor = c.latency_floor_s
    if floor is not None and sol < floor and actual < floor:
        return "latency-bound", ()
    unstable = unstable_reasons(r, sustained=basis == SUSTAINED)  # a cap its ceiling matches unsettles nothing
    if unstable:
        # an anomaly stands only when even the SOL's low end is one; else a rerun could read it otherwise
        return ("anomaly" if (sol_ci[0] if sol_ci else eff) > ANOMALY + _EPS else "unstable"), unstable
    if eff > ANOMALY + _EPS:
        return "anomaly", unstable
    if eff >= AT_CEILING - _EPS:
        return "at-ceiling", unstable
    return "below", unstable


def _basis(c: _Ceilings, bound: Bound, roof: str | None) -> tuple[Basis, str]:
    """The fraction the bounding ceiling was priced at, and for a power-capped row priced on the burst one
    (its profile holds no sustained fraction for that ceiling), the note saying so."""
    if not c.sustained_view:
        return BURST, ""
    if bound == "memory":
        return (SUSTAINED, "") if c.memory_sustained else (BURST, burst_note("memory"))
    return (SUSTAINED, "") if roof in c._roofs_sustained else (BURST, burst_note(roof or "its compute roof"))


def with_gap(p: Priced, audit: dict[tuple[str, str, str, str], list[AuditEntry]]) -> Priced:
    """``p`` with its SOL gap split by its audit entry (the one of its device where the audit has several), or
    the reason there is none. ``audit``: a run's entries by row key (:func:`audit_index`)."""
    r = p.record
    entries = audit.get(r.key)
    entry = None
    if entries:
        name = r.env.device.name
        entry = next((e for e in reversed(entries) if e.device is not None and e.device.name == name), entries[-1])
    if p.efficiency is None or p.actual_time_s is None or p.effective_bandwidth is None:
        p.gap = GapBlank(f"the row has no SOL to split ({p.blank_reason or p.verdict})")
    else:
        p.gap = gap_for(r, entry, actual_time_s=p.actual_time_s, bandwidth=p.effective_bandwidth,
                        compute_time_s=p.compute_time_s or 0.0)
    return p


def audit_index(entries: Iterable[AuditEntry]) -> dict[tuple[str, str, str, str], list[AuditEntry]]:
    """A run's audit entries by row key, in file order (a later entry of a row re-audits it)."""
    out: dict[tuple[str, str, str, str], list[AuditEntry]] = {}
    for e in entries:
        out.setdefault(e.key, []).append(e)
    return out


def price_iter(records: Iterable[Record], chooser: ProfileChooser,
               audit: dict[tuple[str, str, str, str], list[AuditEntry]] | None = None) -> Iterator[Priced]:
    """Price records one at a time, each on the profile ``chooser`` picks for its device (None: blank), and
    where the run has audit entries (``audit``, :func:`audit_index`), split each row's SOL gap by its own.

    Nothing is held but the profiles' resolved ceilings, so a file of any size
    streams through (``tileops roofline`` reads records this way)."""
    ceilings: dict[int, _Ceilings] = {}
    last_device: tuple[str, str] | None = None
    last: _Ceilings | None = None
    for r in records:
        env = r.env
        device = (env.device.name, env.device.key)
        if device != last_device:
            p = chooser(*device)
            if p is None:
                last = None
            else:
                last = ceilings.get(id(p))
                if last is None or last.profile is not p:
                    last = ceilings[id(p)] = _Ceilings.of(p)
            last_device = device
        yield _price(r, last) if not audit else with_gap(_price(r, last), audit)


def price_all(records: Iterable[Record], chooser: ProfileChooser,
              audit: dict[tuple[str, str, str, str], list[AuditEntry]] | None = None) -> list[Priced]:
    """Price many records, each on the profile ``chooser`` picks for its device (None: blank)."""
    return list(price_iter(records, chooser, audit))

