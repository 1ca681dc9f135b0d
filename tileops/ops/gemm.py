"""Contractions. FLOPs are matmul multiply-adds, so the roof is a tensor-core unit by dtype (§1.4)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tileops.dtypes import is_float8
from tileops.ops.base import Op

TENSOR_CORE_KEY = {"float16": "tensor_core.fp16", "bfloat16": "tensor_core.bf16",
                   "int8": "tensor_core.int8"}


class Contraction(Op):
    """Base of matmul-shaped ops: the roof follows the operand dtype and, for fp32, TF32 state."""

    operand = "x"  # the input whose dtype decides the unit

    def __init__(self, backend: str = "torch", **params: Any) -> None:
        super().__init__(backend, **params)
        # Instance state decided at construction: whether fp32 contractions may run on TF32 tensor cores.
        self.allow_tf32 = bool(torch.backends.cuda.matmul.allow_tf32)

    def roof_key(self) -> str:
        dt = self._require_call().dtypes[self.operand]
        if is_float8(dt):
            return "tensor_core.fp8"
        if dt in TENSOR_CORE_KEY:
            return TENSOR_CORE_KEY[dt]
        return "tensor_core.tf32" if self.allow_tf32 else "cuda_core.fp32"


class Linear(Contraction):
    name = "linear"

    def compute(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:  # type: ignore[override]
        return F.linear(x, w, bias)
