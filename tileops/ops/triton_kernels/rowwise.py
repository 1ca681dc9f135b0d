"""Row-wise Triton kernels over the last dim: rms_norm (with the fused residual add), layer_norm, softmax.

The pattern: a program holds BLOCK_M whole rows of N (BLOCK_N >= N, in registers), reduces
along the row in fp32, and writes each row once, so x is read once and y written once. Rows
wider than MAX_ROW do not fit; softmax then splits each row into tiles, one program a tile, in
two launches (each tile's max and sum of exponentials; then, from the row's partials, the
normalized tile), reading x twice, and the norms refuse. A program per tile, not per row: the
sampling rows (64 rows of a 128k vocabulary) would otherwise run 64 programs on a 132-SM GPU.
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
def _softmax_partials_kernel(x_ptr, m_ptr, s_ptr, N, TILES, BLOCK_N: tl.constexpr):
    # Program (row, tile): the tile's max m and sum of exp(x - m), stored at [row, tile]. A tile of -inf
    # only (or of masked lanes) has m = -inf and s = 0.
    pid = tl.program_id(0)
    row, tile = pid // TILES, pid % TILES
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row.to(tl.int64) * N + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    s = tl.where(m == -float("inf"), 0.0, tl.sum(tl.exp(x - m), axis=0))
    tl.store(m_ptr + pid, m)
    tl.store(s_ptr + pid, s)


@triton.jit
def _softmax_normalize_kernel(x_ptr, m_ptr, s_ptr, y_ptr, N, TILES, BLOCK_N: tl.constexpr,
                              BLOCK_T: tl.constexpr):
    # Program (row, tile): the row's max and sum from its tiles' partials, then this tile of
    # exp(x - max) / sum. A row of -inf only has max = -inf, and its outputs are NaN, as eager's.
    pid = tl.program_id(0)
    row, tile = pid // TILES, pid % TILES
    t = tl.arange(0, BLOCK_T)
    pm = tl.load(m_ptr + row * TILES + t, mask=t < TILES, other=-float("inf"))
    ps = tl.load(s_ptr + row * TILES + t, mask=t < TILES, other=0.0)
    row_max = tl.max(pm, axis=0)
    row_sum = tl.sum(tl.where(pm == -float("inf"), 0.0, ps * tl.exp(pm - row_max)), axis=0)
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    offs = row.to(tl.int64) * N + cols
    x = tl.load(x_ptr + offs, mask=cols < N, other=-float("inf")).to(tl.float32)
    tl.store(y_ptr + offs, (tl.exp(x - row_max) / row_sum).to(y_ptr.dtype.element_ty), mask=cols < N)


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
        return y
    block = tile_elems()
    tiles = triton.cdiv(n, block)
    grid = (math.prod(x.shape[:-1]) * tiles,)
    part_m = torch.empty(grid[0], dtype=torch.float32, device=x.device)
    part_s = torch.empty(grid[0], dtype=torch.float32, device=x.device)
    _softmax_partials_kernel[grid](x, part_m, part_s, n, tiles, BLOCK_N=block, num_warps=num_warps(block))
    _softmax_normalize_kernel[grid](x, part_m, part_s, y, n, tiles, BLOCK_N=block, BLOCK_T=next_pow2(tiles),
                                    num_warps=num_warps(block))
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
