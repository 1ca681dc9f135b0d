"""Compare two runs row by row: which rows got slower, faster, stayed the same, or cannot be told apart.

Rows join on ``Record.key`` (op, label, dtype, backend). The comparison is on
measured time (``actual_time_s``), which needs no profile, so it still works
for rows whose SOL is blank; efficiencies are shown beside it when both sides
are priced. Each shared row is decided from both runs' intervals by
``tileops.report.compare_robust`` (after nvbench's compare-robust): ``slower``
or ``faster`` only on a clear gap of at least the threshold, ``same`` when the
intervals rule out a change of the threshold, ``ambiguous`` otherwise (wide
intervals, a disturbed side, a gap the SM clocks explain). A row without an
interval on either side (records from before intervals) is decided on its
medians at the threshold, and says so. Only ``slower`` fails the command
(exit 1); ``ambiguous`` is counted and never fails it. When a key appears more
than once on one side (several runs given together) the last record wins:
files are read in the order given, and a run appends in time order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from collections.abc import Iterable

from tileops.report.compare_robust import Side, Thresholds, classify
from tileops.roofline import Priced, disturbances, sm_clock_mhz, time_interval

Change = Literal["slower", "faster", "same", "ambiguous", "new", "gone", "untimed"]
DEFAULT_THRESHOLD = 0.10


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
    ratio_interval: tuple[float, float] | None = None  # what the intervals allow new / old to be
    basis: str | None = None  # "interval", or "point" where a side has no interval

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
#: What a side keeps of a row: (time, efficiency, device, the time's interval, SM clock, what disturbed it).
Kept = tuple[float | None, float | None, str, tuple[float, float] | None, float | None, str | None]


def _kept(p: Priced) -> Kept:
    r = p.record
    t = _time(p)
    if t is None or r.timing is None:
        return (None, p.efficiency, r.env.device_name, None, None, None)
    return (t, p.efficiency, r.env.device_name, time_interval(r.timing), sm_clock_mhz(r),
            "; ".join(disturbances(r)) or None)


def _side(k: Kept) -> Side:
    t = k[0]
    assert t is not None
    return Side(t, k[3], k[4], k[5])


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
    """Decide each shared row: slower or faster by more than ``threshold`` (0.10 = 10 %) on a clear gap
    between the intervals, the same within it, or ambiguous (:mod:`tileops.report.compare_robust`)."""
    return compare_indexes(TimeIndex.of(current), TimeIndex.of(baseline), threshold)


def compare_indexes(new: TimeIndex, old: TimeIndex, threshold: float = DEFAULT_THRESHOLD) -> Comparison:
    """:func:`compare` over the two sides' indexes (what a stream of records leaves)."""
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0 (a fraction: 0.10 = 10 %), got {threshold}")
    rows: list[RowChange] = []
    nrows, orows = new.rows, old.rows
    limits = Thresholds(threshold=threshold)
    for key in [*nrows, *(k for k in orows if k not in nrows)]:
        n, o = nrows.get(key), orows.get(key)
        nt, ne = (n[0], n[1]) if n else (None, None)
        ot, oe = (o[0], o[1]) if o else (None, None)
        change: Change
        if o is None:
            change = "new"
        elif n is None:
            change = "gone"
        elif nt is None or ot is None:
            change = "untimed"
        else:
            d = classify(_side(o), _side(n), limits)
            rows.append(RowChange(key, d.status, ot, nt, oe, ne, d.reason, d.message, d.ratio_interval, d.basis))
            continue
        rows.append(RowChange(key, change, ot, nt, oe, ne))
    notes: list[str] = []
    new_devices = {v[2] for v in nrows.values()}
    old_devices = {v[2] for v in orows.values()}
    if new_devices and old_devices and new_devices != old_devices:
        notes.append(f"the runs were measured on different devices (now {sorted(new_devices)}, "
                     f"baseline {sorted(old_devices)}): a time change may be the device, not the code")
    return Comparison(threshold, tuple(rows), tuple(notes))
