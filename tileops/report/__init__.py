"""Reports of priced records: tables (a terminal, markdown, CSV, JSON), the baseline comparison, the plot.

What the pipeline (and anyone else) calls::

    from tileops.roofline import health, price_all
    from tileops.report import render_summary
    from tileops.report.plot import write_plot

    priced = price_all(records, chooser)            # tileops.roofline
    h = health(priced)                              # the run's health: the roofline tool decides it
    render_summary(priced, console, health=h)       # grouped table (a digest above 500 rows) + summary
    paths = write_plot(priced, profile, run_dir)    # [run_dir/roofline.png, run_dir/roofline.svg]

``render_text(priced, fmt)`` returns the text of a format (``table`` without colour, ``md``, ``csv``, ``json``).
``tileops.report.baseline.compare(new, old, threshold)`` flags rows more than
``threshold`` slower. Each format is also a :class:`~tileops.report.tables.Report`
filled row by row (``new_report``), which is how ``tileops roofline`` streams
a large run. The plot module imports matplotlib, so it is not imported here;
nothing in this package imports op code or torch (a test checks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from collections.abc import Sequence

from tileops.defaults import REPORT_FORMATS as FORMATS
from tileops.report.baseline import Comparison, compare
from tileops.report.summary import RunFacts, summary_lines
from tileops.report.tables import (
    Report,
    as_json,
    new_report,
    render_csv,
    render_json,
    render_markdown,
    render_text,
)
from tileops.roofline import Health, Priced

if TYPE_CHECKING:  # rich is imported only by callers that hand in a rich Console
    from rich.console import Console

def render_summary(priced: Sequence[Priced], console: Console | None = None, *,
                   comparison: Comparison | None = None, title: str | None = None,
                   health: Health | None = None, full_table: bool = False) -> None:
    """Print the table grouped by op (a digest above ``SUMMARISE_ABOVE`` rows) and the summary, as the
    console printer shows a run's results (``tileops.report.printer``).

    ``console``: a rich Console to print through (its file and colour choice), or None for stdout.
    """
    from rich.console import Console as RichConsole

    from tileops.report.printer import ConsolePrinter

    console = console if console is not None else RichConsole()
    ConsolePrinter(console, console).results(priced, comparison=comparison, title=title, health=health,
                                             full_table=full_table)


__all__ = ["FORMATS", "Comparison", "Report", "RunFacts", "as_json", "compare", "new_report", "render_csv",
           "render_json", "render_markdown", "render_summary", "render_text", "summary_lines"]
