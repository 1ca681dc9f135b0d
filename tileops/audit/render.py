"""The audit's entries as text (JSON, CSV, markdown) and as a rich table for a terminal (rich is imported only
when the table is drawn)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tileops.audit.entry import PREMISE, AuditEntry, counts, entry_data
from tileops.defaults import AUDIT_FORMATS as FORMATS

if TYPE_CHECKING:
    from rich.table import Table

#: How a verdict is coloured on a terminal (rich's style names).
VERDICT_STYLE = {"PASS": "green", "FAIL": "bold red", "ERROR": "bold red", "WARN": "yellow", "EXEMPT": "cyan",
                 "SKIPPED": "dim", "NO-VERDICT": "magenta"}
#: The table's columns, also CSV's and markdown's.
COLUMNS = ("op", "label", "dtype", "backend", "expected_read_bytes", "measured_read_bytes", "read_ratio",
           "measured_write_bytes", "kernels", "verdict", "reason")


def premises(entries: Sequence[AuditEntry]) -> str:
    """The premises the readings rest on: the entries' own (one audit, one replay mode), else the default's."""
    return "; ".join(dict.fromkeys(e.premise for e in entries)) or PREMISE


def render_json(entries: Sequence[AuditEntry]) -> str:
    doc = {"premise": premises(entries), "counts": counts(entries), "rows": [entry_data(e) for e in entries]}
    return json.dumps(doc, indent=2, default=str) + "\n"


def render_csv(entries: Sequence[AuditEntry]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*COLUMNS, "premise"])
    for e in entries:
        d = entry_data(e)
        w.writerow([("" if d[c] is None else d[c]) for c in COLUMNS] + [e.premise])
    return buf.getvalue()


def _cell(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def render_markdown(entries: Sequence[AuditEntry]) -> str:
    head = ["op", "row", "dtype", "declared read (B)", "measured read (B)", "ratio", "measured write (B)",
            "kernels", "verdict", "why"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for e in entries:
        cells = [e.op, e.label, e.dtype, e.expected_read_bytes, e.measured_read_bytes, e.read_ratio,
                 e.measured_write_bytes, e.kernels, e.verdict, e.reason]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    summary = ", ".join(f"{n} {v}" for v, n in counts(entries).items())
    return "\n".join(lines) + f"\n\n{len(entries)} row(s): {summary}. Premises: {premises(entries)}.\n"


def audit_text(entries: Sequence[AuditEntry], fmt: str) -> str:
    """The entries as text in ``fmt`` (json, csv, md; the table is a terminal's, ``tileops.pipeline.audit``)."""
    if fmt == "json":
        return render_json(entries)
    if fmt == "csv":
        return render_csv(entries)
    if fmt == "md":
        return render_markdown(entries)
    raise ValueError(f"unknown format {fmt!r}; formats are {', '.join(FORMATS)}")


def _premise_cells() -> dict[str, str]:
    from tileops.audit.ncu import REPLAY_MODES as MODES
    from tileops.audit.ncu import premise

    return {premise(m): ("cold call; reads only" if m != "kernel" else "cold replay per kernel; reads only")
            for m in MODES}


def _num(v: int | None) -> str:
    return "" if v is None else f"{v:,}"


def audit_table(entries: Sequence[AuditEntry], premise: str) -> Table:
    """The audit for a terminal: a row per entry, its verdict coloured, the premises in the caption."""
    from rich.table import Table

    cells = _premise_cells()
    t = Table(title="Read-side bytes audit", caption=f"premises: {premise}", caption_justify="left")
    for col, justify in (("op", "left"), ("row", "left"), ("dtype", "left"), ("declared read B", "right"),
                         ("measured read B", "right"), ("ratio", "right"), ("measured write B", "right"),
                         ("kernels", "right"), ("verdict", "left"), ("premise", "left")):
        t.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]  # rich's Literal
    for e in entries:
        ratio = e.read_ratio
        t.add_row(e.op, e.label, e.dtype, _num(e.expected_read_bytes), _num(e.measured_read_bytes),
                  "" if ratio is None else f"{ratio:.3f}", _num(e.measured_write_bytes), _num(e.kernels),
                  f"[{VERDICT_STYLE.get(e.verdict, '')}]{e.verdict}[/]", cells.get(e.premise, "see caption"))
    return t
