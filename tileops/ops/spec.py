"""Checked manifest entries: what the analysis decides, codegen writes down and every run reads.

Plain frozen dataclasses whose ``repr`` is valid Python, so codegen can embed an
entry in the generated module as a literal. This module is on the run-time
side: the build-time analysis (``tileops.manifest``) produces these, the
generated module carries them, and the ops, the workload binder and the bench
read them without ever seeing YAML (§4.4.5).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

DimTerm = str  # "M" | "*B" | "4" | an output-extent expression such as "ceil_div(N, 2)"


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[DimTerm, ...]
    dtypes: tuple[str, ...] = ()  # a union of concrete dtypes; empty when same_as/param decides
    same_as: str | None = None  # dtype follows this tensor
    dtype_param: str | None = None  # dtype follows this construction parameter (e.g. cast)
    optional: bool = False
    mutated: bool = False  # an input the op writes in place (read and written)
    write_only: bool = False  # an input the op only writes (an out= buffer)
    alias: str | None = None  # an output that is the same storage as this input
    metadata: bool = False  # an input whose values decide traffic (§4.7)

    @property
    def is_free_dtype(self) -> bool:
        """Chosen by the workload's dtype case (not derived from another tensor)."""
        return self.same_as is None and self.dtype_param is None and len(self.dtypes) > 1


@dataclass(frozen=True)
class ParamSpec:
    name: str
    type: str  # int | float | bool | str | dtype
    default: Any = None
    required: bool = True


@dataclass(frozen=True)
class Signature:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    params: tuple[ParamSpec, ...] = ()
    lets: tuple[tuple[str, str], ...] = ()  # (name, expression source), in dependency order; display only

    def tensor(self, name: str) -> TensorSpec:
        for t in self.inputs + self.outputs:
            if t.name == name:
                return t
        raise KeyError(name)

    @property
    def tensors(self) -> tuple[TensorSpec, ...]:
        return self.inputs + self.outputs


@dataclass(frozen=True)
class Workload:
    label: str
    indices: dict[str, Any]  # index name -> int, or tuple[int, ...] for a variadic index
    params: dict[str, Any] = field(default_factory=dict)
    present: tuple[str, ...] = ()  # optional inputs this row binds
    dtypes: tuple[Any, ...] = ()  # cases: a dtype name, or {tensor: dtype}
    tags: tuple[str, ...] = ()
    seed: int | None = None  # explicit generator seed; None: a stable hash of (op, label) decides (§4.7)


@dataclass(frozen=True)
class Roofline:
    """The roofline field as written, kept for display (`tileops ops`). Nothing evaluates these
    strings: the generated evaluators are plain Python copied from them at codegen time."""

    mode: str  # inline | func
    flops: str | None = None
    bytes: str | None = None  # None: derived from the signature (§2.2)
    read_bytes: str | None = None  # the read half, for the NCU audit (§4.5)
    func: str | None = None
    read_func: str | None = None


@dataclass(frozen=True)
class OpEntry:
    name: str
    family: str
    ref_api: str
    status: str  # spec-only | implemented
    signature: Signature
    workloads: tuple[Workload, ...]
    roofline: Roofline
    file: str = ""  # the manifest file that declares it (a path once loaded)
    description: str = ""


def dtype_case_name(case: Any) -> str:
    """A stable, readable name for a dtype case: 'bfloat16' or 'ids=int64,w=bfloat16'."""
    if isinstance(case, str):
        return case
    return ",".join(f"{k}={v}" for k, v in sorted(dict(case).items()))


def row_seed(op: str, row: Workload, case: Any) -> int:
    """The generator seed of one (row, dtype case) (§4.7): a stable hash of (op, row label), or of the row's
    explicit ``seed:``, and of the dtype case.

    Never the row's position: a row inserted or removed upstream must not move
    another row's routing, its bytes or its data terms. SHA-256, not Python's
    ``hash()``, which is salted per process.
    """
    who = f"op={op}\x1flabel={row.label}" if row.seed is None else f"seed={row.seed}"
    digest = hashlib.sha256(f"{who}\x1fcase={dtype_case_name(case)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & (2**63 - 1)


@dataclass(frozen=True)
class Emitted:
    """One manifest entry as the generated module carries it: the checked entry plus its evaluators.

    ``with_lets(ix)`` returns the indices plus the entry's derived indices;
    ``output_shapes(ix)`` states each output's extents; ``roofline(call)``
    returns (flops, bytes); ``read_bytes(call)`` the read half, or None when the
    entry declares none (the NCU audit then gives NO-VERDICT).
    """

    entry: OpEntry
    with_lets: Callable[[dict[str, Any]], dict[str, Any]]
    output_shapes: Callable[[dict[str, Any]], dict[str, tuple[int, ...]]]
    roofline: Callable[[Any], tuple[int, int]]
    read_bytes: Callable[[Any], int] | None = None

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def family(self) -> str:
        return self.entry.family

    @property
    def signature(self) -> Signature:
        return self.entry.signature

    @property
    def roofline_mode(self) -> str:
        return self.entry.roofline.mode
