"""The roofline as inline SVG, drawn from the priced rows: the plot of the HTML report (``tileops.report.html``).

Why not the PNG. A page that must open with no network and show each point's
row on hover needs the points as elements it can find, each knowing its row
(``data-i``); matplotlib's picture has neither, and it costs a second to import.
The drawing follows ``tileops.report.plot``'s reading of a roofline (log-log,
FLOP/byte across, achieved FLOP/s up, a memory slope and flat compute roofs,
effective solid and theoretical dashed, colour by verdict, shape by backend)
and what issue 37 asked of it: an error bar cut at the axes ends in an arrow,
ceilings within :data:`SAME_CEILING` of each other are one line named for
each, the legend is outside the data (the page lists it under the figure),
and a physics breach has a mark of its own. Every string is escaped; the
standard library only.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tileops.profiles import Profile
from tileops.report.plot_layout import reading
from tileops.report.summary import shown_verdict
from tileops.roofline import Priced, si, time_interval

#: The verdicts in the order the legend and the page's filter list them (a skipped row is its own, as in the
#: summary).
VERDICTS = ("at-ceiling", "below", "unstable", "latency-bound", "anomaly", "blank", "error", "skipped")
#: A backend's marker shape, so a row's backends stand side by side at one intensity.
BACKEND_SHAPE = {"torch": "circle", "compile": "square", "triton": "triangle"}
OTHER_SHAPE = "diamond"
SHAPE_GLYPH = {"circle": "\u25cf", "square": "\u25a0", "triangle": "\u25b2", "diamond": "\u25c6"}
#: The compute roofs' line colours, in turn (the memory roof is the ink colour).
ROOF_COLOURS = ("#e6550d", "#756bb1", "#31a354", "#3182bd", "#de2d26", "#8c6d31", "#d6616b", "#17becf")
MEMORY_COLOUR = "#333333"
#: Two ceilings closer than this (relative) are one line, named for both: on log axes spanning decades, two
#: lines 5 % apart would read as one line of two colours.
SAME_CEILING = 0.05

#: How far (in decades) a point or a ridge stays from the frame at least.
PAD = 0.1
# The plot's geometry, in SVG units (it scales to the page's width).
PLOT_W, PLOT_H = 960, 540
LEFT, RIGHT, TOP, BOTTOM = 104, 18, 14, 52


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def verdict_class(verdict: str) -> str:
    """The CSS class token of a verdict (one of :data:`VERDICTS`; anything else reads as blank)."""
    return verdict if verdict in VERDICTS else "blank"


@dataclass(frozen=True)
class Axis:
    """A log axis: decades ``lo`` to ``hi`` (powers of ten) onto pixels ``a`` to ``b``."""

    lo: int
    hi: int
    a: float
    b: float

    def __call__(self, value: float) -> float:
        return self.a + (math.log10(value) - self.lo) / (self.hi - self.lo) * (self.b - self.a)

    @classmethod
    def over(cls, values: Iterable[float], a: float, b: float) -> Axis:
        """The decades holding every value (at least one), none on the frame's edge."""
        logs = [math.log10(v) for v in values if v > 0 and math.isfinite(v)] or [0.0]
        return cls(math.floor(min(logs) - PAD), math.ceil(max(logs) + PAD), a, b)


@dataclass(frozen=True)
class Point:
    """A row on the plot: its place, and the rates at the slow and fast ends of its time's interval."""

    index: int  # the row's place in the report (data-i)
    x: float  # FLOP per byte
    y: float  # achieved FLOP/s
    y_ci: tuple[float, float] | None


def placed(p: Priced, profile: Profile, index: int = -1) -> Point | None:
    """Where a row sits on ``profile``'s roofline, or None: priced on another profile, not timed, no bytes, or
    no FLOPs (off a log axis)."""
    r = p.record
    t = p.actual_time_s
    if p.profile != profile.name or r.status != "ok" or r.timing is None or not t or not r.bytes or not r.flops:
        return None
    ci = time_interval(r.timing)
    rates = (r.flops / ci[1], r.flops / ci[0]) if ci and ci[0] > 0 else None  # the slow end's rate first
    return Point(index, r.flops / r.bytes, r.flops / t, rates)


def unplaced_reason(p: Priced, profile: Profile) -> str:
    r = p.record
    if p.profile != profile.name:
        return f"priced on {p.profile}" if p.profile else "no profile"
    if r.status != "ok" or r.timing is None:
        return r.status if r.status != "ok" else "not timed"
    return "no bytes" if not r.bytes else "0 FLOPs (off a log axis)"


@dataclass(frozen=True)
class Ceiling:
    """A line of the plot: its names and their rates (coincident ceilings are one line, at the highest), theoretical
    or effective."""

    names: tuple[str, ...]
    rates: tuple[float, ...]
    effective: bool
    colour: str

    @property
    def rate(self) -> float:
        return max(self.rates)

    def label(self, unit: str) -> str:
        """``cpu.fp32 193 GFLOP/s, cpu.fp32_matmul 190 GFLOP/s effective``: each name with its own rate."""
        named = ", ".join(f"{n} {si(r, unit)}" for n, r in zip(self.names, self.rates))
        return f"{named} {'effective' if self.effective else 'theoretical'}"


def ceilings(profile: Profile) -> tuple[list[Ceiling], list[Ceiling]]:
    """(memory lines, compute lines): each ceiling effective (solid) and theoretical (dashed); compute roofs
    within :data:`SAME_CEILING` of each other drawn once, named for all of them."""
    mem = profile.memory
    memory = []
    if mem is not None and mem.effective:
        memory.append(Ceiling(("memory",), (mem.effective,), True, MEMORY_COLOUR))
    if mem is not None and mem.theoretical:
        memory.append(Ceiling(("memory",), (mem.theoretical,), False, MEMORY_COLOUR))
    compute: list[Ceiling] = []
    by_peak = sorted(profile.compute, key=lambda k: -profile.compute[k].theoretical)
    colour = {k: ROOF_COLOURS[n % len(ROOF_COLOURS)] for n, k in enumerate(by_peak)}  # a roof's lines share one
    for effective in (True, False):
        rates: list[tuple[float, str]] = []
        for k, r in profile.compute.items():
            rate = r.effective if effective else r.theoretical
            if rate:
                rates.append((rate, k))
        rates.sort(key=lambda rk: (-rk[0], rk[1]))  # highest first; a tie by name
        groups: list[list[tuple[float, str]]] = []
        for rate, key in rates:
            if groups and rate * (1 + SAME_CEILING) >= groups[-1][0][0]:  # within reach of the group's highest
                groups[-1].append((rate, key))
            else:
                groups.append([(rate, key)])
        for g in groups:
            names = tuple(k for _, k in g)
            compute.append(Ceiling(names, tuple(r for r, _ in g), effective, colour[names[0]]))
    return memory, compute


def plot_svg(priced: Sequence[Priced], profile: Profile, uid: int = 0) -> tuple[str, list[str]]:
    """``profile``'s roofline with the rows priced on it, as inline SVG, and the legend's entries (markup).
    Each point carries its row's index (``data-i``), which the page's hover reads; ``uid`` keeps the ids of
    this plot's clip and arrow apart from another plot's on the page."""
    points = []
    for i, p in enumerate(priced):
        pt = placed(p, profile, i)
        if pt is not None:
            points.append(pt)
    memory, compute = ceilings(profile)
    bw = max((c.rate for c in memory), default=None)
    xs = [q.x for q in points] + ([c.rate / m.rate for c in compute for m in memory])
    ys = [q.y for q in points] + [c.rate for c in compute]
    if not xs:
        xs = [1.0]
    if not ys and bw:
        ys = [bw * x for x in xs]
    ax = Axis.over(xs, LEFT, PLOT_W - RIGHT)
    ay = Axis.over(ys, PLOT_H - BOTTOM, TOP)
    parts = [_frame(ax, ay), f'<g clip-path="url(#plot-area-{uid})">', _lines_of(memory, compute, ax, ay)]
    order = sorted(points, key=lambda q: (priced[q.index].verdict == "anomaly" or bool(priced[q.index].breaches)))
    parts += [_error_bar(q, ax, ay, uid) for q in order if q.y_ci is not None]
    parts.append("</g>")
    parts += [_marker(q, priced[q.index], ax, ay) for q in order]
    svg = (f'<svg class="roofline" viewBox="0 0 {PLOT_W} {PLOT_H}" role="img" '
           f'aria-label="roofline of profile {_e(profile.name)}">' + _defs(uid) + "".join(parts) + "</svg>")
    return svg, _legend(memory, compute, priced, points)


def _defs(uid: int) -> str:
    return (f'<defs><clipPath id="plot-area-{uid}"><rect x="{LEFT}" y="{TOP}" width="{PLOT_W - LEFT - RIGHT}" '
            f'height="{PLOT_H - TOP - BOTTOM}"/></clipPath>'
            f'<marker id="arrow-{uid}" viewBox="0 0 10 10" refX="5" refY="5" markerWidth="7" markerHeight="7" '
            'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker></defs>')


def _tick(value: float, unit: str) -> str:
    return f"{value:g}" if not unit and 1e-3 <= value < 1e4 else si(value, unit).replace(" ", "\u2009")


def _frame(ax: Axis, ay: Axis) -> str:
    out = [f'<rect class="area" x="{LEFT}" y="{TOP}" width="{PLOT_W - LEFT - RIGHT}" '
           f'height="{PLOT_H - TOP - BOTTOM}"/>']
    for k in range(ax.lo, ax.hi + 1):
        x = ax(10.0 ** k)
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{PLOT_H - BOTTOM}"/>'
                   f'<text class="tick" x="{x:.1f}" y="{PLOT_H - BOTTOM + 16}" text-anchor="middle">'
                   f"{_e(_tick(10.0 ** k, ''))}</text>")
    for k in range(ay.lo, ay.hi + 1):
        y = ay(10.0 ** k)
        out.append(f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{PLOT_W - RIGHT}" y2="{y:.1f}"/>'
                   f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                   f"{_e(_tick(10.0 ** k, 'FLOP/s'))}</text>")
    out.append(f'<text class="axis" x="{(LEFT + PLOT_W - RIGHT) / 2}" y="{PLOT_H - 12}" text-anchor="middle">'
               "arithmetic intensity (FLOP/byte)</text>"
               f'<text class="axis" transform="translate(16 {(TOP + PLOT_H - BOTTOM) / 2}) rotate(-90)" '
               'text-anchor="middle">achieved FLOP/s</text>')
    return "".join(out)


def _lines_of(memory: list[Ceiling], compute: list[Ceiling], ax: Axis, ay: Axis) -> str:
    """The memory slopes up to their highest roof of the same kind, and each roof flat from its ridge."""
    x_lo, x_hi = 10.0 ** ax.lo, 10.0 ** ax.hi
    out = []
    for m in memory:
        top = max((c.rate for c in compute if c.effective == m.effective), default=10.0 ** ay.hi)
        x_end = min(top / m.rate, x_hi)
        out.append(_segment(ax(x_lo), ay(m.rate * x_lo), ax(x_end), ay(m.rate * x_end), m))
    for c in compute:
        bw = next((m.rate for m in memory if m.effective == c.effective), None)
        x_start = max(c.rate / bw, x_lo) if bw else x_lo
        out.append(_segment(ax(x_start), ay(c.rate), ax(x_hi), ay(c.rate), c))
    return "".join(out)


def _segment(x1: float, y1: float, x2: float, y2: float, c: Ceiling) -> str:
    dash = "" if c.effective else ' stroke-dasharray="7 5"'
    return (f'<line class="ceiling" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{c.colour}"'
            f"{dash}/>")


def _error_bar(q: Point, ax: Axis, ay: Axis, uid: int) -> str:
    """The rates at the ends of the time's interval, cut at the plot's edges with an arrow where cut."""
    assert q.y_ci is not None
    x = ax(q.x)
    slow, fast = ay(q.y_ci[0]), ay(q.y_ci[1])
    bottom, top = PLOT_H - BOTTOM, TOP
    ends = ""
    if slow > bottom:
        slow, ends = bottom, ends + f' marker-start="url(#arrow-{uid})"'
    if fast < top:
        fast, ends = top, ends + f' marker-end="url(#arrow-{uid})"'
    return f'<line class="eb" data-i="{q.index}" x1="{x:.1f}" y1="{slow:.1f}" x2="{x:.1f}" y2="{fast:.1f}"{ends}/>'


def _shape(shape: str, x: float, y: float) -> str:
    if shape == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5"'
    if shape == "square":
        return f'<rect x="{x - 4.5:.1f}" y="{y - 4.5:.1f}" width="9" height="9"'
    if shape == "triangle":
        return f'<path d="M{x:.1f},{y - 6:.1f} L{x + 5.5:.1f},{y + 4:.1f} L{x - 5.5:.1f},{y + 4:.1f} Z"'
    return f'<path d="M{x:.1f},{y - 6:.1f} L{x + 6:.1f},{y:.1f} L{x:.1f},{y + 6:.1f} L{x - 6:.1f},{y:.1f} Z"'


def _look(p: Priced) -> tuple[str, bool]:
    """A point's colour and whether it is hollow, as the PNG draws it (``plot_layout.reading``): an unstable row
    shows what its median reads, hollow, so a busy host's run is not one colour."""
    shown = shown_verdict(p)
    return (reading(p), True) if shown == "unstable" else (shown, False)


def _marker(q: Point, p: Priced, ax: Axis, ay: Axis) -> str:
    look, unsure = _look(p)
    cls = f"pt v-{verdict_class(look)}" + (" unsure" if unsure else "") + (" breach" if p.breaches else "")
    shape = BACKEND_SHAPE.get(p.record.backend, OTHER_SHAPE)
    return _shape(shape, ax(q.x), ay(q.y)) + f' class="{cls}" data-i="{q.index}"/>'


def _swatch(colour: str, dashed: bool) -> str:
    dash = ' stroke-dasharray="5 3"' if dashed else ""
    return (f'<svg class="swatch" viewBox="0 0 28 10" width="28" height="10"><line x1="0" y1="5" x2="28" y2="5" '
            f'stroke="{colour}" stroke-width="2"{dash}/></svg>')


def _legend(memory: list[Ceiling], compute: list[Ceiling], priced: Sequence[Priced], points: list[Point]) -> list[str]:
    out = []
    for c, unit in [*((m, "B/s") for m in memory), *((c, "FLOP/s") for c in compute)]:
        out.append(f"{_swatch(c.colour, not c.effective)} {_e(c.label(unit))}")
    looks = [_look(priced[q.index]) for q in points]
    verdicts = {v for v, _ in looks}
    out += [f'<span class="dot v-{v}"></span> {_e(v)}' for v in VERDICTS if v in verdicts]
    if any(unsure for _, unsure in looks):
        out.append('<span class="dot unsure"></span> hollow: unstable (its colour: what its median reads)')
    backends = sorted({priced[q.index].record.backend for q in points})
    out += [f"{SHAPE_GLYPH[BACKEND_SHAPE.get(b, OTHER_SHAPE)]} {_e(b)}" for b in backends]
    if any(priced[q.index].breaches for q in points):
        out.append('<span class="dot v-anomaly breach"></span> a physics breach (FORMULA ERROR)')
    out.append("bar: the time's 95 % interval as a rate; an arrow where it runs past the axes")
    return out
