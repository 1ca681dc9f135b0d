"""`tileops ops [NAME]`: the op library as the manifest declares it.

Without NAME, one line per op: family, status, formula mode, the roof keys its
rows price on (``op.roof_key()`` after a call on meta tensors, one per dtype
case), and its workload rows. With NAME, the entry itself: signature,
parameters, derived indices, the roofline field, and every workload row with
the (flops, bytes) ``op.eval_roofline()`` gives it; a value-decided op is
priced only on real tensors, so its rows say so instead (`tileops bench`
prices them).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from tileops import exitcodes
from tileops.errors import OpNotAvailableError, TileOpsError
from tileops.ops.catalog import load_entries
from tileops.ops.spec import OpEntry, TensorSpec

if TYPE_CHECKING:
    from tileops.ops.workload import BoundRow


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ops", help="list the ops of the manifest, or show one with its workload rows",
                       description="List the ops (family, status, roof keys, workload rows), or show one "
                                   "entry with its signature and rows.")
    p.add_argument("name", nargs="?", metavar="NAME", help="show this op in full")
    p.add_argument("--family", action="append", metavar="FAMILY", help="only these families (repeatable)")
    p.add_argument("--tag", metavar="TAG", help="count and show only rows with this tag (e.g. cpu)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--no-price", action="store_true",
                   help="do not call the ops on meta tensors (no roof keys or numbers; nothing is executed)")
    p.set_defaults(func=run)


@dataclass
class PricedCase:
    """One (row, dtype case) priced on meta tensors, or why it was not."""

    label: str
    case: str
    flops: int | None
    bytes: int | None
    roof_key: str | None
    note: str = ""


def price_on_meta(entry: OpEntry, bound: BoundRow, run_ops: bool = True) -> PricedCase:
    """Call the op on meta tensors and read eval_roofline() / roof_key(): no data, no device."""
    base = PricedCase(bound.row.label, bound.case_name, None, None, None)
    if entry.status != "implemented":
        base.note = "spec-only"
        return base
    if not run_ops:
        base.note = "not priced (--no-price)"
        return base
    try:
        from tileops.ops.workload import build_inputs, instantiate  # torch loads when an op is priced

        op = instantiate(entry, bound.row)
        op(**build_inputs(op, bound, "meta"))
        base.roof_key = op.roof_key()
        base.flops, base.bytes = op.eval_roofline()
    except OpNotAvailableError:
        base.note = "value-decided: priced on real tensors (tileops bench)"
    except Exception as exc:  # a row the op refuses is worth showing, not a crash of the listing
        base.note = f"error: {type(exc).__name__}: {exc}"
    return base


def _rows(entry: OpEntry, tag: str | None) -> list[BoundRow]:
    from tileops.ops.workload import iter_bound_rows

    return iter_bound_rows(entry, tags={tag} if tag else None)


def summary(entry: OpEntry, tag: str | None, run_ops: bool = True) -> dict[str, Any]:
    bound = _rows(entry, tag)
    keys: list[str] = []
    for b in bound:
        key = price_on_meta(entry, b, run_ops).roof_key
        if key and key not in keys:
            keys.append(key)
    return {
        "name": entry.name, "family": entry.family, "status": entry.status, "mode": entry.roofline.mode,
        "roof_keys": keys, "rows": len({b.row.label for b in bound}), "cases": len(bound),
        "cpu_rows": sum(1 for r in entry.workloads if "cpu" in r.tags), "ref_api": entry.ref_api,
        "file": entry.file,
    }


def _dtype(t: TensorSpec) -> str:
    if t.same_as:
        return f"same_as({t.same_as})"
    if t.dtype_param:
        return f"param({t.dtype_param})"
    return " | ".join(t.dtypes)


def _flags(t: TensorSpec) -> str:
    flags = [f for f in ("optional", "mutated", "write_only", "metadata") if getattr(t, f)]
    if t.alias:
        flags.append(f"alias of {t.alias}")
    return ", ".join(flags)


def detail(entry: OpEntry, tag: str | None, run_ops: bool = True) -> dict[str, Any]:
    sig = entry.signature
    r = entry.roofline
    return {
        **summary(entry, tag, run_ops),
        "description": entry.description,
        "inputs": [{"name": t.name, "shape": f"[{', '.join(t.shape)}]", "dtype": _dtype(t), "flags": _flags(t)}
                   for t in sig.inputs],
        "outputs": [{"name": t.name, "shape": f"[{', '.join(t.shape)}]", "dtype": _dtype(t), "flags": _flags(t)}
                    for t in sig.outputs],
        "params": [{"name": p.name, "type": p.type, "default": None if p.required else p.default} for p in sig.params],
        "let": dict(sig.lets),
        "roofline": {k: v for k, v in (("flops", r.flops),
                                       ("bytes", r.bytes or ("derived" if r.mode == "inline" else None)),
                                       ("read_bytes", r.read_bytes), ("func", r.func), ("read_func", r.read_func))
                     if v},
        "workloads": [
            {"label": w.label, "indices": {k: list(v) if isinstance(v, tuple) else v for k, v in w.indices.items()},
             "params": w.params, "present": list(w.present), "tags": list(w.tags), "seed": w.seed}
            for w in entry.workloads if not tag or tag in w.tags],
        "priced": [price_on_meta(entry, b, run_ops).__dict__ for b in _rows(entry, tag)],
    }


def _console() -> Console:
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=160)
    return console


def _fmt(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def render_list(rows: list[dict[str, Any]], console: Console) -> None:
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


class UnknownOp(TileOpsError):
    pass


def run(args: argparse.Namespace) -> int:
    from tileops.ops.registry import load_all

    load_all()
    entries = load_entries()
    if args.name:
        entry = entries.get(args.name)
        if entry is None:
            near = difflib.get_close_matches(args.name, entries, n=3)
            raise UnknownOp(f"no op named {args.name!r} in the manifest"
                            + (f"; did you mean {', '.join(near)}?" if near else "; run `tileops ops` for the list"))
        d = detail(entry, args.tag, not args.no_price)
        if args.format == "json":
            print(json.dumps(d, indent=2, default=str))
        else:
            render_detail(d, _console())
        return exitcodes.OK
    chosen = [e for e in sorted(entries.values(), key=lambda e: (e.family, e.name))
              if not args.family or e.family in args.family]
    if not chosen:
        print(f"no ops in famil{'y' if len(args.family or []) == 1 else 'ies'} {', '.join(args.family or [])}; "
              f"families: {', '.join(sorted({e.family for e in entries.values()}))}")
        return exitcodes.USAGE
    rows = [summary(e, args.tag, not args.no_price) for e in chosen]
    if args.format == "json":
        print(json.dumps(rows, indent=2))
    else:
        render_list(rows, _console())
    return exitcodes.OK
