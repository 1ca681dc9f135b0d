"""One priced record as a report row: the columns every format shares.

Every renderer (rich, markdown, CSV, JSON, the plot's legend) reads its cells
from here, so a column means the same thing in every format. ``display`` holds
what a person reads (SI units); ``raw`` holds base units (seconds, bytes/s,
FLOP/s, ratios) for machines.
"""

from __future__ import annotations

import json
import math
from typing import Any
from collections.abc import Callable, Iterable

from tileops.roofline import BackendRace, GapSplit, Priced, power_blank, power_state, row_energy, si
from tileops.roofline.energy import NO_CONDITIONS, NO_TIMING
from tileops.roofline.noise import SPAN_SHOWN, fast_times, precision, rerun_interval, time_interval

#: The human table's columns, in order (``op`` is the group heading). ``FLOP/s`` and ``B/s`` are both achieved
#: rates, side by side whichever bounds the row (``roof`` names the bounding ceiling).
DISPLAY_COLUMNS = ("label", "dtype", "backend", "time", "FLOP/s", "B/s", "roof", "bound", "efficiency", "verdict")
#: The column the human table adds after the efficiency when a row of the run has an interval: the SOL's 95 %
#: interval (a rerun's SOL falls in it), ``—`` on a row without one.
SOL_CI_COLUMN = "SOL (95 % CI)"
#: Columns the human table adds before the verdict when the run has them (:func:`display_columns`):
#: ``compile time``, a compile/triton row's first call, compilation included, and never part of ``time``;
#: ``vs best``, where a row ran on several backends, each backend's SOL points behind the best.
BACKEND_COLUMNS = ("compile time", "vs best")

#: The machine formats' columns, in order.
RAW_COLUMNS = (
    "run_id", "op", "family", "label", "dtype", "backend", "device_name", "device_kind", "timer", "profile",
    "status", "actual_time_s", "flops", "bytes", "intensity_flop_per_byte", "roof_key", "roof",
    "memory_time_s", "compute_time_s", "sol_time_s", "efficiency", "bound",
    "achieved_bytes_per_s", "achieved_flops_per_s", "effective_bandwidth", "effective_peak",
    "verdict", "blank_reason", "blank_detail", "formula_error", "breaches", "notes", "data_terms",
    "compile_s", "span_s", "host_bound",
    "sol_ci", "sol_ci_blank", "time_ci_s", "time_precision", "unstable", "time_rerun_s", "time_fast_s",
    # issue 28 (:func:`conditions_values`): the power state, energy per call, the SOL gap split
    "power_state", "power_blank", "ceiling_basis", "sm_mhz_min", "sm_mhz_max", "power_w", "power_limit_w",
    "temperature_c_max", "clock_events",
    "energy_j_per_call", "flop_per_joule", "bytes_per_joule", "energy_blank",
    "gap", "gap_traffic_ratio", "gap_achieved", "gap_traffic_factor", "gap_moved_bytes", "gap_bound_at_moved",
    "gap_note", "gap_blank",
    # issue 39 (:func:`state_values`): the reference probe, and SOL against the device's state during the row
    "probe_kind", "probe_ratio", "probe_ratio_ci", "state_efficiency", "state_efficiency_ci", "probe_cost_share",
    "best_backend", "best_margin", "behind_best", "best_within_noise",
)

_TIME = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
_FLOPS = ((1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s"), (1e6, "MFLOP/s"), (1e3, "kFLOP/s"), (1.0, "FLOP/s"))
_BYTES = ((1e15, "PB/s"), (1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s"), (1.0, "B/s"))
DASH = "—"

#: The human columns that hold a number: each is drawn in one unit, named in its header (:func:`column_unit`).
NUMBER_COLUMNS = {"time": _TIME, "FLOP/s": _FLOPS, "B/s": _BYTES, "compile time": _TIME}


def seconds(value: float | None) -> str:
    """``12.3 µs``, ``4.56 ms``."""
    if value is None or not math.isfinite(value):
        return DASH
    for scale, unit in _TIME:
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def column_unit(column: str, values: Iterable[float | None]) -> tuple[str, Callable[[float | None], str]]:
    """One unit for a number column (:data:`NUMBER_COLUMNS`), chosen by the median of its values: the header
    naming it (``time (µs)``, ``TFLOP/s``), and the cell of a value in it (three significant figures, no unit,
    so a column reads down without a unit changing between rows)."""
    units = NUMBER_COLUMNS[column]
    finite = sorted(v for v in values if v is not None and math.isfinite(v) and v > 0)
    scale, unit = units[-1]
    if finite:
        typical = finite[len(finite) // 2]
        scale, unit = next(((k, u) for k, u in units if typical >= k), units[-1])
    header = f"{column} ({unit})" if units is _TIME else unit

    def cell(value: float | None) -> str:
        if value is None or not math.isfinite(value):
            return DASH
        return plain_number(value / scale)

    return header, cell


def plain_number(x: float) -> str:
    """Three significant figures without an exponent: ``181``, ``97.6``, ``0.0123``, ``12300`` (49641 too is
    ``49600``: a cell shows no more digits than the measurement holds, whatever the column's unit)."""
    if x == 0:
        return "0"
    x = float(f"{x:.3g}")  # rounded first, so 999.7 is 1000, never 1000.0
    digits = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{digits}f}"


def percent(ratio: float | None) -> str:
    return DASH if ratio is None else f"{ratio * 100:.1f} %"


#: What a host-bound row's efficiency cell adds: its SOL is of device-busy time, which the host's gaps exceed.
HOST_BOUND_MARK = "host-bound"


def efficiency_text(p: Priced) -> str:
    """The efficiency cell: the SOL ratio, marked ``host-bound`` where the host holds the device back."""
    text = percent(p.efficiency)
    return f"{text} {HOST_BOUND_MARK}" if p.efficiency is not None and p.host_bound else text


def sol_ci_text(p: Priced) -> str:
    """The ``SOL (95 % CI)`` cell: ``76.1–81.6 %``; a dash where the row has no interval (its JSON row says why,
    ``sol_ci_blank``) or no SOL; ``not known`` where an end lies more than ten times from the SOL (JSON keeps
    the values; the unstable line says why)."""
    ci = p.sol_ci
    if ci is None:
        return DASH
    lo, hi = ci
    eff = p.efficiency
    if eff is not None and (hi > SPAN_SHOWN * eff or lo * SPAN_SHOWN < eff):
        return "not known"
    return f"{lo * 100:.1f}–{hi * 100:.1f} %"


def ratio_interval_text(lo: float, hi: float) -> str:
    """A ratio's interval for a person: ``0.91–1.08x``, with ``<0.01`` and ``>100`` at the far ends (JSON keeps
    the values)."""
    low = "<0.01" if lo < 0.01 else f"{lo:.2f}"
    high = ">100" if hi > 100 else f"{hi:.2f}"
    return f"{low}–{high}x"


def verdict_text(p: Priced) -> str:
    """The verdict cell: the verdict, a blank's reason, and FORMULA ERROR on a breach."""
    text: str = p.verdict
    if p.verdict == "blank":
        text = f"blank: {p.blank_reason}"
    elif p.verdict == "error":  # "error: timeout", or "skipped"
        err = p.record.error
        text = f"error: {err.kind}" if (p.blank_reason == "error" and err) else (p.blank_reason or "error")
    if p.breaches:
        text += " · FORMULA ERROR"
    mark = power_mark(p)
    if mark:
        text += f" · {mark}"
    return text


def power_mark(p: Priced) -> str:
    """A row measured under a power or thermal cap, marked so: ``power-capped (sustained)`` names the ceiling
    fraction it was priced against; ``thermal`` rows are priced on the burst one. Empty otherwise."""
    state = power_state(p.record)
    if state is None or state == "uncapped":
        return ""
    if state == "power-capped" and p.ceiling_basis is not None:
        return f"{state} ({p.ceiling_basis})"
    return state


def points(ratio: float) -> str:
    """A SOL difference in percentage points: ``25.1 pts``; two significant figures below one point
    (``0.07 pts``), so a small lead does not read as none."""
    pts = ratio * 100
    return f"{pts:.1f} pts" if abs(pts) >= 1 or pts == 0 else f"{pts:.2g} pts"


def versus_best(p: Priced, race: BackendRace | None) -> str:
    """``best, +25.1 pts`` on the row's best backend (ahead of the next), ``-25.1 pts`` on the others;
    empty when the row ran on one backend or this backend has no SOL (its verdict says why)."""
    return versus_best_of(p.record.backend, race)


def versus_best_of(backend: str, race: BackendRace | None) -> str:
    """:func:`versus_best` of a row known by its backend (a streamed report keeps only that)."""
    if race is None or race.best is None:
        return ""
    if backend == race.best:
        if race.margin is None:
            return "best"
        return f"best, +{points(race.margin)}" + (" within noise" if race.within_noise else "")
    behind = race.behind(backend)
    if behind is None:
        return ""
    return f"-{points(behind)}" + (" within noise" if race.overlaps_best(backend) else "")


def compile_seconds(p: Priced) -> float | None:
    """A compile/triton row's first call, compilation included (recorded apart from its timing)."""
    return p.record.timing.compile_s if p.record.timing else None


def columns_for(compiled: bool, raced: bool, intervals: bool = False) -> tuple[str, ...]:
    """The human table's columns: ``DISPLAY_COLUMNS``, plus ``compile time`` when a row was compiled and
    ``vs best`` when a row ran on several backends, both before the verdict, and :data:`SOL_CI_COLUMN` after
    the efficiency when a row has an interval."""
    extra = (("compile time",) if compiled else ()) + (("vs best",) if raced else ())
    ci = (SOL_CI_COLUMN,) if intervals else ()
    return DISPLAY_COLUMNS[:-1] + ci + extra + DISPLAY_COLUMNS[-1:]


def display_columns(priced: Iterable[Priced], races: dict) -> tuple[str, ...]:
    """The human table's columns for this run (:func:`columns_for`)."""
    priced = list(priced)
    return columns_for(any(compile_seconds(p) is not None for p in priced), bool(races),
                       any(p.sol_ci is not None for p in priced))


#: Where the number columns sit in :func:`display_cells` (the compile time after the verdict), and the SOL
#: interval's cell (last: the human table draws it after the efficiency).
TIME_AT, FLOPS_AT, BYTES_AT, COMPILE_AT, SOL_CI_AT = 3, 4, 5, 10, 11


def roof_text(p: Priced) -> str:
    """The bounding ceiling: ``memory 20 GB/s``, ``cpu.fp32 100 GFLOP/s``."""
    if p.bound == "memory":
        return f"memory {si(p.effective_bandwidth, 'B/s')}"
    if p.bound == "compute":
        return f"{p.roof} {si(p.effective_peak, 'FLOP/s')}"
    return DASH


def achieved(p: Priced) -> tuple[float | None, float | None]:
    """(FLOP/s, bytes/s) the row achieved: its recorded counts over its time, whatever bounds it, and also
    where SOL is blank (no profile, an uncalibrated roof): a rate needs no ceiling."""
    t = p.actual_time_s
    if p.achieved_bytes_per_s is not None or not t:
        return p.achieved_flops_per_s, p.achieved_bytes_per_s
    r = p.record
    return (None if r.flops is None else r.flops / t), (None if r.bytes is None else r.bytes / t)


def display_cells(p: Priced) -> tuple[Any, ...]:
    """The human columns (:data:`DISPLAY_COLUMNS`) of a row, in order but the SOL interval, then its compile
    time and its SOL interval (the ``vs best``
    cell needs the run's other backends: :func:`versus_best_of` when the run is read). The number columns
    (time, both achieved rates, compile time) are kept as numbers: a report draws each column in one unit
    (:func:`column_unit`) once it has every row."""
    r = p.record
    timing = r.timing
    flops_per_s, bytes_per_s = achieved(p)
    return (r.label, r.dtype, r.backend, p.actual_time_s, flops_per_s, bytes_per_s,
            roof_text(p), p.bound or DASH, efficiency_text(p), verdict_text(p),
            timing.compile_s if timing is not None else None, sol_ci_text(p))


def display(p: Priced, race: BackendRace | None = None) -> dict[str, str]:
    """The human columns of one row by name, with ``op``, ``compile time`` and ``vs best``, each number in its
    own unit (a row alone has no column to share one with)."""
    cells = list(display_cells(p))
    cells[TIME_AT], cells[COMPILE_AT] = seconds(cells[TIME_AT]), seconds(cells[COMPILE_AT])
    cells[FLOPS_AT], cells[BYTES_AT] = si(cells[FLOPS_AT], "FLOP/s"), si(cells[BYTES_AT], "B/s")
    return {"op": p.record.op, **dict(zip(DISPLAY_COLUMNS, cells)), SOL_CI_COLUMN: cells[SOL_CI_AT],
            "compile time": cells[COMPILE_AT], "vs best": versus_best(p, race)}


_last: tuple[Priced | None, tuple[str, ...]] = (None, ())  # the last row's breach sentences


def breach_sentences(p: Priced) -> tuple[str, ...]:
    """The FORMULA ERROR sentence of each of the row's breaches.

    The summary and the report both ask for them one after the other, so the
    last row's are kept (formatting them is most of the cost of a breach row);
    the pair is replaced whole, so a reader in another thread sees one row's.
    """
    global _last
    if not p.breaches:
        return ()
    last = _last
    if last[0] is p:
        return last[1]
    out = tuple(b.describe(p.record) for b in p.breaches)
    _last = (p, out)
    return out


def raw(p: Priced, race: BackendRace | None = None) -> dict[str, Any]:
    """The machine columns (:data:`RAW_COLUMNS`, in that order), base units."""
    return dict(zip(RAW_COLUMNS, raw_values(p) + race_cells(p.record.backend, race)))


def raw_values(p: Priced) -> list[Any]:
    """:func:`raw`'s values up to the race columns, in column order (a CSV line needs no keys)."""
    r = p.record
    env = r.env
    timing = r.timing
    breaches = p.breaches
    return [
        r.run_id, r.op, r.family, r.label, r.dtype, r.backend, env.device.name, env.device.kind,
        timing.timer if timing is not None else None, p.profile, r.status,
        p.actual_time_s, r.flops, r.bytes, p.intensity, r.roof_key, p.roof,
        p.memory_time_s, p.compute_time_s, p.sol_time_s, p.efficiency, p.bound,
        p.achieved_bytes_per_s, p.achieved_flops_per_s, p.effective_bandwidth, p.effective_peak,
        p.verdict, p.blank_reason, p.blank_detail, bool(breaches),
        [{"ceiling": b.ceiling, "implied_per_s": b.implied_per_s, "theoretical_per_s": b.theoretical_per_s,
          "ratio": b.ratio, "message": m} for b, m in zip(breaches, breach_sentences(p))] if breaches else [],
        list(p.notes),
        dict(r.data_terms),
        compile_seconds(p),
        timing.span_s if timing is not None else None,
        p.host_bound,
        *interval_values(p),
        *conditions_values(p),
        *state_values(p),
    ]


def state_values(p: Priced) -> list[Any]:
    """The probe columns of a row (issue 39, ``tileops.roofline.state``): which probe it was read against, the
    probe's rate over its calibrated rate and SOL against the device's state, each with its interval, and what
    probing cost the row (a share of its timing's wall time)."""
    probe = p.record.probe
    pci, sci = p.probe_ratio_ci, p.state_efficiency_ci
    return [p.probe_kind, p.probe_ratio, list(pci) if pci is not None else None, p.state_efficiency,
            list(sci) if sci is not None else None, probe.cost_share if probe is not None else None]


def interval_values(p: Priced) -> list[Any]:
    """The interval columns of a row (``sol_ci`` .. ``time_fast_s``): the SOL's interval or why a priced row has
    none, the time's interval (this run's level) and its relative half-width, why the verdict is ``unstable``,
    where a rerun's time is expected, and the fast end the physics check judges."""
    timing = p.record.timing
    ci = p.sol_ci
    tci = time_interval(timing) if timing is not None else None
    rci = rerun_interval(timing) if timing is not None else None
    fci = fast_times(timing) if timing is not None else None
    return [list(ci) if ci is not None else None, p.sol_ci_blank, list(tci) if tci is not None else None,
            precision(timing) if timing is not None else None, list(p.unstable),
            list(rci) if rci is not None else None, list(fci) if fci is not None else None]


#: Why a row of a run without audit entries has no gap split.
NO_AUDIT = "the run has no audit entries (`tileops audit --out RUN_DIR` measures each row's DRAM traffic)"


def conditions_values(p: Priced) -> list[Any]:
    """The power state, energy and gap columns of a row (issue 28), in :data:`RAW_COLUMNS` order: a blank
    value's reason is in ``power_blank``, ``energy_blank`` or ``gap_blank``."""
    r = p.record
    c = r.conditions
    if c is None and p.gap is None:  # a record from before the sensors, a run without an audit: most rows
        return [None, power_blank(r), p.ceiling_basis, None, None, None, None, None, [], None, None, None,
                NO_CONDITIONS if r.status == "ok" and r.timing is not None else NO_TIMING,
                None, None, None, None, None, None, None, NO_AUDIT]
    g = c.gpu if c is not None else None
    why_power = power_blank(r)
    power = [power_state(r), why_power, p.ceiling_basis,
             *((g.sm_mhz_min, g.sm_mhz_max, g.power_w, g.power_limit_w, g.temperature_c_max, list(g.clock_events))
               if g is not None else (None, None, None, None, None, []))]
    e = row_energy(r)
    blank = e.blank
    why_energy = None
    if blank:
        reasons = {blank[k] for k in ("joules_per_call", "flop_per_joule", "bytes_per_joule") if k in blank}
        if "joules_per_call" in blank:
            why_energy = blank["joules_per_call"]
        elif reasons:
            why_energy = "; ".join(f"{k}: {blank[k]}" for k in ("flop_per_joule", "bytes_per_joule") if k in blank)
    energy = [e.joules_per_call, e.flop_per_joule, e.bytes_per_joule, why_energy]
    gap = p.gap
    if isinstance(gap, GapSplit):
        split = [gap.describe(), gap.traffic_ratio, gap.achieved, gap.traffic_factor, gap.moved_bytes,
                 gap.bound_at_moved, gap.note or None, None]
    else:
        why = gap.why if gap is not None else NO_AUDIT
        split = [None] * 7 + [why]
    return power + energy + split


#: Where the list-valued columns sit in a row's values (CSV flattens them to text).
BREACHES_AT, NOTES_AT, DATA_TERMS_AT = (RAW_COLUMNS.index(c) for c in ("breaches", "notes", "data_terms"))
#: The interval columns CSV writes as text: the intervals as JSON ``[lo, hi]``, the reasons joined by "; ".
INTERVALS_AT = tuple(RAW_COLUMNS.index(c) for c in ("sol_ci", "time_ci_s", "time_rerun_s", "time_fast_s",
                                                    "probe_ratio_ci", "state_efficiency_ci"))
UNSTABLE_AT = RAW_COLUMNS.index("unstable")
CLOCK_EVENTS_AT = RAW_COLUMNS.index("clock_events")
#: The columns that depend on the run's other backends of the row (last, so a streamed report adds them
#: when the whole run has been read).
RACE_COLUMNS = ("best_backend", "best_margin", "behind_best", "best_within_noise")
assert RAW_COLUMNS[-len(RACE_COLUMNS):] == RACE_COLUMNS


def race_cells(backend: str, race: BackendRace | None) -> list[str | float | None]:
    """The :data:`RACE_COLUMNS` of a row on ``backend`` whose run put it in ``race`` (None: one backend)."""
    if race is None:
        return [None, None, None, None]
    return [race.best, race.margin, race.behind(backend), race.within_noise if race.best is not None else None]


def data_terms_text(terms: dict[str, Any]) -> str:
    """What decided a value-dependent number (§4.7), compact: ``experts_hit=5 rows_per_expert=[...]``."""
    if not terms:
        return ""
    return " ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in terms.items())


def grouped(priced: Iterable[Priced]) -> dict[str, list[Priced]]:
    """Rows grouped by op, ops in the order they first appear (the bench's manifest order)."""
    out: dict[str, list[Priced]] = {}
    for p in priced:
        out.setdefault(p.record.op, []).append(p)
    return out
