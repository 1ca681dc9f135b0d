"""The ``compile`` backend (torch.compile of each op's compute) against eager, and the backend mechanism.

One cpu row per (op, dtype case): compiling is what costs (seconds per graph on two cores),
not running, so each distinct graph is compiled once; the MoE composites, whose Python loop
over experts compiles tens of graphs, compile only their smallest row. Inductor compiles C++ on a CPU, which
needs a C++ compiler (g++ here and in CI). Tolerances: tests/backend_support.py (inductor
fuses and keeps bf16/fp16 intermediates in fp32 where eager rounds them).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from backend_support import ENTRIES, EXACT_OPS, assert_close, assert_same_contract, run_both
from tileops.errors import CompileError
from tileops.ops.spec import dtype_case_name
from tileops.ops import backends
from tileops.ops.registry import load_all, op_class

CLASSES = load_all()
#: composites whose compute loops over experts in Python: dynamo compiles a graph per stage it
#: meets (tens of graphs, a minute or more on two cores), so they compile one call, their smallest
SLOW = {"fused_experts", "moe_ffn"}


def compile_cases() -> list[Any]:
    out = []
    for name in sorted(n for n, e in ENTRIES.items() if e.status == "implemented" and n in CLASSES):
        rows = [r for r in ENTRIES[name].workloads if "cpu" in r.tags]
        if name in SLOW:  # one call: the fewest tokens (the fewest experts hit, so the fewest graphs)
            row = min(rows, key=lambda r: r.indices["T"])
            rows = [dataclasses.replace(row, dtypes=row.dtypes[:1])]
        seen: set[str] = set()
        for row in rows:
            for case in row.dtypes:
                if dtype_case_name(case) in seen:
                    continue
                seen.add(dtype_case_name(case))
                marks = [pytest.mark.slow] if name in SLOW else []
                out.append(pytest.param(name, row, case, id=f"{name}-{row.label}-{dtype_case_name(case)}", marks=marks))
    return out


def test_every_op_offers_compile() -> None:
    for name, cls in CLASSES.items():
        assert cls.backends[:2] == ("torch", "compile"), f"{name}: backends {cls.backends}"


@pytest.mark.parametrize("name,row,case", compile_cases())
def test_compile_matches_eager(name: str, row: Any, case: Any) -> None:
    why = op_class(name).unsupported("compile", "cpu", {}, {})
    if why:
        pytest.skip(why)
    entry = ENTRIES[name]
    eager, compiled, ref_in, got_in, ref, got, seconds = run_both(entry, row, case, "compile", prepare=True)
    assert seconds is not None and seconds > 0
    for t, g, w in zip(entry.signature.outputs, got, ref):
        assert_close(name, t.name, g, w, exact=name in EXACT_OPS)
    for t in entry.signature.inputs:
        if t.mutated:  # prepare's call mutated its own copy; this compares the compared call's
            assert_close(name, f"{t.name} (mutated)", got_in[t.name], ref_in[t.name], exact=False)
    assert_same_contract(eager, compiled)


# --- the mechanism -----------------------------------------------------------------------------

def test_prepare_compiles_once_and_then_refuses_to_recompile() -> None:
    """After prepare, a call that would need another graph raises instead of compiling inside a timing."""
    relu = op_class("relu")(backend="compile")
    x = torch.randn(64, 48)
    assert relu.prepare(x=x).setup_s > 0
    torch.testing.assert_close(relu(x), torch.relu(x), rtol=0, atol=0)  # same inputs: no recompile
    with pytest.raises(Exception, match="(?i)recompil"):
        relu(torch.randn(65, 48))


def test_each_instance_compiles_its_own_graph() -> None:
    """All unary ops share one compute; instances must not pile graphs onto one code object,
    where the recompile limit would turn later rows eager (here: fail)."""
    with torch._dynamo.config.patch(recompile_limit=1):
        for shape in ((32, 40), (40, 32)):
            op = op_class("neg")(backend="compile")
            x = torch.randn(shape)
            op.prepare(x=x)
            torch.testing.assert_close(op(x), -x, rtol=0, atol=0)


def test_failed_compile_is_a_compile_error() -> None:
    """A real inductor failure (no such C++ compiler, no cache to hide it) names the op and the cause."""
    op = op_class("abs")(backend="compile")
    with torch._inductor.config.patch({"cpp.cxx": ("/nonexistent/g++",), "force_disable_caches": True}):
        with pytest.raises(CompileError, match=r"abs: the compile backend failed") as info:
            op.prepare(x=torch.randn(17, 23))
    assert info.value.__cause__ is not None


def test_torch_prepares_nothing() -> None:
    assert op_class("relu")().prepare(x=torch.randn(4)).setup_s is None


def test_unsupported_names_the_reason() -> None:
    relu = op_class("relu")
    dt, sh = {"x": "float32", "y": "float32"}, {"x": (4,)}
    assert relu.unsupported("torch", "cpu", dt, sh) is None
    assert relu.unsupported("compile", "cpu", dt, sh) is None  # g++ is on this machine and in CI
    assert "mps" in (relu.unsupported("compile", "mps", dt, sh) or "")
    assert "no 'cuda-graphs' backend" in (relu.unsupported("cuda-graphs", "cpu", dt, sh) or "")
    gemm = op_class("gemm")
    assert "no 'triton' backend" in (gemm.unsupported("triton", "cuda", {}, {}) or "")
    if not backends.triton_installed():
        assert "not installed" in (relu.unsupported("triton", "cuda", dt, sh) or "")
    else:
        assert "interpreter" in (relu.unsupported("triton", "cpu", dt, sh) or "")


def test_interpreter_is_never_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    """With TRITON_INTERPRET=1 in the environment, GPU rows of Triton code would time the interpreter."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if backends.triton_installed():
        assert "TRITON_INTERPRET=1 is set" in (backends.device_unsupported("triton", "cuda:0") or "")
        assert "TRITON_INTERPRET=1 is set" in (backends.device_unsupported("compile", "cuda") or "")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert "TRITON_INTERPRET=1 is set" not in (backends.device_unsupported("triton", "cuda:0") or "")


def test_cache_env_puts_both_caches_under_one_folder(tmp_path) -> None:
    env = backends.cache_env(tmp_path)
    assert env == {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TRITON_CACHE_DIR": str(tmp_path / "triton")}
