"""Compare two runs row by row: which rows got slower than a threshold.

Rows join on ``Record.key`` (op, label, dtype, backend). The comparison is on
measured time (``actual_time_s``), which needs no profile, so it still works
for rows whose SOL is blank; efficiencies are shown beside it when both sides
are priced. When a key appears more than once on one side (several runs given
together) the last record wins: files are read in the order given, and a run
appends in time order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from collections.abc import Iterable

from tileops.roofline import Priced

Change = Literal["slower", "faster", "same", "new", "gone", "untimed"]
DEFAULT_THRESHOLD = 0.10


@dataclass(frozen=True)
class RowChange:
    key: tuple[str, str, str, str]  # (op, label, dtype, backend)
    change: Change
    old_time_s: float | None
    new_time_s: float | None
    old_efficiency: float | None
    new_efficiency: float | None

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


class TimeIndex:
    """One side of a comparison, reduced to what it needs: per row key, the last row's time,
    efficiency and device. A stream of records fills it row by row; parts of a run merge in order."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: dict[Key, tuple[float | None, float | None, str]] = {}

    @classmethod
    def of(cls, priced: Iterable[Priced]) -> TimeIndex:
        index = cls()
        for p in priced:
            index.add(p)
        return index

    def add(self, p: Priced) -> None:
        r = p.record
        self.rows[r.key] = (_time(p), p.efficiency, r.env.device_name)  # the last record of a key wins

    def merge(self, later: TimeIndex) -> None:
        self.rows.update(later.rows)

    def __len__(self) -> int:
        return len(self.rows)


def compare(current: Iterable[Priced], baseline: Iterable[Priced],
            threshold: float = DEFAULT_THRESHOLD) -> Comparison:
    """Flag rows whose time grew by more than ``threshold`` (0.10 = 10 % slower)."""
    return compare_indexes(TimeIndex.of(current), TimeIndex.of(baseline), threshold)


def compare_indexes(new: TimeIndex, old: TimeIndex, threshold: float = DEFAULT_THRESHOLD) -> Comparison:
    """:func:`compare` over the two sides' indexes (what a stream of records leaves)."""
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0 (a fraction: 0.10 = 10 %), got {threshold}")
    rows: list[RowChange] = []
    nrows, orows = new.rows, old.rows
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
        elif nt > ot * (1 + threshold):
            change = "slower"
        elif nt < ot * (1 - threshold):
            change = "faster"
        else:
            change = "same"
        rows.append(RowChange(key, change, ot, nt, oe, ne))
    notes: list[str] = []
    new_devices = {v[2] for v in nrows.values()}
    old_devices = {v[2] for v in orows.values()}
    if new_devices and old_devices and new_devices != old_devices:
        notes.append(f"the runs were measured on different devices (now {sorted(new_devices)}, "
                     f"baseline {sorted(old_devices)}): a time change may be the device, not the code")
    return Comparison(threshold, tuple(rows), tuple(notes))
