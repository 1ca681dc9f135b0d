"""``tileops ops`` drawn for a terminal: the listing as one table, an entry as a panel and its tables.

They are drawn from :mod:`tileops.ops.describe`'s plain data, the same dicts ``--format json`` prints, so the
table and the JSON cannot say different things. rich is imported only when a table is drawn: the bench, which
imports this package, never loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Group
    from rich.table import Table

#: The listing's columns and how each is drawn (rich's column options).
LIST_COLUMNS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("op", {"style": "bold"}), ("family", {}), ("status", {}), ("mode", {}), ("roof key(s)", {}),
    ("rows", {"justify": "right"}), ("cases", {"justify": "right"}), ("cpu rows", {"justify": "right"}))

#: The priced workload rows' columns.
WORKLOAD_COLUMNS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("label", {"style": "bold"}), ("indices / params", {}), ("dtypes", {}), ("tags", {}),
    ("FLOPs", {"justify": "right"}), ("bytes", {"justify": "right"}), ("roof key", {}))


def _fmt(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def _table(title: str, columns: tuple[tuple[str, dict[str, Any]], ...], **options: Any) -> Table:
    from rich.table import Table

    t = Table(title=title, header_style="bold", **options)
    for col, kw in columns:
        t.add_column(col, **kw)
    return t


def listing_table(rows: list[dict[str, Any]]) -> Table:
    """The listing: one row per op (``tileops.ops.describe.entry_summary``); a status other than implemented
    stands out."""
    t = _table(f"{len(rows)} ops", LIST_COLUMNS)
    for r in rows:
        status = r["status"] if r["status"] == "implemented" else f"[yellow]{r['status']}[/]"
        t.add_row(r["name"], r["family"], status, r["mode"], ", ".join(r["roof_keys"]) or "—",
                  str(r["rows"]), str(r["cases"]), str(r["cpu_rows"]))
    return t


def entry_view(d: dict[str, Any]) -> Group:
    """One entry (``tileops.ops.describe.entry_detail``): a panel, then its signature, parameters (when it has
    any), roofline field and priced workload rows as tables. What the manifest wrote is escaped: a shape such as
    ``[batch, heads]`` is printed, not read as markup."""
    from rich.console import Group

    parts = [_head(d), _signature(d), *([_parameters(d)] if d["params"] or d["let"] else []), _roofline(d),
             _workloads(d)]
    return Group(*parts)


def _head(d: dict[str, Any]) -> Any:
    from rich.markup import escape
    from rich.panel import Panel

    head = (f"[bold]{escape(d['name'])}[/]  family {escape(d['family'])} · {d['status']} · {d['mode']} formula · "
            f"ref {escape(d['ref_api'])}\n{escape(d['description'])}\n[dim]{escape(d['file'])}[/]")
    return Panel(head, expand=False)


def _signature(d: dict[str, Any]) -> Table:
    from rich.markup import escape

    sig = _table("signature", tuple((col, {}) for col in ("tensor", "role", "shape", "dtype", "flags")))
    for role in ("inputs", "outputs"):
        for t in d[role]:
            sig.add_row(t["name"], role[:-1], escape(t["shape"]), t["dtype"], t["flags"])
    return sig


def _parameters(d: dict[str, Any]) -> Table:
    from rich.markup import escape

    pl = _table("parameters and derived indices", tuple((col, {}) for col in ("name", "kind", "value")))
    for p in d["params"]:
        pl.add_row(p["name"], f"param {p['type']}", "required" if p["default"] is None else repr(p["default"]))
    for k, v in d["let"].items():
        pl.add_row(k, "let", escape(v))
    return pl


def _roofline(d: dict[str, Any]) -> Table:
    from rich.markup import escape

    rf = _table("roofline", (("field", {"style": "bold"}), ("value", {})), show_header=False)
    for k, v in d["roofline"].items():
        rf.add_row(k, escape(v))
    return rf


def _workloads(d: dict[str, Any]) -> Table:
    """The rows priced on meta tensors, one per (row, dtype case): a row's label, shape and tags on its first
    case only, so each row reads as a group; a case that could not be priced says why instead of numbers."""
    from rich.markup import escape

    by_label = {w["label"]: w for w in d["workloads"]}
    wt = _table(f"workload rows ({d['rows']} rows, {d['cases']} cases), priced by eval_roofline() on meta tensors",
                WORKLOAD_COLUMNS)
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
    return wt
