"""Instantiate a workload row (§4.2): construct the Op from the row's params and build its tensors.

The row's indices give every input's shape through the signature's patterns,
its dtype case gives every dtype, and ``present`` says which optional inputs
are bound. The bench, the correctness tests and the structural oracle all
build calls here; none of them reads the roofline block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tileops.ops.spec import OpEntry, Signature, TensorSpec, Workload, dtype_case_name, row_seed
from tileops.ops.base import Op
from tileops.ops.registry import op_class


@dataclass(frozen=True)
class BoundRow:
    """One (row, dtype case): shapes and dtypes of every bound input, before any tensor exists."""

    entry: OpEntry
    row: Workload
    case: Any
    dtypes: dict[str, str]  # every tensor whose dtype is fixed by the signature + case (inputs and outputs)
    shapes: dict[str, tuple[int, ...]]  # bound inputs only

    @property
    def case_name(self) -> str:
        return dtype_case_name(self.case)

    @property
    def present(self) -> tuple[str, ...]:
        return self.row.present


def resolve_dtypes(sig: Signature, case: Any, params: dict[str, Any]) -> dict[str, str]:
    """Each tensor's dtype under a dtype case: free tensors from the case, others by same_as/param/single."""
    out: dict[str, str] = {}
    for t in sig.tensors:
        if t.is_free_dtype:
            out[t.name] = case if isinstance(case, str) else case[t.name]
        elif t.dtype_param is not None:
            out[t.name] = params[t.dtype_param]
        elif t.same_as is None:
            out[t.name] = t.dtypes[0]
    for _ in sig.tensors:  # resolve same_as chains (acyclic, checked by the analysis)
        for t in sig.tensors:
            if t.same_as is not None and t.same_as in out:
                out[t.name] = out[t.same_as]
    return out


def input_shape(t: TensorSpec, indices: dict[str, Any]) -> tuple[int, ...]:
    dims: list[int] = []
    for d in t.shape:
        if d.startswith("*"):
            dims.extend(indices[d[1:]])
        elif d.isascii() and d.isdigit():
            dims.append(int(d))
        else:
            dims.append(indices[d])
    return tuple(dims)


def bind_row(entry: OpEntry, row: Workload, case: Any) -> BoundRow:
    sig = entry.signature
    params = {p.name: row.params.get(p.name, p.default) for p in sig.params}
    dtypes = resolve_dtypes(sig, case, params)
    shapes = {t.name: input_shape(t, row.indices) for t in sig.inputs
              if not t.optional or t.name in row.present}
    return BoundRow(entry, row, case, dtypes, shapes)


def instantiate(entry: OpEntry, row: Workload, backend: str = "torch") -> Op:
    return op_class(entry.name)(backend=backend, **row.params)


def row_generator(op: str, row: Workload, case: Any) -> torch.Generator:
    """The row's own generator (§4.7), never the global stream."""
    g = torch.Generator()
    g.manual_seed(row_seed(op, row, case))
    return g


def build_inputs(op: Op, bound: BoundRow, device: str) -> dict[str, torch.Tensor | None]:
    """Tensors for one bound row, made by the op's ``make_input`` hook from the row's generator."""
    g = row_generator(bound.entry.name, bound.row, bound.case)
    out: dict[str, torch.Tensor | None] = {}
    for t in bound.entry.signature.inputs:
        if t.name not in bound.shapes:
            out[t.name] = None
            continue
        out[t.name] = op.make_input(t, bound.shapes[t.name], bound.dtypes[t.name], device, g,
                                    dict(bound.row.indices))
    return out


def iter_bound_rows(entry: OpEntry, *, tags: set[str] | None = None) -> list[BoundRow]:
    rows = []
    for row in entry.workloads:
        if tags and not tags & set(row.tags):
            continue
        for case in row.dtypes:
            rows.append(bind_row(entry, row, case))
    return rows
