"""Func-mode roofline formulas (§2.2): ``f(call) -> (flops, bytes)`` over the checked call only.

A formula here reads the call (indices, dtypes, presence, shapes, bytes, the
metadata tensors' values, stages) and never the op (§4.7). It raises
OpNotAvailableError, through ``call.values``, on a meta call.

A composite's FLOPs are the sum of its stages, each priced by the stage op's
own generated evaluator (§1.3: "each as the op that runs that stage alone
counts it"); its bytes are its own minimum traffic, never the sum of its
stages' bytes, because a stage's outputs are the composite's intermediates.
"""

from __future__ import annotations

import math

import torch

from tileops.ops.call import CheckedCall


def _distinct(t: torch.Tensor) -> int:
    return int(torch.unique(t).numel())


def _stage_flops(call: CheckedCall) -> int:
    """Sum of every stage's FLOPs, each from the stage op's own evaluator (its manifest entry)."""
    from tileops.ops.catalog import emitted_for  # the generated evaluators, not the ops

    return sum(emitted_for(s.op).roofline(s)[0] for calls in call.stages.values() for s in calls)


# --- embedding ------------------------------------------------------------------------------


def embedding_read_bytes(call: CheckedCall) -> int:
    """Distinct table rows the ids name (each read once), plus the ids themselves."""
    ids = call.values("ids")
    row_bytes = call.indices["D"] * call.nbytes("weight") // max(1, math.prod(call.shapes["weight"]))
    return _distinct(ids) * row_bytes + call.nbytes("ids")


def embedding_roofline(call: CheckedCall) -> tuple[int, int]:
    """0 FLOPs (a gather); bytes = distinct rows read + ids read + output written."""
    return 0, embedding_read_bytes(call) + call.nbytes("out")


# --- cast -----------------------------------------------------------------------------------


def cast_read_bytes(call: CheckedCall) -> int:
    return call.nbytes("x")


def cast_roofline(call: CheckedCall) -> tuple[int, int]:
    """One conversion per element, 0 when the target dtype is x's own (identity, §1.3).

    The output is a fresh storage either way: one read of x, one write of y.
    """
    identity = call.dtypes["x"] == call.dtypes["y"]
    return (0 if identity else math.prod(call.indices["S"])), call.nbytes("x") + call.nbytes("y")


# --- mixture of experts -----------------------------------------------------------------------


def _expert_weight_bytes(call: CheckedCall, topk_ids: torch.Tensor) -> int:
    """w13[e] and w2[e] once for each distinct expert the routing names; nothing for the others."""
    experts = call.indices["E"]
    per_expert = (call.nbytes("w13") + call.nbytes("w2")) // experts
    return _distinct(topk_ids) * per_expert


def fused_experts_read_bytes(call: CheckedCall) -> int:
    ids = call.values("topk_ids")
    return (call.nbytes("x") + call.nbytes("topk_weights") + call.nbytes("topk_ids")
            + _expert_weight_bytes(call, ids))


def fused_experts_roofline(call: CheckedCall) -> tuple[int, int]:
    """FLOPs: gate_up, act, down per expert with rows, and combine, each as its own op counts it.

    Bytes: the inputs once, the hit experts' weights once, the output once.
    """
    return _stage_flops(call), fused_experts_read_bytes(call) + call.nbytes("out")


def moe_ffn_read_bytes(call: CheckedCall) -> int:
    (experts_call,) = call.stages["experts"]
    ids = experts_call.values("topk_ids")  # the routing reaches the formula through the stage (§4.7)
    return call.nbytes("x") + call.nbytes("router_logits") + _expert_weight_bytes(call, ids)


def moe_ffn_roofline(call: CheckedCall) -> tuple[int, int]:
    """FLOPs: routing (topk_softmax) + experts (fused_experts), each by its own evaluator.

    Bytes: x, router_logits and out once, plus the weights of the experts the
    routing selected; topk weights and ids are intermediates and never count.
    """
    call.values("router_logits")  # a value-decided formula: refuse a meta call up front
    if "experts" not in call.stages:
        raise ValueError(f"{call.op}: the call has no 'experts' stage; the op did not complete its stages")
    return _stage_flops(call), moe_ffn_read_bytes(call) + call.nbytes("out")
