"""The audit's EXEMPT configuration (tileops.audit.config, tileops.audit.condition).

Form errors are located by file and line; unknown ops, fields and names are
refused with the allowed ones; a ``when`` is the manifest's expression language
and nothing else, evaluated against the call that was measured (here: real
calls of the ops on CPU tensors, through the same workload builder the audit uses).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tileops.audit.condition import Condition, ConditionError, Scope, check
from tileops.audit.config import ConfigError, load_config
from tileops.audit.entry import entry_data
from tileops.audit.facts import CallFacts
from tileops.audit.plan import manifest_entries, op_classes
from tileops.audit.verdict import judge
from tileops.ops.workload import bind_row, build_inputs, instantiate


@pytest.fixture(scope="module")
def entries():
    return manifest_entries()


@pytest.fixture(scope="module")
def implemented(entries):
    classes = op_classes()
    return [n for n, e in entries.items() if e.status == "implemented" and n in classes]


def write(tmp_path: Path, text: str, name: str = "exempt.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def call_facts(entries, op: str, label: str, case) -> CallFacts:
    """The facts of a real call of one manifest row, built as the audit's child builds it (on CPU)."""
    entry = entries[op]
    row = next(w for w in entry.workloads if w.label == label)
    o = instantiate(entry, row)
    o(**build_inputs(o, bind_row(entry, row, case), "cpu"))
    return CallFacts.of_op(o)


WHERE_RULE = """\
exempt:
  - op: where
    when: "prod(T) == 1"
    reason: "a broadcast scalar fill: the kernel reads the selected branch only"
    measurement: "test: no GPU measurement"
"""


def test_the_shipped_configuration_loads_and_its_pending_entry_is_well_formed(tmp_path, entries, implemented):
    shipped = load_config(None, entries, implemented)
    assert shipped.rules == ()  # the where entry stays out until a measurement earns it
    lines = (Path(__file__).resolve().parents[1] / "audit" / "exempt.yaml").read_text().splitlines()
    after = lines[next(i for i, ln in enumerate(lines) if "Pending" in ln) + 1:]
    block = "exempt:\n" + "\n".join(ln[2:] for ln in after if ln.startswith("#   "))
    rules = load_config(write(tmp_path, block), entries, implemented).rules
    assert [r.op for r in rules] == ["where"]


def test_exempt_inside_its_when_and_judged_as_usual_outside(tmp_path, entries, implemented):
    config = load_config(write(tmp_path, WHERE_RULE), entries, implemented)
    (rule,) = config.rules
    assert rule.where == f"{tmp_path / 'exempt.yaml'}:2"
    inside = call_facts(entries, "where", "cpu-512x1024-scalar-fill", "float32")
    outside = call_facts(entries, "where", "cpu-512x1024", "float32")
    found, note = config.match("where", inside)
    assert found is not None and note is None
    j = judge(declared=1_000_000, measured=600_000, inputs=inside.inputs, kernels=1, exemption=found)
    assert j.verdict == "EXEMPT" and "exempt.yaml:2" in j.reason
    found, note = config.match("where", outside)
    assert found is None and "is false" in note
    j = judge(declared=1_000_000, measured=600_000, inputs=outside.inputs, kernels=1, exemption=found,
              exemption_note=note)
    assert j.verdict == "FAIL" and "outside the exception" in j.reason
    assert config.match("add", inside) == (None, None)  # another op's rows are never touched


def test_when_reads_presence_dtypes_bytes_and_lets(entries):
    facts = call_facts(entries, "embedding", "cpu-small-2k-tokens", {"ids": "int32", "weight": "bfloat16"})
    scope = Scope.of("embedding", entries["embedding"].signature)
    for source, expected in [
        ("bits(weight) == 16 and bits(ids) == 32", True),
        ("bytes(weight) == V * D * 2", True),
        ("prod(T) > 4096", False),
        ("V > 1000 if D == 256 else False", True),
        ("not (D < 128)", True),
    ]:
        cond, problems = check(source, scope)
        assert problems == [], problems
        assert cond.holds(facts) is expected, source


def test_presence_of_an_optional_input(entries):
    cond, problems = check("present(bias) and bytes(bias) == N * 4", Scope.of("linear", entries["linear"].signature))
    assert problems == []
    assert cond.holds(call_facts(entries, "linear", "cpu-small-bias-256", "float32")) is True
    assert cond.holds(call_facts(entries, "linear", "cpu-small-256", "float32")) is False


def test_a_name_the_call_did_not_bind_never_exempts(tmp_path, entries, implemented):
    facts = call_facts(entries, "where", "cpu-512x1024-scalar-fill", "float32")
    facts.indices.pop("T")  # as for a dim of an absent optional tensor
    config = load_config(write(tmp_path, WHERE_RULE), entries, implemented)
    found, note = config.match("where", facts)
    assert found is None and "could not be evaluated" in note and "'T' is not bound" in note


def test_form_errors_are_located_by_file_and_line(tmp_path, entries, implemented):
    bad = write(tmp_path, """\
exempt:
  - op: where
    when: "prod(T) == 1"
    reason: "ok"
    measurement: "ok"
  - op: wher
    when: "prod(T) == 1"
    reason: "typo in the op"
    measurement: "x"
  - op: where
    when: "prod(T) =="
    reason: "syntax"
    measurement: "x"
  - op: where
    whn: "prod(T) == 1"
    reason: "typo in a field"
    measurement: "x"
""")
    with pytest.raises(ConfigError) as exc:
        load_config(bad, entries, implemented)
    problems = exc.value.problems
    # pydantic refuses the whole file at the first model error: the unknown field, at its own line.
    assert len(problems) >= 1
    assert any(re.match(rf"{re.escape(str(bad))}:15: unknown field 'whn'; allowed fields: op, when, reason, "
                        r"measurement", p) for p in problems), problems
    assert any(f"{bad}:14: missing field 'when'" in p for p in problems), problems
    # With the field fixed, the op and the syntax error are each reported at their line, together.
    fixed = write(tmp_path, bad.read_text().replace("whn:", "when:"), "fixed.yaml")
    with pytest.raises(ConfigError) as exc:
        load_config(fixed, entries, implemented)
    problems = exc.value.problems
    assert len(problems) == 2, problems
    assert problems[0].startswith(f"{fixed}:6: op 'wher' is not an implemented op; allowed ops: ")
    assert "where" in problems[0] and "embedding" in problems[0]
    assert problems[1].startswith(f"{fixed}:11: when: does not parse")


def test_yaml_syntax_errors_and_unknown_top_level_keys(tmp_path, entries, implemented):
    with pytest.raises(ConfigError, match=r"broken\.yaml:\d+:\d+: YAML syntax error"):
        load_config(write(tmp_path, "exempt:\n  - op: [where\n", "broken.yaml"), entries, implemented)
    with pytest.raises(ConfigError, match=r"top\.yaml:1: unknown field 'exemptions'; allowed fields: exempt"):
        load_config(write(tmp_path, "exemptions: []\n", "top.yaml"), entries, implemented)
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "nowhere.yaml", entries, implemented)
    assert load_config(write(tmp_path, "# nothing yet\n", "empty.yaml"), entries, implemented).rules == ()


def test_a_folder_reads_every_yaml_file(tmp_path, entries, implemented):
    d = tmp_path / "audit"
    d.mkdir()
    write(d, WHERE_RULE, "a.yaml")
    write(d, WHERE_RULE.replace("prod(T) == 1", "prod(S) == 1"), "b.yml")
    config = load_config(d, entries, implemented)
    assert [r.condition.source for r in config.rules] == ["prod(T) == 1", "prod(S) == 1"]


@pytest.mark.parametrize("source, needle", [
    ("N == 1", "'N' is not an index, parameter or let of where; allowed names: C, S, T"),
    ("a == 1", "(a tensor: name it only inside bytes(), bits() or present())"),
    ("open(T) == 1", "open() is not a primitive"),
    ("bytes(q) > 0", "bytes(q): 'q' is not a tensor of where; tensors: cond, a, b, y"),
    ("present(a)", "present(a): 'a' is not optional"),
    ("prod(T)", "is a value, not a condition"),
    ("'x' == 'x'", "is not a number"),
    ("T.real == 1", "Attribute is not allowed"),
    ("T[0] == 1", "Subscript is not allowed"),
    ("(lambda: 1)() == 1", "only primitives can be called"),
    ("[x for x in T] == 1", "ListComp is not allowed"),
    ("prod(T) ==", "does not parse"),
    ("", "non-empty"),
])
def test_when_refuses_what_is_not_an_expression_of_the_call(entries, source: str, needle: str):
    cond, problems = check(source, Scope.of("where", entries["where"].signature))
    assert cond is None
    assert any(needle in p for p in problems), problems
    if "not a primitive" in needle:
        assert "allowed names: bits, broadcast, bytes" in " ".join(problems)  # the manifest's primitive list


def test_nothing_in_a_when_is_executed(tmp_path, entries, implemented):
    marker = tmp_path / "pwned"
    text = WHERE_RULE.replace('"prod(T) == 1"', f"\"__import__('os').system('touch {marker}') == 0\"")
    with pytest.raises(ConfigError, match="only primitives can be called, not .__import__"):
        load_config(write(tmp_path, text), entries, implemented)
    assert not marker.exists()
    # Even a tree that never went through the checker is walked, not run: it fails closed.
    rogue = Condition("__import__('os').system('x')", ast.parse(f"__import__('os').system('touch {marker}')",
                                                                mode="eval").body)
    facts = call_facts(entries, "where", "cpu-512x1024-scalar-fill", "float32")
    with pytest.raises(ConditionError):
        rogue.holds(facts)
    assert not marker.exists()


def test_call_facts_round_trip_through_json(tmp_path, entries):
    facts = call_facts(entries, "fused_experts", "cpu-decode-4tok-16e-top2", {"x": "float32", "topk_ids": "int32"})
    p = tmp_path / "call.json"
    facts.write(p)
    back = CallFacts.read(p)
    assert back.read_bytes == facts.read_bytes and back.read_bytes > 0
    assert back.indices == facts.indices and back.present_inputs == facts.present_inputs
    assert back.inputs == 5  # x, topk_weights, topk_ids, w13, w2
    assert back.data_terms == facts.data_terms


def test_a_measured_row_becomes_its_entry(tmp_path, entries, implemented):
    """The driver's last step on a real call's facts: PASS, FAIL, EXEMPT and WARN entries, with their fields."""
    from tileops.audit.reports import Measurement
    from tileops.audit.run import judged_entry
    from tileops.bench.select import Planned

    config = load_config(write(tmp_path, WHERE_RULE), entries, implemented)
    row = next(w for w in entries["where"].workloads if w.label == "cpu-512x1024-scalar-fill")
    p = Planned("where", row, "float32", "torch")
    facts = call_facts(entries, "where", row.label, "float32")
    declared = facts.read_bytes
    assert declared == facts.nbytes("cond") + facts.nbytes("a") + facts.nbytes("b")

    def entry(measured: int, kernels: int = 1):
        return judged_entry(p, facts, Measurement(measured, 123, 4.5, kernels), config)

    ok = entry(declared)
    assert (ok.verdict, ok.expected_read_bytes, ok.measured_read_bytes, ok.measured_write_bytes) == (
        "PASS", declared, declared, 123)
    assert ok.fail_below_bytes < declared < ok.warn_above_bytes and ok.read_ratio == 1.0
    short = entry(declared // 2)  # inside `prod(T) == 1`: EXEMPT, located
    assert short.verdict == "EXEMPT" and short.exemption == f"{tmp_path / 'exempt.yaml'}:2"
    assert entry(4 * declared).verdict == "WARN"
    outside_row = next(w for w in entries["where"].workloads if w.label == "cpu-512x1024")
    outside = judged_entry(Planned("where", outside_row, "float32", "torch"),
                           call_facts(entries, "where", outside_row.label, "float32"),
                           Measurement(declared // 4, 0, None, 1), config)
    assert outside.verdict == "FAIL" and outside.exemption is None and "is false" in outside.reason
    d = entry_data(ok)
    for field in ("op", "label", "dtype", "backend", "verdict", "measured_read_bytes", "expected_read_bytes"):
        assert field in d  # what `tileops export` reads
