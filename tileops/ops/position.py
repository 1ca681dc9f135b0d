"""Position encodings: rotary embedding (NeoX style)."""

from __future__ import annotations

from typing import Any

import torch

from tileops.dtypes import to_torch
from tileops.errors import SignatureError
from tileops.ops.spec import TensorSpec
from tileops.ops.base import Op
from tileops.ops.call import CheckedCall


class Rope(Op):
    """y = x rotated pairwise by per-token angles: halves (x1, x2) of each head's D = 2R dims."""

    name = "rope"
    backends = ("torch", "compile", "triton")
    triton_kernel = "rope:rope"

    def check_call(self, call: CheckedCall) -> None:
        ix = call.indices
        if ix["D"] != 2 * ix["R"]:
            raise SignatureError(
                f"{self.name}: input 'cos' has R = {ix['R']} angles per token, expected D / 2 = {ix['D'] / 2} "
                f"for x's head dim D = {ix['D']}")

    def make_input(self, t: TensorSpec, shape: tuple[int, ...], dtype: str, device: str,
                   generator: torch.Generator, indices: dict[str, Any]) -> torch.Tensor:
        if t.name not in ("cos", "sin") or device == "meta":
            return super().make_input(t, shape, dtype, device, generator, indices)
        # Real angles: token t at position t, frequencies base^(-i/R) (Llama's base 500000).
        tokens, r = shape
        inv_freq = 500000.0 ** (-torch.arange(r, dtype=torch.float64) / r)
        angle = torch.arange(tokens, dtype=torch.float64)[:, None] * inv_freq[None, :]
        fn = torch.cos if t.name == "cos" else torch.sin
        return fn(angle).to(to_torch(dtype)).to(device)

    def compute(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        r = cos.shape[-1]
        x1, x2 = x[..., :r].float(), x[..., r:].float()
        c, s = cos.float()[:, None, :], sin.float()[:, None, :]  # shared by every head
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)
