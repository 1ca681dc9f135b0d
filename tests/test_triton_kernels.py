"""Every Triton kernel against torch eager, on every manifest row its op has, through Triton's interpreter.

``TRITON_INTERPRET=1`` (set here, before any kernel module imports triton) runs the kernels
on CPU tensors with numpy. Two sets of calls:

- the ``cpu`` rows as the manifest states them, with the interpreter's wide tiles (few
  programs: the interpreter pays per program, not per element);
- every other (GPU-sized) row scaled down: each dim capped by one function (broadcasts still
  broadcast), the dims that choose a kernel's path kept whole (a norm's or softmax's row width,
  silu_and_mul's H, rope's D and R, the embedding width), and run with the tiles a GPU uses
  (``GPU_TILES``), so ragged tails and multi-program rows are exercised as on a GPU.

Tolerances are in tests/backend_support.py. A kernel's speed is not measured here: the
interpreter checks correctness only.

On a machine with CUDA the interpreter is not switched on (it would replace the compiled
kernels for the whole session) and the same calls run compiled on the GPU instead
(``test_kernel_matches_eager_on_gpu``, marked ``gpu``: scripts/device-check runs it).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest
import torch

CUDA = torch.cuda.is_available()
if not CUDA:
    os.environ["TRITON_INTERPRET"] = "1"  # read when a kernel module is imported (triton.jit)

from backend_support import (
    ENTRIES, EXACT_OPS, assert_close, assert_same_contract, cap_indices, largest_input, run_both,
)
from tileops.errors import BackendUnavailableError
from tileops.ops.spec import Workload, dtype_case_name
from tileops.ops import backends
from tileops.ops.base import Op
from tileops.ops.registry import load_all
from tileops.ops.workload import bind_row

# Masked lanes compute on fill values (0 / 0, rsqrt(0), -inf - -inf) that are never stored;
# numpy warns about them in the interpreter.
pytestmark = pytest.mark.filterwarnings("ignore:(invalid value|divide by zero) encountered:RuntimeWarning")

CLASSES = load_all()
TRITON_OPS = sorted(n for n, c in CLASSES.items() if "triton" in c.backends and ENTRIES[n].status == "implemented")

#: dims that choose a kernel's path (or must keep a relation), kept whole when a GPU row is scaled
PATH_DIMS = {"rms_norm": {"N"}, "fused_add_rms_norm": {"N"}, "layer_norm": {"N"}, "softmax": {"N"},
             "silu_and_mul": {"H"}, "rope": {"D", "R"}, "embedding": {"D"}}
#: the largest input a scaled row may have (elements)
SCALED_LIMIT = 1 << 18
#: caps tried in turn, odd sizes so tiles end ragged
CAPS = (999, 301, 99, 31, 9, 3, 1)

#: calls the interpreter cannot check, with why
INTERPRETER_GAPS = {
    "float8_e4m3fn": "Triton 3.7's interpreter converts fp32 to fp8 by rounding half up and drops the "
                     "carry out of the mantissa (1.97 can become 1.0), so it cannot check an fp8 output; "
                     "the GPU converts in hardware (unverified here)",
}


def triton_installed() -> None:
    if not backends.triton_installed():
        if os.environ.get("CI") == "true":
            pytest.fail("triton is not installed (CI=true: `make test` installs it through the test extra)")
        pytest.skip("triton is not installed (pip install -e '.[test]')")


def scaled(name: str, row: Workload) -> Workload:
    keep = PATH_DIMS.get(name, set())
    for cap in CAPS:
        small = dataclasses.replace(row, indices=cap_indices(row.indices, keep, cap), label=f"{row.label}@{cap}")
        if largest_input(ENTRIES[name], small) <= SCALED_LIMIT:
            return small
    return small


def cases() -> list[Any]:
    out: list[Any] = []
    for name in TRITON_OPS:
        seen: set[tuple] = set()
        for row in ENTRIES[name].workloads:
            gpu_row = "cpu" not in row.tags
            use = scaled(name, row) if gpu_row else row
            for case in use.dtypes:
                key = (repr(sorted(use.indices.items())), repr(sorted(use.params.items())), use.present,
                       dtype_case_name(case))
                if key in seen:  # GPU rows of one op often scale to the same call
                    continue
                seen.add(key)
                out.append(pytest.param(name, use, case, gpu_row,
                                        id=f"{name}-{use.label}-{dtype_case_name(case)}"))
    return out


def check_case(name: str, row: Workload, case: Any, device: str) -> None:
    entry = ENTRIES[name]
    bound = bind_row(entry, row, case)
    why = CLASSES[name].call_unsupported("triton", bound.dtypes, bound.shapes, row.params)
    if why:
        assert "@" in row.label, f"{name}: the Triton kernel refuses its own cpu row {row.label}: {why}"
        pytest.skip(why)
    interpreted = device == "cpu"
    gap = next((g for d, g in INTERPRETER_GAPS.items() if name == "cast" and row.params.get("dtype") == d), None)
    if gap and interpreted:
        pytest.skip(gap)
    eager, kernel, ref_in, got_in, ref, got, _ = run_both(entry, row, case, "triton", device=device)
    sig = entry.signature
    # the interpreter truncates fp32 -> bf16, so there a cast from fp32 to bf16 is inexact
    truncated = interpreted and name == "cast" and bound.dtypes["x"] == "float32" and row.params["dtype"] == "bfloat16"
    for t, g, w in zip(sig.outputs, got, ref):
        assert_close(name, t.name, g, w, exact=name in EXACT_OPS and not truncated)
    for t in sig.inputs:
        if t.mutated:
            assert_close(name, f"{t.name} (mutated)", got_in[t.name], ref_in[t.name], exact=False)
    assert_same_contract(eager, kernel)


@pytest.mark.skipif(CUDA, reason="this machine has CUDA: the kernels run compiled (test_kernel_matches_eager_on_gpu)")
@pytest.mark.parametrize("name,row,case,gpu_tiles", cases())
def test_kernel_matches_eager(name: str, row: Workload, case: Any, gpu_tiles: bool,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    triton_installed()
    import tileops.ops.triton_kernels as kt

    monkeypatch.setattr(kt, "GPU_TILES", gpu_tiles)
    check_case(name, row, case, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="no CUDA device on this machine (run scripts/device-check on a GPU)")
@pytest.mark.parametrize("name,row,case,gpu_tiles", cases())
def test_kernel_matches_eager_on_gpu(name: str, row: Workload, case: Any, gpu_tiles: bool) -> None:  # pragma: no cover
    check_case(name, row, case, "cuda")


# --- what the kernels refuse, and how ---------------------------------------------------------

def test_cpu_is_refused_for_timing_even_when_interpreting() -> None:
    """The bench's question: on a CPU the Triton backend is skipped with the reason, interpreter or not."""
    triton_installed()
    cls = CLASSES["relu"]
    why = cls.unsupported("triton", "cpu", {"x": "float32", "y": "float32"}, {"x": (4, 4)})
    assert why is not None and "interpreter" in why and "not timed" in why


@pytest.mark.skipif(CUDA, reason="runs kernels on CPU tensors through the interpreter")
def test_cpu_call_without_interpreter_fails_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    triton_installed()
    CLASSES["relu"].kernel()  # import the kernel module under the interpreter first: triton.jit reads the variable then
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    op = CLASSES["relu"](backend="triton")
    with pytest.raises(BackendUnavailableError, match="interpreter"):
        op(torch.randn(8))


@pytest.mark.skipif(CUDA, reason="runs kernels on CPU tensors through the interpreter")
def test_row_too_wide_is_refused() -> None:
    triton_installed()
    from tileops.ops.triton_kernels.rowwise import MAX_ROW

    cls = CLASSES["rms_norm"]
    shapes = {"x": (2, MAX_ROW + 1), "weight": (MAX_ROW + 1,)}
    dtypes = {"x": "float32", "weight": "float32", "y": "float32"}
    why = cls.call_unsupported("triton", dtypes, shapes, {"eps": 1e-6})
    assert why is not None and str(MAX_ROW) in why
    op = cls(backend="triton")
    with pytest.raises(BackendUnavailableError, match="rows of at most"):
        op(torch.randn(*shapes["x"]), torch.randn(*shapes["weight"]))
    # softmax streams such rows instead of refusing them
    assert CLASSES["softmax"].call_unsupported("triton", {"x": "float32", "y": "float32"}, {"x": (2, 10**5)}, {}) is None


@pytest.mark.skipif(CUDA, reason="runs kernels on CPU tensors through the interpreter")
def test_broadcast_beyond_two_dims_is_refused() -> None:
    triton_installed()
    a, b = torch.randn(2, 1, 3), torch.randn(1, 4, 1)  # strides (3, 0, 1) and (0, 1, 0): three dims
    why = CLASSES["add"].call_unsupported("triton", {"a": "float32", "b": "float32", "y": "float32"},
                                          {"a": tuple(a.shape), "b": tuple(b.shape)}, {})
    assert why is not None and "two dims" in why
    with pytest.raises(BackendUnavailableError, match="two dims"):
        CLASSES["add"](backend="triton")(a, b)
    # a column broadcast reduces to two dims, and is computed
    c = torch.randn(5, 1)
    y = CLASSES["add"](backend="triton")(torch.randn(5, 7), c)
    assert y.shape == (5, 7)


@pytest.mark.skipif(CUDA, reason="runs kernels on CPU tensors through the interpreter")
@pytest.mark.parametrize("shapes", [((37, 300), (37, 1), (1, 300)), ((37, 300), (1,), (37, 300)),
                                    ((1, 300), (37, 1), (1,)), ((37, 1), (37, 300), (1, 1)), ((1,), (1,), (37, 300))],
                         ids=["rows-cols", "scalar-a", "col-row-scalar", "row-full-scalar", "scalars"])
@pytest.mark.parametrize("gpu_tiles", [False, True], ids=["wide-tiles", "gpu-tiles"])
def test_each_operand_is_read_at_its_own_shape(shapes: tuple, gpu_tiles: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """where and add read an operand that varies along rows, columns, both or neither (a scalar) through
    a compile-time choice of load (elementwise._operand), across many programs and ragged tiles."""
    triton_installed()
    from tileops.ops import triton_kernels

    monkeypatch.setattr(triton_kernels, "GPU_TILES", gpu_tiles)
    g = torch.Generator().manual_seed(24)
    c = torch.rand(shapes[0], generator=g) > 0.5
    a, b = torch.randn(shapes[1], generator=g), torch.randn(shapes[2], generator=g)
    assert torch.equal(CLASSES["where"](backend="triton")(c, a, b), torch.where(c, a, b))
    torch.testing.assert_close(CLASSES["add"](backend="triton")(a, b), a + b)


def test_dtype_outside_the_kernel_is_refused() -> None:
    triton_installed()
    why = CLASSES["relu"].call_unsupported("triton", {"x": "float64", "y": "float64"}, {"x": (4,)}, {})
    assert why is not None and "float64" in why


@pytest.mark.skipif(CUDA, reason="runs kernels on CPU tensors through the interpreter")
def test_non_contiguous_input_is_refused() -> None:
    triton_installed()
    x = torch.randn(8, 6).t()
    with pytest.raises(BackendUnavailableError, match="contiguous"):
        CLASSES["exp"](backend="triton")(x)


@pytest.mark.skipif(CUDA, reason="runs kernels on CPU tensors through the interpreter")
@pytest.mark.parametrize("gpu_tiles", [False, True], ids=["wide-tiles", "gpu-tiles"])
def test_softmax_split_rows_hold_minus_infinity(gpu_tiles: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A row too wide for registers is split into tiles: tiles that see only -inf (masked logits) stay out of
    the sum, and a row of -inf only is NaN, as eager's."""
    triton_installed()
    from tileops.ops import triton_kernels
    from tileops.ops.triton_kernels.rowwise import MAX_ROW

    monkeypatch.setattr(triton_kernels, "GPU_TILES", gpu_tiles)
    x = torch.randn(3, MAX_ROW + 3000)
    x[0, : MAX_ROW] = float("-inf")  # whole tiles of -inf, then finite values
    x[1, 5] = 30.0
    x[2] = float("-inf")
    got = CLASSES["softmax"](backend="triton")(x)
    torch.testing.assert_close(got, torch.softmax(x, dim=-1), rtol=1e-5, atol=1e-7, equal_nan=True)
    assert got[2].isnan().all()


def test_every_shipped_elementwise_op_has_an_expression() -> None:
    """A unary or binary op class with no line in the kernel's table is refused, never computed
    as something else; every shipped one has its line."""
    triton_installed()
    from tileops.ops.triton_kernels import elementwise as k
    from tileops.ops.elementwise import Binary, Unary

    for name, cls in CLASSES.items():
        if issubclass(cls, Unary):
            assert name in k.UNARY, name
        if issubclass(cls, Binary):
            assert name in k.BINARY, name
    why = k._unary_limits("softplus", {}, {}, {})
    assert why is not None and "softplus" in why


def test_declaring_triton_needs_a_kernel() -> None:
    with pytest.raises(TypeError, match="triton_kernel"):
        type("NoKernel", (Op,), {"backends": ("torch", "compile", "triton")})
