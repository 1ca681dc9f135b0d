"""Contractions. FLOPs are matmul multiply-adds, so the roof is a tensor-core unit by dtype (§1.4)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tileops.dtypes import is_float8, to_torch
from tileops.errors import SignatureError
from tileops.ops.spec import TensorSpec
from tileops.ops.base import Op, make_tensor
from tileops.ops.call import CheckedCall
from tileops.tf32 import tf32_matmul_enabled

TENSOR_CORE_KEY = {"float16": "tensor_core.fp16", "bfloat16": "tensor_core.bf16",
                   "int8": "tensor_core.int8"}


class Contraction(Op):
    """Base of ops whose FLOPs are matmul contractions (GEMMs, attention, MoE experts).

    The roof follows the operand dtype; for fp32 it follows the instance's TF32
    state, decided at construction (§1.4: instance state, never the running kernel).
    """

    operand = "x"  # the input whose dtype decides the unit

    def __init__(self, backend: str = "torch", **params: Any) -> None:
        super().__init__(backend, **params)
        # Whether fp32 contractions may run on TF32 tensor cores.
        self.allow_tf32 = tf32_matmul_enabled()

    def roof_key(self) -> str:
        dt = self._require_call().dtypes[self.operand]
        if is_float8(dt):
            return "tensor_core.fp8"
        if dt in TENSOR_CORE_KEY:
            return TENSOR_CORE_KEY[dt]
        return "tensor_core.tf32" if self.allow_tf32 else "cuda_core.fp32"


class Gemm(Contraction):
    """c = op(a) @ op(b); a transposed operand is read through a transposed view (no copy)."""

    name = "gemm"
    operand = "a"

    def check_call(self, call: CheckedCall) -> None:
        ix = call.indices
        if ix["K"] != ix["Kb"]:
            a_dim = "dim 0" if self.params["trans_a"] else "dim 1"
            b_dim = "dim 1" if self.params["trans_b"] else "dim 0"
            raise SignatureError(
                f"{self.name}: input 'b' has K = {ix['Kb']} ({b_dim} of b, trans_b={self.params['trans_b']}), "
                f"expected K = {ix['K']} ({a_dim} of a, trans_a={self.params['trans_a']})")

    def compute(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = a.t() if self.params["trans_a"] else a
        b = b.t() if self.params["trans_b"] else b
        return torch.matmul(a, b)


class Bmm(Contraction):
    name = "bmm"
    operand = "a"

    def compute(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


class Linear(Contraction):
    name = "linear"

    def compute(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return F.linear(x, w, bias)


class ScaledMm(Contraction):
    """FP8 GEMM with per-tensor scales through ``torch._scaled_mm`` (CPU and CUDA)."""

    name = "scaled_mm"
    operand = "a"
    OUT_DTYPES = ("bfloat16", "float16", "float32")

    def check_call(self, call: CheckedCall) -> None:
        for dim, tensor in (("K", "a"), ("N", "b")):
            if call.indices[dim] % 16:
                raise SignatureError(
                    f"{self.name}: input {tensor!r} has {dim} = {call.indices[dim]}, expected a multiple of 16 "
                    "(the FP8 GEMM's tile requirement, on the CPU and CUDA alike)")
        if self.params["out_dtype"] not in self.OUT_DTYPES:
            raise SignatureError(
                f"{self.name}: output 'c' dtype (parameter out_dtype) is {self.params['out_dtype']}, "
                f"expected one of {' | '.join(self.OUT_DTYPES)}")

    def make_input(self, t: TensorSpec, shape: tuple[int, ...], dtype: str, device: str,
                   generator: torch.Generator, indices: dict[str, Any]) -> torch.Tensor:
        if t.name.startswith("scale") and device != "meta":  # a positive per-tensor scale
            return (torch.rand(shape, generator=generator) * 0.5 + 0.25).to(device)
        return make_tensor(shape, dtype, device, generator)

    def compute(self, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                scale_b: torch.Tensor) -> torch.Tensor:
        out_dtype = to_torch(self.params["out_dtype"])
        # b is [N, K] row-major; its transpose is the column-major [K, N] operand _scaled_mm wants.
        return torch._scaled_mm(a, b.t(), scale_a=scale_a.reshape(()), scale_b=scale_b.reshape(()),
                                out_dtype=out_dtype)
