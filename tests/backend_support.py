"""Shared by the backend tests: run one manifest row on two backends and compare them.

The reference is the op's own eager implementation (``backend="torch"``) on the same inputs,
itself checked against float64 numpy in test_ops_correctness.py. Tolerances are relative, per
output dtype, with an absolute floor scaled to the values' magnitude (outputs that cancel
towards zero: layer_norm's bias add, rope's differences):

- float32: 1e-5. The implementations differ in operation order (fp32 reductions over up to
  152064 elements, fused multiply-adds), and in their transcendental functions (numpy's in
  Triton's interpreter, SLEEF's in eager and inductor, exp-based tanh in the kernels): each
  a few fp32 ulps (1.2e-7 each), well inside 1e-5.
- float16: 2^-9, two fp16 ulps at 1.0 (half-ulp rounding on each side, plus an intermediate
  eager rounds and the kernel keeps in fp32: silu_and_mul rounds silu(gate) before the mul).
- bfloat16: 2^-6, two bf16 ulps at 1.0, for the same reasons; also Triton's interpreter
  converts fp32 to bf16 by truncation where a GPU rounds to nearest even (1 ulp).

Ops that are exact in any implementation (relu, neg, abs, maximum, gt, where, embedding, and
casts the interpreter converts exactly) must match bit for bit.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from tileops.dtypes import name_of
from tileops.ops.catalog import load_entries
from tileops.ops.spec import OpEntry, Workload
from tileops.ops.base import Op
from tileops.ops.workload import BoundRow, bind_row, build_inputs, instantiate

ENTRIES = load_entries()

TOL = {"float32": 1e-5, "float16": 2**-9, "bfloat16": 2**-6}
EXACT_OPS = {"relu", "neg", "abs", "maximum", "gt", "where", "embedding", "cast"}


def find_row(name: str, label: str) -> Workload:
    return next(r for r in ENTRIES[name].workloads if r.label == label)


def clone(inputs: dict[str, torch.Tensor | None]) -> dict[str, torch.Tensor | None]:
    return {k: None if v is None else v.clone() for k, v in inputs.items()}


def as_tuple(out: Any) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)


def run_both(entry: OpEntry, row: Workload, case: Any, backend: str, prepare: bool = False,
             device: str = "cpu") -> tuple[Op, Op, dict[str, Any], dict[str, Any], tuple, tuple, float | None]:
    """Eager and ``backend`` on one (row, dtype case), each on its own copy of the same inputs.
    Returns both ops, both input dicts after the calls (mutated inputs show), both outputs, and
    the compile seconds when ``prepare`` (prepare runs one call, its prepared call runs twice as the bench
    repeats it, which raises if it would recompile; the compared call is the next)."""
    bound = bind_row(entry, row, case)
    eager = instantiate(entry, row)
    inputs = build_inputs(eager, bound, device)
    mine_in = clone(inputs)
    other = instantiate(entry, row, backend)
    seconds = None
    if prepare:
        warm = clone(inputs)
        prepared = other.prepare(**warm)
        seconds = prepared.setup_s
        for _ in range(2):  # what the bench times: the prepared call repeats without compiling again
            prepared.run()
    ref = as_tuple(eager(**inputs))
    got = as_tuple(other(**mine_in))
    return eager, other, inputs, mine_in, ref, got, seconds


def assert_close(name: str, what: str, got: torch.Tensor, want: torch.Tensor, exact: bool) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (
        f"{name}.{what}: {got.dtype}{list(got.shape)} vs eager {want.dtype}{list(want.shape)}")
    got, want = got.cpu(), want.cpu()
    if exact or not want.dtype.is_floating_point:
        if not torch.equal(got, want):
            bad = (got != want).nonzero()[0].tolist()
            raise AssertionError(f"{name}.{what}: not bit-exact, first difference at {bad}: "
                                 f"{got[tuple(bad)].item()} vs eager {want[tuple(bad)].item()}")
        return
    tol = TOL[name_of(want.dtype)]
    w, g = want.double(), got.double()
    scale = max(float(w.abs().mean()), 1e-3)
    torch.testing.assert_close(g, w, rtol=tol, atol=tol * scale, msg=lambda m: f"{name}.{what} ({name_of(want.dtype)}): {m}")


def assert_same_contract(eager: Op, other: Op) -> None:
    """The Op contract does not depend on the backend: the same checked call, the same pricing."""
    a, b = eager.last_call, other.last_call
    assert a is not None and b is not None
    for field in ("indices", "params", "dtypes", "shapes", "nbytes_by_tensor", "present_inputs", "device"):
        assert getattr(a, field) == getattr(b, field), f"{eager.name}: last_call.{field} differs by backend"
    assert eager.eval_roofline() == other.eval_roofline()
    assert eager.roof_key() == other.roof_key()


def cap_indices(indices: dict[str, Any], keep: set[str], cap: int) -> dict[str, Any]:
    """Every dim capped at ``cap`` by one function (equal dims stay equal and 1 stays 1, so a
    broadcast still broadcasts), except the indices in ``keep``, kept whole."""
    def f(v: int) -> int:
        return min(v, cap)
    return {k: v if k in keep else (tuple(map(f, v)) if isinstance(v, (list, tuple)) else f(v)) for k, v in indices.items()}


def largest_input(entry: OpEntry, row: Workload) -> int:
    bound: BoundRow = bind_row(entry, row, row.dtypes[0])
    return max(math.prod(s) for s in bound.shapes.values())
