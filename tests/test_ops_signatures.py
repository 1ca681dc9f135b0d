"""A call that violates the signature raises SignatureError naming the op, the tensor and what was expected."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

from tileops.errors import SignatureError
from tileops.ops.registry import op_class


def call(name: str, *args: torch.Tensor | None, **params: Any) -> Callable[[], Any]:
    return lambda: op_class(name)(**params)(*args)


r = torch.randn
f8 = torch.float8_e4m3fn

CASES = [
    # (op call, the words the message must contain)
    ("wrong dtype", call("relu", torch.arange(6)), ["relu", "'x'", "int64", "float16 | bfloat16 | float32"]),
    ("dtype of a same_as tensor", call("linear", r(4, 8), r(3, 8, dtype=torch.bfloat16)),
     ["linear", "'w'", "bfloat16", "the dtype of x (float32)"]),
    ("gt output stays bool, inputs must agree", call("gt", r(4), r(4, dtype=torch.float16)), ["gt", "'b'", "float16"]),
    ("where's cond must be bool", call("where", r(4), r(4), r(4)), ["where", "'cond'", "float32", "bool"]),
    ("scaled_mm operands are fp8", call("scaled_mm", r(4, 8), r(4, 8), r(1), r(1)), ["scaled_mm", "'a'", "float8_e4m3fn"]),
    ("shape: a shared index disagrees", call("linear", r(4, 16), r(8, 12)), ["linear", "'w'", "K = 12", "K = 16"]),
    ("shape: weight width", call("rms_norm", r(8, 4), r(8)), ["rms_norm", "'weight'", "N = 8", "N = 4"]),
    ("shape: too few dims", call("rope", r(4, 8), r(4, 4), r(4, 4)), ["rope", "'x'", "[T, H, D]"]),
    ("shape: rank of a fixed pattern", call("bmm", r(4, 8), r(4, 8, 2)), ["bmm", "'a'", "[Bt, M, K]"]),
    ("shape: operands do not broadcast", call("add", r(3, 4), r(5)), ["add", "'b'", "[5]", "broadcasts"]),
    ("missing required input", call("linear", r(4, 8)), ["linear", "'w'", "missing"]),
    ("missing required input (keyword call)", lambda: op_class("where")()(cond=torch.ones(2, dtype=torch.bool), a=r(2)),
     ["where", "'b'", "missing"]),
    ("gemm K of a and b", call("gemm", r(4, 8), r(6, 5)), ["gemm", "'b'", "K = 6", "K = 8"]),
    ("gemm K with a transposed b", call("gemm", r(4, 8), r(5, 6), trans_b=True), ["gemm", "'b'", "K = 6", "trans_b=True"]),
    ("silu_and_mul needs an even width", call("silu_and_mul", r(4, 7)), ["silu_and_mul", "'x'", "H = 7", "even"]),
    ("GQA: kv heads divide q heads", call("sdpa_fwd", r(1, 6, 4, 8), r(1, 4, 4, 8), r(1, 4, 4, 8)),
     ["sdpa_fwd", "'k'", "Hkv = 4", "Hq = 6"]),
    ("causal needs Sq <= Skv", call("sdpa_fwd", r(1, 2, 8, 4), r(1, 2, 4, 4), r(1, 2, 4, 4), causal=True),
     ["sdpa_fwd", "'q'", "Sq = 8", "Skv = 4"]),
    ("rope angles are half the head dim", call("rope", r(4, 2, 8), r(4, 3), r(4, 3)), ["rope", "'cos'", "R = 3", "D / 2"]),
    ("top_k within the experts", call("topk_softmax", r(4, 8), top_k=9), ["topk_softmax", "top_k = 9", "E = 8"]),
    ("w13 stacks gate and up", call("fused_experts", r(4, 8), r(4, 2), torch.zeros(4, 2, dtype=torch.int64),
                                    r(3, 10, 8), r(3, 8, 4)), ["fused_experts", "'w13'", "I2 = 10", "2 * I = 8"]),
    ("routing names an expert that does not exist",
     call("fused_experts", r(4, 8), r(4, 2), torch.full((4, 2), 5, dtype=torch.int64), r(3, 8, 8), r(3, 8, 4)),
     ["fused_experts", "'topk_ids'", "[0, 3)"]),
    ("experts agree between router and weights", call("moe_ffn", r(4, 8), r(4, 6), r(3, 8, 8), r(3, 8, 4), top_k=2),
     ["moe_ffn", "'w13'", "E = 3", "E = 6"]),
    ("scaled_mm tile multiple", call("scaled_mm", r(4, 8).to(f8), r(16, 8).to(f8), r(1), r(1)),
     ["scaled_mm", "'a'", "K = 8", "multiple of 16"]),
    ("scaled_mm output dtype", call("scaled_mm", r(4, 16).to(f8), r(16, 16).to(f8), r(1), r(1), out_dtype="int8"),
     ["scaled_mm", "'c'", "int8", "bfloat16 | float16 | float32"]),
    ("too many inputs", call("relu", r(2), r(2)), ["relu", "takes 1 inputs"]),
]


@pytest.mark.parametrize("what,fn,words", CASES, ids=[c[0] for c in CASES])
def test_a_violating_call_names_op_tensor_and_expectation(what: str, fn: Callable[[], Any], words: list[str]) -> None:
    with pytest.raises(SignatureError) as exc:
        fn()
    msg = str(exc.value)
    for w in words:
        assert w in msg, f"{what}: {w!r} not in {msg!r}"


def test_a_refused_call_leaves_no_last_call() -> None:
    op = op_class("gemm")()
    with pytest.raises(SignatureError):
        op(r(4, 8), r(6, 5))
    assert op.last_call is None
