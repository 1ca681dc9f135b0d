"""A run's health (§4.3), decided here and only here: counts by verdict and blank reason, and the physics
check per (profile, ceiling): held, breached or not judged.

A breach fails the run's health. A ceiling no row could be judged against is
reported as not judged, never as passed; a ceiling in doubt (a calibration too
close to it, or rows above an estimate whose clock nobody measured) is
*suspect*, and the health names the likely cause (the clock, the FMA units per
core, the nominal bandwidth). :class:`HealthTally` counts it row by row, so a
stream of any size (and its parts, read in parallel) gives the same health.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from collections.abc import Iterable

from tileops.roofline.price import (NOT_JUDGED_ESTIMATE, NOT_JUDGED_NOISE, NOT_JUDGED_ROOF_ABSENT, BLANK_ERROR, Check,
                                    Priced)

CeilingState = Literal["held", "breached", "not-judged"]
HealthState = Literal["held", "partial", "not-judged", "breached"]

#: Run-level physics states, in the order a reader should worry about them.
HEALTH_STATES: tuple[str, ...] = ("breached", "not-judged", "partial", "held")


@dataclass(frozen=True)
class CeilingHealth:
    """The physics check of one ceiling of one profile over a run's rows."""

    profile: str | None  # None: rows no profile matched
    ceiling: str  # "memory" or a roof key
    theoretical_per_s: float | None
    judged: int  # rows whose implied rate was compared with the theoretical figure
    breached: int  # of those, rows above it
    not_judged: dict[str, int] = field(default_factory=dict)  # NOT_JUDGED_* reason -> rows
    max_ratio: float | None = None  # the highest implied / theoretical among the judged rows
    #: rows not judged against it (an estimate, a suspect ceiling) whose implied rate is above it anyway
    above: int = 0
    max_ratio_not_judged: float | None = None  # the highest implied / theoretical among those not judged
    suspect: str | None = None  # why this ceiling is in doubt, naming the likely cause (None: no doubt)
    #: within-noise rows: the lowest "least" and the highest "most" rate their fast ends imply, over the
    #: theoretical (what would decide them: a least above 1 is a breach, a most at or under 1 a pass)
    noise_range: tuple[float, float] | None = None

    @property
    def state(self) -> CeilingState:
        """breached (any row above the theoretical), held (judged, none above), or not-judged (no row judged).
        A ceiling judged on some rows and not others is held or breached; its not_judged counts say the rest."""
        if self.breached:
            return "breached"
        return "held" if self.judged else "not-judged"

    @property
    def unit(self) -> str:
        return "B/s" if self.ceiling == "memory" else "FLOP/s"

    @property
    def reason(self) -> str | None:
        """The most common reason rows were not judged (None when every row was)."""
        if not self.not_judged:
            return None
        return max(sorted(self.not_judged), key=self.not_judged.__getitem__)

    def as_dict(self) -> dict[str, Any]:
        return {"profile": self.profile, "ceiling": self.ceiling, "state": self.state,
                "theoretical_per_s": self.theoretical_per_s, "rows_judged": self.judged,
                "rows_breached": self.breached, "rows_not_judged": sum(self.not_judged.values()),
                "not_judged": dict(self.not_judged), "max_ratio": self.max_ratio,
                "rows_above_not_judged": self.above, "max_ratio_not_judged": self.max_ratio_not_judged,
                "suspect": self.suspect, "within_noise_range": list(self.noise_range) if self.noise_range else None}


@dataclass(frozen=True)
class Health:
    """The run's health as the roofline tool decides it (§4.3).

    ``ok`` is False on any physics breach (the exit code 3). ``state`` says what
    the physics check could vouch for: ``held`` (every ceiling of every measured
    row judged, none breached; a roof the profile does not have at all is listed
    as not judged but leaves ``held`` alone, since its rows are blank),
    ``partial`` (some judged and held, some not judged), ``not-judged``
    (nothing judged: no profile, no nominal, no measured row) or ``breached``.
    Only ``held`` is a pass; ``partial`` passes only what it judged, which
    ``ceilings`` lists.
    """

    ok: bool  # False when any row breaches the physics check
    rows: int
    by_verdict: dict[str, int] = field(default_factory=dict)
    blanks_by_reason: dict[str, int] = field(default_factory=dict)
    breaches: int = 0  # rows with at least one breach
    errors: int = 0  # error records (skipped rows are not errors)
    ceilings: tuple[CeilingHealth, ...] = ()

    @property
    def at_ceiling(self) -> int:
        return self.by_verdict.get("at-ceiling", 0)

    @property
    def anomalies(self) -> int:
        return self.by_verdict.get("anomaly", 0)

    @property
    def state(self) -> HealthState:
        if not self.ok:
            return "breached"
        if not any(c.judged for c in self.ceilings):
            return "not-judged"
        return "partial" if self.unjudged(significant=True) else "held"

    def unjudged(self, *, significant: bool = False) -> list[CeilingHealth]:
        """Ceilings with rows the check could not judge. ``significant``: leave out those whose only reason is
        ``roof-absent`` (a unit the profile does not have, such as fp8 on a CPU): their rows are blank, so no
        reading stands on them, and the blank reason already says so."""
        return [c for c in self.ceilings if c.not_judged
                and not (significant and set(c.not_judged) == {NOT_JUDGED_ROOF_ABSENT})]

    @property
    def not_judged_reasons(self) -> dict[str, int]:
        """Rows x ceilings not judged, by reason, over the whole run."""
        out: dict[str, int] = {}
        for c in self.ceilings:
            for reason, n in c.not_judged.items():
                out[reason] = out.get(reason, 0) + n
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "state": self.state, "rows": self.rows, "by_verdict": dict(self.by_verdict),
                "blanks_by_reason": dict(self.blanks_by_reason), "breaches": self.breaches,
                "errors": self.errors, "ceilings": [c.as_dict() for c in self.ceilings]}


#: A compute roof as pricing needs it: (resolved key or None, effective, theoretical, not-judged reason, suspect).

class _CeilingTally:
    __slots__ = ("theoretical", "judged", "breached", "not_judged", "max_ratio", "above", "max_unjudged", "suspect",
                 "noise_range")

    def __init__(self) -> None:
        self.theoretical: float | None = None
        self.judged = self.breached = self.above = 0
        self.not_judged: dict[str, int] = {}
        self.max_ratio: float | None = None
        self.max_unjudged: float | None = None
        self.suspect: str | None = None
        self.noise_range: tuple[float, float] | None = None

    def note_noise(self, least: float, most: float) -> None:
        r = self.noise_range
        self.noise_range = (least, most) if r is None else (min(r[0], least), max(r[1], most))

    def merge(self, later: _CeilingTally) -> None:
        if later.theoretical is not None:
            self.theoretical = later.theoretical
        self.judged += later.judged
        self.breached += later.breached
        self.above += later.above
        for why, n in later.not_judged.items():
            self.not_judged[why] = self.not_judged.get(why, 0) + n
        if later.max_ratio is not None and (self.max_ratio is None or later.max_ratio > self.max_ratio):
            self.max_ratio = later.max_ratio
        if later.max_unjudged is not None and (self.max_unjudged is None or later.max_unjudged > self.max_unjudged):
            self.max_unjudged = later.max_unjudged
        self.suspect = later.suspect or self.suspect
        if later.noise_range is not None:
            self.note_noise(*later.noise_range)

    def count(self, k: Check) -> None:
        """One row's check of this ceiling."""
        if k.theoretical_per_s is not None:
            self.theoretical = k.theoretical_per_s
        if k.suspect is not None:
            self.suspect = k.suspect
        if k.not_judged is None:
            self._count_judged(k)
        else:
            self._count_not_judged(k, k.not_judged)

    def _count_judged(self, k: Check) -> None:
        """A judged check: both the implied rate and the theoretical figure are there (Check.judged)."""
        self.judged += 1
        ratio = k.ratio
        if ratio is not None and (self.max_ratio is None or ratio > self.max_ratio):
            self.max_ratio = ratio
        if k.breached:
            self.breached += 1

    def _count_not_judged(self, k: Check, why: str) -> None:
        """A check not judged: its reason, and (an estimate's or a suspect ceiling's row) whether it ran above."""
        self.not_judged[why] = self.not_judged.get(why, 0) + 1
        theo, implied = k.theoretical_per_s, k.implied_per_s
        if implied is None or not theo:
            return
        if why == NOT_JUDGED_NOISE and k.implied_most_per_s is not None:
            self.note_noise(implied / theo, k.implied_most_per_s / theo)
        ratio = implied / theo
        if self.max_unjudged is None or ratio > self.max_unjudged:
            self.max_unjudged = ratio
        if implied > theo:
            self.above += 1

    def suspicion(self) -> str | None:
        """The health note of a ceiling in doubt: its profile's own (a calibration too close to it), and rows
        above an estimate nobody measured the clock of; None when nothing puts it in doubt."""
        notes = [self.suspect] if self.suspect else []
        if self.above and self.not_judged.get(NOT_JUDGED_ESTIMATE):
            top = f"{self.max_unjudged:.0%}" if self.max_unjudged is not None else "?"
            notes.append(f"{self.above} row(s) ran above this estimate (highest {top} of it), whose clock was not "
                         "measured: the theoretical is too low, not the formula; likely cause: the clock it assumes "
                         "(turbo runs the cores faster than the stated clock), or the FMA units per core")
        return "; ".join(notes) or None


class HealthTally:
    """The run's health counted row by row (:func:`health` over a stream), mergeable across parts of a run."""

    __slots__ = ("rows", "by_verdict", "blanks", "breaches", "errors", "ceilings")

    def __init__(self) -> None:
        self.rows = 0
        self.by_verdict: dict[str, int] = {}
        self.blanks: dict[str, int] = {}
        self.breaches = 0
        self.errors = 0
        self.ceilings: dict[tuple[str, str], _CeilingTally] = {}  # (profile or "", ceiling)

    def add(self, p: Priced) -> None:
        self.rows += 1
        v = p.verdict
        self.by_verdict[v] = self.by_verdict.get(v, 0) + 1
        if v == "blank" and p.blank_reason:
            self.blanks[p.blank_reason] = self.blanks.get(p.blank_reason, 0) + 1
        elif v == "error" and p.blank_reason == BLANK_ERROR:
            self.errors += 1
        if p.breaches:
            self.breaches += 1
        for k in p.checks:
            key = (p.profile or "", k.ceiling)
            t = self.ceilings.get(key)
            if t is None:
                t = self.ceilings[key] = _CeilingTally()
            t.count(k)

    def merge(self, later: HealthTally) -> None:
        """Add the counts of another part of the run (read after this one)."""
        self.rows += later.rows
        for mine, theirs in ((self.by_verdict, later.by_verdict), (self.blanks, later.blanks)):
            for k, n in theirs.items():
                mine[k] = mine.get(k, 0) + n
        self.breaches += later.breaches
        self.errors += later.errors
        for key, t in later.ceilings.items():
            mine_t = self.ceilings.get(key)
            if mine_t is None:
                mine_t = self.ceilings[key] = _CeilingTally()
            mine_t.merge(t)

    def health(self) -> Health:
        ceilings: list[CeilingHealth] = []
        for profile, ceiling in sorted(self.ceilings, key=lambda pc: (pc[0], pc[1] != "memory", pc[1])):  # memory first
            t = self.ceilings[(profile, ceiling)]
            ceilings.append(CeilingHealth(profile or None, ceiling, t.theoretical, t.judged, t.breached,
                                          dict(t.not_judged), t.max_ratio, t.above, t.max_unjudged, t.suspicion(),
                                          t.noise_range))
        return Health(ok=self.breaches == 0, rows=self.rows, by_verdict=dict(self.by_verdict),
                      blanks_by_reason=dict(self.blanks), breaches=self.breaches, errors=self.errors,
                      ceilings=tuple(ceilings))


def health(priced: Iterable[Priced]) -> Health:
    """The run's health: counts by verdict and blank reason, and the physics check per (profile, ceiling).

    ``ok`` is False when any row breaches the physics check; ``state`` and
    ``ceilings`` say what the check judged, so a ceiling nothing could be
    compared with is reported as not judged, never as passed.
    """
    tally = HealthTally()
    for p in priced:
        tally.add(p)
    return tally.health()

