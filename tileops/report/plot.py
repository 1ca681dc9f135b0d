"""The roofline plot (PNG and SVG): the picture a person looks at first.

Log-log: arithmetic intensity (FLOP/byte) across, achieved FLOP/s up. One
ceiling per roof of the profile: the memory slope (bytes/s × intensity) and
each compute roof as a flat line, theoretical dashed and effective solid in
the same colour. Each row is a point coloured by its verdict and shaped by its
backend (``BACKEND_MARKER``: torch a circle, compile a square, triton a triangle;
one scatter per verdict and backend, so thousands of rows cost what a few do). Up to ``LABEL_CAP`` points
carry a short id — all of them in a small run; in a large one the formula
errors and anomalies, then the worst rows and the best at-ceiling ones — and
the table beside the plot lists what each id is, followed by rows that cannot
be placed (no FLOPs, no bytes, not timed, another profile) with why, up to
``TABLE_CAP`` rows. What is not listed is summarised under the table (counts by
verdict and by reason); every row is in ``roofline.json`` and
``tileops roofline --format csv``. ``plot_layout`` makes these choices as a
pure function, so they can be tested without drawing.

Matplotlib runs on the Agg backend: no display is needed.
"""

from __future__ import annotations

import collections
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.ticker import EngFormatter, FuncFormatter

from tileops.profiles import Profile
from tileops.report import columns
from tileops.roofline import BLANK_SKIPPED, GapSplit, Priced, time_interval

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
#: One marker shape per backend, so a row's backends stand side by side at the same intensity.
BACKEND_MARKER = {"torch": "o", "compile": "s", "triton": "^"}
OTHER_MARKER = "D"  # a backend this table does not name
MEMORY_COLOR = "#333333"
ROOF_COLORS = ("#e6550d", "#756bb1", "#31a354", "#3182bd", "#de2d26", "#636363", "#8c6d31", "#d6616b", "#17becf")
FILES = ("roofline.png", "roofline.svg")


#: The most points that carry an id on the plot, and the most rows the table beside it lists:
#: beyond these, labels overlap and the table outgrows the figure.
LABEL_CAP = 30
TABLE_CAP = 45
# Geometry, inches.
PLOT_W, PLOT_H = 9.5, 6.2
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM, GAP = 1.35, 0.25, 0.45, 0.75, 0.35
FONT_PT = 7.5
CHAR_IN = FONT_PT * 0.61 / 72  # one monospace (DejaVu Sans Mono) character
ROW_IN = 0.155  # one table line


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


_ENG, _ENG_UNIT = EngFormatter(sep=""), EngFormatter(sep=" ")


def tick_text(value: float, unit: str = "") -> str:
    """An axis tick: ``0.01``, ``0.1``, ``1``, ``10``, ``1000`` as written, SI prefixes only from 10 000 up
    (``10k``, ``1.5TFLOP/s``); never ``10m`` for a hundredth, which reads as ten of something."""
    if value <= 0:
        return "0"
    if value < 1e4:
        return f"{value:.6g}" + (f" {unit}" if unit else "")
    return _ENG_UNIT.format_eng(value) + unit if unit else _ENG.format_eng(value)


def mark_colour(p: Priced) -> str:
    """A row's colour: its verdict's, except a skipped row (a backend the op does not run here, by design),
    which is grey, not the red of a failure."""
    return VERDICT_COLOR["skipped"] if p.blank_reason == BLANK_SKIPPED else VERDICT_COLOR[p.verdict]


def backend_marker(backend: str) -> str:
    """The marker shape of a backend's points (``OTHER_MARKER`` for one not in ``BACKEND_MARKER``)."""
    return BACKEND_MARKER.get(backend, OTHER_MARKER)


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


def _id_text(ids: list[int], per_line: int = 6) -> tuple[str, int]:
    """``1-4,7,9`` (runs of three or more compressed), wrapped; returns (text, lines)."""
    ids = sorted(ids)
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts += [f"{ids[i]}-{ids[j]}"] if j - i >= 2 else [str(x) for x in ids[i:j + 1]]
        i = j + 1
    lines = [",".join(parts[k:k + per_line]) for k in range(0, len(parts), per_line)]
    return ",\n".join(lines), len(lines)


@dataclass
class _Label:
    fx: float  # the point, in axes fraction
    fy: float
    ids: list[int]
    ty: float = 0.0  # where the text goes after de-overlap


def _place_labels(points: list[_Point], to_frac: Callable[[float, float], tuple[float, float]], line_h: float,
                  char_w: float) -> list[tuple[_Label, str]]:
    """One label per group of coincident points, pushed down until it overlaps no label placed before.

    Works in axes fractions; ``line_h`` and ``char_w`` are one text line's height
    and one character's width there. Labels are placed top to bottom.
    """
    labels: list[_Label] = []
    for pt in points:
        fx, fy = to_frac(pt.x, pt.y)
        for lab in labels:
            if abs(lab.fx - fx) <= 0.012 and abs(lab.fy - fy) <= 0.6 * line_h:
                lab.ids.append(int(pt.ident))
                break
        else:
            labels.append(_Label(fx, fy, [int(pt.ident)]))
    placed: list[tuple[float, float, float, float]] = []  # x0, x1, y0, y1
    out: list[tuple[_Label, str]] = []
    for lab in sorted(labels, key=lambda q: (-q.fy, q.fx)):
        text, n = _id_text(lab.ids)
        width = max(len(t) for t in text.split("\n")) * char_w
        h = n * line_h
        x0, x1 = lab.fx + 0.012, lab.fx + 0.012 + width
        ty = lab.fy
        moved = True
        while moved:
            moved = False
            for px0, px1, py0, py1 in placed:
                if x0 < px1 and px0 < x1 and ty - h / 2 < py1 and py0 < ty + h / 2:
                    ty = py0 - h / 2 - 1e-6
                    moved = True
        placed.append((x0, x1, ty - h / 2, ty + h / 2))
        lab.ty = ty
        out.append((lab, text))
    return out


def write_plot(priced: Sequence[Priced], profile: Profile, out_dir: Path, *, stem: str = "roofline") -> list[Path]:
    """Write ``<stem>.png`` and ``<stem>.svg`` into ``out_dir``; returns their paths.

    Only rows priced on ``profile`` are placed; the others are listed as not placed.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    layout = plot_layout(priced, profile)
    points = layout.points
    ceilings = _PlotCeilings.of(profile)
    box = _axis_box(points, ceilings)
    lines, summary = _table_lines(layout.listed), layout.summary
    fig, ax, tax, table_h = _figure(lines, summary)
    _style_axes(ax, box)
    handles = _draw_ceilings(ax, ceilings, box)
    breached = _draw_points(ax, points)
    _draw_labels(ax, fig, layout.labelled, box)
    _draw_legends(ax, handles, points, breached)
    ax.set_title(f"Roofline — {profile.name} ({len(points)} of {len(priced)} row(s) placed)", fontsize=11,
                 loc="left")
    _legend_table(tax, layout.listed, lines, summary, ROW_IN / table_h)
    paths = []
    for ext in ("png", "svg"):
        path = out_dir / f"{stem}.{ext}"
        with matplotlib.rc_context({"svg.fonttype": "none"}):  # SVG text stays text: searchable, small
            fig.savefig(path)
        paths.append(path)
    plt.close(fig)
    return paths


@dataclass(frozen=True)
class _PlotCeilings:
    """The profile's ceilings as the plot draws them: the memory slopes and each compute roof's lines."""

    bw_theo: float | None
    bw_eff: float | None
    nominal_unknown: bool  # the effective bandwidth was measured, the nominal is not known
    roofs: list[tuple[str, float, float | None]]  # (key, theoretical, effective)

    @classmethod
    def of(cls, profile: Profile) -> _PlotCeilings:
        mem = profile.memory
        return cls(
            bw_theo=mem.theoretical if mem else None, bw_eff=mem.effective if mem else None,
            nominal_unknown=mem is not None and not mem.nominal_known,
            roofs=[(k, r.theoretical, r.effective) for k, r in profile.compute.items()])

    @property
    def peak_max(self) -> float | None:
        return max((t for _, t, _ in self.roofs), default=None)

    @property
    def eff_max(self) -> float | None:
        return max((e for _, _, e in self.roofs if e), default=None)


@dataclass(frozen=True)
class _Box:
    """The axes' ranges (log scales on both)."""

    xmin: float
    xmax: float
    ymin: float
    ymax: float

    def to_frac(self, x: float, y: float) -> tuple[float, float]:
        """A point's place in axes fractions."""
        return (math.log10(x / self.xmin) / math.log10(self.xmax / self.xmin),
                math.log10(y / self.ymin) / math.log10(self.ymax / self.ymin))


def _axis_box(points: list[_Point], c: _PlotCeilings) -> _Box:
    """Axis ranges holding every point and every ridge (where the memory slope meets a roof), three decades
    wide at least."""
    bw_ref = c.bw_theo or c.bw_eff
    xs = [pt.x for pt in points]
    if bw_ref:
        xs += [t / bw_ref for _, t, _ in c.roofs] + [e / bw_ref for _, _, e in c.roofs if e]
    if not xs:
        xs = [0.1, 100.0]
    xmin, xmax = min(xs) / 8, max(xs) * 8
    if math.log10(xmax / xmin) < 3:
        mid = math.sqrt(xmin * xmax)
        xmin, xmax = mid / 10 ** 1.5, mid * 10 ** 1.5
    ys = [pt.y for pt in points] + [t for _, t, _ in c.roofs] + [e for _, _, e in c.roofs if e]
    if bw_ref:
        ys.append(bw_ref * xmin)
    if not ys:
        ys = [1e9, 1e12]
    return _Box(xmin, xmax, min(ys) / 5, max(ys) * 3)


def _figure(lines: list[tuple[str, bool]], summary: list[str]) -> tuple[Any, Any, Any, float]:
    """The figure, its plot axes and its table axes, and the table's height in inches.

    A fixed geometry in inches (no tight bounding box: that costs a whole extra draw per file): the plot on
    the left, the table as wide as its longest line and as tall as its rows on the right."""
    table_w = max(4.0, 0.3 + CHAR_IN * max([len(t) for t, _ in lines] + [0.85 * len(x) for x in summary]))
    table_h = ROW_IN * (len(lines) + 1.3 * len(summary) + 0.5)
    width = MARGIN_LEFT + PLOT_W + GAP + table_w + MARGIN_RIGHT
    height = max(MARGIN_BOTTOM + PLOT_H + MARGIN_TOP, MARGIN_TOP + table_h + 0.2)
    fig = plt.figure(figsize=(width, height), dpi=110)
    ax = fig.add_axes((MARGIN_LEFT / width, (height - MARGIN_TOP - PLOT_H) / height, PLOT_W / width,
                       PLOT_H / height))
    tax = fig.add_axes(((MARGIN_LEFT + PLOT_W + GAP) / width, (height - MARGIN_TOP - table_h) / height,
                        table_w / width, table_h / height))
    return fig, ax, tax, table_h


def _style_axes(ax: Any, box: _Box) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(box.xmin, box.xmax)
    ax.set_ylim(box.ymin, box.ymax)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: tick_text(v)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: tick_text(v, "FLOP/s")))
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.08)


def _draw_ceilings(ax: Any, c: _PlotCeilings, box: _Box) -> list[Any]:
    """The memory slopes and the compute roofs (dashed: theoretical, solid: effective); their legend handles."""
    xmin, xmax = box.xmin, box.xmax

    def slope(bw: float, top: float | None, style: str, label: str) -> None:
        """The memory slope, up to the highest compute roof of the same kind (theoretical/effective)."""
        x_end = (top / bw) if top else xmax
        x_end = min(max(x_end, xmin), xmax)
        ax.plot([xmin, x_end], [bw * xmin, bw * x_end], style, color=MEMORY_COLOR, lw=1.6, label=label)

    if c.bw_theo:
        slope(c.bw_theo, c.peak_max, "--", f"memory theoretical {columns.si(c.bw_theo, 'B/s')}")
    if c.bw_eff:
        note = " (measured; nominal unknown)" if c.nominal_unknown else ""
        slope(c.bw_eff, c.eff_max or c.peak_max, "-", f"memory effective {columns.si(c.bw_eff, 'B/s')}{note}")
    for idx, (key, theo, eff) in enumerate(sorted(c.roofs, key=lambda r: -r[1])):
        color = ROOF_COLORS[idx % len(ROOF_COLORS)]
        # With the nominal bandwidth unknown there is no theoretical ridge: the dashed roof spans the plot.
        for value, bw, style, kind in ((theo, c.bw_theo, "--", "theoretical"),
                                       (eff, c.bw_eff, "-", "effective")):
            if value is None:
                continue
            x0 = value / bw if bw else xmin
            x0 = min(max(x0, xmin), xmax)
            ls = (idx * 3, (5, 4)) if style == "--" else "-"
            ax.plot([x0, xmax], [value, value], ls=ls, color=color, lw=1.6,
                    label=f"{key} {kind} {columns.si(value, 'FLOP/s')}")
        if eff is None:
            ax.plot([], [], " ", label=f"{key}: uncalibrated (no effective line)")
    handles, _ = ax.get_legend_handles_labels()
    return list(handles)


def _draw_points(ax: Any, points: list[_Point]) -> bool:
    """The points (one artist per verdict and backend), their error bars, and a red ring round each row that
    breaches the physics check; whether any does."""
    by_kind: dict[tuple[str, str], list[_Point]] = {}
    for pt in points:
        by_kind.setdefault((pt.priced.verdict, pt.priced.record.backend), []).append(pt)
    for (verdict, backend), pts in by_kind.items():
        ax.scatter([q.x for q in pts], [q.y for q in pts], s=46, color=VERDICT_COLOR[verdict], zorder=5,
                   marker=backend_marker(backend), edgecolors="white", linewidths=0.6,
                   gid=f"points-{backend}-{verdict}")
    _error_bars(ax, points)
    breached = [pt for pt in points if pt.priced.breaches]
    if breached:
        ax.scatter([q.x for q in breached], [q.y for q in breached], s=180, facecolors="none",
                   edgecolors="red", linewidths=2.0, zorder=6)
    return bool(breached)


def _draw_labels(ax: Any, fig: Any, labelled: list[_Point], box: _Box) -> None:
    """The points' ids, placed without overlap (a label moved off its point keeps a thin line to it)."""
    ax_h_in = ax.get_position().height * fig.get_figheight()
    ax_w_in = ax.get_position().width * fig.get_figwidth()
    line_h = (8 * 1.3 / 72) / ax_h_in  # one 8-pt text line, in axes fraction
    char_w = (8 * 0.62 / 72) / ax_w_in  # one 8-pt character
    for lab, text in _place_labels(labelled, box.to_frac, line_h, char_w):
        moved = abs(lab.ty - lab.fy) > 0.5 * line_h
        ax.annotate(text, (lab.fx, lab.fy), xycoords="axes fraction", xytext=(lab.fx + 0.012, lab.ty),
                    textcoords="axes fraction", fontsize=8, va="center", zorder=7,
                    bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8),
                    arrowprops=dict(arrowstyle="-", color="#888888", lw=0.6) if moved else None)


def _draw_legends(ax: Any, handles: list[Any], points: list[_Point], breached: bool) -> None:
    """The ceilings' legend, the verdicts' (with the breach ring), and the backends' markers once a run has a
    backend other than torch."""
    verdicts = {pt.priced.verdict for pt in points}
    verdict_handles = [Line2D([], [], marker="o", ls="", color=VERDICT_COLOR[v], label=v)
                       for v in VERDICT_COLOR if v in verdicts]
    if breached:
        verdict_handles.append(Line2D([], [], marker="o", ls="", mfc="none", mec="red", mew=2,
                                      label="FORMULA ERROR (physics breach)"))
    leg1 = ax.legend(handles=handles, loc="upper left", fontsize=7.5, title="ceilings", title_fontsize=8,
                     framealpha=0.9)
    ax.add_artist(leg1)
    backends = list(dict.fromkeys(pt.priced.record.backend for pt in points))
    shapes = bool(backends) and backends != ["torch"]  # shapes say something once a run has another backend
    if verdict_handles:
        leg2 = ax.legend(handles=verdict_handles, loc="lower right", fontsize=7.5, title="verdict",
                         title_fontsize=8, framealpha=0.9)
        if shapes:  # the next legend replaces the axes' own: keep this one as an artist
            ax.add_artist(leg2)
    if shapes:
        ax.legend(handles=[Line2D([], [], marker=backend_marker(b), ls="", color="#555555", label=b)
                           for b in backends], loc="lower center", fontsize=7.5, title="backend",
                  title_fontsize=8, framealpha=0.9)


def _error_bars(ax: Any, points: list[_Point]) -> None:
    """One vertical bar per point with an interval: its achieved rate at the slow and the fast end of its time's
    95 % interval, which is its SOL interval on the plot's scale (SOL is this rate over the roof). One artist
    for every bar, as for the points."""
    bars = [(q.x, q.y, q.y_ci) for q in points if q.y_ci is not None]
    if not bars:
        return
    ax.errorbar([x for x, _, _ in bars], [y for _, y, _ in bars],
                yerr=[[y - lo for _, y, (lo, _) in bars], [hi - y for _, y, (_, hi) in bars]], fmt="none",
                ecolor="#555555", elinewidth=0.9, capsize=2.5, zorder=4, gid="sol-ci")


TABLE_HEADER = ("id", "op", "label", "dtype", "backend", "eff", "verdict")
#: The side table's column after ``eff`` where a listed row has a SOL interval (its error bar, in figures).
CI_HEADER = "95 % CI"
#: The side table's last column where the audit measured a listed row: its SOL gap split.
GAP_HEADER = ("gap: bytes x min, at bytes moved",)


def gap_cell(p: Priced) -> str:
    """``1.80x, 54.0 %``: the bytes the row moves over the formula's minimum, and the ceiling's fraction it
    reaches at them (empty where the audit did not measure it)."""
    g = p.gap
    return f"{g.traffic_ratio:.2f}x, {columns.percent(g.achieved)}" if isinstance(g, GapSplit) else ""


def _table_lines(legend_rows: list[tuple[str, Priced, str | None]]) -> list[tuple[str, bool]]:
    """The table as monospace lines, header first: (text, is a formula error)."""
    gaps = any(isinstance(p.gap, GapSplit) for _, p, _ in legend_rows)
    intervals = any(p.sol_ci is not None for _, p, _ in legend_rows)  # the eff's interval beside it
    cells: list[tuple[str, ...]] = [TABLE_HEADER[:6] + ((CI_HEADER,) if intervals else ()) + TABLE_HEADER[6:]
                                    + (GAP_HEADER if gaps else ())]
    for ident, p, why in legend_rows:
        r = p.record
        verdict = columns.verdict_text(p) + (f" (not placed: {why})" if why else "")
        cells.append((ident, r.op, _short(r.label, 30), r.dtype, r.backend, columns.efficiency_text(p))
                     + ((columns.sol_ci_text(p),) if intervals else ())
                     + (_short(verdict, 44),) + ((gap_cell(p),) if gaps else ()))
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    return [("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip(),
             k > 0 and bool(legend_rows[k - 1][1].breaches))
            for k, row in enumerate(cells)]


def _legend_table(tax: Any, legend_rows: list[tuple[str, Priced, str | None]], lines: list[tuple[str, bool]],
                  summary: list[str], row_h: float) -> None:
    """The id → row table beside the plot and the summary of what it leaves out: one monospace line per
    row (red for a formula error) and a verdict-coloured mark in its backend's shape, not a cell per value."""
    tax.axis("off")
    tax.set_xlim(0, 1)
    tax.set_ylim(0, 1)
    text = dict(fontsize=FONT_PT, family="monospace", va="center", ha="left", transform=tax.transAxes)
    x_text = 0.22 / tax.get_position().width / tax.figure.get_figwidth()  # room for the colour square
    for k, (line, red) in enumerate(lines):
        tax.text(x_text, 1.0 - (k + 0.5) * row_h, line, color="red" if red else "black",
                 weight="bold" if k == 0 or red else "normal", **text)
    if legend_rows:  # each row's verdict colour in its backend's shape, one scatter per shape
        by_marker: dict[str, list[int]] = {}
        for k, (_, p, _) in enumerate(legend_rows):
            by_marker.setdefault(backend_marker(p.record.backend), []).append(k)
        for marker, ks in by_marker.items():
            tax.scatter([x_text / 2] * len(ks), [1.0 - (k + 1.5) * row_h for k in ks], marker=marker, s=30,
                        transform=tax.transAxes, clip_on=False,
                        c=[mark_colour(legend_rows[k][1]) for k in ks], edgecolors="#777777", linewidths=0.4)
    else:
        tax.text(x_text, 1.0 - 1.5 * row_h, "no rows", **text)
    if summary:
        tax.text(0.0, 1.0 - (len(lines) + 0.3) * row_h, "\n".join(summary), fontsize=FONT_PT, va="top", ha="left",
                 color="#333333", transform=tax.transAxes)


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"
