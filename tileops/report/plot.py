"""The roofline plot (PNG and SVG): the picture a person looks at first.

Log-log: arithmetic intensity (FLOP/byte) across, achieved FLOP/s up, the
ceilings drawn once each (``plot_ceilings``), each row a point whose look says
its reading, its backend, and whether it is unstable, above its roof or a
formula error, with its interval's bar cut at the axes (``plot_marks``). Up to
``LABEL_CAP`` points carry an id, placed where it hides no label and no point
(``plot_labels``); the table beside the plot says what each id is and lists
the rows that could not be placed, with why (``plot_table``); what is neither
labelled nor listed is counted under the table. ``plot_layout`` makes these
choices as a pure function, so they can be tested without drawing, and
``plot_figure`` returns the drawn figure, so a test can measure its artists.

Nothing sits over the data but the points and their ids: the legends stand
in a band under the axes. Nothing is cut: the figure's size is computed from
what it holds (the legends and the table measured by the renderer, the
table's long cells wrapped), not fixed, and without a tight bounding box
(which costs a whole extra draw per file).

Matplotlib runs on the Agg backend: no display is needed.
"""

from __future__ import annotations

import io
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.legend_handler import HandlerTuple
from matplotlib.text import Text
from matplotlib.ticker import EngFormatter, FuncFormatter

from tileops.fsutil import write_atomic
from tileops.profiles import Profile
from tileops.report.plot_ceilings import PLOT_H_IN, Box, PlotCeilings, axis_box, draw_ceilings
from tileops.report.plot_labels import place_labels
from tileops.report.plot_layout import LABEL_CAP, TABLE_CAP, Layout, _Point, above_roof, plot_layout, reading
from tileops.report.plot_marks import (BACKEND_MARKER, OTHER_MARKER, VERDICT_COLOR, backend_handles,
                                       backend_marker, draw_error_bars, draw_points, hollow, key_handles,
                                       mark_colour, marker_radius_in)
from tileops.report.plot_table import (CI_HEADER, GAP_HEADER, TABLE_HEADER, _table_lines, draw_table, gap_cell,
                                       summary_text, table_blocks, table_size_in)
from tileops.roofline import Priced

__all__ = ["BACKEND_MARKER", "CI_HEADER", "FILES", "GAP_HEADER", "LABEL_CAP", "OTHER_MARKER", "TABLE_CAP",
           "TABLE_HEADER", "VERDICT_COLOR", "Layout", "above_roof", "backend_marker", "gap_cell", "hollow",
           "mark_colour", "plot_figure", "plot_layout", "reading", "tick_text", "write_plot", "_table_lines"]

FILES = ("roofline.png", "roofline.svg")
# Geometry, inches.
PLOT_W, PLOT_H = 9.5, PLOT_H_IN
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, GAP = 1.35, 0.25, 0.45, 0.35
XAXIS_IN = 0.7  # under the axes: the ticks' numbers and the axis's name
LEGEND_GAP, EDGE = 0.2, 0.12
DPI = 110
LABEL_PT = 8

_ENG, _ENG_UNIT = EngFormatter(sep=""), EngFormatter(sep=" ")


def tick_text(value: float, unit: str = "") -> str:
    """An axis tick: ``0.01``, ``0.1``, ``1``, ``10``, ``1000`` as written, SI prefixes only from 10 000 up
    (``10k``, ``1.5TFLOP/s``); never ``10m`` for a hundredth, which reads as ten of something."""
    if value <= 0:
        return "0"
    if value < 1e4:
        return f"{value:.6g}" + (f" {unit}" if unit else "")
    return _ENG_UNIT.format_eng(value) + unit if unit else _ENG.format_eng(value)


def write_plot(priced: Sequence[Priced], profile: Profile, out_dir: Path, *, stem: str = "roofline") -> list[Path]:
    """Write ``<stem>.png`` and ``<stem>.svg`` into ``out_dir``; returns their paths.

    Only rows priced on ``profile`` are placed; the others are listed as not placed.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig = plot_figure(priced, profile)
    paths = []
    try:
        for ext in ("png", "svg"):
            path = out_dir / f"{stem}.{ext}"
            buf = io.BytesIO()  # drawn whole in memory, then written atomically: the old plot or the new one
            # SVG text stays text (searchable, small); no date and fixed ids: the same rows give the same bytes
            with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "tileops"}):
                fig.savefig(buf, format=ext, metadata={"Date": None} if ext == "svg" else None)
            write_atomic(path, buf.getvalue())
            paths.append(path)
    finally:
        plt.close(fig)
    return paths


def plot_figure(priced: Sequence[Priced], profile: Profile) -> Figure:
    """The drawn figure of ``write_plot`` (the caller closes it): every artist at its final place and size."""
    layout = plot_layout(priced, profile)
    points = layout.points
    ceilings = PlotCeilings.of(profile)
    box = axis_box(points, ceilings)
    blocks = table_blocks(layout.listed)
    summary = summary_text(layout.summary, blocks)
    fig = plt.figure(figsize=(PLOT_W, PLOT_H), dpi=DPI)
    ax = fig.add_axes((0, 0, 1, 1))
    tax = fig.add_axes((0, 0, 1, 1))
    _style_axes(ax, box)
    draw_points(ax, points)
    cut = draw_error_bars(ax, points, (box.ymin, box.ymax))
    ceiling_handles = draw_ceilings(ax, ceilings, box)
    ax.set_title(f"Roofline — {profile.name} ({len(points)} of {len(priced)} row(s) placed)", fontsize=11,
                 loc="left")
    legends = [fig.legend(handles=[a for a, _ in h], labels=[b for _, b in h], loc="upper left", fontsize=7.5,
                          title=title, title_fontsize=8, alignment="left", framealpha=1.0,
                          handler_map={tuple: HandlerTuple(ndivide=1, pad=0.0)})
               for title, h in (("ceilings", ceiling_handles), ("points", key_handles(points, cut)),
                                ("backend", backend_handles(points))) if h]
    _arrange(fig, ax, tax, legends, table_size_in(blocks, summary))
    draw_table(tax, layout.listed, blocks, summary)
    _draw_labels(ax, fig, layout.labelled, points, box)
    return fig


def _style_axes(ax: Any, box: Box) -> None:
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


def _arrange(fig: Any, ax: Any, tax: Any, legends: list[Any], table_in: tuple[float, float]) -> None:
    """Size the figure to what it holds and put each part in place: the axes (its left margin as wide as its
    tick numbers need), the legends in rows under it, the table to its right.

    Sizes are measured with the renderer in inches, so a legend of nine ceilings or a table of 45 wrapped rows
    moves the figure's edge, never off it."""
    renderer = fig.canvas.get_renderer()
    sizes = [(b.width / fig.dpi, b.height / fig.dpi) for b in (leg.get_window_extent(renderer) for leg in legends)]
    # the legends, left to right, a new row when the next does not fit under the axes
    rows: list[list[int]] = [[]]
    used = 0.0
    for i, (w, _) in enumerate(sizes):
        if rows[-1] and used + LEGEND_GAP + w > PLOT_W:
            rows.append([])
            used = 0.0
        used += (LEGEND_GAP if rows[-1] else 0.0) + w
        rows[-1].append(i)
    band = sum(max(sizes[i][1] for i in row) for row in rows if row) + LEGEND_GAP * len(rows)
    table_w, table_h = table_in
    left = max(MARGIN_LEFT, _ytick_room(fig, ax) + EDGE)
    widest = max((sum(sizes[i][0] for i in row) + LEGEND_GAP * (len(row) - 1) for row in rows if row), default=0.0)
    width = max(left + PLOT_W + GAP + table_w + MARGIN_RIGHT, left + widest + EDGE)
    height = MARGIN_TOP + max(PLOT_H + XAXIS_IN + band, table_h) + EDGE
    fig.set_size_inches(width, height)
    bottom = height - MARGIN_TOP - PLOT_H
    ax.set_position((left / width, bottom / height, PLOT_W / width, PLOT_H / height))
    tax.set_position(((left + PLOT_W + GAP) / width, (height - MARGIN_TOP - table_h) / height, table_w / width,
                      table_h / height))
    top = bottom - XAXIS_IN  # the band under the axes, its ticks' numbers and its name
    for row in rows:
        x = left
        for i in row:
            legends[i].set_bbox_to_anchor((x, top), transform=fig.dpi_scale_trans)
            x += sizes[i][0] + LEGEND_GAP
        top -= max((sizes[i][1] for i in row), default=0.0) + LEGEND_GAP


def _ytick_room(fig: Any, ax: Any) -> float:
    """The inches left of the axes that its widest tick number, the ticks and the axis's name take (measured, so
    ``1.5 TFLOP/s`` moves the axes right instead of off the figure's edge; without a trial layout of the
    axes, which would build every tick twice)."""
    renderer = fig.canvas.get_renderer()
    lo, hi = ax.get_ylim()
    values = [v for v in ax.yaxis.get_major_locator().tick_values(lo, hi) if lo <= v <= hi]
    size = plt.rcParams["ytick.labelsize"]
    widest = max((Text(0, 0, tick_text(v, "FLOP/s"), fontsize=size, figure=fig).get_window_extent(renderer).width
                  for v in values), default=0.0) / fig.dpi
    name = Text(0, 0, ax.get_ylabel(), figure=fig, rotation=90).get_window_extent(renderer).width / fig.dpi
    pads = (plt.rcParams["ytick.major.size"] + plt.rcParams["ytick.major.pad"] + plt.rcParams["axes.labelpad"]) / 72
    return float(widest + name + pads)


def _draw_labels(ax: Any, fig: Any, labelled: list[_Point], points: list[_Point], box: Box) -> None:
    """The points' ids where they hide no other id (``plot_labels``), a thin line to a label set off its point."""
    if not labelled:
        return
    renderer = fig.canvas.get_renderer()
    pos = ax.get_position()
    w_in, h_in = pos.width * fig.get_figwidth(), pos.height * fig.get_figheight()

    def inches(q: _Point) -> tuple[float, float, float]:
        fx, fy = box.to_frac(q.x, q.y)
        return fx * w_in, fy * h_in, marker_radius_in(q.priced)

    def size(text: str) -> tuple[float, float]:
        ext = Text(0, 0, text, fontsize=LABEL_PT, figure=fig).get_window_extent(renderer)
        pad = 2 * LABEL_PT * 0.1 / 72  # the label's white box round its text
        return ext.width / fig.dpi + pad, ext.height / fig.dpi + pad

    placed = place_labels([(int(q.ident), *inches(q)) for q in labelled], [inches(q) for q in points], size,
                          (w_in, h_in))
    leaders = []
    for lab in placed:
        x0, y0, x1, y1 = lab.box
        ax.text((x0 + x1) / 2 / w_in, (y0 + y1) / 2 / h_in, lab.text, transform=ax.transAxes, fontsize=LABEL_PT,
                ha="center", va="center", zorder=7, gid="point-id",
                bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none", alpha=0.8))
        if lab.leader:
            ax_, ay = lab.anchor
            near = (min(max(ax_, x0), x1), min(max(ay, y0), y1))
            leaders.append([(ax_ / w_in, ay / h_in), (near[0] / w_in, near[1] / h_in)])
    if leaders:
        ax.add_collection(LineCollection(leaders, colors="#888888", linewidths=0.6, zorder=6,
                                         transform=ax.transAxes))
