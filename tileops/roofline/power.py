"""A GPU row's power state, and which of a ceiling's two fractions (burst, sustained) it is priced against.

Why. Under a power cap the SM clock drops 15-20 % with no error anywhere
(issue 28), so a row measured there and priced against the ceiling the
calibration reached at full clocks reads as a slow kernel when it is a capped
device. A profile may hold, for each ceiling, the fraction measured at full
clocks (``calibration``, burst) and the fraction measured under the power cap
(``sustained``); a row is priced against the one its power state matches:

* power-capped (and not thermal): the sustained fraction where the profile
  holds one for the ceiling, else the burst one, and a note says the row's SOL
  is against a ceiling its clocks did not reach;
* thermal, or neither cap: the burst fraction. A thermal cap is a cooling
  fault, not the steady state a sustained fraction describes, so it is marked,
  never excused.

The state comes from the record's ``conditions`` (the bench's sensors:
``tileops.bench.sensors``); a row without them (a CPU row, a record written
before they were read, a GPU without NVML) has no state and is priced on the
burst fraction, as every row was before.
"""

from __future__ import annotations

from typing import Literal

from tileops.records import Record

Basis = Literal["burst", "sustained"]
BURST: Basis = "burst"
SUSTAINED: Basis = "sustained"

#: The power states a row can be in (stable names: metric label values).
POWER_CAPPED = "power-capped"
THERMAL = "thermal"
POWER_CAPPED_THERMAL = "power-capped+thermal"
UNCAPPED = "uncapped"


def power_state(record: Record) -> str | None:
    """``power-capped``, ``thermal``, ``power-capped+thermal`` or ``uncapped`` for a GPU row whose clock-event
    reasons were read; None where they were not (:func:`power_blank` says why)."""
    c = record.conditions
    return None if c is None or record.env.device.kind != "cuda" else c.power_state()


def power_blank(record: Record) -> str | None:
    """Why a row has no power state (None: it has one)."""
    if record.env.device.kind != "cuda":
        return "a CPU row: no GPU clocks or power to read"
    c = record.conditions
    if c is None:
        return "the record carries no conditions (written before the bench read its sensors)"
    return c.power_blank()


def wants_sustained(record: Record) -> bool:
    """Whether the row's power state matches a sustained fraction: power-capped, and not thermal."""
    return power_state(record) == POWER_CAPPED


def burst_note(ceiling: str) -> str:
    """The note of a power-capped row priced on a burst fraction (its profile holds no sustained one)."""
    return (f"measured under a power cap, but the profile holds no sustained fraction for {ceiling}: priced "
            "against the burst ceiling, which its clocks did not reach (calibrate under the cap, or add "
            f"{ceiling}'s sustained fraction to the profile)")
