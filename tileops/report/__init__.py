"""Reports of priced records: tables (rich, markdown, CSV, JSON), the baseline comparison, the plot.

What the pipeline (and anyone else) calls::

    from tileops.roofline import health, price_all
    from tileops.report import render_summary
    from tileops.report.plot import write_plot

    priced = price_all(records, chooser)            # tileops.roofline
    h = health(priced)                              # the run's health: the roofline tool decides it
    render_summary(priced, console, health=h)       # grouped table + summary
    paths = write_plot(priced, profile, run_dir)    # [run_dir/roofline.png, run_dir/roofline.svg]

``render(priced, fmt)`` returns the text of the ``md``, ``csv`` or ``json`` format.
``tileops.report.baseline.compare(new, old, threshold)`` flags rows more than
``threshold`` slower. The plot module imports matplotlib, so it is not imported
here; nothing in this package imports op code or torch (a test checks).
"""

from __future__ import annotations

import io
from typing import Sequence

from rich.console import Console

from tileops.report.baseline import Comparison, compare
from tileops.report.tables import (
    as_json,
    render_csv,
    render_json,
    render_markdown,
    render_table,
    summary_lines,
)
from tileops.roofline import Health, Priced

FORMATS = ("table", "json", "md", "csv")


def render_summary(priced: Sequence[Priced], console: Console | None = None, *,
                   comparison: Comparison | None = None, title: str | None = None,
                   health: Health | None = None) -> None:
    """Print the table grouped by op and the summary (verdict counts, blanks by reason, breaches, health)."""
    render_table(priced, console or Console(), comparison=comparison, title=title, health=health)


def render(priced: Sequence[Priced], fmt: str, *, comparison: Comparison | None = None,
           health: Health | None = None) -> str:
    """The report as text: ``md``, ``csv``, ``json`` (``table`` renders through rich, without colour)."""
    if fmt == "md":
        return render_markdown(priced, comparison=comparison)
    if fmt == "csv":
        return render_csv(priced, comparison=comparison)
    if fmt == "json":
        return render_json(priced, comparison=comparison, health=health)
    if fmt == "table":
        console = Console(record=True, width=160, file=io.StringIO(), color_system=None)
        render_table(priced, console, comparison=comparison, health=health)
        return console.export_text()
    raise ValueError(f"unknown format {fmt!r}; formats are {', '.join(FORMATS)}")


__all__ = ["FORMATS", "Comparison", "as_json", "compare", "render", "render_csv", "render_json",
           "render_markdown", "render_summary", "render_table", "summary_lines"]
