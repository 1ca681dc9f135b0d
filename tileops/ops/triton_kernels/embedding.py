"""Embedding lookup as a Triton kernel: out[i, :] = weight[ids[i], :].

A program gathers BLOCK_M tokens' rows, BLOCK_D columns at a time (the grid's second axis
walks D). Each token's row is read once and written once; rows no id names are never read.
Ids must lie in [0, V): like any gather kernel it does not check them (TRITON_DEBUG=1 turns
the device assertion on).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import triton
import triton.language as tl

from tileops.ops.triton_kernels import FLOATS, Kernel, next_pow2, num_warps, tile_elems


@triton.jit
def _embedding_kernel(ids_ptr, w_ptr, out_ptr, T, V, D, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    tokens = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    ids = tl.load(ids_ptr + tokens, mask=tokens < T, other=0).to(tl.int64)
    tl.device_assert((ids >= 0) & (ids < V), "embedding: id out of range [0, V)")
    mask = (tokens[:, None] < T) & (cols[None, :] < D)
    row = tl.load(w_ptr + ids[:, None] * D + cols[None, :], mask=mask)
    tl.store(out_ptr + tokens[:, None].to(tl.int64) * D + cols[None, :], row, mask=mask)


def _run_embedding(op: Any, ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    v, d = weight.shape
    out = torch.empty(*ids.shape, d, dtype=weight.dtype, device=weight.device)
    t = math.prod(ids.shape)
    if out.numel():
        block_d = min(next_pow2(d), tile_elems())
        block_m = min(max(1, tile_elems() // block_d), next_pow2(t))
        grid = (triton.cdiv(t, block_m), triton.cdiv(d, block_d))
        _embedding_kernel[grid](ids, weight, out, t, v, d, BLOCK_M=block_m, BLOCK_D=block_d,
                                num_warps=num_warps(block_m * block_d))
    return out


embedding = Kernel(run=_run_embedding, dtypes=FLOATS | {"int32", "int64"})
