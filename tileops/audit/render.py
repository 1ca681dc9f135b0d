"""The audit's entries as text: JSON, CSV and markdown (the rich table lives in the command)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence

from tileops.audit.entry import PREMISE, AuditEntry, counts, entry_data
from tileops.defaults import AUDIT_FORMATS as FORMATS

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
