"""``tileops ops [NAME]`` composed: the op library as the manifest declares it, listed or shown one entry at a time.

Without a name, one line per op: family, status, formula mode, the roof keys its
rows price on (one per dtype case) and its workload rows. With a name, the
entry itself: signature, parameters, derived indices, the roofline field, and
every workload row with the (flops, bytes) ``op.eval_roofline()`` gives it.
What each line says is ``tileops.ops.describe``'s (the rows priced on meta
tensors); this workflow picks the entries and shows them through the printer:
the JSON as it is, or the tables ``tileops.ops.render`` draws.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING
from collections.abc import Mapping, Sequence

from tileops import exitcodes
from tileops.errors import TileOpsError
from tileops.pipeline.outcome import exit_code

if TYPE_CHECKING:
    from tileops.ops.spec import OpEntry
    from tileops.report.printer import Printer

#: How wide the tables are drawn where stdout is no terminal and $COLUMNS is unset (a log, a pipe): whole.
PIPED_WIDTH = 160


class UnknownOp(TileOpsError):
    """``tileops ops NAME`` with a name the manifest does not declare (exit 2, with the nearest names)."""


@dataclass(frozen=True)
class OpsRequest:
    """What ``tileops ops`` shows: one entry by name, or the listing filtered by family; rows by tag."""

    name: str | None = None  # None: the listing
    families: Sequence[str] = ()  # the listing's families; empty: every family
    tag: str | None = None  # only the rows with this tag are counted and shown
    format: str = "table"  # table or json
    price: bool = True  # False: call no op (no roof keys, no numbers; nothing is executed)


@dataclass(frozen=True)
class OpsResult:
    """How many ops were shown: none means the families asked for name no op, a usage error (exit 2)."""

    shown: int

    @property
    def exit_code(self) -> int:
        return exit_code() if self.shown else exitcodes.USAGE


def run_ops(req: OpsRequest, printer: Printer | None = None) -> OpsResult:
    """Show the listing or the entry on stdout through ``printer`` (default: JSON as it is, tables on a console
    as wide as $COLUMNS, else 160 where stdout is no terminal, so a log keeps them whole). UnknownOp for a name
    no entry has."""
    from tileops.ops.catalog import load_entries
    from tileops.ops.registry import load_all
    from tileops.report.printer import make_printer

    if printer is None:  # a JSON document needs no rich
        printer = make_printer("console" if req.format == "table" else "log",
                               piped_width=int(os.environ.get("COLUMNS", "0") or 0) or PIPED_WIDTH)
    load_all()
    entries = load_entries()
    if req.name:
        return _show_one(req, req.name, entries, printer)
    chosen = [e for e in sorted(entries.values(), key=lambda e: (e.family, e.name))
              if not req.families or e.family in req.families]
    if not chosen:
        printer.say(f"no ops in famil{'y' if len(req.families) == 1 else 'ies'} {', '.join(req.families)}; "
                    f"families: {', '.join(sorted({e.family for e in entries.values()}))}", result=True)
        return OpsResult(shown=0)
    from tileops.ops.describe import entry_summary
    from tileops.ops.render import listing_table

    rows = [entry_summary(e, req.tag, req.price) for e in chosen]
    if req.format == "json":
        printer.text(json.dumps(rows, indent=2) + "\n")
    else:
        printer.show(listing_table(rows), data=rows)
    return OpsResult(shown=len(rows))


def _show_one(req: OpsRequest, name: str, entries: Mapping[str, OpEntry], printer: Printer) -> OpsResult:
    from tileops.ops.describe import entry_detail
    from tileops.ops.render import entry_view

    entry = entries.get(name)
    if entry is None:
        near = difflib.get_close_matches(name, entries, n=3)
        raise UnknownOp(f"no op named {name!r} in the manifest"
                        + (f"; did you mean {', '.join(near)}?" if near else "; run `tileops ops` for the list"))
    d = entry_detail(entry, req.tag, req.price)
    if req.format == "json":
        printer.text(json.dumps(d, indent=2, default=str) + "\n")
    else:
        printer.show(entry_view(d), data=d)
    return OpsResult(shown=1)
