"""Theoretical ceilings derived from a device's facts: the product behind every datasheet figure.

Memory bandwidth is bus width / 8 x maximum memory clock x transfers per clock;
a compute roof is SMs x maximum SM clock (a tensor roof: the tensor-core clock
where the architecture has one) x dense operations per clock per SM
(``tileops.ceilings.arch``). Each derived ceiling says how it was computed, and a
ceiling that lacks a fact is None with the missing fact named: a gap, never a
guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from tileops.ceilings.arch import TRANSFERS_PER_CLOCK, arch
from tileops.ceilings.facts import FACT_LABELS, DeviceFacts
from tileops.profiles import ROOF_KEYS
from tileops.roofline import si

MEMORY = "memory"
GPU_ROOFS = tuple(k for k in ROOF_KEYS if k.startswith(("cuda_core.", "tensor_core.")))


@dataclass(frozen=True)
class Derived:
    """One ceiling derived from facts: ``value`` per second and ``how``, or None and ``why_not``."""

    ceiling: str  # "memory" or a roof key
    value: float | None
    how: str = ""
    why_not: str = ""

    @property
    def unit(self) -> str:
        return "B/s" if self.ceiling == MEMORY else "FLOP/s"


def derive_memory(facts: DeviceFacts) -> Derived:
    bus, clock = facts.bus_width_bits, facts.max_mem_mhz
    if bus is None or clock is None:
        return Derived(MEMORY, None, why_not=_missing(facts, ("bus_width_bits", "max_mem_mhz")))
    value = bus / 8 * clock * 1e6 * TRANSFERS_PER_CLOCK
    return Derived(MEMORY, value, f"{bus}-bit bus / 8 x {clock:g} MHz x {TRANSFERS_PER_CLOCK} transfers per clock "
                                  f"= {si(value, 'B/s')}")


def derive_roof(facts: DeviceFacts, roof: str) -> Derived:
    row = arch(facts.capability)
    if row is None:
        cc = f"{facts.capability[0]}.{facts.capability[1]}" if facts.capability else "unknown"
        return Derived(roof, None, why_not=f"compute capability {cc} has no row in the per-SM rate table "
                                           "(tileops/ceilings/arch.py): add one, with its source")
    rate = row.rate(roof, facts.name)
    if rate is None:
        return Derived(roof, None, why_not=f"{row.name} (compute capability {row.capability[0]}.{row.capability[1]}) "
                                           f"has no {roof} rate in the per-SM rate table")
    tensor = roof.startswith("tensor_core.") and row.tensor_clock == "published"
    clock_fact = "tensor_max_mhz" if tensor else "max_sm_mhz"
    clock = getattr(facts, clock_fact)
    if facts.sm_count is None or clock is None:
        why = _missing(facts, ("sm_count", clock_fact))
        if tensor and clock is None:
            why += f" ({row.name} runs tensor-core work at a lower clock its product documentation states: " \
                   f"{row.tensor_clock_source})"
        return Derived(roof, None, why_not=why)
    value = facts.sm_count * clock * 1e6 * rate.per_clock_per_sm
    which = "tensor-core clock" if tensor else "max SM clock"
    return Derived(roof, value, f"{facts.sm_count} SMs x {clock:g} MHz ({which}) x {rate.per_clock_per_sm} "
                                f"FLOP/clock/SM = {si(value, 'FLOP/s')}")


def derive(facts: DeviceFacts, ceilings: tuple[str, ...] = (MEMORY, *GPU_ROOFS)) -> dict[str, Derived]:
    """Every ceiling in ``ceilings`` derived from ``facts`` (value None where a fact or a table row is missing)."""
    return {c: derive_memory(facts) if c == MEMORY else derive_roof(facts, c) for c in ceilings}


def _missing(facts: DeviceFacts, needed: tuple[str, ...]) -> str:
    parts = []
    for fact in needed:
        if getattr(facts, fact) is None:
            why = facts.missing.get(fact, "not reported" if facts.origin != "recorded" else "not recorded")
            parts.append(f"{FACT_LABELS[fact]} unknown ({why})")
    return "; ".join(parts) or "a fact is missing"
