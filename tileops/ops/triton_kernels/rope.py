"""Rotary embedding (NeoX halves) as a Triton kernel.

x [T, H, D] is walked as T*H rows of D = 2R: each program takes BLOCK_M rows, loads their
token's cos and sin rows ([T, R], shared by the token's H heads: re-read from cache, not from
memory), and writes y1 = x1 cos - x2 sin, y2 = x2 cos + x1 sin in fp32, rounded once.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from tileops.ops.triton_kernels import FLOATS, Kernel, next_pow2, num_warps, tile_elems


@triton.jit
def _rope_kernel(x_ptr, cos_ptr, sin_ptr, y_ptr, M, H, R, BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # (token, head) pairs
    r = tl.arange(0, BLOCK_R)
    mask = (rows[:, None] < M) & (r[None, :] < R)
    angle = (rows // H)[:, None] * R + r[None, :]  # the token's cos/sin row
    c = tl.load(cos_ptr + angle, mask=mask, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + angle, mask=mask, other=0.0).to(tl.float32)
    first = rows[:, None] * 2 * R + r[None, :]
    x1 = tl.load(x_ptr + first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + first + R, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + first, (x1 * c - x2 * s).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(y_ptr + first + R, (x2 * c + x1 * s).to(y_ptr.dtype.element_ty), mask=mask)


def _run_rope(op: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    t, h, _ = x.shape
    r = cos.shape[-1]
    if y.numel():
        block_r = next_pow2(r)
        block_m = min(max(1, tile_elems() // (2 * block_r)), next_pow2(t * h))
        _rope_kernel[(triton.cdiv(t * h, block_m),)](x, cos, sin, y, t * h, h, r, BLOCK_M=block_m, BLOCK_R=block_r,
                                                     num_warps=num_warps(2 * block_m * block_r))
    return y


rope = Kernel(run=_run_rope, dtypes=FLOATS)
