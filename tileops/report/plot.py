"""The roofline plot (PNG and SVG): the picture a person looks at first.

Log-log: arithmetic intensity (FLOP/byte) across, achieved FLOP/s up. One
ceiling per roof of the profile: the memory slope (bytes/s × intensity) and
each compute roof as a flat line, theoretical dashed and effective solid in
the same colour. Each row is a point coloured by its verdict and labelled by a
short id; the table beside the plot lists what each id is. Rows that cannot be
placed (no FLOPs, no bytes, not timed, another profile) are listed there too,
with why.

Matplotlib runs on the Agg backend: no display is needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import EngFormatter  # noqa: E402

from tileops.profiles import Profile  # noqa: E402
from tileops.report import rows as R  # noqa: E402
from tileops.roofline import Priced  # noqa: E402

VERDICT_COLOR = {
    "at-ceiling": "#1a9850",
    "below": "#4575b4",
    "latency-bound": "#f39c12",
    "anomaly": "#c51b7d",
    "blank": "#9e9e9e",
    "error": "#d73027",
}
MEMORY_COLOR = "#333333"
ROOF_COLORS = ("#e6550d", "#756bb1", "#31a354", "#3182bd", "#de2d26", "#636363", "#8c6d31", "#d6616b", "#17becf")
FILES = ("roofline.png", "roofline.svg")


@dataclass
class _Point:
    ident: str
    x: float
    y: float
    priced: Priced


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


def _place_labels(points: list[_Point], to_frac, line_h: float, char_w: float) -> list[tuple[_Label, str]]:
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
    points: list[_Point] = []
    legend_rows: list[tuple[str, Priced, str | None]] = []
    for i, p in enumerate(priced, 1):
        why = _why_not_placed(p, profile)
        legend_rows.append((str(i), p, why))
        if why is None:
            t = p.record.timing.actual_time_s  # type: ignore[union-attr]
            points.append(_Point(str(i), p.record.flops / p.record.bytes, p.record.flops / t, p))  # type: ignore[operator]

    mem = profile.memory
    bw_eff = mem.effective if mem else None
    bw_theo = mem.theoretical if mem else None
    roofs = [(k, r.theoretical, r.effective) for k, r in profile.compute.items()]
    peak_max = max((t for _, t, _ in roofs), default=None)

    # Axis ranges: every point and every ridge (where the memory slope meets a roof).
    bw_ref = bw_theo or bw_eff
    xs = [pt.x for pt in points]
    if bw_ref:
        xs += [t / bw_ref for _, t, _ in roofs] + [e / bw_ref for _, _, e in roofs if e]
    if not xs:
        xs = [0.1, 100.0]
    xmin, xmax = min(xs) / 8, max(xs) * 8
    if math.log10(xmax / xmin) < 3:
        mid = math.sqrt(xmin * xmax)
        xmin, xmax = mid / 10 ** 1.5, mid * 10 ** 1.5
    ys = [pt.y for pt in points] + [t for _, t, _ in roofs] + [e for _, _, e in roofs if e]
    if bw_ref:
        ys.append(bw_ref * xmin)
    if not ys:
        ys = [1e9, 1e12]
    ymin, ymax = min(ys) / 5, max(ys) * 3

    n_rows = len(legend_rows)
    height = max(6.5, 1.6 + 0.22 * (n_rows + 1))
    fig = plt.figure(figsize=(17, height), dpi=110)
    gs = fig.add_gridspec(1, 2, width_ratios=[1.35, 1.0], wspace=0.04)
    ax = fig.add_subplot(gs[0, 0])
    tax = fig.add_subplot(gs[0, 1])
    # Keep the plot a readable size when the legend table makes the figure tall.
    plot_h = min(1.0, 7.0 / height)
    pos = ax.get_position()
    ax.set_position([pos.x0, pos.y1 - pos.height * plot_h, pos.width, pos.height * plot_h])

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(xmin, xmax)
    ax.set_ylim(ymin, ymax)
    ax.xaxis.set_major_formatter(EngFormatter(unit="", sep=""))
    ax.yaxis.set_major_formatter(EngFormatter(unit="FLOP/s"))
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.grid(True, which="major", alpha=0.3)
    ax.grid(True, which="minor", alpha=0.08)

    eff_max = max((e for _, _, e in roofs if e), default=None)

    def slope(bw: float, top: float | None, style: str, label: str) -> None:
        """The memory slope, up to the highest compute roof of the same kind (theoretical/effective)."""
        x_end = (top / bw) if top else xmax
        x_end = min(max(x_end, xmin), xmax)
        ax.plot([xmin, x_end], [bw * xmin, bw * x_end], style, color=MEMORY_COLOR, lw=1.6, label=label)

    handles: list = []
    if bw_theo:
        slope(bw_theo, peak_max, "--", f"memory theoretical {R.si(bw_theo, 'B/s')}")
    if bw_eff:
        note = " (measured; nominal unknown)" if mem is not None and not mem.nominal_known else ""
        slope(bw_eff, eff_max or peak_max, "-", f"memory effective {R.si(bw_eff, 'B/s')}{note}")
    for idx, (key, theo, eff) in enumerate(sorted(roofs, key=lambda r: -r[1])):
        color = ROOF_COLORS[idx % len(ROOF_COLORS)]
        # With the nominal bandwidth unknown there is no theoretical ridge: the dashed roof spans the plot.
        for value, bw, style, kind in ((theo, bw_theo, "--", "theoretical"),
                                       (eff, bw_eff, "-", "effective")):
            if value is None:
                continue
            x0 = value / bw if bw else xmin
            x0 = min(max(x0, xmin), xmax)
            ls = (idx * 3, (5, 4)) if style == "--" else "-"
            ax.plot([x0, xmax], [value, value], ls=ls, color=color, lw=1.6,
                    label=f"{key} {kind} {R.si(value, 'FLOP/s')}")
        if eff is None:
            ax.plot([], [], " ", label=f"{key}: uncalibrated (no effective line)")
    handles, _ = ax.get_legend_handles_labels()

    by_verdict: dict[str, list[_Point]] = {}
    for pt in points:
        by_verdict.setdefault(pt.priced.verdict, []).append(pt)
    for verdict, pts in by_verdict.items():
        ax.scatter([q.x for q in pts], [q.y for q in pts], s=46, color=VERDICT_COLOR[verdict], zorder=5,
                   edgecolors="white", linewidths=0.6)
    breached = [pt for pt in points if pt.priced.breaches]
    if breached:
        ax.scatter([q.x for q in breached], [q.y for q in breached], s=180, facecolors="none",
                   edgecolors="red", linewidths=2.0, zorder=6)
    span_x, span_y = math.log10(xmax / xmin), math.log10(ymax / ymin)
    ax_h_in = ax.get_position().height * fig.get_figheight()
    ax_w_in = ax.get_position().width * fig.get_figwidth()
    line_h = (8 * 1.3 / 72) / ax_h_in  # one 8-pt text line, in axes fraction
    char_w = (8 * 0.62 / 72) / ax_w_in  # one 8-pt character

    def to_frac(x: float, y: float) -> tuple[float, float]:
        return math.log10(x / xmin) / span_x, math.log10(y / ymin) / span_y

    for lab, text in _place_labels(points, to_frac, line_h, char_w):
        moved = abs(lab.ty - lab.fy) > 0.5 * line_h
        ax.annotate(text, (lab.fx, lab.fy), xycoords="axes fraction", xytext=(lab.fx + 0.012, lab.ty),
                    textcoords="axes fraction", fontsize=8, va="center", zorder=7,
                    bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8),
                    arrowprops=dict(arrowstyle="-", color="#888888", lw=0.6) if moved else None)

    verdict_handles = [Line2D([], [], marker="o", ls="", color=VERDICT_COLOR[v], label=v)
                       for v in VERDICT_COLOR if v in by_verdict]
    if breached:
        verdict_handles.append(Line2D([], [], marker="o", ls="", mfc="none", mec="red", mew=2,
                                      label="FORMULA ERROR (physics breach)"))
    leg1 = ax.legend(handles=handles, loc="upper left", fontsize=7.5, title="ceilings", title_fontsize=8,
                     framealpha=0.9)
    ax.add_artist(leg1)
    if verdict_handles:
        ax.legend(handles=verdict_handles, loc="lower right", fontsize=7.5, title="verdict", title_fontsize=8,
                  framealpha=0.9)
    placed = len(points)
    title = f"Roofline — {profile.name} ({placed} of {n_rows} row(s) placed)"
    ax.set_title(title, fontsize=11, loc="left")

    _legend_table(tax, legend_rows)
    paths = []
    for ext in ("png", "svg"):
        path = out_dir / f"{stem}.{ext}"
        with matplotlib.rc_context({"svg.fonttype": "none"}):  # SVG text stays text: searchable, small
            fig.savefig(path, bbox_inches="tight")
        paths.append(path)
    plt.close(fig)
    return paths


def _legend_table(tax, legend_rows: list[tuple[str, Priced, str | None]]) -> None:
    """The id → row table beside the plot, coloured by verdict."""
    tax.axis("off")
    if not legend_rows:
        tax.text(0, 1, "no rows", va="top")
        return
    header = ("id", "op", "label", "dtype", "backend", "eff", "verdict")
    cells = []
    colors = []
    for ident, p, why in legend_rows:
        r = p.record
        verdict = R.verdict_text(p) + (f" (not placed: {why})" if why else "")
        cells.append([ident, r.op, _short(r.label, 30), r.dtype, r.backend, R.percent(p.efficiency),
                      _short(verdict, 44)])
        colors.append(VERDICT_COLOR.get(p.verdict, "#ffffff"))
    n = len(cells)
    row_h = min(0.055, 0.97 / (n + 1))
    table = tax.table(cellText=cells, colLabels=header, loc="upper left", cellLoc="left",
                      colLoc="left", bbox=[0.0, 1.0 - row_h * (n + 1), 1.0, row_h * (n + 1)])
    table.auto_set_font_size(False)
    table.set_fontsize(7.5)
    table.auto_set_column_width(list(range(len(header))))
    for (row, col), cell in table.get_celld().items():
        cell.set_edgecolor("#dddddd")
        if row == 0:
            cell.set_text_props(weight="bold")
            cell.set_facecolor("#f0f0f0")
        elif col == 0:
            cell.set_facecolor(colors[row - 1])
            cell.set_text_props(color="white", weight="bold")
        elif col == 6 and legend_rows[row - 1][1].breaches:
            cell.set_text_props(color="red", weight="bold")


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"
