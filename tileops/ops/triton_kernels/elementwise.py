"""Elementwise Triton kernels: unary, binary and select with NumPy broadcasting, cast, silu_and_mul.

Every kernel walks its output as a matrix [M, N] in tiles of BLOCK_M rows by BLOCK_N columns
(``_tile``): a same-shape call is one row of N = numel elements; a broadcast call is reduced
on the host to at most two dims, each operand read at its own shape and never expanded
(``_operand``): along a dim it varies in, through its stride; along a dim it is broadcast in,
once. Which of the two is a compile-time flag per operand and dim, so a broadcast operand is
one load per row (or one per program, for a scalar), not one per element with a stride of 0
the compiler cannot see (16 scalar loads a thread: tests/test_kernels_sass.py reads the SASS).

Values are computed in fp32 and rounded once to the output dtype. A new unary or binary op
is one line in ``_unary_fn`` / ``_binary_fn`` and its name in ``UNARY`` / ``BINARY``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import triton
import triton.language as tl

from tileops.dtypes import to_torch
from tileops.ops.triton_kernels import FLOATS, Kernel, next_pow2, num_warps, tile_elems

#: unary ops _unary_fn computes (the op's manifest name)
UNARY = ("relu", "neg", "abs", "exp", "tanh", "rsqrt", "sigmoid", "silu", "gelu_tanh", "identity")
#: binary ops _binary_fn computes
BINARY = ("add", "mul", "div", "maximum", "gt")
#: the dtypes cast reads and writes (fp8 e4m3 needs compute capability 8.9+, which the bench checks)
CAST_DTYPES = FLOATS | {"float8_e4m3fn"}


@triton.jit
def _tanh(x):
    # tanh from exp (Triton has no tanh the interpreter also runs): exact in form, ~1e-7 absolute in fp32.
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)


@triton.jit
def _unary_fn(x, FN: tl.constexpr):
    """y = FN(x) on fp32 values: one branch per op."""
    if FN == "relu":
        y = tl.maximum(x, 0.0, propagate_nan=tl.PropagateNan.ALL)
    elif FN == "neg":
        y = -x
    elif FN == "abs":
        y = tl.abs(x)
    elif FN == "exp":
        y = tl.exp(x)
    elif FN == "tanh":
        y = _tanh(x)
    elif FN == "rsqrt":
        y = tl.rsqrt(x)
    elif FN == "sigmoid":
        y = tl.sigmoid(x)
    elif FN == "silu":
        y = x * tl.sigmoid(x)
    elif FN == "gelu_tanh":
        y = 0.5 * x * (1.0 + _tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    elif FN == "identity":  # a cast: a load in one dtype, a store in another
        y = x
    else:
        tl.static_assert(False, "_unary_fn: no such FN")
    return y


@triton.jit
def _binary_fn(a, b, FN: tl.constexpr):
    """y = FN(a, b) on fp32 values: one branch per op."""
    if FN == "add":
        y = a + b
    elif FN == "mul":
        y = a * b
    elif FN == "div":
        y = tl.div_rn(a, b)  # IEEE-rounded, as eager divides (Triton's `/` on fp32 is approximate)
    elif FN == "maximum":
        y = tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
    elif FN == "gt":
        y = a > b
    else:
        tl.static_assert(False, "_binary_fn: no such FN")
    return y


@triton.jit
def _tile(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """This program's rows [BLOCK_M, 1] and columns [1, BLOCK_N] over an [M, N] output, and their masks."""
    pid = tl.program_id(0)
    col_blocks = tl.cdiv(N, BLOCK_N)
    rows = (pid // col_blocks) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % col_blocks) * BLOCK_N + tl.arange(0, BLOCK_N)
    return rows[:, None], cols[None, :], rows[:, None] < M, cols[None, :] < N


@triton.jit
def _operand(ptr, rows, cols, s_m, row_mask, col_mask, ROWS: tl.constexpr, COLS: tl.constexpr):
    """An operand of the [M, N] output at its own shape: [BLOCK_M, BLOCK_N] where it varies along both
    (rows ``s_m`` apart, columns contiguous), [BLOCK_M, 1] or [1, BLOCK_N] where it is broadcast along one,
    one value where it is a scalar. ROWS / COLS: whether it varies along the output's rows / columns."""
    if ROWS:
        if COLS:
            v = tl.load(ptr + rows * s_m + cols, mask=row_mask & col_mask)
        else:
            v = tl.load(ptr + rows * s_m, mask=row_mask)
    else:
        if COLS:
            v = tl.load(ptr + cols, mask=col_mask)
        else:
            v = tl.load(ptr)
    return v


@triton.jit
def _unary_kernel(x_ptr, y_ptr, M, N, FN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows, cols, row_mask, col_mask = _tile(M, N, BLOCK_M, BLOCK_N)
    mask = row_mask & col_mask
    x = tl.load(x_ptr + rows * N + cols, mask=mask).to(tl.float32)
    tl.store(y_ptr + rows * N + cols, _unary_fn(x, FN).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _binary_kernel(a_ptr, b_ptr, y_ptr, M, N, sa_m, sb_m, FN: tl.constexpr,
                   A_ROWS: tl.constexpr, A_COLS: tl.constexpr, B_ROWS: tl.constexpr, B_COLS: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows, cols, row_mask, col_mask = _tile(M, N, BLOCK_M, BLOCK_N)
    a = _operand(a_ptr, rows, cols, sa_m, row_mask, col_mask, A_ROWS, A_COLS).to(tl.float32)
    b = _operand(b_ptr, rows, cols, sb_m, row_mask, col_mask, B_ROWS, B_COLS).to(tl.float32)
    y = tl.broadcast_to(_binary_fn(a, b, FN), (BLOCK_M, BLOCK_N))
    tl.store(y_ptr + rows * N + cols, y.to(y_ptr.dtype.element_ty), mask=row_mask & col_mask)


@triton.jit
def _where_kernel(c_ptr, a_ptr, b_ptr, y_ptr, M, N, sc_m, sa_m, sb_m,
                  C_ROWS: tl.constexpr, C_COLS: tl.constexpr, A_ROWS: tl.constexpr, A_COLS: tl.constexpr,
                  B_ROWS: tl.constexpr, B_COLS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows, cols, row_mask, col_mask = _tile(M, N, BLOCK_M, BLOCK_N)
    c = _operand(c_ptr, rows, cols, sc_m, row_mask, col_mask, C_ROWS, C_COLS).to(tl.int1)
    a = _operand(a_ptr, rows, cols, sa_m, row_mask, col_mask, A_ROWS, A_COLS)
    b = _operand(b_ptr, rows, cols, sb_m, row_mask, col_mask, B_ROWS, B_COLS)
    y = tl.broadcast_to(tl.where(c, a, b), (BLOCK_M, BLOCK_N))
    tl.store(y_ptr + rows * N + cols, y, mask=row_mask & col_mask)


@triton.jit
def _silu_and_mul_kernel(x_ptr, y_ptr, M, D, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # x rows are [gate | up], each D wide; y rows are D wide.
    rows, cols, row_mask, col_mask = _tile(M, D, BLOCK_M, BLOCK_N)
    mask = row_mask & col_mask
    gate = tl.load(x_ptr + rows * 2 * D + cols, mask=mask).to(tl.float32)
    up = tl.load(x_ptr + rows * 2 * D + D + cols, mask=mask).to(tl.float32)
    tl.store(y_ptr + rows * D + cols, (gate * tl.sigmoid(gate) * up).to(y_ptr.dtype.element_ty), mask=mask)


# --- launch ------------------------------------------------------------------------------------

def _block(n: int) -> int:
    """Tile width for rows of n: the widest of tile, tile/2, tile/4 that wastes at most 1/8 of a
    row in masked lanes, else tile/4."""
    widest = tile_elems()
    if n <= widest // 4:
        return max(16, next_pow2(n))
    for b in (widest, widest // 2):
        if -(-n // b) * b <= n * 1.125:
            return b
    return widest // 4


def _launch(kernel: Any, m: int, n: int, *args: Any, **constexprs: Any) -> None:
    """Launch ``kernel(*args)`` over an [m, n] output in tiles of BLOCK_M rows by BLOCK_N columns."""
    block_n = _block(n)
    block_m = min(max(1, tile_elems() // block_n), next_pow2(m))
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)
    kernel[grid](*args, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps(block_m * block_n), **constexprs)


def broadcast_2d(out: tuple[int, ...], *operands: tuple[int, ...]) -> tuple[int, int, list[tuple[int, int]]] | None:
    """The output as [M, N] and each operand's (row, column) element strides, or None when the
    broadcast does not reduce to two dims. Dims where every operand continues contiguously (or
    every one that is broadcast stays broadcast) merge; size-1 output dims drop."""
    strides = []
    for shape in operands:
        own = [0] * len(out)
        step = 1
        for i in range(1, len(shape) + 1):
            if shape[-i] != 1:
                own[-i] = step
            step *= shape[-i]
        strides.append(own)
    dims = [i for i, d in enumerate(out) if d != 1]
    merged: list[tuple[int, list[int]]] = []  # (size, each operand's stride) from the innermost dim out
    for i in reversed(dims):
        size, st = out[i], [s[i] for s in strides]
        if merged and all(s == ps * merged[-1][0] for s, ps in zip(st, merged[-1][1])):
            merged[-1] = (merged[-1][0] * size, merged[-1][1])
        else:
            merged.append((size, st))
    if len(merged) > 2:
        return None
    while len(merged) < 2:
        merged.append((1, [0] * len(operands)))
    (n, inner), (m, outer) = merged
    return m, n, list(zip(outer, inner))


def _broadcast_limits(names: tuple[str, ...], fns: tuple[str, ...] | None):
    def limits(op: str, dtypes: Mapping[str, str], shapes: Mapping[str, tuple[int, ...]],
               params: Mapping[str, Any]) -> str | None:
        if fns is not None and op not in fns:
            return _no_expression(op)
        ops = [tuple(shapes[n]) for n in names]
        try:
            out = tuple(torch.broadcast_shapes(*ops))
        except RuntimeError:
            return f"shapes {ops} do not broadcast"
        if broadcast_2d(out, *ops) is None:
            return (f"the Triton broadcast kernel reads operands as at most two dims; {', '.join(map(str, ops))} "
                    f"broadcast to {list(out)} needs more")
        return None
    return limits


def _run_unary(op: Any, x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    if x.numel():
        _launch(_unary_kernel, 1, x.numel(), x, y, 1, x.numel(), FN=op.name)
    return y


def _run_cast(op: Any, x: torch.Tensor) -> torch.Tensor:
    y = torch.empty(x.shape, dtype=to_torch(op.params["dtype"]), device=x.device)
    if x.numel():
        _launch(_unary_kernel, 1, x.numel(), x, y, 1, x.numel(), FN="identity")
    return y


def _operand_args(names: str, strides: list[tuple[int, int]]) -> tuple[list[int], dict[str, bool]]:
    """Each operand's row stride, and its ``<X>_ROWS`` / ``<X>_COLS`` flags (:func:`_operand`). Its column
    stride is 1 or 0: the innermost kept dim is contiguous in every operand that is not broadcast along it."""
    row_strides, flags = [], {}
    for x, (s_m, s_n) in zip(names, strides):
        assert s_n in (0, 1), (names, strides)
        row_strides.append(s_m)
        flags[f"{x}_ROWS"], flags[f"{x}_COLS"] = s_m != 0, s_n == 1
    return row_strides, flags


def _run_binary(op: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = tuple(torch.broadcast_shapes(a.shape, b.shape))
    y = torch.empty(out, dtype=torch.bool if op.name == "gt" else a.dtype, device=a.device)
    plan = broadcast_2d(out, tuple(a.shape), tuple(b.shape))
    assert plan is not None  # Kernel.__call__ checked the limits
    m, n, strides = plan
    if y.numel():
        row_strides, flags = _operand_args("AB", strides)
        _launch(_binary_kernel, m, n, a, b, y, m, n, *row_strides, FN=op.name, **flags)
    return y


def _run_where(op: Any, cond: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = tuple(torch.broadcast_shapes(cond.shape, a.shape, b.shape))
    y = torch.empty(out, dtype=a.dtype, device=a.device)
    plan = broadcast_2d(out, tuple(cond.shape), tuple(a.shape), tuple(b.shape))
    assert plan is not None
    m, n, strides = plan
    if y.numel():
        row_strides, flags = _operand_args("CAB", strides)
        _launch(_where_kernel, m, n, cond, a, b, y, m, n, *row_strides, **flags)
    return y


def _run_silu_and_mul(op: Any, x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    y = torch.empty(*x.shape[:-1], d, dtype=x.dtype, device=x.device)
    rows = math.prod(x.shape[:-1])
    if y.numel():
        _launch(_silu_and_mul_kernel, rows, d, x, y, rows, d)
    return y


def _no_expression(op: str) -> str:
    return f"the Triton elementwise kernels have no expression for {op!r} (add one to {__name__})"


def _unary_limits(op: str, dtypes: Mapping[str, str], shapes: Mapping[str, tuple[int, ...]],
                  params: Mapping[str, Any]) -> str | None:
    return None if op in UNARY else _no_expression(op)


def _cast_limits(op: str, dtypes: Mapping[str, str], shapes: Mapping[str, tuple[int, ...]],
                 params: Mapping[str, Any]) -> str | None:
    target = params.get("dtype")
    if target not in CAST_DTYPES:
        return f"the Triton cast kernel writes {' | '.join(sorted(CAST_DTYPES))}, not {target}"
    return None


unary = Kernel(run=_run_unary, dtypes=FLOATS, limits=_unary_limits)
cast = Kernel(run=_run_cast, dtypes=CAST_DTYPES, limits=_cast_limits)
binary = Kernel(run=_run_binary, dtypes=FLOATS | {"bool"}, limits=_broadcast_limits(("a", "b"), BINARY))
where = Kernel(run=_run_where, dtypes=FLOATS | {"bool"}, limits=_broadcast_limits(("cond", "a", "b"), None))
silu_and_mul = Kernel(run=_run_silu_and_mul, dtypes=FLOATS)
