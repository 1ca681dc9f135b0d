"""The structural oracle (§4.6): recount every implemented op's bytes by an independent path.

Level one. A binder builds each call from the signature, one workload row, the
dtypes and the mutation marks, on ``meta`` tensors (no values are needed for a
shape-decided formula), and recounts bytes by the minimum-traffic rules of §1.2
and §2.2. It shares with the formula only that definition, the op's statement
of its output extents (``output_shapes``) and the manifest's output-dtype
resolution (``resolve_dtypes``); never the roofline block, never codegen's
derived-bytes helpers, never the primitives' bit widths (element sizes come
from torch). Every implemented op that can be priced on meta tensors sits here,
by being recountable, not by being listed: every row, every dtype its unions
allow, and the read half wherever the entry declares one.

Level two. Hand-written cases for calls whose traffic their values decide
(§4.7): the case constructs the selecting tensor itself, explains its count
beside it, and also runs the op's own ``cpu`` workload rows, recounting from
the values those rows drew from their generators.

Completeness: every implemented op sits at exactly one level. Mutation: a
coefficient slip, a missed output, a wrong element size and a broadcast
charged at the wrong shape, written into a copy of the manifest, are each
caught by the level-one recount.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import numpy as np
import pytest
import torch
import yaml

from tileops.dtypes import to_torch
from tileops.errors import OpNotAvailableError
from tileops.manifest.codegen import generate
from tileops.ops.catalog import load_entries, shipped_manifest_dir
from tileops.ops.spec import Emitted, OpEntry, Signature
from tileops.ops.registry import op_class
from tileops.ops.workload import BoundRow, bind_row, build_inputs, instantiate

ENTRIES = load_entries()
IMPLEMENTED = sorted(n for n, e in ENTRIES.items() if e.status == "implemented")


# --- the minimum-traffic definition, restated independently ------------------------------------


def element_size(dtype: str) -> int:
    """Bytes per element, from torch (not from the manifest's primitive table)."""
    return torch.empty((), dtype=to_torch(dtype)).element_size()


@dataclass(frozen=True)
class Traffic:
    total: int
    read: int


def minimum_traffic(sig: Signature, in_shapes: dict[str, tuple[int, ...]], out_shapes: dict[str, tuple[int, ...]],
                    dtypes: dict[str, str]) -> Traffic:
    """§1.2 rule 1: each distinct input storage read once (unless write_only), each public output
    written once, a mutated input read and written, a write_only input written once, a declared
    alias one storage; an absent optional input moves nothing."""
    storage: dict[str, list[int]] = {}  # storage -> [size, reads, writes]
    for t in sig.inputs:
        if t.name not in in_shapes:
            continue
        size = math.prod(in_shapes[t.name]) * element_size(dtypes[t.name])
        storage[t.name] = [size, 0 if t.write_only else 1, 1 if (t.mutated or t.write_only) else 0]
    for t in sig.outputs:
        if t.alias is not None:
            storage[t.alias][2] = 1  # written into its input's storage, not a storage of its own
        else:
            storage[t.name] = [math.prod(out_shapes[t.name]) * element_size(dtypes[t.name]), 0, 1]
    return Traffic(total=sum(s * (r + w) for s, r, w in storage.values()),
                   read=sum(s * r for s, r, _ in storage.values()))


# --- level one ---------------------------------------------------------------------------------


class NotRecountable(Exception):
    """The op cannot be priced on meta tensors: its traffic is value-decided (level two)."""


def dtype_cases(entry: OpEntry, bound_present: tuple[str, ...], row_cases: tuple[Any, ...]) -> list[Any]:
    """The row's own dtype cases plus every combination of the free dtypes its unions allow."""
    free = [t for t in entry.signature.tensors if t.is_free_dtype and (not t.optional or t.name in bound_present)]
    combos = [dict(zip((t.name for t in free), c)) for c in itertools.product(*(t.dtypes for t in free))] if free else []
    cases: list[Any] = list(row_cases)
    for c in combos:
        if c not in cases and not any(isinstance(rc, str) and all(v == rc for v in c.values()) for rc in row_cases):
            cases.append(c)
    return cases


def level_one_calls(entry: OpEntry) -> list[BoundRow]:
    return [bind_row(entry, row, case) for row in entry.workloads
            for case in dtype_cases(entry, row.present, row.dtypes)]


def level_one(name: str, emitted: Emitted | None = None) -> list[str]:
    """Recount every (row, dtype) of ``name`` on meta tensors; return every mismatch.

    ``emitted`` prices with another evaluator (a mutated manifest's); by default the op's own.
    Raises NotRecountable when a call on meta tensors cannot be priced.
    """
    entry = ENTRIES[name]
    mismatches: list[str] = []
    for bound in level_one_calls(entry):
        op = instantiate(entry, bound.row)
        inputs = build_inputs(op, bound, "meta")
        op(**inputs)
        evaluator = emitted or op.emitted
        try:
            _, nbytes = evaluator.roofline(op.last_call)
            read = evaluator.read_bytes(op.last_call) if evaluator.read_bytes else None
        except OpNotAvailableError as exc:
            raise NotRecountable(f"{name}: {exc}") from exc
        ix = op.emitted.with_lets({**bound.row.indices, **op.params})
        want = minimum_traffic(entry.signature, bound.shapes, op.emitted.output_shapes(ix), bound.dtypes)
        where = f"{name} [{bound.row.label}, {bound.case_name}]"
        if nbytes != want.total:
            mismatches.append(f"{where}: eval_roofline bytes {nbytes} != recount {want.total}")
        if read is not None and read != want.read:
            mismatches.append(f"{where}: read bytes {read} != recount {want.read}")
    return mismatches


# --- level two: value-decided traffic, hand-written --------------------------------------------


def run(name: str, **inputs: torch.Tensor) -> Any:
    op = op_class(name)(**inputs.pop("_params", {}))  # type: ignore[arg-type]
    op(**inputs)
    return op


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def level_two_embedding() -> None:
    # ids name rows {1, 3, 7} (six lookups, three distinct): each distinct row is read once.
    ids = torch.tensor([[3, 3, 7], [1, 7, 3]], dtype=torch.int64)
    weight = torch.randn(100, 16)
    op = run("embedding", ids=ids, weight=weight)
    rows_read = 3 * 16 * 4  # 3 distinct rows x D=16 x fp32
    ids_read = 6 * 8  # six int64 ids
    out_written = 6 * 16 * 4  # [2, 3, 16] fp32
    assert op.eval_roofline() == (0, rows_read + ids_read + out_written)
    assert op.eval_roofline_read_bytes() == rows_read + ids_read
    assert op.roofline_data_terms() == {"distinct_rows": 3, "tokens": 6}
    # Every id the same: one row, whatever the table size.
    op = run("embedding", ids=torch.full((64,), 5, dtype=torch.int32), weight=torch.randn(1000, 8, dtype=torch.bfloat16))
    assert op.eval_roofline() == (0, 1 * 8 * 2 + 64 * 4 + 64 * 8 * 2)
    # The cpu workload rows: recount from the ids each row drew from its own generator.
    for bound, op, inputs in workload_calls("embedding"):
        distinct = int(np.unique(inputs["ids"].numpy()).size)
        row_bytes = bound.shapes["weight"][1] * element_size(bound.dtypes["weight"])
        out = math.prod(bound.shapes["ids"]) * row_bytes
        assert op.eval_roofline() == (0, distinct * row_bytes + nbytes(inputs["ids"]) + out), bound.row.label


def _moe_weights(experts: int, hidden: int, inter: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(experts, 2 * inter, hidden) * 0.1, torch.randn(experts, hidden, inter) * 0.1


def level_two_fused_experts() -> None:
    # Six tokens, top-2 over 8 experts, routed only to experts {0, 1, 2}: experts 3..7 receive no
    # rows, so their weights are not read (§1.3). Hidden 16, intermediate 8 (w13 rows 16).
    T, H, I, E = 6, 16, 8, 8
    ids = torch.tensor([[0, 1], [1, 0], [0, 2], [2, 1], [0, 1], [1, 2]], dtype=torch.int32)
    w = torch.full((T, 2), 0.5)
    x = torch.randn(T, H)
    w13, w2 = _moe_weights(E, H, I)
    op = run("fused_experts", x=x, topk_weights=w, topk_ids=ids, w13=w13, w2=w2)
    per_expert = (2 * I * H + H * I) * 4  # one expert's w13[e] and w2[e], fp32
    reads = T * H * 4 + T * 2 * 4 + T * 2 * 4 + 3 * per_expert  # x, topk_weights, topk_ids (int32), 3 experts
    assert op.eval_roofline()[1] == reads + T * H * 4  # + out
    assert op.eval_roofline_read_bytes() == reads
    assert op.roofline_data_terms()["experts_hit"] == 3
    # FLOPs: each stage as the op that runs it alone would count it (§1.3), recounted here by
    # running those ops alone on the rows each expert received (e0: 4 rows, e1: 5, e2: 3).
    flops = 0
    for e, rows in {0: 4, 1: 5, 2: 3}.items():
        flops += run("linear", x=torch.randn(rows, H), w=w13[e]).eval_roofline()[0]
        flops += run("silu_and_mul", x=torch.randn(rows, 2 * I)).eval_roofline()[0]
        flops += run("linear", x=torch.randn(rows, I), w=w2[e]).eval_roofline()[0]
    flops += run("moe_combine", expert_out=torch.randn(T, 2, H), topk_weights=w).eval_roofline()[0]
    assert op.eval_roofline()[0] == flops
    # The cpu workload rows: recount from the routing each row drew from its own generator.
    for bound, op, inputs in workload_calls("fused_experts"):
        hit = int(np.unique(inputs["topk_ids"].numpy()).size)
        per = (nbytes(inputs["w13"]) + nbytes(inputs["w2"])) // bound.row.indices["E"]
        reads = nbytes(inputs["x"]) + nbytes(inputs["topk_weights"]) + nbytes(inputs["topk_ids"]) + hit * per
        assert op.eval_roofline_read_bytes() == reads, bound.row.label
        assert op.eval_roofline()[1] == reads + nbytes(inputs["x"]), bound.row.label  # out is x's size


def level_two_moe_ffn() -> None:
    # Five tokens whose logits put each one's top-2 on experts {0, 1} out of 8: two experts' weights
    # are read. The routing results (topk weights and ids) are intermediates: never counted.
    T, H, I, E = 5, 16, 8, 8
    logits = torch.full((T, E), -10.0)
    for t in range(T):
        logits[t, t % 2] = 10.0
        logits[t, 1 - t % 2] = 9.0
    x = torch.randn(T, H)
    w13, w2 = _moe_weights(E, H, I)
    op = run("moe_ffn", x=x, router_logits=logits, w13=w13, w2=w2, _params={"top_k": 2})
    per_expert = (2 * I * H + H * I) * 4
    reads = T * H * 4 + T * E * 4 + 2 * per_expert  # x, router_logits, experts {0, 1}
    assert op.eval_roofline()[1] == reads + T * H * 4
    assert op.eval_roofline_read_bytes() == reads
    # FLOPs: routing as topk_softmax alone counts it + experts as fused_experts alone counts it.
    routing = run("topk_softmax", router_logits=logits, _params={"top_k": 2})
    w, ids = routing(logits)
    experts = run("fused_experts", x=x, topk_weights=w, topk_ids=ids, w13=w13, w2=w2)
    assert op.eval_roofline()[0] == routing.eval_roofline()[0] + experts.eval_roofline()[0]
    assert op.roofline_data_terms()["experts_hit"] == 2
    # The cpu workload rows: the routing follows from the logits each row drew (distinct floats,
    # so the top-k is unique), recounted with numpy.
    for bound, op, inputs in workload_calls("moe_ffn"):
        k = op.params["top_k"]
        chosen = np.argsort(-inputs["router_logits"].float().numpy(), axis=-1)[:, :k]
        hit = int(np.unique(chosen).size)
        per = (nbytes(inputs["w13"]) + nbytes(inputs["w2"])) // bound.row.indices["E"]
        reads = nbytes(inputs["x"]) + nbytes(inputs["router_logits"]) + hit * per
        assert op.eval_roofline_read_bytes() == reads, bound.row.label
        assert op.eval_roofline()[1] == reads + nbytes(inputs["x"]), bound.row.label


def workload_calls(name: str) -> list[tuple[BoundRow, Any, dict[str, torch.Tensor]]]:
    """Run the op's cpu rows on real tensors drawn from each row's own generator."""
    entry = ENTRIES[name]
    out = []
    for row in entry.workloads:
        if "cpu" not in row.tags:
            continue
        for case in row.dtypes:
            bound = bind_row(entry, row, case)
            op = instantiate(entry, row)
            inputs = build_inputs(op, bound, "cpu")
            op(**inputs)
            out.append((bound, op, inputs))
    assert out, f"{name} has no cpu row to recount"
    return out


#: Level two: one hand-written case per value-decided op.
LEVEL_TWO: dict[str, Callable[[], None]] = {
    "embedding": level_two_embedding,
    "fused_experts": level_two_fused_experts,
    "moe_ffn": level_two_moe_ffn,
}
LEVEL_ONE = [n for n in IMPLEMENTED if n not in LEVEL_TWO]


# --- the tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", LEVEL_ONE)
def test_level_one_recount_equals_eval_roofline(name: str) -> None:
    try:
        mismatches = level_one(name)
    except NotRecountable as exc:
        pytest.fail(f"{exc}\n{name} is not recountable on meta tensors: add a level-two case to LEVEL_TWO")
    assert mismatches == []


@pytest.mark.parametrize("name", sorted(LEVEL_TWO))
def test_level_two_value_decided_traffic(name: str) -> None:
    LEVEL_TWO[name]()


def test_every_implemented_op_sits_at_exactly_one_level() -> None:
    """An op added to the manifest is recounted by the binder (LEVEL_ONE is every implemented op
    without a hand-written case, and its test fails when the op cannot be priced on meta tensors)
    or by a level-two case; a level-two op must really be beyond the binder."""
    assert set(LEVEL_TWO) <= set(IMPLEMENTED), "a level-two case names no implemented op"
    assert set(LEVEL_ONE) | set(LEVEL_TWO) == set(IMPLEMENTED)
    assert not set(LEVEL_ONE) & set(LEVEL_TWO)
    for name in LEVEL_TWO:
        with pytest.raises(NotRecountable):
            level_one(name)


def test_level_one_covers_every_row_and_dtype() -> None:
    """The binder's cases include every row and every dtype each row's unions allow."""
    for name in LEVEL_ONE:
        entry = ENTRIES[name]
        calls = level_one_calls(entry)
        assert {b.row.label for b in calls} == {r.label for r in entry.workloads}
        for t in entry.signature.tensors:
            if t.is_free_dtype:
                seen = {b.dtypes[t.name] for b in calls if t.name in b.dtypes}
                assert seen == set(t.dtypes), f"{name}.{t.name}: {seen} != {set(t.dtypes)}"


def test_the_recount_rules_themselves() -> None:
    """The effect rules on a hand-made signature, including the marks no shipped op uses yet:
    a write_only buffer is written once, an aliased output is its input's storage, an absent
    optional input moves nothing."""
    from tileops.ops.spec import TensorSpec as T

    sig = Signature(
        inputs=(T("x", ("N",), ("float32",)), T("acc", ("N",), ("float16",), mutated=True),
                T("buf", ("N",), ("bfloat16",), write_only=True), T("bias", ("N",), ("float32",), optional=True),
                T("inplace", ("N",), ("float32",))),
        outputs=(T("y", ("N",), ("float32",)), T("z", ("N",), ("float32",), alias="inplace")),
    )
    shapes = {"x": (10,), "acc": (10,), "buf": (10,), "inplace": (10,)}  # bias absent
    dtypes = {"x": "float32", "acc": "float16", "buf": "bfloat16", "inplace": "float32", "y": "float32",
              "z": "float32"}
    got = minimum_traffic(sig, shapes, {"y": (10,), "z": (10,)}, dtypes)
    # x read 40; acc read+written 2*20; buf written 20; inplace read 40 + written once (z) 40; y written 40
    assert got == Traffic(total=40 + 40 + 20 + 80 + 40, read=40 + 20 + 40)


# --- mutation: slips in a copy of the manifest are caught ---------------------------------------

#: (op, bytes expression written into the copy, the slip it carries)
MUTATIONS = [
    ("rms_norm", "2 * bytes(x) + bytes(weight) + bytes(y)", "coefficient slip: x charged twice"),
    ("softmax", "bytes(x)", "missed output: y never written"),
    ("fused_add_rms_norm", "bytes(x) + bytes(residual) + bytes(weight) + bytes(y)",
     "missed output: the mutated residual's write"),
    ("layer_norm", "prod(B) * N * 2 + bytes(weight) + bytes(bias) + bytes(y)",
     "wrong element size: x charged at 2 bytes whatever its dtype"),
    ("add", "bytes(a) + prod(broadcast(S, T)) * bits(b) / 8 + bytes(y)",
     "broadcast operand charged at the output's shape"),
    ("gemm", "bytes(a) + bytes(b) + M * N * 2", "wrong element size: c at 2 bytes"),
]


def load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def mutant(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """A copy of the shipped manifest with each mutation written in, and its own generated module."""
    mdir = tmp_path_factory.mktemp("mutant") / "manifest"
    shutil.copytree(shipped_manifest_dir(), mdir)
    for op, expr, _ in MUTATIONS:
        path = mdir / Path(ENTRIES[op].file).name
        doc = yaml.safe_load(path.read_text())
        doc[op]["roofline"]["bytes"] = expr
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    target, text, report = generate(mdir)
    assert report.ok, [d.render() for d in report.defects]  # every slip is a valid formula
    target.write_text(text)
    return load_module(target, "tileops_oracle_mutant_gen")


@pytest.mark.parametrize("op,expr,slip", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_oracle_catches_a_slip_in_a_copy_of_the_manifest(mutant: ModuleType, op: str, expr: str, slip: str) -> None:
    mismatches = level_one(op, emitted=mutant.ENTRIES[op])
    assert mismatches, f"the oracle missed: {slip}"


def test_the_mutant_copy_is_otherwise_faithful(mutant: ModuleType) -> None:
    """Control: an entry the mutation left alone passes the oracle through the copy's evaluator."""
    assert level_one("relu", emitted=mutant.ENTRIES["relu"]) == []
    assert level_one("sdpa_fwd", emitted=mutant.ENTRIES["sdpa_fwd"]) == []
