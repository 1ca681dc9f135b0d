"""The analysis (§4.4) is total, lossless and accumulating, and every defect code is reachable."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tileops.manifest.analysis import DEFECT_CODES, State, analyze


def good_entry() -> dict[str, Any]:
    return {
        "family": "elementwise",
        "ref_api": "torch.add",
        "status": "implemented",
        "signature": {
            "inputs": [
                {"name": "a", "shape": "[*S]", "dtype": "float16 | float32"},
                {"name": "b", "shape": "[*S]", "dtype": "same_as(a)"},
                {"name": "bias", "shape": "[N]", "dtype": "same_as(a)", "optional": True},
            ],
            "outputs": [{"name": "y", "shape": "[*S]", "dtype": "same_as(a)"}],
            "params": {"alpha": {"type": "float", "default": 1.0}},
            "let": {"E": "prod(S)"},
        },
        "workloads": [
            {"label": "small", "indices": {"S": [4, 8]}, "dtypes": ["float32"], "tags": ["cpu"]},
            {"label": "bias", "indices": {"S": [4, 8], "N": 8}, "present": ["bias"], "dtypes": ["float16"]},
        ],
        "roofline": {"flops": "E + (N if present(bias) else 0)"},
    }


def codes(entry: Any) -> set[str]:
    return {d.code for d in analyze(entry, "op", "m.yaml").defects}


def test_good_entry_is_clean_and_emittable() -> None:
    a = analyze(good_entry(), "add2", "m.yaml")
    assert a.ok, [d.render() for d in a.defects]
    assert a.emittable
    assert a.entry is not None and a.entry.signature.lets == (("E", "prod(S)"),)
    assert [w.label for w in a.entry.workloads] == ["small", "bias"]


# -- totality -----------------------------------------------------------------------------

yaml_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(["[M, K]", "[*B, N]", "float16 | bfloat16", "same_as(x)", "param(d)", "prod(S)",
                     "2 * M * N * K", "bytes(x)", "present(b)", "x", "implemented", "spec-only",
                     "tileops.ops.formulas.f", "[", "1 +", "__import__('os')"]),
)
yaml_values = st.recursive(
    yaml_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=8), st.sampled_from(
            ["family", "ref_api", "status", "signature", "inputs", "outputs", "params", "let", "name", "shape",
             "dtype", "optional", "mutated", "write_only", "alias", "metadata", "workloads", "label", "indices",
             "dtypes", "present", "roofline", "flops", "bytes", "func", "read_bytes", "type", "default"])),
            children, max_size=5),
    ),
    max_leaves=30,
)


def mutate(entry: dict, path: list, value: Any) -> dict:
    e = copy.deepcopy(entry)
    cur: Any = e
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    return e


MUTATION_POINTS = [
    ["family"], ["status"], ["signature"], ["signature", "inputs"], ["signature", "inputs", 0],
    ["signature", "inputs", 0, "shape"], ["signature", "inputs", 0, "dtype"], ["signature", "outputs"],
    ["signature", "params"], ["signature", "let"], ["workloads"], ["workloads", 0], ["workloads", 0, "indices"],
    ["workloads", 0, "dtypes"], ["roofline"], ["roofline", "flops"],
]


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entry=yaml_values, name=yaml_values)
def test_analysis_never_raises_on_any_yaml_value(entry: Any, name: Any) -> None:
    a = analyze(entry, name, "fuzz.yaml")
    assert (a.entry is None) or a.ok  # an entry is emitted only from a clean analysis
    assert "internal" not in {d.code for d in a.defects}, [d.render() for d in a.defects]


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(point=st.sampled_from(MUTATION_POINTS), value=yaml_values)
def test_analysis_never_raises_on_a_mutated_real_entry(point: list, value: Any) -> None:
    """Near-valid entries reach deep checks that random values rarely get to."""
    a = analyze(mutate(good_entry(), point, value), "op", "fuzz.yaml")
    assert (a.entry is None) or a.ok
    assert "internal" not in {d.code for d in a.defects}, [d.render() for d in a.defects]


# -- lossless -------------------------------------------------------------------------------


def test_absent_and_malformed_are_told_apart() -> None:
    absent = good_entry()
    del absent["family"]
    malformed = mutate(good_entry(), ["family"], 42)
    a1 = analyze(absent, "op", "m.yaml")
    a2 = analyze(malformed, "op", "m.yaml")
    assert a1.facts["family"] is State.ABSENT and a2.facts["family"] is State.MALFORMED
    assert [d.code for d in a1.defects] == ["missing-field"]
    assert [d.code for d in a2.defects] == ["bad-type"]
    # an optional field that is absent is not a defect; malformed is
    e = good_entry()
    assert analyze(e, "op").facts["description"] is State.ABSENT
    assert "bad-type" in codes(mutate(e, ["description"], ["x"]))


# -- accumulating ---------------------------------------------------------------------------


def test_defects_accumulate_and_unreached_names_the_missing_fact() -> None:
    e = good_entry()
    e["family"] = ""
    e["status"] = "done"
    e["signature"] = "not a mapping"
    e["roofline"]["flops"] = "frobnicate(M) + "
    a = analyze(e, "op", "m.yaml")
    got = {d.code for d in a.defects}
    assert {"bad-type", "bad-status", "syntax"} <= got
    assert any(u.missing == "signature" for u in a.unreached)
    assert all(d.location.startswith("m.yaml:op") for d in a.defects)


def test_unknown_names_are_checked_even_when_another_part_is_broken() -> None:
    e = good_entry()
    e["status"] = 7
    e["roofline"]["flops"] = "Q * 2"
    got = codes(e)
    assert {"bad-type", "unknown-name"} <= got


# -- every defect code ------------------------------------------------------------------------

PROVOKE: dict[str, Any] = {
    "entry-type": ["not", "a", "mapping"],
    "unknown-field": mutate(good_entry(), ["colour"], "blue"),
    "missing-field": {k: v for k, v in good_entry().items() if k != "ref_api"},
    "bad-type": mutate(good_entry(), ["ref_api"], 3),
    "bad-status": mutate(good_entry(), ["status"], "done"),
    "bad-name": mutate(good_entry(), ["signature", "inputs", 0, "name"], "2x"),
    "duplicate-name": mutate(good_entry(), ["signature", "inputs", 1, "name"], "a"),
    "bad-shape": mutate(good_entry(), ["signature", "inputs", 0, "shape"], "[M + 1]"),
    "bad-dtype": mutate(good_entry(), ["signature", "inputs", 0, "dtype"], "float17"),
    "bad-flag": mutate(good_entry(), ["signature", "outputs", 0, "optional"], True),
    "bad-param": mutate(good_entry(), ["signature", "params", "alpha"], {"type": "complex"}),
    "roofline-mode": mutate(good_entry(), ["roofline"], {"flops": "E", "func": "tileops.ops.formulas.f"}),
    "syntax": mutate(good_entry(), ["roofline", "flops"], "E +"),
    "bad-form": mutate(good_entry(), ["roofline", "flops"], "E.real"),
    "unknown-function": mutate(good_entry(), ["roofline", "flops"], "sqrt(E)"),
    "bad-arity": mutate(good_entry(), ["roofline", "flops"], "ceil_div(E)"),
    "tensor-arg": mutate(good_entry(), ["roofline", "flops"], "present(a)"),
    "unknown-name": mutate(good_entry(), ["roofline", "flops"], "E * K"),
    "bad-func-path": mutate(good_entry(), ["roofline"], {"func": "os.system"}),
    "no-workloads": mutate(good_entry(), ["workloads"], []),
    "bad-workload": mutate(good_entry(), ["workloads", 0, "indices"], {"S": [4, 8], "Q": 3}),
    "duplicate-label": mutate(good_entry(), ["workloads", 1, "label"], "small"),
    "too-complex": mutate(good_entry(), ["roofline", "flops"], " + ".join(["E"] * 300)),
    "bad-constant": mutate(good_entry(), ["roofline", "flops"], "E * 10 ** 10 ** 10"),
}


def test_a_bad_dtype_on_an_input_is_one_defect_and_its_dependents_are_not_reached() -> None:
    """Issue 17: a bad dtype on x must not also yield a false "same_as(x) names no tensor" on y;
    the judgments that need x's dtype are recorded as not reached, naming that fact (§4.4)."""
    e = good_entry()
    e["signature"]["inputs"][0]["dtype"] = "float33"  # a, the anchor of b's and y's same_as
    a = analyze(e, "op", "m.yaml")
    assert [(d.code, d.location) for d in a.defects] == [("bad-dtype", "m.yaml:op.signature.inputs[0](a).dtype")]
    unreached = {(u.judgment, u.missing) for u in a.unreached}
    assert ("same_as(a) resolves", "signature.inputs[0](a).dtype") in unreached
    assert a.entry is None
    # the same holds for a tensor referred to by bytes()/present(), and a dtype parameter
    e = good_entry()
    e["signature"]["inputs"][2]["shape"] = "[N"  # bias: its shape does not parse
    e["roofline"]["bytes"] = "bytes(a) + bytes(bias) + bytes(y)"
    a = analyze(e, "op", "m.yaml")
    assert [d.code for d in a.defects] == ["bad-shape"], [d.render() for d in a.defects]
    assert any(u.judgment == "bytes(bias) names a tensor" and u.missing.endswith("(bias).shape")
               for u in a.unreached), a.unreached
    # a name an unreadable shape may declare is not reached either: N came from bias' shape
    assert any(u.judgment == "'N' resolves" for u in a.unreached), a.unreached


def test_a_broken_parameter_is_not_reported_again_where_it_is_used() -> None:
    e = good_entry()
    e["signature"]["params"] = {"d": {"type": "dtype", "default": "float99"}}
    e["signature"]["outputs"][0]["dtype"] = "param(d)"
    a = analyze(e, "op", "m.yaml")
    assert [d.code for d in a.defects] == ["bad-param"], [d.render() for d in a.defects]
    assert any(u.judgment == "param(d) names a dtype parameter" for u in a.unreached)


def test_every_defect_code_has_a_provoking_case() -> None:
    assert set(PROVOKE) == set(DEFECT_CODES)


@pytest.mark.parametrize("code", sorted(DEFECT_CODES))
def test_defect_code_is_provoked(code: str) -> None:
    a = analyze(PROVOKE[code], "op", "m.yaml")
    got = [d for d in a.defects if d.code == code]
    assert got, f"{code} not raised; got {[d.render() for d in a.defects]}"
    d = got[0]
    assert d.location.startswith("m.yaml:op") and d.message and d.fix
    assert a.entry is None


def test_refusing_a_function_lists_the_allowed_names() -> None:
    a = analyze(PROVOKE["unknown-function"], "op", "m.yaml")
    d = next(d for d in a.defects if d.code == "unknown-function")
    for name in ("prod", "ceil_div", "bytes", "present", "bits"):
        assert name in d.fix


@pytest.mark.parametrize("formula", ["__import__('os')", "E if True else (lambda: 1)()", "[E][0]", "'E'", "E(1)"])
def test_dangerous_or_foreign_forms_are_refused(formula: str) -> None:
    assert codes(mutate(good_entry(), ["roofline", "flops"], formula)) & {"bad-form", "unknown-function"}


def test_workload_rows_must_fit_the_signature() -> None:
    e = good_entry()
    e["workloads"] = [
        {"label": "missing-index", "indices": {}, "dtypes": ["float32"]},
        {"label": "bad-dtype", "indices": {"S": [2]}, "dtypes": ["bfloat16"]},
        {"label": "not-optional", "indices": {"S": [2]}, "present": ["a"], "dtypes": ["float32"]},
        {"label": "bad-size", "indices": {"S": [0]}, "dtypes": ["float32"]},
        {"label": "bad-param", "indices": {"S": [2]}, "params": {"alpha": "x"}, "dtypes": ["float32"]},
    ]
    a = analyze(e, "op", "m.yaml")
    msgs = [d.location for d in a.defects if d.code == "bad-workload"]
    for label in ("missing-index", "bad-dtype", "not-optional", "bad-size", "bad-param"):
        assert any(f"workloads[{label}]" in m for m in msgs), (label, msgs)
