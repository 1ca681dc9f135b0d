"""The table beside the roofline plot: what each id is, and the rows that could not be placed, with why.

Monospace lines, one text artist per line (not one per cell: a table of 45
rows stays cheap), each row marked with its point's look (colour, shape,
hollow). A cell longer than its column wraps onto the row's next line instead
of being cut: "not placed: 0 FLOPs (off a log ax…" lost the one word that said
why. The summary of what the table leaves out wraps to the table's width.
"""

from __future__ import annotations

import textwrap
from typing import Any

from tileops.report import columns
from tileops.report.plot_marks import backend_marker, hollow, look_kwargs, mark_colour
from tileops.roofline import GapSplit, Priced

TABLE_HEADER = ("id", "op", "label", "dtype", "backend", "eff", "verdict")
#: The side table's column after ``eff`` where a listed row has a SOL interval (its error bar, in figures).
CI_HEADER = "95 % CI"
#: The side table's last column where the audit measured a listed row: its SOL gap split.
GAP_HEADER = ("gap: bytes x min, at bytes moved",)
#: The widest the label and verdict columns grow before their text wraps.
LABEL_W, VERDICT_W = 30, 44
#: The narrowest the summary under the table wraps at, in characters.
SUMMARY_W = 64
FONT_PT = 7.5
CHAR_IN = FONT_PT * 0.61 / 72  # one monospace (DejaVu Sans Mono) character
ROW_IN = 0.155  # one table line
MARK_IN = 0.22  # the room left of the text for each row's mark


def gap_cell(p: Priced) -> str:
    """``1.80x, 54.0 %``: the bytes the row moves over the formula's minimum, and the ceiling's fraction it
    reaches at them (empty where the audit did not measure it)."""
    g = p.gap
    return f"{g.traffic_ratio:.2f}x, {columns.percent(g.achieved)}" if isinstance(g, GapSplit) else ""


def _wrap(text: str, width: int, *, hyphens: bool = False) -> list[str]:
    """``text`` in lines of ``width`` at most, broken at spaces (and hyphens, for a label such as
    ``cpu-512x1024-row-broadcast``), a word longer than a line broken where it must be."""
    return textwrap.wrap(text, width, break_on_hyphens=hyphens) or [""]


def table_blocks(legend_rows: list[tuple[str, Priced, str | None]]) -> list[tuple[list[str], bool]]:
    """The table as monospace lines, header block first: one block per row (its wrapped lines, and whether it is
    a formula error)."""
    gaps = any(isinstance(p.gap, GapSplit) for _, p, _ in legend_rows)
    intervals = any(p.sol_ci is not None for _, p, _ in legend_rows)  # the eff's interval beside it
    header = TABLE_HEADER[:6] + ((CI_HEADER,) if intervals else ()) + TABLE_HEADER[6:] + (GAP_HEADER if gaps else ())
    cells: list[list[list[str]]] = [[[h] for h in header]]
    for ident, p, why in legend_rows:
        r = p.record
        verdict = columns.verdict_text(p) + (f" (not placed: {why})" if why else "")
        cells.append([[ident], [r.op], _wrap(r.label, LABEL_W, hyphens=True), [r.dtype], [r.backend],
                      [columns.efficiency_text(p)]] + ([[columns.sol_ci_text(p)]] if intervals else [])
                     + [_wrap(verdict, VERDICT_W)] + ([[gap_cell(p)]] if gaps else []))
    widths = [max(len(line) for row in cells for line in row[i]) for i in range(len(header))]
    blocks: list[tuple[list[str], bool]] = []
    for k, row in enumerate(cells):
        depth = max(len(c) for c in row)
        lines = ["  ".join((c[j] if j < len(c) else "").ljust(w) for c, w in zip(row, widths)).rstrip()
                 for j in range(depth)]
        blocks.append((lines, k > 0 and bool(legend_rows[k - 1][1].breaches)))
    return blocks


def _table_lines(legend_rows: list[tuple[str, Priced, str | None]]) -> list[tuple[str, bool]]:
    """The table's lines, header first: (text, is a formula error)."""
    return [(line, red) for lines, red in table_blocks(legend_rows) for line in lines]


def summary_text(summary: list[str], blocks: list[tuple[list[str], bool]]) -> list[str]:
    """The summary's lines, wrapped at the table's width (``SUMMARY_W`` at least)."""
    width = max([SUMMARY_W] + [len(line) for lines, _ in blocks for line in lines])
    return [w for s in summary for w in textwrap.wrap(s, width, subsequent_indent="  ", break_on_hyphens=False)]


def table_size_in(blocks: list[tuple[list[str], bool]], summary: list[str]) -> tuple[float, float]:
    """The table's (width, height) in inches: the mark, the longest line, and a line per text line."""
    longest = max([len(line) for lines, _ in blocks for line in lines] + [len(s) for s in summary] + [8])
    n = sum(len(lines) for lines, _ in blocks) + (len(summary) + 0.5 if summary else 0)
    return MARK_IN + CHAR_IN * longest + 0.1, ROW_IN * (n + 1)


def draw_table(tax: Any, legend_rows: list[tuple[str, Priced, str | None]], blocks: list[tuple[list[str], bool]],
               summary: list[str]) -> None:
    """The id → row table in ``tax`` (sized by ``table_size_in``): one monospace line per text line (red for a
    formula error) and each row's mark in its point's look; the summary under it."""
    tax.axis("off")
    tax.set_xlim(0, 1)
    tax.set_ylim(0, 1)
    height_in = tax.get_position().height * tax.figure.get_figheight()
    row_h = ROW_IN / height_in
    text = dict(fontsize=FONT_PT, family="monospace", va="center", ha="left", transform=tax.transAxes)
    x_text = MARK_IN / tax.get_position().width / tax.figure.get_figwidth()
    k = 0
    first_line: list[int] = []
    for lines, red in blocks:
        first_line.append(k)
        for line in lines:
            tax.text(x_text, 1.0 - (k + 0.5) * row_h, line, color="red" if red else "black",
                     weight="bold" if k == 0 or red else "normal", **text)
            k += 1
    if legend_rows:  # each row's mark: its point's colour and fill in its backend's shape, one scatter per shape
        by_marker: dict[str, list[int]] = {}
        for i, (_, p, _) in enumerate(legend_rows):
            by_marker.setdefault(backend_marker(p.record.backend), []).append(i)
        for marker, rows in by_marker.items():
            ps = [legend_rows[i][1] for i in rows]
            tax.scatter([x_text / 2] * len(rows), [1.0 - (first_line[i + 1] + 0.5) * row_h for i in rows],
                        marker=marker, s=30, transform=tax.transAxes, clip_on=False,
                        **look_kwargs([mark_colour(p) for p in ps], [hollow(p) for p in ps]))
    else:
        tax.text(x_text, 1.0 - (k + 0.5) * row_h, "no rows", **text)
        k += 1
    if summary:
        tax.text(0.0, 1.0 - (k + 0.5) * row_h, "\n".join(summary), fontsize=FONT_PT, family="monospace",
                 va="top", ha="left", color="#333333", transform=tax.transAxes, linespacing=1.25)
