"""Routed mixture of experts: routing, expert FFNs, weighted combine (§1.3, §4.7).

``moe_ffn`` = stage "routing" (``topk_softmax``) + stage "experts"
(``fused_experts``); ``fused_experts`` = per expert with rows, stages
"gate_up" (``linear``), "act" (``silu_and_mul``) and "down" (``linear``), then
stage "combine" (``moe_combine``). Every stage is a library op run through
``run_stage``, so its checked call joins the composite's ``stages`` and the
composite's formula prices it with that op's own evaluator. An expert that
receives no rows runs no stage and reads no weights.
"""

from __future__ import annotations

from typing import Any

import torch

from tileops.dtypes import to_torch
from tileops.errors import SignatureError
from tileops.ops.spec import TensorSpec
from tileops.ops.base import Op, make_tensor
from tileops.ops.call import CheckedCall
from tileops.ops.elementwise import SiluAndMul
from tileops.ops.gemm import Contraction, Linear


def routing_terms(topk_ids: torch.Tensor, experts: int) -> dict[str, Any]:
    """What decided a routed op's traffic: how many experts the routing hit and how unevenly."""
    counts = torch.bincount(topk_ids.reshape(-1).long().cpu(), minlength=experts)
    hit = counts > 0
    return {
        "tokens": int(topk_ids.shape[0]),
        "top_k": int(topk_ids.shape[1]),
        "experts": experts,
        "experts_hit": int(hit.sum()),
        "routed_rows": int(topk_ids.numel()),
        "rows_max": int(counts.max()) if counts.numel() else 0,
        "rows_min_hit": int(counts[hit].min()) if bool(hit.any()) else 0,
    }


def expert_weight(t: TensorSpec, shape: tuple[int, ...], dtype: str, device: str,
                  generator: torch.Generator) -> torch.Tensor:
    """w13 / w2 scaled by 1/sqrt(fan-in), as initialised models are, so activations stay O(1)
    and a real-size fp16 row does not overflow to inf."""
    if device == "meta":
        return make_tensor(shape, dtype, device, generator)
    w = torch.randn(shape, generator=generator, dtype=torch.float32).mul_(shape[-1] ** -0.5)  # one host buffer
    return w.to(to_torch(dtype)).to(device)


def _check_ffn_widths(op: str, ix: dict[str, Any]) -> None:
    if ix["I2"] != 2 * ix["I"]:
        raise SignatureError(
            f"{op}: input 'w13' has I2 = {ix['I2']} rows per expert, expected 2 * I = {2 * ix['I']} "
            f"(gate and up stacked, for w2's intermediate width I = {ix['I']})")


class TopkSoftmax(Op):
    name = "topk_softmax"

    def check_call(self, call: CheckedCall) -> None:
        k, e = self.params["top_k"], call.indices["E"]
        if not 1 <= k <= e:
            raise SignatureError(f"{self.name}: parameter top_k = {k}, expected 1 <= top_k <= E = {e} "
                                 "(E from router_logits' last dim)")

    def compute(self, router_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = torch.softmax(router_logits.float(), dim=-1)
        w, ids = torch.topk(p, self.params["top_k"], dim=-1)
        if self.params["renormalize"]:
            w = w / w.sum(dim=-1, keepdim=True)
        return w, ids


class MoeCombine(Op):
    name = "moe_combine"

    def compute(self, expert_out: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        return (expert_out.float() * topk_weights.unsqueeze(-1)).sum(dim=1).to(expert_out.dtype)


class FusedExperts(Contraction):
    """Expert FFNs given the routing; a loop over the experts that received rows."""

    name = "fused_experts"

    def __init__(self, backend: str = "torch", **params: Any) -> None:
        super().__init__(backend, **params)
        self._linear = Linear()
        self._act = SiluAndMul()
        self._combine = MoeCombine()

    def check_call(self, call: CheckedCall) -> None:
        _check_ffn_widths(self.name, call.indices)

    def make_input(self, t: TensorSpec, shape: tuple[int, ...], dtype: str, device: str,
                   generator: torch.Generator, indices: dict[str, Any]) -> torch.Tensor:
        """Routing drawn from the row's own generator (§4.7): top_k distinct experts per token."""
        if t.name in ("w13", "w2"):
            return expert_weight(t, shape, dtype, device, generator)
        if device == "meta" or t.name not in ("topk_ids", "topk_weights"):
            return super().make_input(t, shape, dtype, device, generator, indices)
        tokens, k = shape
        if t.name == "topk_ids":
            ids = torch.rand(tokens, indices["E"], generator=generator).topk(k, dim=-1).indices
            return ids.to(to_torch(dtype)).to(device)
        w = torch.rand(tokens, k, generator=generator) + 0.1
        return (w / w.sum(dim=-1, keepdim=True)).to(device)

    def compute(self, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor,
                w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        tokens, k = topk_ids.shape
        experts, hidden = w13.shape[0], x.shape[1]
        if x.is_meta:  # no values, no routing: the shape-checked call completes, pricing it will refuse
            return torch.empty(tokens, hidden, dtype=x.dtype, device=x.device)
        flat = topk_ids.reshape(-1).long()
        if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= experts):
            raise SignatureError(f"{self.name}: input 'topk_ids' holds ids in [{int(flat.min())}, {int(flat.max())}], "
                                 f"expected ids in [0, {experts}) (E from w13)")
        order = torch.argsort(flat, stable=True)  # routed slots (token * k + j), grouped by expert
        counts = torch.bincount(flat, minlength=experts).tolist()
        expert_out = torch.empty(tokens * k, hidden, dtype=x.dtype, device=x.device)
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue  # no rows: no stage, no weights read
            slots = order[start:start + n]
            start += n
            h = self.run_stage("gate_up", self._linear, x.index_select(0, slots // k), w13[e])
            a = self.run_stage("act", self._act, h)
            expert_out[slots] = self.run_stage("down", self._linear, a, w2[e])
        return self.run_stage("combine", self._combine, expert_out.view(tokens, k, hidden), topk_weights)

    def roofline_data_terms(self) -> dict[str, Any]:
        call = self._require_call()
        if call.is_meta:
            return {}
        return routing_terms(call.values("topk_ids"), call.indices["E"])


class MoeFfn(Contraction):
    """Routing (softmax top-k over router_logits), then the experts."""

    name = "moe_ffn"

    def __init__(self, backend: str = "torch", **params: Any) -> None:
        super().__init__(backend, **params)
        self._router = TopkSoftmax(top_k=self.params["top_k"], renormalize=self.params["renormalize"])
        self._experts = FusedExperts()

    def check_call(self, call: CheckedCall) -> None:
        k, e = self.params["top_k"], call.indices["E"]
        if not 1 <= k <= e:
            raise SignatureError(f"{self.name}: parameter top_k = {k}, expected 1 <= top_k <= E = {e} "
                                 "(E from router_logits' last dim)")
        _check_ffn_widths(self.name, call.indices)

    def make_input(self, t: TensorSpec, shape: tuple[int, ...], dtype: str, device: str,
                   generator: torch.Generator, indices: dict[str, Any]) -> torch.Tensor:
        """router_logits are drawn from the row's own generator (the default), so is the routing."""
        if t.name in ("w13", "w2"):
            return expert_weight(t, shape, dtype, device, generator)
        return super().make_input(t, shape, dtype, device, generator, indices)

    def compute(self, x: torch.Tensor, router_logits: torch.Tensor, w13: torch.Tensor,
                w2: torch.Tensor) -> torch.Tensor:
        weights, ids = self.run_stage("routing", self._router, router_logits)
        return self.run_stage("experts", self._experts, x, weights, ids, w13, w2)

    def roofline_data_terms(self) -> dict[str, Any]:
        call = self._require_call()
        if call.is_meta:
            return {}
        return routing_terms(call.stages["experts"][0].values("topk_ids"), call.indices["E"])
