"""Compare two runs row by row: which rows got slower, faster, stayed the same, or cannot be told apart.

Rows join on ``Record.key`` (op, label, dtype, backend). The comparison is on
measured time (``actual_time_s``), which needs no profile, so it still works
for rows whose SOL is blank; efficiencies are shown beside it when both sides
are priced. Each shared row is decided from both runs' levels and their
intervals by ``tileops.report.compare_robust``: ``slower`` or ``faster`` only on
a change both significant (Benjamini–Hochberg over the comparison's rows) and
material (beyond the threshold), ``same`` when the ratio's interval rules out a
change of the threshold, ``ambiguous`` otherwise (wide intervals, a disturbed
side, a change the SM clocks explain), ``unjudged`` where a side has no interval
(records from before intervals): never slower on its medians alone. A record
from before issue 34 carries only the prediction of a rerun: its level's
interval is that, narrowed by sqrt(2) in log (a prediction adds two levels'
uncertainties). Only ``slower`` fails the command (exit 1); ``ambiguous`` and
``unjudged`` are counted and never fail it. Where both runs probed the device
(issue 39), each row's change is also split into the device's and the kernel's
own (``tileops.report.statesplit``), each decided; the verdict above stays the
time's. When a key appears more than once on
one side (several runs given together) the last record wins: files are read in
the order given, and a run appends in time order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from collections.abc import Iterable

import math

from tileops.defaults import BASELINE_THRESHOLD as DEFAULT_THRESHOLD
from tileops.records import Timing
from tileops.report.compare_robust import Side, Thresholds, classify_all, common_shift
from tileops.report.statesplit import StateSides, StateSplit, split_all, state_sides
from tileops.roofline import Priced, disturbances, sm_clock_mhz, time_interval

Change = Literal["slower", "faster", "same", "ambiguous", "unjudged", "new", "gone", "untimed"]


@dataclass(frozen=True)
class RowChange:
    key: tuple[str, str, str, str]  # (op, label, dtype, backend)
    change: Change
    old_time_s: float | None
    new_time_s: float | None
    old_efficiency: float | None
    new_efficiency: float | None
    reason: str | None = None  # the decision's short code (compare_robust.REASONS) on a shared timed row
    message: str | None = None  # the same for a person, with the numbers
    ratio_interval: tuple[float, float] | None = None  # the 95 % interval of new / old
    basis: str | None = None  # "interval", or "none" where a side has no interval (unjudged)
    p_value: float | None = None  # the change's two-sided p-value, before the correction over rows
    #: the change split into the device's (its reference probe) and the kernel's own, each decided (issue 39,
    #: ``tileops.report.statesplit``); None where a side has no probe ratio with an interval
    split: StateSplit | None = None

    @property
    def ratio(self) -> float | None:
        """new time / old time (> 1 is slower)."""
        if self.old_time_s and self.new_time_s:
            return self.new_time_s / self.old_time_s
        return None


@dataclass(frozen=True)
class Comparison:
    threshold: float
    rows: tuple[RowChange, ...]
    notes: tuple[str, ...] = field(default=())
    #: the change every row shares: the median of the rows' new / old, where enough rows have intervals
    common_ratio: float | None = None

    @property
    def regressions(self) -> tuple[RowChange, ...]:
        return tuple(r for r in self.rows if r.change == "slower")

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.change] = out.get(r.change, 0) + 1
        return out


def _time(p: Priced) -> float | None:
    t = p.record.timing
    return t.actual_time_s if (p.record.status == "ok" and t is not None) else None


Key = tuple[str, str, str, str]
#: What a side keeps of a row: (time, efficiency, device, the level's interval, its df, SM clock, what disturbed
#: it, its two factors for the device/kernel split).
Kept = tuple[float | None, float | None, str, tuple[float, float] | None, float, float | None, str | None,
             StateSides | None]


def level_interval(t: Timing) -> tuple[tuple[float, float] | None, float]:
    """The interval of a record's level (its actual time) and that interval's degrees of freedom. A record from
    before issue 34 holds only a rerun's prediction (``median_ci_s``, two levels' uncertainty): narrowed by
    sqrt(2) in log, with a normal quantile."""
    ci = time_interval(t)
    if ci is None:
        return None, math.inf
    if t.level_ci_s is not None:
        return ci, float(t.ci_df) if t.ci_df else math.inf
    m = t.actual_time_s
    lo, hi = (m * (ci[0] / m) ** (1 / math.sqrt(2)), m * (ci[1] / m) ** (1 / math.sqrt(2)))
    return (min(lo, m), max(hi, m)), math.inf


def _kept(p: Priced) -> Kept:
    r = p.record
    t = _time(p)
    if t is None or r.timing is None:
        return (None, p.efficiency, r.env.device.name, None, math.inf, None, None, None)
    ci, df = level_interval(r.timing)
    disturbed = "; ".join(disturbances(r)) or None
    state = state_sides(p, t, ci, df, disturbed) if p.probe_ratio is not None else None
    return (t, p.efficiency, r.env.device.name, ci, df, sm_clock_mhz(r), disturbed, state)


def _side(k: Kept) -> Side:
    t = k[0]
    assert t is not None
    return Side(t, k[3], k[4], k[5], k[6])


class TimeIndex:
    """One side of a comparison, reduced to what it needs: per row key, the last row's time, efficiency,
    device, the time's interval, its SM clock and what disturbed it. A stream of records fills it row by row;
    parts of a run merge in order."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: dict[Key, Kept] = {}

    @classmethod
    def of(cls, priced: Iterable[Priced]) -> TimeIndex:
        index = cls()
        for p in priced:
            index.add(p)
        return index

    def add(self, p: Priced) -> None:
        r = p.record
        self.rows[r.key] = _kept(p)  # the last record of a key wins

    def merge(self, later: TimeIndex) -> None:
        self.rows.update(later.rows)

    def __len__(self) -> int:
        return len(self.rows)


def compare(current: Iterable[Priced], baseline: Iterable[Priced],
            threshold: float = DEFAULT_THRESHOLD) -> Comparison:
    """Decide each shared row: slower or faster by more than ``threshold`` (0.10 = 10 %), significantly over
    the comparison's rows, the same within it, ambiguous, or unjudged (:mod:`tileops.report.compare_robust`)."""
    return compare_indexes(TimeIndex.of(current), TimeIndex.of(baseline), threshold)


def compare_indexes(new: TimeIndex, old: TimeIndex, threshold: float = DEFAULT_THRESHOLD) -> Comparison:
    """:func:`compare` over the two sides' indexes (what a stream of records leaves)."""
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0 (a fraction: 0.10 = 10 %), got {threshold}")
    nrows, orows = new.rows, old.rows
    limits = Thresholds(threshold=threshold)
    keys = [*nrows, *(k for k in orows if k not in nrows)]
    timed = [k for k in keys if k in nrows and k in orows and nrows[k][0] is not None and orows[k][0] is not None]
    sides = [(_side(orows[k]), _side(nrows[k])) for k in timed]
    decisions = dict(zip(timed, classify_all(sides, limits)))
    probed = [k for k in timed if nrows[k][7] is not None and orows[k][7] is not None]
    splits = dict(zip(probed, split_all([(orows[k][7], nrows[k][7]) for k in probed], limits)))  # type: ignore[misc]
    common = common_shift(sides)
    rows: list[RowChange] = []
    for key in keys:
        n, o = nrows.get(key), orows.get(key)
        nt, ne = (n[0], n[1]) if n else (None, None)
        ot, oe = (o[0], o[1]) if o else (None, None)
        d = decisions.get(key)
        if d is not None:
            rows.append(RowChange(key, d.status, ot, nt, oe, ne, d.reason, d.message, d.ratio_interval, d.basis,
                                  d.p_value, splits.get(key)))
            continue
        change: Change = "new" if o is None else "gone" if n is None else "untimed"
        rows.append(RowChange(key, change, ot, nt, oe, ne))
    notes: list[str] = []
    new_devices = {v[2] for v in nrows.values()}
    old_devices = {v[2] for v in orows.values()}
    if new_devices and old_devices and new_devices != old_devices:
        notes.append(f"the runs were measured on different devices (now {sorted(new_devices)}, "
                     f"baseline {sorted(old_devices)}): a time change may be the device, not the code")
    return Comparison(threshold, tuple(rows), tuple(notes), math.exp(common) if common is not None else None)
