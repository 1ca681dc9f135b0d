"""Attention forward: scaled-dot-product with causal masking, GQA and an optional softcap.

FLOPs are contractions (QK and PV), so the roof is a tensor-core unit by dtype,
through the same ``Contraction`` base as the GEMMs.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tileops.errors import SignatureError
from tileops.ops.call import CheckedCall
from tileops.ops.gemm import Contraction


def causal_mask(sq: int, skv: int, device: torch.device | str) -> torch.Tensor:
    """Bottom-right aligned causal mask (True = kept): query i sees keys j <= i + (skv - sq)."""
    return torch.ones(sq, skv, dtype=torch.bool, device=device).tril(diagonal=skv - sq)


class SdpaFwd(Contraction):
    name = "sdpa_fwd"
    operand = "q"

    def check_call(self, call: CheckedCall) -> None:
        ix = call.indices
        if ix["Hq"] % ix["Hkv"]:
            raise SignatureError(
                f"{self.name}: input 'k' has Hkv = {ix['Hkv']} heads, expected a divisor of q's Hq = {ix['Hq']} "
                "(grouped-query attention)")
        if self.params["causal"] and ix["Sq"] > ix["Skv"]:
            raise SignatureError(
                f"{self.name}: input 'q' has Sq = {ix['Sq']} > Skv = {ix['Skv']}; a causal call expects "
                "Sq <= Skv (queries are the last Sq positions of the keys)")
        if self.params["softcap"] < 0:
            raise SignatureError(f"{self.name}: parameter softcap = {self.params['softcap']}, expected >= 0")

    def _scale(self, d: int) -> float:
        return self.params["scale"] or 1.0 / math.sqrt(d)

    def compute(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        causal, softcap = self.params["causal"], self.params["softcap"]
        sq, skv = q.shape[-2], k.shape[-2]
        scale = self._scale(q.shape[-1])
        gqa = q.shape[1] != k.shape[1]
        if softcap > 0:
            return self._softcapped(q, k, v, scale, softcap)
        if causal and sq != skv:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(sq, skv, q.device),
                                                  scale=scale, enable_gqa=gqa)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa)

    def _softcapped(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                    softcap: float) -> torch.Tensor:
        """SDPA has no softcap: scores = softcap * tanh(scale * q k^T / softcap), in fp32."""
        groups = q.shape[1] // k.shape[1]
        kf = k.float().repeat_interleave(groups, dim=1)
        vf = v.float().repeat_interleave(groups, dim=1)
        s = torch.matmul(q.float(), kf.transpose(-1, -2)) * scale
        s = softcap * torch.tanh(s / softcap)
        if self.params["causal"]:
            s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device), float("-inf"))
        return torch.matmul(torch.softmax(s, dim=-1), vf).to(q.dtype)
