"""Row-wise Triton kernels over the last dim: rms_norm (with the fused residual add), layer_norm, softmax.

The pattern: a program holds BLOCK_M whole rows of N (BLOCK_N >= N, in registers), reduces
along the row in fp32, and writes each row once, so x is read once and y written once. Rows
wider than MAX_ROW do not fit; softmax then streams the row in two passes (an online max and
sum, then the normalized write), reading x twice, and the norms refuse.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import triton
import triton.language as tl

from tileops.ops.triton_kernels import FLOATS, Kernel, next_pow2, num_warps, tile_elems

#: the widest row a program holds in registers (fp32: 128 KiB over up to 16 warps)
MAX_ROW = 32768


@triton.jit
def _rows(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """This program's [BLOCK_M, BLOCK_N] element offsets, their mask, the column offsets and mask."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    return rows[:, None] * N + cols[None, :], mask, cols, cols < N


@triton.jit
def _rms_norm_kernel(x_ptr, res_ptr, w_ptr, y_ptr, M, N, eps,
                     ADD_RESIDUAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    offs, mask, cols, col_mask = _rows(M, N, BLOCK_M, BLOCK_N)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if ADD_RESIDUAL:  # residual <- x + residual (rounded to its dtype); normalize the fp32 sum
        x += tl.load(res_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(res_ptr + offs, x.to(res_ptr.dtype.element_ty), mask=mask)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, (x * rstd[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _layer_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, eps,
                       HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    offs, mask, cols, col_mask = _rows(M, N, BLOCK_M, BLOCK_N)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / N
    xc = tl.where(mask, x - mean[:, None], 0.0)
    y = xc * tl.rsqrt(tl.sum(xc * xc, axis=1) / N + eps)[:, None]
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    if HAS_BIAS:
        y = y + tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    offs, mask, cols, col_mask = _rows(M, N, BLOCK_M, BLOCK_N)
    x = tl.load(x_ptr + offs, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=1)[:, None])
    tl.store(y_ptr + offs, (e / tl.sum(e, axis=1)[:, None]).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_streamed_kernel(x_ptr, y_ptr, N, BLOCK_N: tl.constexpr):
    # One row per program. Pass 1 keeps a running max m and sum s per lane (rescaled as m grows);
    # pass 2 writes exp(x - max) / sum. A lane that has seen only -inf holds m = -inf, s = 0.
    row = tl.program_id(0).to(tl.int64) * N
    m = tl.full([BLOCK_N], -float("inf"), tl.float32)
    s = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        empty = m_new == -float("inf")
        s = s * tl.where(empty, 1.0, tl.exp(m - m_new)) + tl.where(empty, 0.0, tl.exp(x - m_new))
        m = m_new
    row_max = tl.max(m, axis=0)
    row_sum = tl.sum(tl.where(m == -float("inf"), 0.0, s * tl.exp(m - row_max)), axis=0)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
        y = tl.exp(x - row_max) / row_sum
        tl.store(y_ptr + row + cols, y.to(y_ptr.dtype.element_ty), mask=cols < N)


# --- launch ------------------------------------------------------------------------------------

def _row_launch(kernel: Any, x: torch.Tensor, pointers: tuple[torch.Tensor, ...], scalars: tuple[float, ...] = (),
                **constexprs: Any) -> None:
    """Launch ``kernel(*pointers, M, N, *scalars)`` over x's rows: BLOCK_M rows of BLOCK_N =
    next_pow2(N) per program, about a tile's worth of elements."""
    n = x.shape[-1]
    m = math.prod(x.shape[:-1])
    block_n = next_pow2(n)
    block_m = min(max(1, tile_elems() // block_n), next_pow2(m))
    kernel[(triton.cdiv(m, block_m),)](*pointers, m, n, *scalars, BLOCK_M=block_m, BLOCK_N=block_n,
                                       num_warps=num_warps(block_m * block_n), **constexprs)


def _run_rms_norm(op: Any, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    if x.numel():
        _row_launch(_rms_norm_kernel, x, (x, x, weight, y), (op.params["eps"],), ADD_RESIDUAL=False)
    return y


def _run_fused_add_rms_norm(op: Any, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    if x.numel():
        _row_launch(_rms_norm_kernel, x, (x, residual, weight, y), (op.params["eps"],), ADD_RESIDUAL=True)
    return y


def _run_layer_norm(op: Any, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None) -> torch.Tensor:
    y = torch.empty_like(x)
    if x.numel():  # an absent weight or bias is never read: x stands in for its pointer
        _row_launch(_layer_norm_kernel, x, (x, x if weight is None else weight, x if bias is None else bias, y),
                    (op.params["eps"],), HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None)
    return y


def _run_softmax(op: Any, x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    if not x.numel():
        return y
    n = x.shape[-1]
    if n <= MAX_ROW:
        _row_launch(_softmax_kernel, x, (x, y))
    else:
        block = tile_elems()
        _softmax_streamed_kernel[(math.prod(x.shape[:-1]),)](x, y, n, BLOCK_N=block, num_warps=num_warps(block))
    return y


def _row_fits(op: str, dtypes: Mapping[str, str], shapes: Mapping[str, tuple[int, ...]],
              params: Mapping[str, Any]) -> str | None:
    n = shapes["x"][-1]
    if n > MAX_ROW:
        return (f"the Triton {op} kernel holds a row in registers: rows of at most {MAX_ROW} elements, "
                f"this row has N = {n}")
    return None


rms_norm = Kernel(run=_run_rms_norm, dtypes=FLOATS, limits=_row_fits)
fused_add_rms_norm = Kernel(run=_run_fused_add_rms_norm, dtypes=FLOATS, limits=_row_fits)
layer_norm = Kernel(run=_run_layer_norm, dtypes=FLOATS, limits=_row_fits)
softmax = Kernel(run=_run_softmax, dtypes=FLOATS)
