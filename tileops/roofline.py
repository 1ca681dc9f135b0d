"""Roofline tool (M5, §4.3): price benchmark records against a device profile.

Pure functions over records and a profile. It never instantiates an op and
imports no op code (§4.4.5): every number it needs is in the record.

CONTRACT (shared with tileops.export and tileops.report; keep these names):

    select_profile(device_name, profiles) -> Profile | None
    price(record, profile) -> Priced
    price_all(records, profile_or_none_or_callable) -> list[Priced]
    health(priced) -> Health

Implementation: see issue 6.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tileops.bench.records import Record
from tileops.profiles import Profile

Verdict = Literal[
    "at-ceiling",  # efficiency >= 80 %
    "below",  # priced, under 80 %
    "anomaly",  # > 105 %: the formula or the calibration is wrong; never "at ceiling"
    "latency-bound",  # sol_time and measured time both below the profile's latency floor
    "blank",  # not priced; blank_reason says why (never guessed)
    "error",  # an error/skipped record
]
Bound = Literal["memory", "compute"]

AT_CEILING = 0.80
ANOMALY = 1.05


@dataclass(frozen=True)
class Breach:
    """A physics-check breach: an implied rate above a theoretical ceiling (§4.3)."""

    ceiling: str  # "memory" or a roof key such as "tensor_core.bf16"
    implied_per_s: float  # bytes/s or FLOP/s the row implies
    theoretical_per_s: float

    @property
    def ratio(self) -> float:
        return self.implied_per_s / self.theoretical_per_s


@dataclass(frozen=True)
class Priced:
    record: Record
    profile: str | None  # the profile's name, None when no profile matched
    verdict: Verdict
    blank_reason: str | None = None
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


@dataclass(frozen=True)
class Health:
    ok: bool
    rows: int
    by_verdict: dict[str, int] = field(default_factory=dict)
    blanks_by_reason: dict[str, int] = field(default_factory=dict)
    breaches: int = 0
    errors: int = 0
