"""At run time: the device's own facts against the profile that prices it.

A fleet holds SKUs whose variants share a name prefix, boards run at other
clocks than their datasheet's, and a profile copied from a neighbour's SKU reads
plausibly. Before a run prices anything, the GPU's facts (NVML, the driver's
properties) give its ceilings; a profile figure more than 3 % from them gets a
warning on stderr and a note in the run's health (``run.json``), naming both
numbers. A device whose facts cannot be read (a CPU, no NVML) is not checked
and says why in ``run.json``; nothing is printed and nothing is guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from tileops.ceilings.check import TOLERANCE, CeilingCheck, check_profile
from tileops.ceilings.facts import DeviceFacts, FactsReading, read_facts
from tileops.device import DeviceInfo
from tileops.profiles import Profile

DeviceCheckState = Literal["agrees", "mismatch", "not-checked"]


@dataclass(frozen=True)
class DeviceCheck:
    """One device's facts against its profile's theoretical figures."""

    device: str
    profile: str | None
    state: DeviceCheckState
    reason: str | None = None  # why not checked
    mismatches: tuple[CeilingCheck, ...] = ()
    facts: DeviceFacts | None = None

    def warnings(self) -> list[str]:
        """One line per ceiling the facts disagree with, both numbers in it."""
        return [c.describe(self.profile or "?") + f" (device {self.device})" for c in self.mismatches]

    @property
    def note(self) -> str | None:
        """The run's health note (None when nothing disagrees)."""
        if not self.mismatches:
            return None
        names = ", ".join(c.ceiling for c in self.mismatches)
        return (f"device facts: {self.device}'s own facts (NVML, driver) disagree by more than {TOLERANCE:.0%} with "
                f"profile {self.profile} on {names}; SOL readings and the physics check on those ceilings rest on a "
                f"figure the device does not have: `tileops profile check {self.profile}` shows both numbers")

    def as_dict(self) -> dict[str, Any]:
        return {"state": self.state, "device": self.device, "profile": self.profile, "reason": self.reason,
                "note": self.note, "mismatches": [c.as_dict() for c in self.mismatches],
                "facts": self.facts.as_dict() if self.facts else None}


def check_device(info: DeviceInfo, profile: Profile | None, reading: FactsReading | None = None) -> DeviceCheck:
    """Hold the profile that prices ``info`` against the device's own facts (read now unless ``reading``)."""
    if profile is None:
        return DeviceCheck(info.name, None, "not-checked", "no profile prices this device")
    reading = reading if reading is not None else read_facts(info)
    if reading.facts is None:
        return DeviceCheck(info.name, profile.name, "not-checked", reading.why_not)
    result = check_profile(profile, reading.facts)
    if result.not_checked:
        return DeviceCheck(info.name, profile.name, "not-checked", result.not_checked, facts=reading.facts)
    if not any(c.state != "not-checked" for c in result.ceilings):
        why = "; ".join(sorted({c.derived.why_not for c in result.ceilings if c.derived.why_not})) or "no ceiling"
        return DeviceCheck(info.name, profile.name, "not-checked", why, facts=reading.facts)
    defects = tuple(result.defects)
    return DeviceCheck(info.name, profile.name, "mismatch" if defects else "agrees", None, defects, reading.facts)
