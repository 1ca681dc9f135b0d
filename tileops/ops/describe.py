"""An op entry described for a person (``tileops ops``): its summary, its detail, and each row priced on meta tensors.

Pricing a row here means what ``tileops bench`` does without the data: build
the op from the row, call it on meta tensors (shapes and dtypes, no storage,
no device) and read ``op.roof_key()`` and ``op.eval_roofline()``. So the
listing shows the roof key and the (flops, bytes) a run would price with, from
the same code path. A value-decided op is priced only
on real tensors, so its rows say so instead; a row the op refuses is shown
with the error, not a crash of the listing. The descriptions are plain data
(dicts of strings and numbers): ``--format json`` prints them as they are, and
the tables are drawn from them (``tileops.ops.render``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tileops.errors import OpNotAvailableError
from tileops.ops.spec import OpEntry, TensorSpec

if TYPE_CHECKING:
    from tileops.ops.workload import BoundRow


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


def entry_summary(entry: OpEntry, tag: str | None, run_ops: bool = True) -> dict[str, Any]:
    """One line of the listing: family, status, formula mode, the roof keys its rows price on, its rows."""
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


def entry_detail(entry: OpEntry, tag: str | None, run_ops: bool = True) -> dict[str, Any]:
    """The whole entry: its summary, signature, parameters, derived indices, roofline field and every workload
    row with what it prices to."""
    sig = entry.signature
    r = entry.roofline
    return {
        **entry_summary(entry, tag, run_ops),
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
