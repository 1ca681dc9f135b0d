"""Reductions and scans over the last dim, accumulated in fp32 and stored in the input's dtype."""

from __future__ import annotations

from typing import ClassVar

import torch

from tileops.ops.base import Op


class LastDim(Op):
    """y = fn(x) along the last dim, computed in fp32, returned in x's dtype."""

    fn: ClassVar[staticmethod[[torch.Tensor], torch.Tensor]]  # each op's torch function

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return type(self).fn(x).to(x.dtype)


class Sum(LastDim):
    name = "sum"
    fn = staticmethod(lambda x: torch.sum(x, dim=-1, dtype=torch.float32))


class Softmax(LastDim):
    name = "softmax"
    backends = ("torch", "compile", "triton")
    triton_kernel = "rowwise:softmax"
    fn = staticmethod(lambda x: torch.softmax(x, dim=-1, dtype=torch.float32))


class Cumsum(LastDim):
    name = "cumsum"
    fn = staticmethod(lambda x: torch.cumsum(x, dim=-1, dtype=torch.float32))
