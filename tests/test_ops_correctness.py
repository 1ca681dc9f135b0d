"""Every implemented op against a reference, on CPU, for every dtype its signature allows.

The calls are the manifest's own ``cpu`` rows (built by the workload binder from
each row's generator), crossed with every combination of the free dtypes the
signature's unions allow. References are numpy in float64 on the same
(already rounded) inputs, so the only expected difference is the op's own
rounding and accumulation order; tolerances are per output dtype.

Where ``REFERENCES`` has no entry for an op, the reference is the entry's
``ref_api`` when that names a plain torch callable (``torch.nn.functional.softplus``):
it is called in float64 on the same inputs, in signature order, with the op's
parameters as keywords. That is what makes a new elementwise op a manifest
entry plus a two-line class (docs/manifest.md). Anything else (a vllm API, a
call with arguments written into ``ref_api``) needs an explicit reference here.

Nothing is skipped: every dtype in every union runs on this CPU (fp8 included,
through ``torch._scaled_mm``'s CPU kernel and fp8 casts).
"""

from __future__ import annotations

import itertools
import re
from typing import Any, Callable

import numpy as np
import pytest
import torch

from tileops.dtypes import name_of
from tileops.ops.catalog import load_entries
from tileops.ops.spec import OpEntry
from tileops.ops.workload import BoundRow, bind_row, build_inputs, instantiate

ENTRIES = load_entries()
IMPLEMENTED = sorted(n for n, e in ENTRIES.items() if e.status == "implemented")

#: relative tolerance by output dtype (the output's own rounding dominates)
TOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2, "float8_e4m3fn": 7e-2, "float8_e5m2": 0.13}
#: composites store their intermediates in the input dtype between stages, as a real kernel does
#: (gate_up output, activation, expert outputs): each rounding adds to the error the reference lacks.
STAGE_FACTOR = {"fused_experts": 4.0, "moe_ffn": 4.0}


def dtype_cases(entry: OpEntry, present: tuple[str, ...]) -> list[dict[str, str] | str]:
    """Every combination of the free dtypes of the bound tensors (a single case when none is free)."""
    free = [t for t in entry.signature.tensors if t.is_free_dtype and (not t.optional or t.name in present)]
    if not free:
        return []
    return [dict(zip((t.name for t in free), combo)) for combo in itertools.product(*(t.dtypes for t in free))]


def cpu_cases() -> list[Any]:
    out = []
    for name in IMPLEMENTED:
        e = ENTRIES[name]
        rows = [r for r in e.workloads if "cpu" in r.tags]
        for row in rows:
            cases = dtype_cases(e, row.present) or list(row.dtypes)
            for case in cases:
                out.append(pytest.param(name, row.label, case, id=f"{name}-{row.label}-{bind_row(e, row, case).case_name}"))
    return out


def f64(t: torch.Tensor | None) -> np.ndarray | None:
    return None if t is None else t.detach().to(torch.float64).numpy()


# --- references (numpy, float64) -------------------------------------------------------------

def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _rms(x: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def _sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray, p: dict[str, Any]) -> np.ndarray:
    bz, hq, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    scale = p["scale"] or 1.0 / np.sqrt(d)
    out = np.zeros((bz, hq, sq, v.shape[-1]))
    keep = np.array([[j <= i + (skv - sq) for j in range(skv)] for i in range(sq)]) if p["causal"] else None
    for b in range(bz):
        for h in range(hq):
            g = h // (hq // hkv)  # the kv head this query head shares
            s = q[b, h] @ k[b, g].T * scale
            if p["softcap"] > 0:
                s = p["softcap"] * np.tanh(s / p["softcap"])
            if keep is not None:
                s = np.where(keep, s, -np.inf)
            out[b, h] = _softmax(s) @ v[b, g]
    return out


def _experts(x: np.ndarray, w: np.ndarray, ids: np.ndarray, w13: np.ndarray, w2: np.ndarray) -> np.ndarray:
    """Dense per-token reference: out[t] = sum_j w[t,j] * FFN_{ids[t,j]}(x[t])."""
    out = np.zeros_like(x)
    inter = w2.shape[-1]
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            h = w13[e] @ x[t]
            out[t] += w[t, j] * (w2[e] @ (_silu(h[:inter]) * h[inter:]))
    return out


def _routing(logits: np.ndarray, k: int, renormalize: bool) -> tuple[np.ndarray, np.ndarray]:
    p = _softmax(logits)
    ids = np.argsort(-p, axis=-1, kind="stable")[:, :k]
    w = np.take_along_axis(p, ids, axis=-1)
    return (w / w.sum(-1, keepdims=True) if renormalize else w), ids


Ref = Callable[[dict[str, Any], dict[str, Any]], tuple[np.ndarray, ...]]

REFERENCES: dict[str, Ref] = {
    "relu": lambda i, p: (np.maximum(i["x"], 0.0),),
    "neg": lambda i, p: (-i["x"],),
    "abs": lambda i, p: (np.abs(i["x"]),),
    "exp": lambda i, p: (np.exp(i["x"]),),
    "tanh": lambda i, p: (np.tanh(i["x"]),),
    "rsqrt": lambda i, p: (1.0 / np.sqrt(i["x"]),),
    "sigmoid": lambda i, p: (1.0 / (1.0 + np.exp(-i["x"])),),
    "silu": lambda i, p: (_silu(i["x"]),),
    "gelu_tanh": lambda i, p: (_gelu_tanh(i["x"]),),
    "add": lambda i, p: (i["a"] + i["b"],),
    "mul": lambda i, p: (i["a"] * i["b"],),
    "div": lambda i, p: (i["a"] / i["b"],),
    "maximum": lambda i, p: (np.maximum(i["a"], i["b"]),),
    "gt": lambda i, p: (i["a"] > i["b"],),
    "where": lambda i, p: (np.where(i["cond"] != 0, i["a"], i["b"]),),
    "cast": lambda i, p: (i["x"],),  # the value is kept, to within the target dtype's rounding
    "silu_and_mul": lambda i, p: (_silu(i["x"][..., : i["x"].shape[-1] // 2]) * i["x"][..., i["x"].shape[-1] // 2:],),
    "sum": lambda i, p: (i["x"].sum(axis=-1),),
    "softmax": lambda i, p: (_softmax(i["x"]),),
    "cumsum": lambda i, p: (np.cumsum(i["x"], axis=-1),),
    "rms_norm": lambda i, p: (_rms(i["x"], p["eps"]) * i["weight"],),
    "layer_norm": lambda i, p: (
        ((i["x"] - i["x"].mean(-1, keepdims=True)) / np.sqrt(i["x"].var(-1, keepdims=True) + p["eps"]))
        * (1.0 if i["weight"] is None else i["weight"]) + (0.0 if i["bias"] is None else i["bias"]),),
    "fused_add_rms_norm": lambda i, p: (_rms(i["x"] + i["residual"], p["eps"]) * i["weight"],),
    "gemm": lambda i, p: ((i["a"].T if p["trans_a"] else i["a"]) @ (i["b"].T if p["trans_b"] else i["b"]),),
    "bmm": lambda i, p: (np.matmul(i["a"], i["b"]),),
    "linear": lambda i, p: (i["x"] @ i["w"].T + (0.0 if i["bias"] is None else i["bias"]),),
    "scaled_mm": lambda i, p: ((i["a"] @ i["b"].T) * i["scale_a"][0] * i["scale_b"][0],),
    "sdpa_fwd": lambda i, p: (_sdpa(i["q"], i["k"], i["v"], p),),
    "rope": lambda i, p: (np.concatenate([
        i["x"][..., : i["cos"].shape[-1]] * i["cos"][:, None] - i["x"][..., i["cos"].shape[-1]:] * i["sin"][:, None],
        i["x"][..., i["cos"].shape[-1]:] * i["cos"][:, None] + i["x"][..., : i["cos"].shape[-1]] * i["sin"][:, None],
    ], axis=-1),),
    "embedding": lambda i, p: (i["weight"][i["ids"].astype(np.int64)],),
    "topk_softmax": lambda i, p: _routing(i["router_logits"], p["top_k"], p["renormalize"]),
    "moe_combine": lambda i, p: (np.einsum("tkh,tk->th", i["expert_out"], i["topk_weights"]),),
    "fused_experts": lambda i, p: (_experts(i["x"], i["topk_weights"], i["topk_ids"], i["w13"], i["w2"]),),
    "moe_ffn": lambda i, p: (_experts(i["x"], *_routing(i["router_logits"], p["top_k"], p["renormalize"]),
                                      i["w13"], i["w2"]),),
}


_TORCH_PATH = re.compile(r"torch(\.[A-Za-z_][A-Za-z0-9_]*)+")


def ref_api_reference(entry: OpEntry) -> Ref | None:
    """The entry's ``ref_api`` as a float64 reference, when it names a plain torch callable; else None."""
    if not _TORCH_PATH.fullmatch(entry.ref_api):
        return None
    fn: Any = torch
    for part in entry.ref_api.split(".")[1:]:
        fn = getattr(fn, part, None)
    if not callable(fn):
        return None
    names = [t.name for t in entry.signature.inputs]

    def reference(inputs: dict[str, Any], params: dict[str, Any]) -> tuple[np.ndarray, ...]:
        args = [torch.from_numpy(inputs[n]) for n in names if inputs.get(n) is not None]
        out = fn(*args, **params)
        outs = out if isinstance(out, tuple) else (out,)
        return tuple(o.numpy() if o.dtype == torch.bool else o.to(torch.float64).numpy() for o in outs)

    return reference


def reference_for(name: str) -> Ref:
    """The explicit numpy reference, or the one ``ref_api`` names (KeyError with the fix otherwise)."""
    if name in REFERENCES:
        return REFERENCES[name]
    derived = ref_api_reference(ENTRIES[name])
    if derived is None:
        raise KeyError(f"{name}: ref_api {ENTRIES[name].ref_api!r} is not a plain torch callable; add a numpy "
                       "reference to REFERENCES in tests/test_ops_correctness.py")
    return derived


def distinct_logits(t: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Router logits without ties in any dtype (multiples of 1/8 below 16 are exact in bf16 and
    fp16), so the top-k choice is unique and the reference routes exactly as the op does."""
    perm = torch.rand(t.shape, generator=generator).argsort(dim=-1)
    return (perm.to(torch.float32) / 8).to(t.dtype)


def run_case(name: str, label: str, case: Any) -> tuple[BoundRow, dict[str, Any], Any, Any]:
    entry = ENTRIES[name]
    row = next(r for r in entry.workloads if r.label == label)
    bound = bind_row(entry, row, case)
    op = instantiate(entry, row)
    inputs = build_inputs(op, bound, "cpu")
    if "router_logits" in inputs:
        inputs["router_logits"] = distinct_logits(inputs["router_logits"], torch.Generator().manual_seed(7))
    before = {k: (None if v is None else v.clone()) for k, v in inputs.items()}
    out = op(**inputs)
    return bound, before, inputs, (op, out if isinstance(out, tuple) else (out,))


def assert_matches(name: str, got: torch.Tensor, want: np.ndarray, tensor: str) -> None:
    dt = name_of(got.dtype)
    if dt == "bool" or not got.dtype.is_floating_point:
        np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{name}.{tensor}")
        return
    tol = TOL[dt] * STAGE_FACTOR.get(name, 1.0)
    g = got.to(torch.float64).numpy()
    scale = max(float(np.abs(want).mean()), 1e-3)  # the magnitude of the values, for an absolute floor
    np.testing.assert_allclose(g, want, rtol=tol, atol=tol * scale, err_msg=f"{name}.{tensor} ({dt})")


@pytest.mark.parametrize("name,label,case", cpu_cases())
def test_op_matches_reference(name: str, label: str, case: Any) -> None:
    bound, before, after, (op, outs) = run_case(name, label, case)
    ref = reference_for(name)({k: f64(v) for k, v in before.items()}, op.params)
    sig = ENTRIES[name].signature
    assert len(outs) == len(sig.outputs) == len(ref)
    for t, got, want in zip(sig.outputs, outs, ref):
        assert name_of(got.dtype) == bound.dtypes[t.name], f"{name}.{t.name} dtype"
        if name == "topk_softmax" and t.name == "topk_ids":
            continue  # ids are compared through the weights they select (below)
        assert_matches(name, got, want, t.name)
    if name == "topk_softmax":
        p = REFERENCES["softmax"]({"x": f64(before["router_logits"])}, {})[0]
        chosen = np.take_along_axis(p, outs[1].numpy(), axis=-1)
        np.testing.assert_allclose(chosen, np.sort(p, axis=-1)[:, ::-1][:, : op.params["top_k"]], rtol=1e-6)
    for t in sig.inputs:  # mutated inputs hold their new value; every other input is untouched
        if after[t.name] is None:
            continue
        if t.mutated:
            assert name == "fused_add_rms_norm" and t.name == "residual", "add the mutated input's expected value"
            want = f64(before["x"]) + f64(before["residual"])
            assert_matches(name, after[t.name], want, t.name)
        else:
            assert torch.equal(after[t.name], before[t.name]), f"{name} changed input {t.name!r}"


def test_every_implemented_op_has_a_reference_and_a_cpu_row() -> None:
    assert set(REFERENCES) <= set(IMPLEMENTED), sorted(set(REFERENCES) - set(IMPLEMENTED))
    for name in IMPLEMENTED:
        reference_for(name)  # explicit, or derived from a plain torch ref_api
        assert any("cpu" in r.tags for r in ENTRIES[name].workloads), f"{name} has no row tagged cpu"


def test_cast_values_and_fresh_storage() -> None:
    """Rounding is the target dtype's (relative error within half an ulp); the identity copies."""
    op = instantiate(ENTRIES["cast"], ENTRIES["cast"].workloads[0])
    x = torch.randn(64, 32)
    y = op(x)
    assert y.dtype == torch.bfloat16
    np.testing.assert_allclose(f64(y), f64(x), rtol=2 ** -8)
    same = type(op)(dtype="float32")
    z = same(x)
    assert torch.equal(z, x) and z.data_ptr() != x.data_ptr()
    assert same.eval_roofline()[0] == 0


def test_a_plain_torch_ref_api_is_a_reference_and_anything_else_is_not() -> None:
    """The derived reference agrees with the explicit one where both exist, and refuses what it cannot call."""
    x = np.linspace(-3.0, 3.0, 11)
    for name in ("relu", "sigmoid", "silu", "exp"):
        derived = ref_api_reference(ENTRIES[name])
        assert derived is not None, name
        np.testing.assert_allclose(derived({"x": x}, {})[0], REFERENCES[name]({"x": x}, {})[0], rtol=1e-12)
    gt = ref_api_reference(ENTRIES["gt"])
    assert gt is not None and gt({"a": x, "b": x[::-1].copy()}, {})[0].dtype == np.bool_
    for name in ("gelu_tanh", "sum", "silu_and_mul", "fused_experts"):  # arguments written in, or not torch
        assert ref_api_reference(ENTRIES[name]) is None, name


def test_library_size() -> None:
    """The issue asks for at least 25 ops across the families."""
    assert len(IMPLEMENTED) >= 25
    families = {ENTRIES[n].family for n in IMPLEMENTED}
    assert {"elementwise", "reduction", "norm", "gemm", "attention", "position", "embedding", "moe"} <= families
