"""``tileops ops [NAME]`` composed: the op library as the manifest declares it, listed or shown one entry at a time.

Without a name, one line per op: family, status, formula mode, the roof keys its
rows price on (one per dtype case) and its workload rows. With a name, the
entry itself: signature, parameters, derived indices, the roofline field, and
every workload row with the (flops, bytes) ``op.eval_roofline()`` gives it.
What each line says is ``tileops.ops.describe``'s (the rows priced on meta
tensors); this workflow picks the entries, and prints JSON or rich tables.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from collections.abc import Sequence

from tileops import exitcodes
from tileops.errors import TileOpsError
from tileops.pipeline.outcome import exit_code

if TYPE_CHECKING:
    from rich.console import Console


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


def run_ops(req: OpsRequest, console: Console | None = None) -> OpsResult:
    """Print the listing or the entry on stdout (JSON, or tables on ``console``, default a console on stdout).
    UnknownOp for a name no entry has."""
    from tileops.ops.catalog import load_entries
    from tileops.ops.describe import entry_detail, entry_summary
    from tileops.ops.registry import load_all

    load_all()
    entries = load_entries()
    if req.name:
        entry = entries.get(req.name)
        if entry is None:
            near = difflib.get_close_matches(req.name, entries, n=3)
            raise UnknownOp(f"no op named {req.name!r} in the manifest"
                            + (f"; did you mean {', '.join(near)}?" if near else "; run `tileops ops` for the list"))
        d = entry_detail(entry, req.tag, req.price)
        if req.format == "json":
            print(json.dumps(d, indent=2, default=str))
        else:
            render_detail(d, console or _console())
        return OpsResult(shown=1)
    chosen = [e for e in sorted(entries.values(), key=lambda e: (e.family, e.name))
              if not req.families or e.family in req.families]
    if not chosen:
        print(f"no ops in famil{'y' if len(req.families) == 1 else 'ies'} {', '.join(req.families)}; "
              f"families: {', '.join(sorted({e.family for e in entries.values()}))}")
        return OpsResult(shown=0)
    rows = [entry_summary(e, req.tag, req.price) for e in chosen]
    if req.format == "json":
        print(json.dumps(rows, indent=2))
    else:
        render_list(rows, console or _console())
    return OpsResult(shown=len(rows))


def _console() -> Console:
    """A console on stdout; in a log or a pipe (no terminal, no COLUMNS) wide enough for the tables."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=160)
    return console


def _fmt(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def render_list(rows: list[dict[str, Any]], console: Console) -> None:
    """The listing: one row per op (``tileops.ops.describe.entry_summary``)."""
    from rich.table import Table

    t = Table(title=f"{len(rows)} ops", header_style="bold")
    columns: tuple[tuple[str, dict[str, Any]], ...] = (
        ("op", {"style": "bold"}), ("family", {}), ("status", {}), ("mode", {}), ("roof key(s)", {}),
        ("rows", {"justify": "right"}), ("cases", {"justify": "right"}), ("cpu rows", {"justify": "right"}))
    for col, kw in columns:
        t.add_column(col, **kw)
    for r in rows:
        status = r["status"] if r["status"] == "implemented" else f"[yellow]{r['status']}[/]"
        t.add_row(r["name"], r["family"], status, r["mode"], ", ".join(r["roof_keys"]) or "—",
                  str(r["rows"]), str(r["cases"]), str(r["cpu_rows"]))
    console.print(t)


def render_detail(d: dict[str, Any], console: Console) -> None:
    """One entry (``tileops.ops.describe.entry_detail``): a panel, then its signature, parameters, roofline
    field and priced workload rows as tables."""
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    head = (f"[bold]{escape(d['name'])}[/]  family {escape(d['family'])} · {d['status']} · {d['mode']} formula · "
            f"ref {escape(d['ref_api'])}\n{escape(d['description'])}\n[dim]{escape(d['file'])}[/]")
    console.print(Panel(head, expand=False))
    sig = Table(title="signature", header_style="bold")
    for col in ("tensor", "role", "shape", "dtype", "flags"):
        sig.add_column(col)
    for role in ("inputs", "outputs"):
        for t in d[role]:
            sig.add_row(t["name"], role[:-1], escape(t["shape"]), t["dtype"], t["flags"])
    console.print(sig)
    if d["params"] or d["let"]:
        pl = Table(title="parameters and derived indices", header_style="bold")
        for col in ("name", "kind", "value"):
            pl.add_column(col)
        for p in d["params"]:
            pl.add_row(p["name"], f"param {p['type']}", "required" if p["default"] is None else repr(p["default"]))
        for k, v in d["let"].items():
            pl.add_row(k, "let", escape(v))
        console.print(pl)
    rf = Table(title="roofline", header_style="bold", show_header=False)
    rf.add_column("field", style="bold")
    rf.add_column("value")
    for k, v in d["roofline"].items():
        rf.add_row(k, escape(v))
    console.print(rf)
    by_label = {w["label"]: w for w in d["workloads"]}
    wt = Table(title=f"workload rows ({d['rows']} rows, {d['cases']} cases), priced by eval_roofline() on meta tensors",
               header_style="bold")
    columns: tuple[tuple[str, dict[str, Any]], ...] = (
        ("label", {"style": "bold"}), ("indices / params", {}), ("dtypes", {}), ("tags", {}),
        ("FLOPs", {"justify": "right"}), ("bytes", {"justify": "right"}), ("roof key", {}))
    for col, kw in columns:
        wt.add_column(col, **kw)
    last = None
    for p in d["priced"]:
        w = by_label[p["label"]]
        first = p["label"] != last
        last = p["label"]
        shape = ", ".join(f"{k}={v}" for k, v in w["indices"].items())
        extra = ", ".join([*(f"{k}={v}" for k, v in w["params"].items()), *(f"+{x}" for x in w["present"])])
        numbers = (_fmt(p["flops"]), _fmt(p["bytes"]), p["roof_key"] or "—") if not p["note"] else \
            (f"[dim]{escape(p['note'])}[/]", "", p["roof_key"] or "—")
        wt.add_row(p["label"] if first else "", escape(shape + (f"; {extra}" if extra else "")) if first else "",
                   p["case"], ", ".join(w["tags"]) if first else "", *numbers)
    console.print(wt)
