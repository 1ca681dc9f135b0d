"""The Op contract (§4.4.4, §1.4, §4.7): last_call, no caching, meta calls, roof keys, errors."""

from __future__ import annotations

import pytest
import torch

from tileops.errors import OpNotAvailableError, SignatureError
from tileops.ops.registry import op_class


def test_pricing_before_the_first_call_is_a_clear_error() -> None:
    op = op_class("relu")()
    with pytest.raises(OpNotAvailableError, match="no completed call"):
        op.eval_roofline()
    with pytest.raises(OpNotAvailableError):
        op_class("linear")().roof_key()  # a dtype-dependent roof is valid only once the dtype is bound


def test_eval_roofline_prices_the_last_call_and_caches_nothing() -> None:
    op = op_class("relu")()
    op(torch.randn(4, 8))
    first = op.eval_roofline()
    op(torch.randn(16, 8, dtype=torch.bfloat16))
    second = op.eval_roofline()
    assert first == (32, 2 * 32 * 4)
    assert second == (128, 2 * 128 * 2)


def test_last_call_records_indices_dtypes_shapes_bytes() -> None:
    op = op_class("linear")()
    op(torch.randn(2, 3, 16), torch.randn(8, 16), torch.randn(8))
    c = op.last_call
    assert c.indices["B"] == (2, 3) and c.indices["K"] == 16 and c.indices["N"] == 8
    assert c.dtypes == {"x": "float32", "w": "float32", "bias": "float32", "y": "float32"}
    assert c.shapes["y"] == (2, 3, 8)
    assert c.nbytes("bias") == 32 and c.is_present("bias")
    assert op.eval_roofline() == (2 * 6 * 8 * 16 + 6 * 8, (96 + 128 + 8 + 48) * 4)


def test_shape_only_formula_works_on_meta_tensors() -> None:
    op = op_class("linear")()
    x = torch.empty(4096, 4096, device="meta", dtype=torch.bfloat16)
    w = torch.empty(6144, 4096, device="meta", dtype=torch.bfloat16)
    op(x, w)
    assert op.last_call.is_meta
    assert op.eval_roofline() == (2 * 4096 * 6144 * 4096, (4096 * 4096 + 6144 * 4096 + 4096 * 6144) * 2)
    assert op.roof_key() == "tensor_core.bf16"


def test_value_reading_formula_raises_on_meta() -> None:
    op = op_class("embedding")()
    op(torch.zeros(8, dtype=torch.int64, device="meta"), torch.empty(100, 4, device="meta"))
    with pytest.raises(OpNotAvailableError, match="meta"):
        op.eval_roofline()
    op(torch.tensor([3, 3, 7, 9]), torch.randn(100, 4))
    assert op.eval_roofline() == (0, 3 * 16 + 4 * 8 + 4 * 16)  # 3 distinct rows, ids, output
    assert op.roofline_data_terms() == {"distinct_rows": 3, "tokens": 4}


def test_roof_key_default_and_override() -> None:
    r = op_class("relu")()
    r(torch.randn(4, dtype=torch.bfloat16))
    assert r.roof_key() == "cuda_core.fp32"  # elementwise arithmetic runs on CUDA cores whatever the dtype
    lin = op_class("linear")()
    lin(torch.randn(2, 4, dtype=torch.float16), torch.randn(3, 4, dtype=torch.float16))
    assert lin.roof_key() == "tensor_core.fp16"
    lin.allow_tf32 = True  # instance state decides the fp32 unit
    lin(torch.randn(2, 4), torch.randn(3, 4))
    assert lin.roof_key() == "tensor_core.tf32"
    lin.allow_tf32 = False
    assert lin.roof_key() == "cuda_core.fp32"


@pytest.mark.parametrize("args,match", [
    ((torch.randn(2, 4), torch.randn(3, 5)), r"linear: input 'w' binds K = 5.*K = 4"),
    ((torch.randn(2, 4), torch.randn(3, 4, dtype=torch.float16)), r"linear: input 'w' has dtype float16, expected the dtype of x"),
    ((torch.randn(2, 4),), r"linear: required input 'w' is missing"),
    ((torch.randn(2, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)), r"'x' has dtype float64, expected float16 \| bfloat16 \| float32"),
    ((torch.tensor(1.0), torch.randn(3, 4)), r"'x' has shape \[\], expected \[\*B, K\]"),
])
def test_signature_violations_name_op_tensor_and_expectation(args, match) -> None:
    with pytest.raises(SignatureError, match=match):
        op_class("linear")()(*args)


def test_unknown_constructor_parameter_is_refused() -> None:
    with pytest.raises(TypeError, match="relu: unknown parameter"):
        op_class("relu")(alpha=2)


def test_prepare_checks_once_and_repeats_only_the_implementation() -> None:
    """What a timer times: the checked call sets last_call once; the prepared callable runs compute only."""
    op = op_class("linear")()
    x, w, b = torch.randn(4, 16), torch.randn(8, 16), torch.randn(8)
    run = op.prepare(x, w, b).run
    checked = op.last_call
    assert checked is not None and op.eval_roofline() == (2 * 4 * 8 * 16 + 4 * 8, (64 + 128 + 8 + 32) * 4)
    assert torch.equal(run(), op(x, w, b)) and op.last_call is not checked  # forward records a new call
    again = op.last_call
    for _ in range(3):
        run()
    assert op.last_call is again  # the prepared calls recorded nothing
    with pytest.raises(SignatureError):
        op.prepare(x, torch.randn(8, 15))  # the one checked call still checks


def test_a_prepared_composite_runs_its_stages_without_recording_them() -> None:
    from tileops.ops.catalog import load_entries
    from tileops.ops.workload import bind_row, build_inputs, instantiate

    e = load_entries()["moe_ffn"]
    row = next(w for w in e.workloads if "cpu" in w.tags)
    op = instantiate(e, row)
    inputs = build_inputs(op, bind_row(e, row, row.dtypes[0]), "cpu")
    run = op.prepare(**inputs).run
    stages = {k: len(v) for k, v in op.last_call.stages.items()}
    experts = op._experts.last_call
    assert stages["routing"] == 1 and stages["experts"] == 1
    torch.testing.assert_close(run(), instantiate(e, row)(**inputs))
    assert {k: len(v) for k, v in op.last_call.stages.items()} == stages
    assert op._experts.last_call is experts  # the sub-op's bookkeeping did not run either
