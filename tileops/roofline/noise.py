"""How well a row's time is known, and what that does to its reading (issue 26).

A record's ``timing.level_ci_s`` is the interval of this run's level, and
``timing.median_ci_s`` where a rerun's level is expected to fall
(``tileops.bench.hostnoise``); ``timing.fast_ci_s`` bounds the fastest the call
ran, noise aside (``tileops.bench.interval.fast_interval``); ``record.conditions``
says what surrounded the row (``tileops.bench.sensors``). From them the roofline
takes three things:

* **the SOL's interval**: SOL is sol_time / actual_time, so the slow end of the
  level's interval gives the low end of the SOL: ``sol_ci = (sol / hi, sol / lo)``
  (device copies excluded from the time are added to both ends, as to the level);
* **whether a verdict can stand**: a row whose level interval is wider than
  ``UNSTABLE_CPU`` (±5 %) on a CPU or ``UNSTABLE_GPU`` (±2 %) on a GPU, or that
  ran contended or throttled, or was timed in scheduler slices (``timing.slices``:
  its interval spans the fast and the slow cluster, and is said in words, never
  as a precise ±), is ``unstable``: its SOL could lie on the other side of the
  80 % line, or the time is partly a neighbour's or the scheduler's;
* **the times the physics check judges**: the fast end (``fast_times``), since
  noise only ever slows a call (``tileops.roofline.price``).

A record without an interval (written before intervals, or not by the bench, which gives every row one) is
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
    CI_NO_INTERVAL: "the record has no interval for its median (written before intervals, or not by tileops "
                    "bench): its SOL is a point reading; re-run the bench for an interval",
}


def unstable_limit(device_kind: str) -> float:
    """The widest half-width a verdict stands on for this device kind (``cpu``, ``cuda``)."""
    return UNSTABLE_GPU if device_kind == "cuda" else UNSTABLE_CPU


def time_interval(timing: Timing) -> tuple[float, float] | None:
    """(lo, hi) of the row's actual time as this run measured it: its level's interval (``level_ci_s``; a
    record from before issue 34 has only the rerun prediction, ``median_ci_s``, which stands in, wider) plus the
    device copies excluded from it; None without an interval."""
    ci = timing.level_ci_s if timing.level_ci_s is not None else timing.median_ci_s
    if ci is None:
        return None
    copies = timing.excluded_copies_s
    return ci[0] + copies, ci[1] + copies


def rerun_interval(timing: Timing) -> tuple[float, float] | None:
    """(lo, hi) where a rerun's actual time is expected to fall (``median_ci_s`` plus the excluded copies); None
    without one."""
    ci = timing.median_ci_s
    if ci is None:
        return None
    copies = timing.excluded_copies_s
    return ci[0] + copies, ci[1] + copies


def fast_times(timing: Timing) -> tuple[float, float] | None:
    """(lo, hi) of the fastest the call ran, noise aside (``fast_ci_s`` plus the excluded copies): the call's
    noise-free time is at most ``hi``, and ``lo`` is the fastest its readings allow; None in a record without
    it (written before issue 34)."""
    ci = timing.fast_ci_s
    if ci is None:
        return None
    copies = timing.excluded_copies_s
    return ci[0] + copies, ci[1] + copies


def precision(timing: Timing) -> float | None:
    """The level interval's relative half-width on its wider side (what a verdict's stability is judged by);
    None without an interval."""
    iv = time_interval(timing)
    if iv is None:
        return None
    m = timing.actual_time_s
    return max(iv[1] / m - 1.0, 1.0 - iv[0] / m)


def sol_interval(sol_time_s: float, timing: Timing) -> tuple[float, float] | None:
    """The SOL ratio's interval: (sol / the slow end, sol / the fast end) of the level's; None without one."""
    iv = time_interval(timing)
    if iv is None:
        return None
    return sol_time_s / iv[1], sol_time_s / iv[0]


#: An interval whose end lies further than this factor from its level is written in words, not numbers.
SPAN_SHOWN = 10.0


def interval_words(level: float, lo: float, hi: float, df: float | None = None) -> str:
    """An interval around ``level`` for a person: ``known to ±4.1 %``, ``known to +12.4 %/-8.9 %`` where its
    sides differ (a log-symmetric interval is wider above), and where an end lies more than :data:`SPAN_SHOWN`
    times from the level, ``not known to within 10x`` with the reason (``df``: its t quantile's degrees of
    freedom), never a bound of 0.001 ns or a billion seconds."""
    if hi > SPAN_SHOWN * level or lo * SPAN_SHOWN < level:
        why = (f"its interval rests on {df:.0f} degree(s) of freedom: too few blocks, or too few rows of its kind "
               "to pool" if df is not None and df < 3 else "its blocks or visits disagree by that much: a busy host")
        return f"not known to within {SPAN_SHOWN:.0f}x ({why})"
    up, down = hi / level - 1.0, 1.0 - lo / level
    if abs(up - down) < 0.0005 or max(up, down) < 0.01:
        return f"known to ±{max(up, down) * 100:.1f} %"
    return f"known to +{up * 100:.1f} %/-{down * 100:.1f} %"


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
    sliced = sliced_words(record)
    if sliced is not None:  # its interval spans both clusters: the slices are the reason, not a width
        out += (sliced,)
    elif t is not None:
        p = precision(t)
        limit = unstable_limit(record.env.device.kind)
        if p is not None and p > limit:
            where = "GPU" if record.env.device.kind == "cuda" else "CPU"
            ci = time_interval(t)
            known = "its time is " + (interval_words(t.actual_time_s, *ci, t.ci_df) if ci is not None else "not known")
            out += (f"{known}, wider than the ±{limit * 100:.0f} % a verdict needs on a {where}",)
    return out + disturbances(record, sustained=sustained)


def sliced_words(record: Record) -> str | None:
    """A row timed in scheduler slices (``timing.slices``), in words: how many samples, how much slower, and
    what to do; its interval spans both clusters and is never shown as a precise ±. None for any other row."""
    t = record.timing
    sl = t.slices if t is not None else None
    if sl is None:
        return None
    fix = "a quieter host" if record.env.threads == 1 else "--threads 1 or a quieter host"
    return (f"timed in scheduler slices ({sl.slow} of {sl.samples} samples ~{_s(sl.slow_s - sl.fast_s)} slower: "
            f"the OS time slice; try {fix})")


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


#: Each unstable reason's short name, by how its phrase (:func:`unstable_reasons`) begins: the exporter labels an
#: unstable row with these (``tileops_row_unstable``), never with a phrase whose numbers change every run.
UNSTABLE_CODES: tuple[tuple[str, str], ...] = (
    ("its time is", "wide-interval"),  # the level's interval is wider than the device kind's limit
    ("contended", "contended"),
    ("throttled", "throttled"),
    ("timed in scheduler slices", "time-sliced"),  # its samples bimodal at the OS time slice
)
#: A phrase no entry of :data:`UNSTABLE_CODES` names (a reason added without one).
UNSTABLE_OTHER = "other"


def unstable_code(phrase: str) -> str:
    """The short name of one of :func:`unstable_reasons`' phrases (``wide-interval``, ``contended``,
    ``throttled``, ``time-sliced``; ``other`` for a phrase no code names)."""
    return next((code for start, code in UNSTABLE_CODES if phrase.startswith(start)), UNSTABLE_OTHER)


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
