"""A profile's theoretical figures held against the ceilings its device's facts give.

A datasheet figure that disagrees with SMs x clock x rate (or bus x clock x 2) by
more than :data:`TOLERANCE` is a defect: either the figure is wrong (a sparse
figure, another SKU's, a clock the device never reaches) or a fact is, and
either way a SOL reading priced on it is wrong. Above the facts, rows read low
and the physics check cannot see a formula inflated up to it; below them, a
correct kernel can read above 100 % and breach the check. Both numbers are
reported, with how the derived one was computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from tileops.ceilings.derive import GPU_ROOFS, MEMORY, Derived, derive_memory, derive_roof
from tileops.ceilings.facts import DeviceFacts, FactsReading, recorded_for
from tileops.ceilings.peers import PEER_BAND, PeerComparison, compare_profile
from tileops.profiles import Profile
from tileops.roofline import si

#: A figure further than this from its derived value is a defect. Datasheets round (67 TFLOP/s for 66.9) and
#: quote bandwidth a little under bus x clock (H200: 4.8 TB/s for 4.92, 2.4 % under): 3 % passes both, while a
#: sparse figure (+100 %), another SKU's memory (H100's 3.35 TB/s on an H200: -30 %) or a clock 10 % off does not.
TOLERANCE = 0.03

CheckState = Literal["agrees", "defect", "not-checked"]


@dataclass(frozen=True)
class CeilingCheck:
    """One ceiling: what the profile states against what the facts give."""

    ceiling: str
    stated: float | None
    derived: Derived

    @property
    def ratio(self) -> float | None:
        """stated / derived (None when either is missing)."""
        d = self.derived.value
        return None if self.stated is None or not d else self.stated / d

    @property
    def state(self) -> CheckState:
        r = self.ratio
        if r is None:
            return "not-checked"
        return "defect" if abs(r - 1) > TOLERANCE else "agrees"

    @property
    def unit(self) -> str:
        return self.derived.unit

    def describe(self, profile: str) -> str:
        """One sentence: both numbers, how the derived one was computed, and (for a defect) what it means."""
        stated, derived = si(self.stated, self.unit), si(self.derived.value, self.unit)
        r = self.ratio
        if r is None:
            why = self.derived.why_not if self.stated is not None else "the profile states no figure"
            return f"{profile} {self.ceiling}: not checked ({why})"
        head = (f"{profile} {self.ceiling}: the profile states {stated}, the device's facts give {derived} "
                f"({self.derived.how}); the profile is {(r - 1) * 100:+.1f} % off")
        if self.state == "agrees":
            return head
        return f"{head}: {_cause(r)}"

    def as_dict(self) -> dict[str, Any]:
        return {"ceiling": self.ceiling, "state": self.state, "stated_per_s": self.stated,
                "derived_per_s": self.derived.value, "ratio": self.ratio, "how": self.derived.how or None,
                "why_not": self.derived.why_not or None}


def _cause(ratio: float) -> str:
    if abs(ratio - 2) <= 2 * TOLERANCE:
        return ("twice the dense figure: this is the sparse (2:4 structured sparsity) figure, which no dense kernel "
                "reaches; state the dense one (half)")
    if ratio > 1:
        return ("above what the device can do: rows priced on it read low and the physics check cannot see a formula "
                "inflated up to it; the figure is another product's, a sparse one, or assumes a clock or unit count "
                "the device does not have")
    return ("below what the device can reach: a correct kernel can read above 100 % and breach the physics check; "
            "the figure assumes a lower clock (a base or sustained clock), fewer units, or another product's memory")


@dataclass(frozen=True)
class ProfileCheck:
    """Every ceiling of one profile against one set of facts (or why the profile could not be checked)."""

    profile: str
    file: str | None
    facts: DeviceFacts | None
    ceilings: tuple[CeilingCheck, ...] = ()
    not_checked: str | None = None  # the whole profile: a CPU profile, no facts

    @property
    def defects(self) -> list[CeilingCheck]:
        return [c for c in self.ceilings if c.state == "defect"]

    @property
    def state(self) -> CheckState:
        if self.defects:
            return "defect"
        return "agrees" if any(c.state == "agrees" for c in self.ceilings) else "not-checked"

    def unchecked(self) -> list[str]:
        """Why this profile, or which of its ceilings, could not be checked: one line per reason."""
        if self.not_checked:
            return [f"{self.profile}: not checked ({self.not_checked})"]
        by_reason: dict[str, list[str]] = {}
        for c in self.ceilings:
            if c.state == "not-checked":
                by_reason.setdefault(c.derived.why_not or "the profile states no figure", []).append(c.ceiling)
        return [f"{self.profile} {', '.join(names)}: not checked ({why})" for why, names in by_reason.items()]

    def as_dict(self) -> dict[str, Any]:
        return {"profile": self.profile, "file": self.file, "state": self.state, "not_checked": self.not_checked,
                "facts": self.facts.as_dict() if self.facts else None,
                "defects": len(self.defects), "ceilings": [c.as_dict() for c in self.ceilings]}


def check_profile(profile: Profile, facts: DeviceFacts | None, why_no_facts: str = "") -> ProfileCheck:
    """Hold ``profile``'s theoretical figures against the ceilings ``facts`` give."""
    file = str(profile.source_path) if profile.source_path else None
    if profile.kind == "cpu":
        return ProfileCheck(profile.name, file, None, not_checked=(
            "a CPU profile: its peak is the product of its own recorded factors (cores x GHz x FMA units x lanes x 2), "
            "which reading it checks, and its bandwidth is the nominal the user or DMI gave"))
    if facts is None:
        return ProfileCheck(profile.name, file, None, not_checked=why_no_facts or "no device facts")
    checks: list[CeilingCheck] = []
    if profile.memory is not None:
        checks.append(CeilingCheck(MEMORY, profile.memory.theoretical, derive_memory(facts)))
    for key in GPU_ROOFS:
        roof = profile.compute.get(key)
        if roof is not None:
            checks.append(CeilingCheck(key, roof.theoretical, derive_roof(facts, key)))
    return ProfileCheck(profile.name, file, facts, tuple(checks))


def facts_for(profile: Profile, device: FactsReading | None = None) -> tuple[DeviceFacts | None, str]:
    """The facts to hold ``profile`` against: this device's own when it is a device the profile names, else the
    recorded facts of the SKU it names; (None, why) when there are none."""
    if device is not None and device.facts is not None and profile.matches(device.facts.name):
        return device.facts, ""
    recorded = recorded_for(profile.match)
    if recorded is not None:
        return recorded, ""
    return None, (f"no device facts recorded for {', '.join(profile.match)} (tileops/ceilings/facts.py); run "
                  f"`tileops profile check {profile.name}` on such a device to hold it against the device's own")


def check_profiles(profiles: list[Profile], device: FactsReading | None = None) -> list[ProfileCheck]:
    """Each profile against this device's facts (where it names this device) or its SKU's recorded ones."""
    out = []
    for p in profiles:
        facts, why = facts_for(p, device)
        out.append(check_profile(p, facts, why))
    return out


@dataclass(frozen=True)
class CheckReport:
    """What ``tileops profile check`` found: each profile against its facts, each calibration against its peers."""

    profiles: tuple[ProfileCheck, ...]
    peers: dict[str, list[PeerComparison]]

    @property
    def defects(self) -> int:
        return sum(len(p.defects) for p in self.profiles)

    @property
    def flagged(self) -> list[tuple[str, PeerComparison]]:
        return [(name, c) for name, cs in self.peers.items() for c in cs if c.flagged]

    @property
    def failed(self) -> bool:
        """A defect or a flagged calibration: something a reader must fix before trusting SOL figures."""
        return bool(self.defects or self.flagged)

    def summary(self) -> str:
        states = [p.state for p in self.profiles]
        parts = [f"{states.count('agrees')} agree within {TOLERANCE:.0%}",
                 f"{states.count('defect')} with defects ({self.defects} ceiling(s))",
                 f"{states.count('not-checked')} not checked"]
        compared = sum(len(cs) for cs in self.peers.values())
        peers = (f"; {compared} calibration figure(s) held against what others measured, {len(self.flagged)} "
                 f"flagged (more than {PEER_BAND:.0%} away)") if compared else ""
        return f"{len(self.profiles)} profile(s): " + ", ".join(parts) + peers

    def as_dict(self) -> dict[str, Any]:
        return {"ok": not self.failed, "tolerance": TOLERANCE, "peer_band": PEER_BAND, "defects": self.defects,
                "flagged": len(self.flagged), "summary": self.summary(),
                "profiles": [{**p.as_dict(), "peers": [c.as_dict() for c in self.peers.get(p.profile, [])]}
                             for p in self.profiles]}


def check_report(profiles: list[Profile], device: FactsReading | None = None) -> CheckReport:
    """Each of ``profiles`` against its facts (:func:`check_profiles`) and, where calibrated, its peers."""
    return CheckReport(tuple(check_profiles(profiles, device)), {p.name: compare_profile(p) for p in profiles})
