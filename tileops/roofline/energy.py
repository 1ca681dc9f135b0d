"""Energy per call and per unit of work: joules per call, FLOP per joule, bytes per joule, or why not.

Why. A fleet buys energy as much as time: two GPUs of one SKU at the same SOL
may differ in joules per token, and a power-capped row trades time for watts
(issue 28). The bench's sensors (``tileops.bench.sensors``) read an energy
counter over a window (NVML's total energy on a GPU, RAPL on a CPU where
readable); this turns the joules of a window and the calls made in it into
rates, each blank with its reason where a reading is missing, so a row on a
machine without counters says so instead of showing a zero.

What the window holds is the caller's decision, and the rates are only as good
as it: the energy of a window of timed samples includes the cache flush before
each sample and the gaps between them, so joules per call from it is an upper
bound on the call's own; a window of back-to-back calls (no flush) gives the
call's warm energy. ``window`` says which, and travels with the rates. The
counters tick coarsely (NVML's updates a few times a second), so a window
should last a second or more; the sensors blank a window whose counter did not
move.

Pure arithmetic, standard library only: the roofline tool and the exporters
read it (:func:`row_energy`: a record's rates from its ``conditions``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tileops.records import Record


@dataclass(frozen=True)
class EnergyRates:
    joules_per_call: float | None = None
    flop_per_joule: float | None = None
    bytes_per_joule: float | None = None
    average_power_w: float | None = None  # the window's joules over its seconds
    window: str = ""  # what the window held (e.g. "timed samples, cache flush included")
    blank: dict[str, str] = field(default_factory=dict)  # rate -> why it is None


RATES = ("joules_per_call", "flop_per_joule", "bytes_per_joule", "average_power_w")


def energy_rates(joules: float | None, calls: int, *, flops: int | None, nbytes: int | None,
                 window_s: float | None = None, window: str = "", why: str = "") -> EnergyRates:
    """Rates from the joules of a window in which ``calls`` calls ran; ``why`` is the sensor's reason when
    ``joules`` is None. ``flops`` and ``nbytes`` are one call's (the record's ``flops`` and ``bytes``)."""
    if calls < 1:
        raise ValueError(f"calls must be at least 1, got {calls}")
    if joules is not None and not (math.isfinite(joules) and joules >= 0):
        raise ValueError(f"joules must be a finite number >= 0, got {joules!r}")
    if window_s is not None and not (math.isfinite(window_s) and window_s >= 0):
        raise ValueError(f"window_s must be a finite number >= 0, got {window_s!r}")
    if joules is None or joules == 0:
        reason = why or ("no energy reading" if joules is None else "the energy counter did not advance over the "
                                                                  "window")
        return EnergyRates(window=window, blank=dict.fromkeys(RATES, reason))
    per_call = joules / calls
    flop_j, no_flop = _per_joule(flops, per_call, "the record carries no FLOP count",
                                 "the formula counts no FLOPs (the op moves data only)")
    bytes_j, no_bytes = _per_joule(nbytes, per_call, "the record carries no byte count", "the formula counts no bytes")
    blank = {rate: why for rate, why in (("flop_per_joule", no_flop), ("bytes_per_joule", no_bytes)) if why}
    power = None
    if window_s:
        power = joules / window_s
    else:
        blank["average_power_w"] = "the window's length is unknown"
    return EnergyRates(joules_per_call=per_call, flop_per_joule=flop_j, bytes_per_joule=bytes_j,
                       average_power_w=power, window=window, blank=blank)



def _per_joule(count: int | None, per_call: float, missing: str, zero: str) -> tuple[float | None, str | None]:
    """``count`` per joule, or None with why: the record lacks the count (``missing``) or it is zero (``zero``)."""
    if count is None:
        return None, missing
    if count == 0:
        return None, zero
    return count / per_call, None

#: What a row's window holds (the bench's sensors wrap the row's warm-up and timed samples): each call's cache
#: flush and the gaps between calls are in it, so a rate per call is an upper bound on the call's own energy.
ROW_WINDOW = ("the row's (last visit's) warm-up, timed samples and re-warm calls, cache flushes and gaps between "
              "calls included (an upper bound)")
#: Why a row that ran has no rates, by what is missing from its record.
NO_TIMING = "the row has no timing (an error or skipped record), so no calls to share the energy"
NO_CONDITIONS = ("the record carries no conditions (written before the bench read its sensors); re-run the bench "
                 "to read the energy counter")


def row_energy(record: Record) -> EnergyRates:
    """A row's rates from the energy its sensors read over its window: NVML's counter on a GPU row, RAPL's on a
    CPU row, shared by every call the window held (the warm-up and the timed samples); blank with the reason
    (the sensor's own, or what the record lacks) where there is no reading."""
    t = record.timing
    if record.status != "ok" or t is None:
        return EnergyRates(window=ROW_WINDOW, blank=dict.fromkeys(RATES, NO_TIMING))
    c = record.conditions
    if c is None:
        return EnergyRates(window=ROW_WINDOW, blank=dict.fromkeys(RATES, NO_CONDITIONS))
    gpu = record.env.device.kind == "cuda"
    side = c.gpu if gpu else c.cpu
    if side is None:
        why = "no GPU readings in the record (NVML was not read)" if gpu else "no CPU readings in the record"
        return EnergyRates(window=ROW_WINDOW, blank=dict.fromkeys(RATES, why))
    calls = c.calls if c.calls else t.n + t.warmup  # a window's own count; an older record's, its timing's
    return energy_rates(side.energy_j, calls, flops=record.flops, nbytes=record.bytes,
                        window_s=c.window_s, window=ROW_WINDOW, why=side.blank.get("energy_j", ""))
