"""The analysis and the manifest reader are total (§4.4, issue 15 §2-§3): any YAML, any formula
gives a defect list or a clean result, never an exception, each in bounded time and memory."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tileops.manifest.analysis import analyze
from tileops.manifest.codegen import generate
from tileops.manifest.load import MAX_EXPANDED_NODES, read_manifest

GOOD = {
    "family": "test", "ref_api": "torch.relu", "status": "spec-only",
    "signature": {
        "inputs": [{"name": "x", "shape": "[M, N]", "dtype": "float32 | float16"}],
        "outputs": [{"name": "y", "shape": "[M, N]", "dtype": "same_as(x)"}],
        "params": {"alpha": {"type": "float", "default": 1.0}},
    },
    "workloads": [{"label": "w", "indices": {"M": 4, "N": 8}, "dtypes": ["float32"]}],
    "roofline": {"flops": "M * N"},
}


def with_flops(formula: Any) -> dict:
    return {**GOOD, "roofline": {"flops": formula}}


#: The bounds are on the CPU time this process spends (time.process_time), not wall time: an unbounded
#: analysis of these inputs takes minutes or never ends, a bounded one milliseconds, and a shared CI
#: machine's load stretches wall time but not the CPU a case consumes.
def timed_analyze(entry: Any, name: Any = "op") -> tuple[Any, float]:
    t0 = time.process_time()
    a = analyze(entry, name, "m.yaml")
    return a, time.process_time() - t0


def read(tmp_path: Path, text: str | bytes, name: str = "m.yaml"):
    f = tmp_path / name
    f.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    t0 = time.process_time()
    report = read_manifest([f])
    return report, time.process_time() - t0, f


def test_the_reference_entry_is_clean() -> None:
    assert analyze(GOOD, "op", "m.yaml").ok


# --- formulas: deep, wide, huge -----------------------------------------------------------------

@pytest.mark.parametrize("formula", [
    " + ".join(["M"] * 1000),  # a 1,000-term sum
    "-" * 1000 + "M",  # 1,000 nested unary operators
    "-" * 100_000 + "M",
    "not " * 1000 + "M",
    "(" * 500 + "M" + ")" * 500,
    "M * " * 5000 + "N",
    "f(" * 300 + "M" + ")" * 300,
], ids=["sum-1000", "unary-1000", "unary-100k", "not-1000", "parens-500", "product-5000", "calls-300"])
def test_a_huge_or_deep_formula_is_a_located_defect(formula: str) -> None:
    a, took = timed_analyze(with_flops(formula))
    assert took < 1.0
    got = [d for d in a.defects if d.location == "m.yaml:op.roofline.flops"]
    assert got and got[0].code in {"too-complex", "syntax"}, [d.render() for d in a.defects]
    assert "internal" not in {d.code for d in a.defects}


@pytest.mark.parametrize("formula,fragment", [
    ("M * 10 ** 10 ** 10", "exponent"),
    ("M * 10 ** 400", "exponent"),
    ("1e999 * M", "finite"),
    ("M * (1e308 * 10)", "finite"),
    ("M ** N", "not a constant"),
    ("M // (2 - 2)", "divides by zero"),
    ("M * " + "9" * 30, "below 2**64"),
    ("(-8) ** 0.5 * M", "finite"),
])
def test_unbounded_or_non_finite_constant_arithmetic_is_refused(formula: str, fragment: str) -> None:
    a, took = timed_analyze(with_flops(formula))
    assert took < 1.0
    bad = [d for d in a.defects if d.code == "bad-constant"]
    assert bad and fragment in bad[0].message and bad[0].location == "m.yaml:op.roofline.flops", \
        [d.render() for d in a.defects]


def test_modest_constants_and_powers_are_fine() -> None:
    assert analyze(with_flops("M * N ** 2 + 2 ** 10 + 0.5 * M * N * 2"), "op", "m.yaml").ok


@pytest.mark.parametrize("default", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_float_default_is_refused(default: float) -> None:
    e = {**GOOD, "signature": {**GOOD["signature"], "params": {"alpha": {"type": "float", "default": default}}}}
    a = analyze(e, "op", "m.yaml")
    assert [d.code for d in a.defects] == ["bad-param"] and "finite" in a.defects[0].message
    assert a.defects[0].location == "m.yaml:op.signature.params.alpha.default"


def test_non_finite_values_in_yaml_are_refused_and_codegen_still_writes_python(tmp_path: Path) -> None:
    """`.nan`, `.inf` and `1e999` (which YAML reads as inf) in a default, a row's params and a formula."""
    text = yaml.safe_dump({"op": GOOD}).replace("default: 1.0", "default: .nan")
    text += yaml.safe_dump({"op2": {**with_flops("M * 1e999"), "workloads": [
        {"label": "w", "indices": {"M": 4, "N": 8}, "dtypes": ["float32"], "params": {"alpha": 1e999}}]}})
    (tmp_path / "m.yaml").write_text(text)
    target, code, report = generate(tmp_path)
    got = {(d.location.split(":", 1)[1], d.code) for d in report.defects}
    assert ("op.signature.params.alpha.default", "bad-param") in got
    assert ("op2.roofline.flops", "bad-constant") in got
    assert ("op2.workloads[w].params.alpha", "bad-workload") in got
    assert report.entries() == {}
    target.write_text(code)
    spec = importlib.util.spec_from_file_location("hostile_nonfinite_gen", target)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # it imports: no bare inf or nan anywhere
    assert mod.ENTRIES == {}


def test_a_shape_written_with_non_ascii_digits_is_a_located_defect() -> None:
    for shape in ("[M, ٤]", "[M, ²]", "[M, ４]", "[M, 1" + "0" * 5000 + "]"):
        e = {**GOOD, "signature": {**GOOD["signature"],
                                   "inputs": [{"name": "x", "shape": shape, "dtype": "float32"}]}}
        a, took = timed_analyze(e)
        assert took < 1.0
        assert [d.location for d in a.defects if d.code == "bad-shape"] == ["m.yaml:op.signature.inputs[0](x).shape"]
        assert "internal" not in {d.code for d in a.defects}


def test_an_oversized_index_in_a_row_is_refused() -> None:
    e = {**GOOD, "workloads": [{"label": "w", "indices": {"M": 10 ** 40, "N": 8}, "dtypes": ["float32"]}]}
    assert [d.code for d in analyze(e, "op", "m.yaml").defects] == ["bad-workload"]


def test_a_func_path_must_name_a_public_function_of_the_formulas_module() -> None:
    for path in ("tileops.ops.formulas.__class__", "tileops.ops.formulas._private", "tileops.perf.formulas.f",
                 "os.system", "tileops.ops.formulas.a.b"):
        a = analyze({**GOOD, "roofline": {"func": path}}, "op", "m.yaml")
        assert [d.code for d in a.defects] == ["bad-func-path"], (path, [d.render() for d in a.defects])


# --- YAML files: aliases, encodings, duplicates, case ----------------------------------------------

BILLION_LAUGHS = """\
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def test_a_billion_laughs_document_is_unreadable_quickly(tmp_path: Path) -> None:
    report, took, f = read(tmp_path, BILLION_LAUGHS)
    assert took < 1.0
    assert len(report.unreadable) == 1 and report.unreadable[0].startswith(f"{f}:1:")
    assert f"{MAX_EXPANDED_NODES:,}" in report.unreadable[0]


def test_modest_aliases_still_read(tmp_path: Path) -> None:
    """The shipped manifest shares rows by alias: a bound, not a ban."""
    entry = """
  family: test
  ref_api: torch.relu
  status: spec-only
  signature:
    inputs: [{name: x, shape: "[M, N]", dtype: float32}]
    outputs: [{name: y, shape: "[M, N]", dtype: same_as(x)}]
  roofline: {flops: "M * N"}
"""
    text = (f"op:{entry}  workloads: &rows\n    - {{label: w, indices: {{M: 4, N: 8}}, dtypes: [float32]}}\n"
            f"op2:{entry}  workloads: *rows\n")
    report, _, _ = read(tmp_path, text)
    assert report.ok, report.unreadable + [d.render() for d in report.defects]
    assert report.entries()["op2"].workloads == report.entries()["op"].workloads


def test_a_recursive_alias_is_unreadable(tmp_path: Path) -> None:
    report, took, f = read(tmp_path, "op: &x\n  family: test\n  self: *x\n")
    assert took < 1.0 and report.unreadable and report.unreadable[0].startswith(f"{f}:")
    assert "recursive" in report.unreadable[0]


@pytest.mark.parametrize("text", [
    "op: " + "[" * 5000 + "]" * 5000 + "\n",
    "op: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n",
    "".join(" " * i + f"k{i}:\n" for i in range(2000)) + " " * 2000 + "v\n",
    "".join(" " * i + "-\n" for i in range(2000)),
], ids=["flow-seq", "flow-map", "block-map", "block-seq"])
def test_deeply_nested_yaml_is_unreadable_quickly(tmp_path: Path, text: str) -> None:
    report, took, f = read(tmp_path, text)
    assert took < 1.0
    assert len(report.unreadable) == 1 and "nests more than 64 levels" in report.unreadable[0]
    assert report.unreadable[0].startswith(f"{f}:")


def test_a_non_utf8_file_is_unreadable_with_its_line(tmp_path: Path) -> None:
    text = yaml.safe_dump({"op": GOOD}).encode("utf-8").replace(b"test", b"t\xe9st")
    report, _, f = read(tmp_path, text)
    at = text.index(b"\xe9")
    line = text[:at].count(b"\n") + 1
    assert report.unreadable == [f"{f}:{line}: not UTF-8 (byte 0xe9 at offset {at}); save the file as UTF-8"]


@pytest.mark.parametrize("text", [
    "op: 2001-02-30\n",  # YAML accepts the date, Python cannot build it
    "op: " + "1" * 5000 + "\n",  # past Python's int-from-string limit
    "? [a, b]\n: 1\n",  # an unhashable key
    "op: !!python/object:os.system {}\n",  # a tag safe_load refuses
    "\x00",
])
def test_values_python_cannot_build_are_unreadable_not_a_traceback(tmp_path: Path, text: str) -> None:
    report, took, f = read(tmp_path, text)
    assert took < 1.0 and report.unreadable and report.unreadable[0].startswith(str(f))


def test_an_op_declared_twice_in_one_file_is_a_defect(tmp_path: Path) -> None:
    one = yaml.safe_dump({"op": GOOD})
    report, _, f = read(tmp_path, one + one)
    line = one.count("\n") + 1
    dup = [d for d in report.defects if d.code == "duplicate-name"]
    assert [d.location for d in dup] == [f"{f}:{line}"], [d.render() for d in report.defects]
    assert "declared twice" in dup[0].message and report.entries() == {}


def test_a_key_declared_twice_inside_an_entry_is_a_defect(tmp_path: Path) -> None:
    text = yaml.safe_dump({"op": GOOD}, sort_keys=False).replace("  status: spec-only\n",
                                                                 "  status: spec-only\n  family: other\n")
    report, _, f = read(tmp_path, text)
    dup = [d for d in report.defects if d.code == "duplicate-key"]
    assert len(dup) == 1 and "'family' of op 'op'" in dup[0].message
    assert dup[0].location == f"{f}:{text.splitlines().index('  family: other') + 1}"
    assert report.entries() == {}  # not emitted: which family was meant is not known


def test_two_op_names_differing_only_in_case_are_a_defect(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({"relu_x": GOOD}))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"Relu_X": GOOD}))
    report = read_manifest([tmp_path])
    dup = [d for d in report.defects if d.code == "duplicate-name"]
    assert len(dup) == 1 and "only in case" in dup[0].message and dup[0].location.endswith("b.yaml:Relu_X")
    assert set(report.entries()) == {"relu_x"}


# --- property-based: arbitrary trees and adversarial expressions ------------------------------------

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10 ** 30), max_value=10 ** 30),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["[M, N]", "[*B, N]", "[M, ٤]", "float32 | float16", "same_as(x)", "param(alpha)",
                     "M * N", "10 ** 10 ** 10", "1e999", "bytes(x)", "present(x)", "implemented", "spec-only",
                     "tileops.ops.formulas.f", "tileops.ops.formulas.__class__", "[", "x"]),
)
KEYS = ["family", "ref_api", "status", "signature", "inputs", "outputs", "params", "let", "name", "shape",
        "dtype", "optional", "mutated", "write_only", "alias", "metadata", "workloads", "label", "indices",
        "dtypes", "present", "tags", "seed", "roofline", "flops", "bytes", "read_bytes", "func", "read_func",
        "type", "default", "M", "N", "x", "y"]
trees = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=5),
                               st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=6)), children,
                                               max_size=6)),
    max_leaves=40,
)

_leaf = st.one_of(st.sampled_from(["M", "N", "alpha", "x", "unknown", "True", "None", "'s'", "1j", "1e999",
                                   "10**400", "9" * 40, "0", "0.5", "..."]),
                  st.integers(min_value=-(10 ** 25), max_value=10 ** 25).map(str),
                  st.floats(allow_nan=False, allow_infinity=False).map(repr))
_unary = ["-", "+", "not ", "~"]
_binary = ["+", "-", "*", "/", "//", "%", "**", "<", "==", "and", "or", "|", "<<", "@"]
_calls = ["prod", "sum", "min", "max", "ceil_div", "ceil", "floor", "log2", "rank", "broadcast", "bytes", "bits",
          "present", "sqrt", "__import__", "x.real", "(lambda: 1)"]


def _compose(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(st.sampled_from(_unary), children).map(lambda t: f"{t[0]}{t[1]}"),
        st.tuples(children, st.sampled_from(_binary), children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(_calls), st.lists(children, max_size=3)).map(
            lambda t: f"{t[0]}({', '.join(t[1])})"),
        st.tuples(children, children, children).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
        st.tuples(children, st.sampled_from(["[0]", ".real", "(1)", "[:]"])).map(lambda t: f"({t[0]}){t[1]}"),
        st.lists(children, min_size=1, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.tuples(children, children).map(lambda t: f"[{t[0]} for M in {t[1]}]"),
        st.tuples(children, st.integers(1, 400)).map(lambda t: " + ".join([t[0]] * t[1])),  # wide
        st.tuples(children, st.integers(1, 400)).map(lambda t: "-" * t[1] + t[0]),  # deep
        st.tuples(children, st.integers(1, 60)).map(lambda t: "(" * t[1] + t[0] + ")" * t[1]),
    )


expressions = st.recursive(_leaf, _compose, max_leaves=12)


def _assert_total(a: Any, took: float) -> None:
    assert took < 1.0, f"took {took:.2f} s"
    assert "internal" not in {d.code for d in a.defects}, [d.render() for d in a.defects]
    assert a.entry is None or a.ok
    for d in a.defects:
        assert d.location.startswith("m.yaml:") and d.message and d.fix


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(formula=expressions, where=st.sampled_from(["flops", "bytes", "let", "output-shape"]))
def test_any_expression_gives_defects_or_a_clean_result_in_under_a_second(formula: str, where: str) -> None:
    e: dict[str, Any] = {**GOOD, "signature": dict(GOOD["signature"]), "roofline": dict(GOOD["roofline"])}
    if where in ("flops", "bytes"):
        e["roofline"][where] = formula
    elif where == "let":
        e["signature"]["let"] = {"L": formula}
    else:
        e["signature"]["outputs"] = [{"name": "y", "shape": f"[M, {formula}]", "dtype": "same_as(x)"}]
    _assert_total(*timed_analyze(e))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.dictionaries(st.one_of(st.sampled_from(["op", "relu", "Relu"]), st.text(max_size=8)), trees,
                           max_size=4))
@pytest.mark.slow
def test_any_yaml_tree_read_from_a_file_gives_a_report_in_under_a_second(tmp_path_factory: pytest.TempPathFactory,
                                                                          doc: dict) -> None:
    d = tmp_path_factory.mktemp("fuzz")
    text = yaml.safe_dump(doc, allow_unicode=True)
    report, took, _ = read(d, text)
    assert took < 1.0, f"took {took:.2f} s"
    for a in report.analyses:
        assert "internal" not in {d.code for d in a.defects}, [d.render() for d in a.defects]
        assert a.entry is None or a.ok
    for d in report.defects:
        assert d.location.startswith(str(d_file := d.location.split(":", 1)[0])) and d_file.endswith("m.yaml")
        assert d.message and d.fix
