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

import sys
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
from tileops.report.texttable import colour_wanted
from tileops.roofline import Health, Priced

if TYPE_CHECKING:  # rich is imported only by callers that hand in a rich Console
    from rich.console import Console

def render_summary(priced: Sequence[Priced], console: Console | None = None, *,
                   comparison: Comparison | None = None, title: str | None = None,
                   health: Health | None = None, full_table: bool = False) -> None:
    """Print the table grouped by op (a digest above ``SUMMARISE_ABOVE`` rows) and the summary.

    ``console``: a rich Console to print through (its file and colour choice), or None for stdout.
    """
    if console is None:
        text = render_text(priced, "table", comparison=comparison, health=health, title=title,
                           full_table=full_table, colour=colour_wanted(sys.stdout))
        sys.stdout.write(text)
        return
    colour = console.color_system is not None and not console.no_color and not console.record
    text = render_text(priced, "table", comparison=comparison, health=health, title=title,
                       full_table=full_table, colour=colour)
    if console.record:  # a recording console keeps what is printed through it
        from rich.text import Text

        console.print(Text(text, end=""), soft_wrap=True, end="")
    else:
        console.file.write(text)
        console.file.flush()


__all__ = ["FORMATS", "Comparison", "Report", "RunFacts", "as_json", "compare", "new_report", "render_csv",
           "render_json", "render_markdown", "render_summary", "render_text", "summary_lines"]
