"""Elementwise ops. A new one is a manifest entry plus a two-line class here.

``Unary`` and ``Binary`` apply a torch function (broadcasting is torch's); the
roofline of each op is its manifest entry's, not anything here.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from tileops.dtypes import to_torch
from tileops.errors import SignatureError
from tileops.ops.spec import TensorSpec
from tileops.ops.base import Op, make_tensor
from tileops.ops.call import CheckedCall


def check_broadcast(op: str, call: CheckedCall, names: tuple[str, ...]) -> None:
    """Operands must broadcast together (NumPy rules); name the first one that does not."""
    shape: tuple[int, ...] = ()
    for i, n in enumerate(names):
        try:
            shape = tuple(torch.broadcast_shapes(shape, call.shapes[n]))
        except RuntimeError:
            raise SignatureError(
                f"{op}: input {n!r} has shape {list(call.shapes[n])}, expected a shape that broadcasts with "
                f"{', '.join(repr(m) for m in names[:i])} (broadcast so far {list(shape)})") from None


class Unary(Op):
    """y = fn(x), elementwise. The Triton kernel computes the op named in its expression table."""

    fn: ClassVar[staticmethod[[torch.Tensor], torch.Tensor]]  # each op's torch function
    backends = ("torch", "compile", "triton")
    triton_kernel = "elementwise:unary"

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return type(self).fn(x)


class Binary(Op):
    """y = fn(a, b), elementwise with NumPy broadcasting."""

    fn: ClassVar[staticmethod[[torch.Tensor, torch.Tensor], torch.Tensor]]  # each op's torch function
    backends = ("torch", "compile", "triton")
    triton_kernel = "elementwise:binary"

    def check_call(self, call: CheckedCall) -> None:
        check_broadcast(self.name, call, ("a", "b"))

    def compute(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return type(self).fn(a, b)


# --- unary ------------------------------------------------------------------------------------

class Relu(Unary):
    name = "relu"
    fn = staticmethod(torch.relu)


class Neg(Unary):
    name = "neg"
    fn = staticmethod(torch.neg)


class Abs(Unary):
    name = "abs"
    fn = staticmethod(torch.abs)


class Exp(Unary):
    name = "exp"
    fn = staticmethod(torch.exp)


class Tanh(Unary):
    name = "tanh"
    fn = staticmethod(torch.tanh)


class Rsqrt(Unary):
    name = "rsqrt"
    fn = staticmethod(torch.rsqrt)

    def make_input(self, t: TensorSpec, shape: tuple[int, ...], dtype: str, device: str,
                   generator: torch.Generator, indices: dict[str, Any]) -> torch.Tensor:
        # Positive inputs: rsqrt of a negative number is NaN, which measures nothing useful.
        x = make_tensor(shape, dtype, device, generator)
        return x if device == "meta" else x.abs() + 0.5


class Sigmoid(Unary):
    name = "sigmoid"
    fn = staticmethod(torch.sigmoid)


class Silu(Unary):
    name = "silu"
    fn = staticmethod(F.silu)


class GeluTanh(Unary):
    name = "gelu_tanh"
    fn = staticmethod(functools.partial(F.gelu, approximate="tanh"))


# --- binary -----------------------------------------------------------------------------------

class Add(Binary):
    name = "add"
    fn = staticmethod(torch.add)


class Mul(Binary):
    name = "mul"
    fn = staticmethod(torch.mul)


class Div(Binary):
    name = "div"
    fn = staticmethod(torch.div)

    def make_input(self, t: TensorSpec, shape: tuple[int, ...], dtype: str, device: str,
                   generator: torch.Generator, indices: dict[str, Any]) -> torch.Tensor:
        # A divisor away from zero: a / 1e-4 overflows fp16 and measures nothing useful.
        x = make_tensor(shape, dtype, device, generator)
        return x if t.name != "b" or device == "meta" else torch.where(x < 0, x - 0.5, x + 0.5)


class Maximum(Binary):
    name = "maximum"
    fn = staticmethod(torch.maximum)


class Gt(Binary):
    name = "gt"
    fn = staticmethod(torch.gt)


# --- select, conversion, fused gate ------------------------------------------------------------

class Where(Op):
    name = "where"
    backends = ("torch", "compile", "triton")
    triton_kernel = "elementwise:where"

    def check_call(self, call: CheckedCall) -> None:
        check_broadcast(self.name, call, ("cond", "a", "b"))

    def compute(self, cond: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.where(cond, a, b)


class Cast(Op):
    """x.to(dtype) into a fresh tensor, also when the dtype is x's own (the output is a new storage)."""

    name = "cast"
    backends = ("torch", "compile", "triton")
    triton_kernel = "elementwise:cast"

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(to_torch(self.params["dtype"]), copy=True)


class SiluAndMul(Op):
    """SwiGLU on [gate | up] stacked along the last dim."""

    name = "silu_and_mul"
    backends = ("torch", "compile", "triton")
    triton_kernel = "elementwise:silu_and_mul"

    def check_call(self, call: CheckedCall) -> None:
        if call.indices["H"] % 2:
            raise SignatureError(
                f"{self.name}: input 'x' has last dim H = {call.indices['H']}, expected an even width "
                "(gate and up halves of D = H / 2 each)")

    def compute(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]
