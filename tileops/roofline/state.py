"""Two SOLs per row (issue 39): against the calibrated ceiling, and against the device's state during the row.

A row's SOL (``Priced.efficiency``) is its time against a ceiling measured at
another time: the fleet's view, which a slow device moves as much as a slow
kernel. The reference probe timed between the row's blocks
(``tileops.bench.probe``, ``Record.probe``) reads the device's state at the same
moments. From it:

* ``probe_ratio``: the probe's rate during the row over the calibrated rate of
  the same kind in the profile (the memory probe over the ``read`` mix, the FMA
  probe over its compute roof's calibrated rate). The probe of the row's bound:
  the FMA probe for a compute-bound row, the memory probe for any other.
* ``state_efficiency = efficiency / probe_ratio``: SOL against the ceiling the
  device offered during the row, the kernel's own efficiency, which a slow
  device does not move.

Intervals. The probe's rate carries its 95 % interval (``ProbeRate.level``); the
calibrated rate is a constant of the profile, as every ceiling is when a row is
priced, so the ratio's interval is the rate's over it. The state efficiency's
interval adds the two relative uncertainties in quadrature in log space, each
side separately: exact for independent errors, and conservative here, since a
device's drift moves the row and its probe the same way (positively correlated
errors, which the quotient partly cancels). The probe's own kernel is not the
calibration's (``tileops.bench.probe`` says why), so a healthy device reads a
ratio under 1 by a constant of the probe's; the ratio's change between two runs
is what ``roofline --baseline`` splits on (``tileops.report.statesplit``).

Pure functions over a record, a profile and the numbers already priced.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from tileops.profiles import Profile
from tileops.records import ProbeRate, Record


class StateSol(NamedTuple):
    """What the probe adds to a priced row (``Priced``'s issue-39 fields)."""

    probe_kind: str
    probe_ratio: float
    probe_ratio_ci: tuple[float, float] | None
    state_efficiency: float | None
    state_efficiency_ci: tuple[float, float] | None


def reference_rate(profile: Profile, rate: ProbeRate) -> float | None:
    """The profile's calibrated rate of the probe's kind: a memory mix's measured bytes/s (or its fraction of the
    nominal), a compute roof's calibrated FLOP/s (through the profile's aliases); None where the profile has none."""
    ref = rate.reference
    if ref is None:
        return None
    if rate.kind == "memory":
        mem = profile.memory
        if mem is None:
            return None
        if ref in mem.measured:
            return float(mem.measured[ref])
        if ref in mem.mixes and mem.theoretical is not None:
            return float(mem.theoretical * mem.mixes[ref])
        return None
    if rate.kind == "fma":
        roof = profile.compute.get(profile.roof_aliases.get(ref, ref))
        return roof.effective if roof is not None else None
    return None


def chosen_probe(record: Record, bound: str | None) -> ProbeRate | None:
    """The probe a row is read against: the FMA probe for a compute-bound row, the memory probe for any other;
    None where the record has none of that kind (a compute-bound row is never read against the memory probe)."""
    probe = record.probe
    if probe is None:
        return None
    return probe.rate("fma" if bound == "compute" else "memory")


def quotient_interval(value: float, num: tuple[float, float], den_value: float, den: tuple[float, float]
                      ) -> tuple[float, float]:
    """The interval of ``value = a / b`` from a's interval ``num`` (around a = value * b) and b's ``den`` (around
    ``den_value``): each side's relative widths added in quadrature in log space (a's low end with b's high)."""
    a = value * den_value
    down = math.hypot(math.log(a / num[0]), math.log(den[1] / den_value))
    up = math.hypot(math.log(num[1] / a), math.log(den_value / den[0]))
    return value * math.exp(-down), value * math.exp(up)


def state_sol(record: Record, profile: Profile, bound: str | None, efficiency: float | None,
              sol_ci: tuple[float, float] | None) -> StateSol | None:
    """The row's probe ratio and its SOL against the device's state, with their intervals; None where the record
    has no probe reading of its bound's kind with a level, or the profile no calibrated rate of that kind."""
    rate = chosen_probe(record, bound)
    if rate is None:
        return None
    level = rate.level()
    ref = reference_rate(profile, rate)
    if level is None or not ref:
        return None
    ratio = level.rate / ref
    ratio_ci = (level.lo / ref, level.hi / ref)
    if efficiency is None:
        return StateSol(rate.kind, ratio, ratio_ci, None, None)
    state = efficiency / ratio
    state_ci = quotient_interval(state, sol_ci, ratio, ratio_ci) if sol_ci is not None else None
    return StateSol(rate.kind, ratio, ratio_ci, state, state_ci)
