"""Normalizations over the last dim, computed in fp32 and stored in the input's dtype."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tileops.ops.base import Op


def _rms(xf: torch.Tensor, eps: float) -> torch.Tensor:
    """xf * rsqrt(mean(xf^2) + eps), in xf's (fp32) precision."""
    return xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)


class RmsNorm(Op):
    name = "rms_norm"
    backends = ("torch", "compile", "triton")
    triton_kernel = "rowwise:rms_norm"

    def compute(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return (_rms(x.float(), self.params["eps"]) * weight.float()).to(x.dtype)


class LayerNorm(Op):
    name = "layer_norm"
    backends = ("torch", "compile", "triton")
    triton_kernel = "rowwise:layer_norm"

    def compute(self, x: torch.Tensor, weight: torch.Tensor | None,
                bias: torch.Tensor | None) -> torch.Tensor:
        n = x.shape[-1]
        y = F.layer_norm(x.float(), (n,), None if weight is None else weight.float(),
                         None if bias is None else bias.float(), self.params["eps"])
        return y.to(x.dtype)


class FusedAddRmsNorm(Op):
    """residual <- x + residual in place (rounded to its dtype); y = rms_norm of the fp32 sum."""

    name = "fused_add_rms_norm"
    backends = ("torch", "compile", "triton")
    triton_kernel = "rowwise:fused_add_rms_norm"

    def compute(self, x: torch.Tensor, residual: torch.Tensor,
                weight: torch.Tensor) -> torch.Tensor:
        s = x.float() + residual.float()
        residual.copy_(s)
        return (_rms(s, self.params["eps"]) * weight.float()).to(x.dtype)
