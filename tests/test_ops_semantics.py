"""Op behaviour the reference comparison does not reach: edge shapes, roof keys, counting rules
checked against the algorithm's own structure, the row generators of value-decided ops, GPU runs."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

from tileops.errors import OpNotAvailableError
from tileops.ops.catalog import load_entries
from tileops.ops.attention import causal_mask
from tileops.ops.registry import op_class
from tileops.ops.workload import bind_row, build_inputs, instantiate, row_generator
from tileops.tf32 import tf32_matmul

ENTRIES = load_entries()
r = torch.randn


# --- edge shapes against references ------------------------------------------------------------

def test_broadcasting_across_ranks_and_unit_dims() -> None:
    a, b = r(4, 1, 8), r(3, 1)
    for name, ref in (("add", np.add), ("mul", np.multiply), ("maximum", np.maximum), ("gt", np.greater)):
        y = op_class(name)()(a, b)
        assert tuple(y.shape) == (4, 3, 8)
        np.testing.assert_allclose(y.double().numpy(), ref(a.double().numpy(), b.double().numpy()), rtol=1e-6)
    cond = torch.rand(3, 8) > 0.5
    y = op_class("where")()(cond, r(4, 1, 1), r(1))
    assert tuple(y.shape) == (4, 3, 8)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_transposes(ta: bool, tb: bool) -> None:
    m, k, n = 5, 7, 3
    a = r(k, m) if ta else r(m, k)
    b = r(n, k) if tb else r(k, n)
    c = op_class("gemm")(trans_a=ta, trans_b=tb)(a, b)
    want = (a.double().T if ta else a.double()) @ (b.double().T if tb else b.double())
    np.testing.assert_allclose(c.double().numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def _sdpa_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, softcap: float, scale: float) -> np.ndarray:
    q, k, v = (t.double().numpy() for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = q @ k.swapaxes(-1, -2) * scale
    if softcap:
        s = softcap * np.tanh(s / softcap)
    if causal:
        sq, skv = s.shape[-2:]
        s = np.where(np.tril(np.ones((sq, skv), bool), k=skv - sq), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("sq,skv,causal,softcap,scale", [
    (1, 33, True, 0.0, 0.0),      # decode: one query sees the whole cache
    (5, 12, True, 0.0, 0.0),      # chunked prefill: bottom-right aligned mask
    (12, 12, True, 0.0, 0.3),     # square causal, explicit scale
    (6, 9, False, 20.0, 0.0),     # softcap, bidirectional
    (7, 10, True, 5.0, 0.0),      # softcap and causal
])
def test_attention_shapes_masks_and_softcap(sq: int, skv: int, causal: bool, softcap: float, scale: float) -> None:
    q, k, v = r(2, 6, sq, 16), r(2, 2, skv, 16), r(2, 2, skv, 8)  # GQA 3:1, Dv != D
    o = op_class("sdpa_fwd")(causal=causal, softcap=softcap, scale=scale)(q, k, v)
    want = _sdpa_ref(q, k, v, causal, softcap, scale or 1 / math.sqrt(16))
    np.testing.assert_allclose(o.double().numpy(), want, rtol=1e-4, atol=1e-5)


# --- counting rules against the algorithm's structure ----------------------------------------------

def _attn_flops(sq: int, skv: int, **params: object) -> int:
    op = op_class("sdpa_fwd")(**params)
    op(r(1, 4, sq, 16, device="meta"), r(1, 2, skv, 16, device="meta"), r(1, 2, skv, 16, device="meta"))
    return op.eval_roofline()[0]


@pytest.mark.parametrize("sq,skv", [(1, 64), (16, 16), (8, 40), (64, 64)])
def test_causal_attention_counts_exactly_the_scores_the_mask_keeps(sq: int, skv: int) -> None:
    """The per-score cost c comes from two bidirectional calls; a causal call must then differ
    from the bidirectional one by c times the scores its mask drops (counted from the mask)."""
    per_score = (_attn_flops(sq, skv + 1) - _attn_flops(sq, skv)) // (4 * sq)  # 4 heads, one more key each
    dropped = int((~causal_mask(sq, skv, "cpu")).sum())
    assert _attn_flops(sq, skv) - _attn_flops(sq, skv, causal=True) == 4 * dropped * per_score
    # and a softcap adds its divide, tanh and multiply (§1.3) to every kept score
    kept = sq * skv - dropped
    assert _attn_flops(sq, skv, causal=True, softcap=30.0) - _attn_flops(sq, skv, causal=True) == 4 * kept * 3


def test_moe_flops_are_its_stages_each_priced_as_its_own_op() -> None:
    op = op_class("moe_ffn")(top_k=2)
    x, logits = r(16, 32), r(16, 6)
    w13, w2 = r(6, 16, 32) * 0.1, r(6, 32, 8) * 0.1
    op(x, logits, w13, w2)
    stages = op.last_call.stages
    assert sorted(stages) == ["experts", "routing"]
    inner = stages["experts"][0].stages
    assert sorted(inner) == ["act", "combine", "down", "gate_up"]
    experts_hit = len(inner["gate_up"])
    assert experts_hit == op.roofline_data_terms()["experts_hit"]
    # re-run each recorded stage call as a standalone op on the same shapes
    total = 0
    for s in (*inner["gate_up"], *inner["down"]):
        total += _standalone("linear", x=r(*s.shapes["x"]), w=r(*s.shapes["w"]))
    for s in inner["act"]:
        total += _standalone("silu_and_mul", x=r(*s.shapes["x"]))
    (c,) = inner["combine"]
    total += _standalone("moe_combine", expert_out=r(*c.shapes["expert_out"]), topk_weights=r(*c.shapes["topk_weights"]))
    total += _standalone("topk_softmax", router_logits=logits, _params={"top_k": 2})
    assert op.eval_roofline()[0] == total


def _standalone(name: str, **inputs: object) -> int:
    op = op_class(name)(**inputs.pop("_params", {}))  # type: ignore[arg-type]
    op(**inputs)
    return op.eval_roofline()[0]


def test_value_decided_ops_on_meta_complete_the_call_but_refuse_to_price() -> None:
    for name in ("moe_ffn", "fused_experts", "embedding"):
        e = ENTRIES[name]
        bound = bind_row(e, e.workloads[0], e.workloads[0].dtypes[0])
        op = instantiate(e, bound.row)
        op(**build_inputs(op, bound, "meta"))
        assert op.last_call.is_meta
        with pytest.raises(OpNotAvailableError, match="meta"):
            op.eval_roofline()
        with pytest.raises(OpNotAvailableError):
            op.eval_roofline_read_bytes()
        assert op.roofline_data_terms() == {}


# --- roof keys (§1.4) -----------------------------------------------------------------------------

def test_roof_keys_follow_the_unit_an_optimal_implementation_uses() -> None:
    def key(name: str, *args: torch.Tensor, **params: object) -> str:
        op = op_class(name)(**params)
        op(*args)
        return op.roof_key()

    m = lambda *s, dt=torch.bfloat16: torch.empty(*s, device="meta", dtype=dt)
    assert key("gemm", m(4, 8), m(8, 2)) == "tensor_core.bf16"
    assert key("bmm", m(2, 4, 8, dt=torch.float16), m(2, 8, 2, dt=torch.float16)) == "tensor_core.fp16"
    f8 = torch.float8_e4m3fn
    assert key("scaled_mm", m(4, 16, dt=f8), m(16, 16, dt=f8), m(1, dt=torch.float32),
               m(1, dt=torch.float32)) == "tensor_core.fp8"
    assert key("sdpa_fwd", m(1, 2, 4, 8), m(1, 2, 4, 8), m(1, 2, 4, 8)) == "tensor_core.bf16"
    # not contractions: CUDA cores in fp32 whatever the storage dtype
    for name, args in (("relu", (m(8),)), ("softmax", (m(2, 8),)), ("rms_norm", (m(2, 8), m(8))),
                       ("rope", (m(2, 1, 8), m(2, 4), m(2, 4))), ("topk_softmax", (m(2, 8),))):
        assert key(name, *args, **({"top_k": 2} if name == "topk_softmax" else {})) == "cuda_core.fp32", name


def test_fp32_contractions_follow_the_instance_tf32_state() -> None:
    m = lambda *s: torch.empty(*s, device="meta")
    with tf32_matmul(True):
        tf32 = op_class("linear")()
    with tf32_matmul(False):
        fp32 = op_class("linear")()
    for op in (tf32, fp32):
        op(m(4, 8), m(2, 8))
    assert (tf32.roof_key(), fp32.roof_key()) == ("tensor_core.tf32", "cuda_core.fp32")


# --- workload rows: the row's own generator (§4.7) --------------------------------------------------

def _row_inputs(name: str, label: str) -> dict[str, torch.Tensor]:
    e = ENTRIES[name]
    row = next(w for w in e.workloads if w.label == label)
    bound = bind_row(e, row, row.dtypes[0])
    return build_inputs(instantiate(e, row), bound, "cpu")  # type: ignore[return-value]


def test_routing_comes_from_the_rows_own_generator_not_the_global_stream() -> None:
    torch.manual_seed(1234)
    expected_next = torch.rand(3)
    torch.manual_seed(1234)
    a = _row_inputs("fused_experts", "cpu-64tok-8e-top2")
    assert torch.equal(torch.rand(3), expected_next), "building a row consumed the global random stream"
    torch.manual_seed(99)  # a different global state changes nothing
    torch.rand(1000)
    b = _row_inputs("fused_experts", "cpu-64tok-8e-top2")
    assert torch.equal(a["topk_ids"], b["topk_ids"]) and torch.equal(a["topk_weights"], b["topk_weights"])
    ids = a["topk_ids"]
    assert all(len(set(t.tolist())) == ids.shape[1] for t in ids), "a token routed twice to one expert"
    assert int(ids.min()) >= 0 and int(ids.max()) < ENTRIES["fused_experts"].workloads[0].indices["E"]
    other = _row_inputs("fused_experts", "cpu-decode-4tok-16e-top2")
    assert not torch.equal(other["topk_ids"][:4].long(), a["topk_ids"][:4].long())


def test_distinct_rows_and_cases_have_distinct_generators() -> None:
    e = ENTRIES["moe_ffn"]
    seeds = {row_generator("moe_ffn", w, c).initial_seed() for w in e.workloads for c in w.dtypes}
    assert len(seeds) == sum(len(w.dtypes) for w in e.workloads)


def test_rope_rows_carry_real_angles() -> None:
    i = _row_inputs("rope", "cpu-256tok-8x64")
    np.testing.assert_allclose((i["cos"] ** 2 + i["sin"] ** 2).numpy(), 1.0, rtol=1e-5)
    assert torch.equal(i["cos"][0], torch.ones(32)) and torch.equal(i["sin"][0], torch.zeros(32))  # position 0


# --- fp8 GEMM: how far two devices may differ, from the format ------------------------------------

#: Unit roundoff of the accumulator an fp8 GEMM sums in. fp32 is 2^-24, but Hopper's fp8 tensor cores keep
#: about 14 bits while accumulating (DeepSeek-V3 technical report, §3.3.2) before cuBLAS promotes partial
#: sums to fp32, so 2^-14 bounds either device.
FP8_ACCUMULATOR_U = 2.0 ** -14
#: Unit roundoff of the output dtype (half an ulp at 1): the final rounding of c.
OUT_U = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def fp8_gemm_bound(a: torch.Tensor, b: torch.Tensor, scale: float, out_dtype: torch.dtype,
                   u: float = FP8_ACCUMULATOR_U) -> torch.Tensor:
    """Elementwise bound on |c_gpu - c_cpu| for c = (a @ b.T) * scale with a, b in e4m3 (same values on both).

    e4m3 has 3 mantissa bits, so a product a_k b_k has at most 2 x (3 + 1) = 8 significant bits: exact in
    either device's accumulator. The devices differ only in how they sum the K products (order, width):
    each sum is within gamma_K * sum_k |a_k b_k| of the exact one, gamma_K = K u / (1 - K u) (Higham,
    Accuracy and Stability of Numerical Algorithms, eq. 3.5, for any summation order), so the two differ
    by at most 2 gamma_K sum|a_k b_k| * scale, plus each side's rounding of the scaled result to the
    output dtype (2 u_out |c|).
    """
    k = a.shape[-1]
    gamma = k * u / (1 - k * u)
    abs_sum = (a.double().abs() @ b.double().abs().T) * scale
    exact = (a.double() @ b.double().T) * scale
    return 2 * gamma * abs_sum + 2 * OUT_U[out_dtype] * exact.abs() + 1e-30


def test_fp8_gemm_bound_holds_for_cpu_orders_and_catches_a_wrong_scale() -> None:
    """The bound is tight enough to catch real errors and loose enough for any summation order."""
    e = ENTRIES["scaled_mm"]
    for row in (w for w in e.workloads if "cpu" in w.tags):
        op = instantiate(e, row)
        i = build_inputs(op, bind_row(e, row, row.dtypes[0]), "cpu")
        out = op(**i)
        scale = float(i["scale_a"][0] * i["scale_b"][0])
        bound = fp8_gemm_bound(i["a"], i["b"], scale, out.dtype, u=2.0 ** -24)  # both sides fp32 on the CPU
        reversed_k = (i["a"].float().flip(-1) @ i["b"].float().flip(-1).T * scale).to(out.dtype)
        assert ((out.double() - reversed_k.double()).abs() <= bound).all(), row.label
        wrong = (i["a"].float() @ i["b"].float().T * scale * float(i["scale_a"][0])).to(out.dtype)
        assert ((out.double() - wrong.double()).abs() > fp8_gemm_bound(i["a"], i["b"], scale, out.dtype)).any()


# --- GPU: the same ops on CUDA agree with the CPU --------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine (run scripts/device-check on a GPU)")
@pytest.mark.parametrize("name", sorted(n for n, e in ENTRIES.items() if e.status == "implemented"))
def test_cuda_matches_cpu(name: str) -> None:
    e = ENTRIES[name]
    row = next(w for w in e.workloads if "cpu" in w.tags)
    case = row.dtypes[0]
    bound = bind_row(e, row, case)
    cpu_op, gpu_op = instantiate(e, row), instantiate(e, row)
    cpu_in = build_inputs(cpu_op, bound, "cpu")
    gpu_in = {k: (None if v is None else v.to("cuda")) for k, v in cpu_in.items()}
    want = cpu_op(**{k: (None if v is None else v.clone()) for k, v in cpu_in.items()})
    got = gpu_op(**gpu_in)
    want, got = (want if isinstance(want, tuple) else (want,)), (got if isinstance(got, tuple) else (got,))
    for w, g in zip(want, got):
        if name == "scaled_mm":
            _assert_fp8_gemm_close(cpu_in, g.cpu(), w)
        elif w.dtype.is_floating_point:
            tol = 2e-2 if w.dtype in (torch.bfloat16, torch.float16, torch.float8_e4m3fn) else 2e-3
            torch.testing.assert_close(g.cpu().float(), w.float(), rtol=tol, atol=tol * float(w.float().abs().mean() + 1e-3))
        elif name != "topk_softmax":
            assert torch.equal(g.cpu(), w)
    if name not in ("embedding", "fused_experts", "moe_ffn"):  # value-decided ops may route differently on ties
        assert gpu_op.eval_roofline() == cpu_op.eval_roofline()
    assert gpu_op.roof_key() == cpu_op.roof_key() or os.environ.get("NVIDIA_TF32_OVERRIDE") is not None


def _assert_fp8_gemm_close(inputs: dict, got: torch.Tensor, want: torch.Tensor) -> None:
    scale = float(inputs["scale_a"][0] * inputs["scale_b"][0])
    bound = fp8_gemm_bound(inputs["a"], inputs["b"], scale, want.dtype)
    err = (got.double() - want.double()).abs()
    worst = float((err / bound).max())
    assert worst <= 1.0, f"fp8 GEMM differs by {worst:.2f}x the bound from e4m3's products and K={inputs['a'].shape[-1]}"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine (run scripts/device-check on a GPU)")
@pytest.mark.parametrize("label", [w.label for w in ENTRIES["scaled_mm"].workloads if "cpu" in w.tags])
def test_scaled_mm_cuda_within_the_fp8_bound(label: str) -> None:
    """Every cpu row of scaled_mm (bf16 and fp32 out) on CUDA against the CPU, within the format's bound."""
    e = ENTRIES["scaled_mm"]
    row = next(w for w in e.workloads if w.label == label)
    cpu_op, gpu_op = instantiate(e, row), instantiate(e, row)
    cpu_in = build_inputs(cpu_op, bind_row(e, row, row.dtypes[0]), "cpu")
    want = cpu_op(**cpu_in)
    got = gpu_op(**{k: v.to("cuda") for k, v in cpu_in.items()})
    _assert_fp8_gemm_close(cpu_in, got.cpu(), want)
