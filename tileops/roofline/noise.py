"""How well a row's time is known, and what that does to its reading (issue 26).

A record's ``timing.median_ci_s`` is where a rerun's median is expected to fall
(``tileops.bench.interval``); ``record.conditions`` says what surrounded the row
(``tileops.bench.sensors``). From them the roofline takes three things:

* **the SOL's interval**: SOL is sol_time / actual_time, so the slow end of the
  time gives the low end of the SOL: ``sol_ci = (sol / hi, sol / lo)`` (device
  copies excluded from the time are added to both ends, as to the median);
* **whether a verdict can stand**: a row whose interval is wider than
  ``UNSTABLE_CPU`` (±5 %) on a CPU or ``UNSTABLE_GPU`` (±2 %) on a GPU, or that
  ran contended or throttled, is ``unstable``: a rerun could land on the other
  side of the 80 % line, or the time is partly a neighbour's;
* **the ends the physics check judges**: the implied rate at the slow end (the
  least a rerun may imply) and at the fast end (the most).

A record without an interval (written before intervals, or too few blocks) is
read on its median alone, as before, and its SOL interval is blank with the
reason ``no-interval``. Pure functions over a record.
"""

from __future__ import annotations

from tileops.records import Record, RowConditions, Timing

#: The widest relative half-width of a row's interval whose verdict still stands, by device kind. A GPU row
#: is timed by CUPTI on a device nobody else uses, so it is held to a tighter bound than a CPU row on a host.
UNSTABLE_CPU = 0.05
UNSTABLE_GPU = 0.02

#: Why a priced row has no SOL interval (the only reason: a blank row's SOL is blank for its own reason).
CI_NO_INTERVAL = "no-interval"
CI_REASONS: dict[str, str] = {
    CI_NO_INTERVAL: "the record has no interval for its median (written before intervals, or too few blocks "
                    "of samples): its SOL is a point reading; re-run the bench for an interval",
}


def unstable_limit(device_kind: str) -> float:
    """The widest half-width a verdict stands on for this device kind (``cpu``, ``cuda``)."""
    return UNSTABLE_GPU if device_kind == "cuda" else UNSTABLE_CPU


def time_interval(timing: Timing) -> tuple[float, float] | None:
    """(lo, hi) of the row's actual time: the median's interval plus the device copies excluded from it;
    None without an interval."""
    ci = timing.median_ci_s
    if ci is None:
        return None
    copies = timing.excluded_copies_s
    return ci[0] + copies, ci[1] + copies


def precision(timing: Timing) -> float | None:
    """The interval's relative half-width on its wider side (what the stopping rule aims at and the
    progress line prints as ``± x %``); None without an interval."""
    ci = timing.median_ci_s
    if ci is None:
        return None
    m = timing.median_s
    return max(ci[1] / m - 1.0, 1.0 - ci[0] / m)


def sol_interval(sol_time_s: float, timing: Timing) -> tuple[float, float] | None:
    """The SOL ratio's interval: (sol / the slow end, sol / the fast end); None without an interval."""
    iv = time_interval(timing)
    if iv is None:
        return None
    return sol_time_s / iv[1], sol_time_s / iv[0]


def throttle_unsettles(c: RowConditions, *, sustained: bool = False) -> bool:
    """Whether the row's throttling makes its reading unstable.

    A throttled row ran below its clocks for part of its time, so its time is
    not the one the ceiling was measured at. One case is not: a row held only by
    the power cap (not by heat) that is priced against a ceiling measured under
    the same cap (``sustained``) is compared like with like."""
    if not c.throttled:
        return False
    return not (sustained and c.power_capped and not c.thermal)


def unstable_reasons(record: Record, *, sustained: bool = False) -> tuple[str, ...]:
    """Why the row's verdict cannot stand, one phrase each; empty when it can."""
    t = record.timing
    out: tuple[str, ...] = ()
    if t is not None:
        p = precision(t)
        limit = unstable_limit(record.env.device_kind)
        if p is not None and p > limit:
            where = "GPU" if record.env.device_kind == "cuda" else "CPU"
            ci = t.median_ci_s
            if p > 1 and ci is not None:  # "±5000 %" says nothing a person can use: the interval itself does
                known = f"its time is not known even to ±100 % (a rerun may read {_s(ci[0])}–{_s(ci[1])})"
            else:
                known = f"its time is known to ±{p * 100:.1f} %"
            out += (f"{known}, wider than the ±{limit * 100:.0f} % a verdict needs on a {where}",)
    return out + disturbances(record, sustained=sustained)


def disturbances(record: Record, *, sustained: bool = False) -> tuple[str, ...]:
    """What made the row's time not the device's own alone: contention, throttling (one phrase each)."""
    c = record.conditions
    out: tuple[str, ...] = ()
    if c is not None:
        if c.contended:
            out += ("contended: " + ("; ".join(c.contention) or "another load shared the device"),)
        if throttle_unsettles(c, sustained=sustained):
            held = [w for w, on in (("power cap", c.power_capped), ("thermal", c.thermal)) if on]
            out += ("throttled" + (f" ({', '.join(held)})" if held else "") + ": the clocks fell during the row",)
    return out


def sm_clock_mhz(record: Record) -> float | None:
    """The SM clock during a GPU row: the middle of its lowest and highest reading (what a comparison in
    cycles scales by); None on a CPU or where NVML could not read it."""
    c = record.conditions
    g = c.gpu if c is not None else None
    if g is None or g.sm_mhz_min is None or g.sm_mhz_max is None:
        return None
    return (g.sm_mhz_min + g.sm_mhz_max) / 2


def _s(seconds: float) -> str:
    """A time for a person: ``3.66 ms``, ``1.07 s``."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"
