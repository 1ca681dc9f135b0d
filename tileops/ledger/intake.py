"""Node intake: a device's fresh calibration held against its SKU's floors (``tileops calibrate --check``).

A node that reaches less than its SKU reliably reaches (a throttled clock, a degraded HBM stack, a
wrong BIOS setting) would price every row it runs against a ceiling it cannot reach, and make every
op look slow. So before it takes work its own calibration is compared, ceiling by ceiling, with the
floors of its SKU (``tileops.ledger.floors``). Three outcomes, none of them silent:

- ``pass``: every floor met;
- ``below_floor``: one or more ceilings measured below their floor (or not measured at all: an
  unmeasured ceiling is not an accepted one), each named with its measured value, floor and gap;
- ``no_floor``: no floors file holds this SKU, or the history it needs is too short: nothing was judged.

A calibration stored marked (``--force`` over a contended measurement or a drop beyond noise) is judged as
measured, its verdict naming the mark; it never joins the history a floor is the median of, so a figure a
neighbour lowered cannot lower the bar the next calibration must clear. (One refused is never stored, so it
is never judged: ``tileops.pipeline.intake``.)
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from tileops.ledger.floors import SkuFloors
from tileops.ledger.model import DeviceCalibration
from tileops.profiles import Profile, ProfileError

IntakeState = Literal["pass", "below_floor", "no_floor"]
#: Every state, in the order the exported metric lists them (one series each, the current one 1).
INTAKE_STATES: tuple[IntakeState, ...] = ("pass", "below_floor", "no_floor")


@dataclass(frozen=True)
class Floor:
    """The least one ceiling must measure, in its own unit, and where that figure came from."""

    ceiling: str  # ``memory.<mix>`` or a roof key (``tensor_core.bf16``, ``cpu.fp32``)
    rate: float  # bytes/s or FLOP/s
    source: str


@dataclass(frozen=True)
class CeilingCheck:
    """One ceiling's measured rate beside its floor."""

    floor: Floor
    measured: float | None  # None: the calibration did not measure this ceiling

    @property
    def passed(self) -> bool:
        return self.measured is not None and self.measured >= self.floor.rate

    @property
    def gap(self) -> float | None:
        """How far below (negative) or above the floor the measured rate is, as a fraction of the floor."""
        return None if self.measured is None else self.measured / self.floor.rate - 1


@dataclass(frozen=True)
class IntakeVerdict:
    """One device's intake: its state, the SKU whose floors judged it, and every ceiling checked."""

    device_key: str
    device_name: str
    state: IntakeState
    sku: str | None = None
    checks: list[CeilingCheck] = field(default_factory=list)
    reason: str = ""  # no_floor: why there is none
    marked: str = ""  # why the calibration judged was stored marked ("" when it was not)

    @property
    def failing(self) -> list[CeilingCheck]:
        return [c for c in self.checks if not c.passed]


def ceiling_unit(ceiling: str) -> str:
    return "B/s" if ceiling.startswith("memory.") else "FLOP/s"


def measured_rate(run: DeviceCalibration, ceiling: str) -> float | None:
    """The rate ``run`` measured for ``ceiling`` (``memory.<mix>`` or a roof key), or None."""
    if ceiling.startswith("memory."):
        mix = run.mixes.get(ceiling.removeprefix("memory."))
        return mix.bytes_per_s if mix else None
    roof = run.roofs.get(ceiling)
    return roof.flops_per_s if roof else None


def _theoretical(profile: Profile, ceiling: str, sku: str) -> float:
    if ceiling.startswith("memory."):
        value = profile.memory.theoretical if profile.memory is not None else None
    else:
        roof = profile.compute.get(ceiling)
        value = roof.theoretical if roof is not None else None
    if value is None:
        raise ProfileError(f"floors of {sku}: ceiling {ceiling!r} has no theoretical figure in profile "
                           f"{profile.name!r}", field=f"ceilings.{ceiling}",
                           fix="name a ceiling the profile states (memory.<mix>, or one of its compute roofs)")
    return value


def published_floors(floors: SkuFloors, profile: Profile) -> list[Floor]:
    """Each published fraction times the profile's datasheet figure, less the margin."""
    keep = 1 - floors.margin
    out = []
    for ceiling, pub in floors.ceilings.items():
        theo = _theoretical(profile, ceiling, floors.sku)
        out.append(Floor(ceiling, pub.fraction * keep * theo,
                         f"published {pub.fraction:.4g} of {theo:.4g} {ceiling_unit(ceiling)} ({pub.ref}) "
                         f"less {floors.margin:.0%}"))
    return out


def history_floors(floors: SkuFloors, run: DeviceCalibration,
                   history: Sequence[DeviceCalibration]) -> tuple[list[Floor], str]:
    """The median of each ceiling over the device's earlier results of the same mode, less the margin; and,
    when there are fewer than ``min_history`` of them, no floors and the reason."""
    earlier = [h for h in history if h.run_id != run.run_id and h.quick == run.quick
               and h.finished_at < run.finished_at and h.marked is None]
    mode = "quick" if run.quick else "full"
    if len(earlier) < floors.min_history:
        return [], (f"{len(earlier)} earlier {mode} calibration(s) of {run.device_key} in its history (marked ones "
                    "left out), "
                    f"{floors.min_history} needed for a history floor (floors {floors.sku})")
    ceilings = [f"memory.{m}" for m in run.mixes] + list(run.roofs)
    out = []
    for ceiling in ceilings:
        past = [r for h in earlier if (r := measured_rate(h, ceiling)) is not None]
        if len(past) >= floors.min_history:
            median = statistics.median(past)
            out.append(Floor(ceiling, median * (1 - floors.margin),
                             f"median {median:.4g} {ceiling_unit(ceiling)} of {len(past)} earlier {mode} "
                             f"calibrations less {floors.margin:.0%}"))
    return out, "" if out else f"no ceiling of {run.device_key} measured in {floors.min_history} earlier results"


def _floors_of(run: DeviceCalibration, all_floors: Sequence[SkuFloors],
               profile: Profile | None) -> SkuFloors | None:
    for f in all_floors:
        if f.device_kind != run.kind:
            continue
        if f.source == "history" or (profile is not None and f.sku.lower() == profile.name.lower()):
            return f
    return None


def judge_intake(run: DeviceCalibration, all_floors: Sequence[SkuFloors], profile: Profile | None,
                 history: Sequence[DeviceCalibration] = ()) -> IntakeVerdict:
    """``run`` against the floors of its SKU (``profile``: the one its device name selects, or None)."""
    verdict = _judge(run, all_floors, profile, history)
    if run.marked is None:
        return verdict
    return replace(verdict, marked="; ".join(run.marked.reasons) + f" ({run.marked.by})")


def _judge(run: DeviceCalibration, all_floors: Sequence[SkuFloors], profile: Profile | None,
           history: Sequence[DeviceCalibration]) -> IntakeVerdict:
    floors = _floors_of(run, all_floors, profile)
    if floors is None:
        sku = profile.name if profile is not None else f"no profile matches {run.name!r}"
        return IntakeVerdict(run.device_key, run.name, "no_floor",
                             reason=f"no floors file holds SKU {sku} (profiles/floors/)")
    if floors.source == "published":
        assert profile is not None
        found, reason = published_floors(floors, profile), ""
    else:
        found, reason = history_floors(floors, run, history)
    if not found:
        return IntakeVerdict(run.device_key, run.name, "no_floor", floors.sku, reason=reason)
    checks = [CeilingCheck(f, measured_rate(run, f.ceiling)) for f in found]
    state: IntakeState = "pass" if all(c.passed for c in checks) else "below_floor"
    return IntakeVerdict(run.device_key, run.name, state, floors.sku, checks)
