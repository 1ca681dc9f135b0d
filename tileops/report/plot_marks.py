"""How a row looks on the roofline plot, and the key that says so.

A point's **colour** is what its median reads (``plot_layout.reading``:
at-ceiling, below, anomaly, latency-bound, blank); its **shape** is its backend
(``BACKEND_MARKER``); a **hollow** marker is an ``unstable`` row, its time not
known well enough to judge, so a busy host's run keeps its colours. Over the
point, a **red ring** marks a physics breach (a formula error) and a **magenta
diamond** a row above 105 % of its roof (an anomaly, however unstable). One
scatter per look, so thousands of rows cost what a few do.

A row's **error bar** spans its achieved rate at the slow and the fast end of
its time's 95 % interval (its SOL interval on the plot's scale). A bar is cut
where it leaves the axes, or more than ``BAR_SPAN`` from its point (then it is
"not known to within 10x", as the tables say), and an arrowhead at the cut end
says it goes on: a bar of five decades no longer paints the whole plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any

from matplotlib.collections import LineCollection
from matplotlib.lines import Line2D

from tileops.report.plot_layout import _Point, above_roof, reading
from tileops.roofline import BLANK_SKIPPED, Priced
from tileops.roofline.noise import SPAN_SHOWN

VERDICT_COLOR = {
    "at-ceiling": "#1a9850",
    "below": "#4575b4",
    "unstable": "#fdae61",
    "latency-bound": "#f39c12",
    "anomaly": "#c51b7d",
    "blank": "#9e9e9e",
    "error": "#d73027",
    "skipped": "#d9d9d9",
}
#: What each colour says in the key (the verdict a stable row has; an unstable row's median reading).
READING_TEXT = {
    "at-ceiling": "at-ceiling (80 % of its roof or more)",
    "below": "below (under 80 %)",
    "anomaly": "anomaly (above 105 % of its roof)",
    "latency-bound": "latency-bound",
    "blank": "blank (not priced)",
}
#: One marker shape per backend, so a row's backends stand side by side at the same intensity.
BACKEND_MARKER = {"torch": "o", "compile": "s", "triton": "^"}
OTHER_MARKER = "D"  # a backend this table does not name
BREACH_COLOR = "red"
ANOMALY_MARK = "D"  # the diamond round a row above 105 % of its roof
POINT_S, BREACH_S, ANOMALY_S = 46, 190, 170  # marker areas, points squared
#: An error bar is drawn at most this factor from its point on each side (``noise.SPAN_SHOWN``, the span past
#: which the tables write "not known"); beyond it, or past the axes, an arrowhead says it goes on.
BAR_SPAN = SPAN_SHOWN
BAR_COLOR = "#666666"
#: How far inside the axes a cut bar ends (axes fraction), so its arrowhead stays inside too.
BAR_INSET = 0.018


def mark_colour(p: Priced) -> str:
    """A row's colour: what its median reads (``reading``), except a skipped row (a backend the op does not run
    here, by design), which is grey, not the red of a failure."""
    return VERDICT_COLOR["skipped"] if p.blank_reason == BLANK_SKIPPED else VERDICT_COLOR[reading(p)]


def backend_marker(backend: str) -> str:
    """The marker shape of a backend's points (``OTHER_MARKER`` for one not in ``BACKEND_MARKER``)."""
    return BACKEND_MARKER.get(backend, OTHER_MARKER)


def hollow(p: Priced) -> bool:
    """An unstable row is drawn hollow: its colour says what it reads, the hollow that it is not sure."""
    return p.verdict == "unstable"


def look_kwargs(colours: Sequence[str], hollows: Sequence[bool]) -> dict[str, Any]:
    """``scatter`` arguments for markers filled or hollow: a filled one in its colour with a white rim, a
    hollow one white inside with a thick rim in its colour."""
    return dict(c=["white" if h else c for c, h in zip(colours, hollows)],
                edgecolors=[c if h else "white" for c, h in zip(colours, hollows)],
                linewidths=[1.6 if h else 0.6 for h in hollows])


def marker_radius_in(p: Priced) -> float:
    """How far from its centre a row's marker reaches, in inches: its ring's or diamond's where it has one."""
    s = BREACH_S if p.breaches else ANOMALY_S if above_roof(p) else POINT_S
    return math.sqrt(s) / 2 / 72


def draw_points(ax: Any, points: list[_Point]) -> None:
    """The points, one scatter per backend, colour and fill, then the rings of the breaches and anomalies."""
    by_look: dict[tuple[str, str, bool], list[_Point]] = {}
    for pt in points:
        by_look.setdefault((pt.priced.record.backend, reading(pt.priced), hollow(pt.priced)), []).append(pt)
    for (backend, read, is_hollow), pts in by_look.items():
        colour = mark_colour(pts[0].priced)
        ax.scatter([q.x for q in pts], [q.y for q in pts], s=POINT_S, marker=backend_marker(backend), zorder=5,
                   gid=f"points-{backend}-{read}" + ("-unstable" if is_hollow else ""),
                   **look_kwargs([colour] * len(pts), [is_hollow] * len(pts)))
    breached = [q for q in points if q.priced.breaches]
    if breached:
        ax.scatter([q.x for q in breached], [q.y for q in breached], s=BREACH_S, facecolors="none",
                   edgecolors=BREACH_COLOR, linewidths=2.0, zorder=6, gid="breach-rings")
    over = [q for q in points if above_roof(q.priced) and not q.priced.breaches]
    if over:
        ax.scatter([q.x for q in over], [q.y for q in over], s=ANOMALY_S, marker=ANOMALY_MARK, facecolors="none",
                   edgecolors=VERDICT_COLOR["anomaly"], linewidths=1.5, zorder=6, gid="anomaly-marks")


@dataclass(frozen=True)
class Bar:
    """One error bar as drawn: its ends (data units) and whether each was cut (and carries an arrowhead)."""

    x: float
    lo: float
    hi: float
    lo_cut: bool
    hi_cut: bool


def clip_bars(points: list[_Point], ylim: tuple[float, float]) -> list[Bar]:
    """Each interval's bar, cut at ``BAR_SPAN`` from its point and a little inside the axes' ``ylim`` (log)."""
    ymin, ymax = ylim
    inset = (ymax / ymin) ** BAR_INSET
    floor, ceil = ymin * inset, ymax / inset
    bars = []
    for q in points:
        if q.y_ci is None:
            continue
        lo, hi = q.y_ci
        lo_limit, hi_limit = max(floor, q.y / BAR_SPAN), min(ceil, q.y * BAR_SPAN)
        if not (lo_limit <= q.y <= hi_limit):  # a point outside the drawn range: no bar (cannot happen on
            continue  # axes chosen from the points, but a bar must never be drawn outside them)
        bars.append(Bar(q.x, max(lo, lo_limit), min(hi, hi_limit), lo < lo_limit, hi > hi_limit))
    return bars


def draw_error_bars(ax: Any, points: list[_Point], ylim: tuple[float, float]) -> bool:
    """The bars (one artist for all), caps on the ends that are the interval's, arrowheads on the cut ones;
    whether any bar was cut."""
    bars = clip_bars(points, ylim)
    if not bars:
        return False
    ax.add_collection(LineCollection([[(b.x, b.lo), (b.x, b.hi)] for b in bars], colors=BAR_COLOR,
                                     linewidths=0.9, alpha=0.75, zorder=4, gid="sol-ci"), autolim=False)
    caps = [(b.x, b.lo) for b in bars if not b.lo_cut] + [(b.x, b.hi) for b in bars if not b.hi_cut]
    if caps:
        ax.scatter([x for x, _ in caps], [y for _, y in caps], marker="_", s=22, color=BAR_COLOR, linewidths=0.9,
                   zorder=4, gid="sol-ci-caps")
    ups = [(b.x, b.hi) for b in bars if b.hi_cut]
    downs = [(b.x, b.lo) for b in bars if b.lo_cut]
    for ends, marker, gid in ((ups, "^", "sol-ci-up"), (downs, "v", "sol-ci-down")):
        if ends:
            ax.scatter([x for x, _ in ends], [y for _, y in ends], marker=marker, s=26, color=BAR_COLOR,
                       linewidths=0, zorder=4, gid=gid)
    return bool(ups or downs)


def key_handles(points: list[_Point], bars_cut: bool) -> list[tuple[Any, str]]:
    """The key to the points, (handle, text) each: every colour present, the hollow marker, the anomaly's
    diamond (over its colour), the breach's ring, the bar and its arrowhead."""
    reads = {reading(q.priced) for q in points}

    def dot(colour: str) -> Any:
        return Line2D([], [], marker="o", ls="", color=colour, mec="white")

    handles: list[tuple[Any, str]] = [(dot(VERDICT_COLOR[r]), READING_TEXT.get(r, r))
                                      for r in VERDICT_COLOR if r in reads and r != "anomaly"]
    if any(above_roof(q.priced) and not q.priced.breaches for q in points):
        handles.append(((dot(VERDICT_COLOR["anomaly"]),
                         Line2D([], [], marker=ANOMALY_MARK, ls="", mfc="none", mec=VERDICT_COLOR["anomaly"],
                                mew=1.5, ms=10)), READING_TEXT["anomaly"]))
    elif "anomaly" in reads:
        handles.append((dot(VERDICT_COLOR["anomaly"]), READING_TEXT["anomaly"]))
    if any(hollow(q.priced) for q in points):
        handles.append((Line2D([], [], marker="o", ls="", mfc="white", mec="#555555", mew=1.6),
                        "hollow: unstable (its colour: what its median reads)"))
    if any(q.priced.breaches for q in points):
        handles.append((Line2D([], [], marker="o", ls="", mfc="none", mec=BREACH_COLOR, mew=2, ms=11),
                        "FORMULA ERROR (physics breach)"))
    if any(q.y_ci is not None for q in points):
        handles.append((Line2D([], [], color=BAR_COLOR, marker="|", ls="", ms=11, mew=0.9), "95 % interval"))
    if bars_cut:
        handles.append((Line2D([], [], color=BAR_COLOR, marker="^", ls="", ms=5),
                        f"interval goes on (past the axes or {BAR_SPAN:.0f}x)"))
    return handles


def backend_handles(points: list[_Point]) -> list[tuple[Any, str]]:
    """The backends' shapes, once a run has a backend other than torch (else the shape says nothing)."""
    backends = list(dict.fromkeys(q.priced.record.backend for q in points))
    if not backends or backends == ["torch"]:
        return []
    return [(Line2D([], [], marker=backend_marker(b), ls="", color="#555555"), b) for b in backends]

