"""What the roofline plot shows, chosen without drawing: which rows are placed, labelled and listed.

Every row is either placed (it has FLOPs, bytes and a time on the plot's
profile) or listed as not placed with why. Up to ``LABEL_CAP`` placed rows
carry an id on the plot — all of them in a small run; in a large one the
formula errors and anomalies, then the worst rows and the best at-ceiling
ones — and the side table lists the labelled rows and then the unplaced
ones, up to ``TABLE_CAP``; what it leaves out is counted in ``summary``. A
pure function, so a test can ask what a plot of 2,000 rows would say without
paying for the drawing.

It also names what a point's look says (``reading``, ``above_roof``): the
colour is what the row's median reads, so a busy host whose every row is
``unstable`` still shows which rows sit at the ceiling and which far below;
being unstable is said by the marker being hollow, not by a colour shared by
every row.
"""

from __future__ import annotations

import collections
import itertools
from dataclasses import dataclass
from collections.abc import Iterable, Sequence

from tileops.profiles import Profile
from tileops.roofline import ANOMALY, AT_CEILING, Priced, time_interval

#: The most points that carry an id on the plot, and the most rows the table beside it lists:
#: beyond these, labels overlap and the table outgrows the figure.
LABEL_CAP = 30
TABLE_CAP = 45
_EPS = 1e-9  # the pricing's float allowance at its verdict lines


@dataclass
class _Point:
    ident: str
    x: float
    y: float
    priced: Priced
    y_ci: tuple[float, float] | None = None  # the achieved rate at the slow and the fast end of the time's interval


@dataclass
class Layout:
    """Which rows are drawn, labelled and listed: every row is in ``points`` or in ``unplaced``."""

    points: list[_Point]  # every placed row
    unplaced: list[tuple[str, Priced, str]]  # (id, row, why it cannot be placed)
    labelled: list[_Point]  # the placed rows that carry their id on the plot
    listed: list[tuple[str, Priced, str | None]]  # the table: labelled rows, then unplaced ones, in id order
    summary: list[str]  # what the table leaves out, counted


def reading(p: Priced) -> str:
    """The verdict a point's colour shows: the row's own, except that an ``unstable`` row shows what its median
    reads (``anomaly`` above 105 %, ``at-ceiling`` from 80 %, else ``below``): its instability is the hollow
    marker, so a run of unstable rows is not one colour."""
    if p.verdict != "unstable" or p.efficiency is None:
        return p.verdict
    if p.efficiency > ANOMALY + _EPS:
        return "anomaly"
    return "at-ceiling" if p.efficiency >= AT_CEILING - _EPS else "below"


def above_roof(p: Priced) -> bool:
    """Whether the row's median reads above 105 % of its roof: an anomaly or a formula error, whatever its
    verdict (an unstable row at 134 % of the memory roof is one the reader must see)."""
    return p.efficiency is not None and p.efficiency > ANOMALY + _EPS


def _why_not_placed(p: Priced, profile: Profile) -> str | None:
    r = p.record
    if p.profile != profile.name:
        return f"priced on {p.profile}" if p.profile else "no profile"
    if r.status != "ok" or r.timing is None:
        return r.status if r.status != "ok" else "not timed"
    if not r.bytes:
        return "no bytes"
    if not r.flops:
        return "0 FLOPs (off a log axis)"
    return None


def _choose_labels(points: list[_Point], cap: int) -> list[_Point]:
    """All points when they fit; else breaches and anomalies first (most impossible first), then the
    worst priced rows and the best at-ceiling ones in turn, then the rest in id order."""
    if len(points) <= cap:
        return list(points)

    def eff(q: _Point) -> float:
        return q.priced.efficiency if q.priced.efficiency is not None else 0.0

    must = sorted((q for q in points if q.priced.breaches or q.priced.verdict == "anomaly"), key=lambda q: -eff(q))
    worst = sorted((q for q in points if q.priced.verdict == "below"), key=eff)
    best = sorted((q for q in points if q.priced.verdict == "at-ceiling"), key=lambda q: -eff(q))
    chosen: dict[int, _Point] = {}
    for q in must:
        if len(chosen) >= cap:
            break
        chosen[id(q)] = q
    for pair in itertools.zip_longest(worst, best):
        for q in pair:
            if q is not None and len(chosen) < cap:
                chosen.setdefault(id(q), q)
    for q in points:
        if len(chosen) >= cap:
            break
        chosen.setdefault(id(q), q)
    return sorted(chosen.values(), key=lambda q: int(q.ident))


def _counts(items: Iterable[str]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in collections.Counter(items).most_common())


def plot_layout(priced: Sequence[Priced], profile: Profile, *, label_cap: int = LABEL_CAP,
                table_cap: int = TABLE_CAP) -> Layout:
    """Place every row of ``priced`` on ``profile``'s plot or say why not, and choose what is labelled and
    listed (ids are 1-based positions in ``priced``)."""
    points: list[_Point] = []
    unplaced: list[tuple[str, Priced, str]] = []
    for i, p in enumerate(priced, 1):
        why = _why_not_placed(p, profile)
        if why is None:
            r = p.record
            assert r.timing is not None and r.flops is not None and r.bytes  # a placed row has them (_why_not_placed)
            t = r.timing.actual_time_s
            ci = time_interval(r.timing)
            points.append(_Point(str(i), r.flops / r.bytes, r.flops / t, p,
                                 (r.flops / ci[1], r.flops / ci[0]) if ci is not None else None))
        else:
            unplaced.append((str(i), p, why))
    labelled = _choose_labels(points, label_cap)
    # A skipped row (a backend the op does not have here) is by design: the table's room goes to rows that
    # failed or cannot be drawn first, and skipped ones are listed only if room is left (else counted).
    unplaced.sort(key=lambda u: u[2] == "skipped")  # stable: id order within each kind
    shown_unplaced = unplaced[:max(0, table_cap - len(labelled))]
    listed: list[tuple[str, Priced, str | None]] = sorted(
        [(q.ident, q.priced, None) for q in labelled] + list(shown_unplaced), key=lambda r: int(r[0]))
    summary: list[str] = []
    if len(labelled) < len(points):
        ids = {q.ident for q in labelled}
        rest = [q.priced.verdict for q in points if q.ident not in ids]
        summary.append(f"{len(rest):,} more placed row(s) drawn without an id: {_counts(rest)}")
    if len(shown_unplaced) < len(unplaced):
        rest_why = [why for _, _, why in unplaced[len(shown_unplaced):]]
        summary.append(f"{len(rest_why):,} more row(s) not placed: {_counts(rest_why)}")
    if summary:
        summary.append("every row: roofline.json, or `tileops roofline --format csv`")
    return Layout(points, unplaced, labelled, listed, summary)
