"""Codegen (§4.4.1): derived bytes by the §2.2 rules, hand counts, staleness detection."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from tileops.manifest.codegen import GENERATED_NAME, generate, is_current
from tileops.ops.catalog import shipped_manifest_dir
from tileops.ops.call import CheckedCall


def emit_module(tmp_path: Path, entries: dict[str, Any]):
    """Write entries to a temp manifest, run codegen on it, import the generated module."""
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(entries), encoding="utf-8")
    target, text, report = generate(tmp_path)
    assert report.ok, [d.render() for d in report.defects]
    target.write_text(text, encoding="utf-8")
    name = f"gen_{abs(hash(str(tmp_path)))}"
    spec = importlib.util.spec_from_file_location(name, target)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def call_of(op: str, tensors: dict[str, tuple[tuple[int, ...], str]], indices: dict[str, Any],
            optional_present: set[str] = frozenset()) -> CheckedCall:
    """A checked call built by hand: sizes are prod(shape) * bits / 8."""
    bits = {"float32": 32, "float16": 16, "bfloat16": 16, "int64": 64, "int8": 8, "bool": 8}
    # formula-guard: allow a hand-built call: the test's own size of each tensor, to check the evaluators against
    return CheckedCall(
        op=op, indices=indices, params={},
        dtypes={k: d for k, (_, d) in tensors.items()},
        shapes={k: s for k, (s, _) in tensors.items()},
        nbytes_by_tensor={k: int(torch.Size(s).numel()) * bits[d] // 8 for k, (s, d) in tensors.items()},
        present_inputs=frozenset(optional_present),
    )


def entry(inputs: list[dict], outputs: list[dict], flops: str = "0", **roof: str) -> dict:
    return {
        "family": "test", "ref_api": "none", "status": "spec-only",
        "signature": {"inputs": inputs, "outputs": outputs},
        "workloads": [],
        "roofline": {"flops": flops, **roof},
    }


def t(name: str, **kw: Any) -> dict:
    return {"name": name, "shape": "[N]", "dtype": "float32", **kw}


# Each derived-bytes rule, with a hand count. N = 100 float32 elements = 400 bytes per tensor.
RULES = {
    # name: (inputs, outputs, hand count in units of one tensor, present optionals)
    "input_read_output_written": ([t("x")], [t("y")], 2, set()),
    "two_inputs": ([t("x"), t("z")], [t("y")], 3, set()),
    "mutated_input_read_and_written": ([t("x", mutated=True)], [t("y")], 3, set()),
    "write_only_input_one_write": ([t("x"), t("out", write_only=True)], [t("y")], 3, set()),
    "alias_is_one_storage": ([t("x")], [t("y", alias="x")], 2, set()),
    "alias_of_mutated_counts_once": ([t("x", mutated=True)], [t("y", alias="x")], 2, set()),
    "absent_optional_moves_nothing": ([t("x"), t("b", optional=True)], [t("y")], 2, set()),
    "present_optional_is_read": ([t("x"), t("b", optional=True)], [t("y")], 3, {"b"}),
    "two_outputs": ([t("x")], [t("y"), t("z")], 3, set()),
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_derived_bytes_rule(tmp_path: Path, rule: str) -> None:
    ins, outs, units, present = RULES[rule]
    mod = emit_module(tmp_path, {"op": entry(ins, outs)})
    tensors = {x["name"]: ((100,), "float32") for x in ins + outs if not x.get("optional") or x["name"] in present}
    call = call_of("op", tensors, {"N": 100}, present)
    assert mod.ENTRIES["op"].roofline(call) == (0, units * 400)


def test_derived_bytes_use_each_tensors_own_dtype_and_shape(tmp_path: Path) -> None:
    """size = prod(shape) * bits(dtype) / 8 per tensor: a bf16 [4, 8] in, a bool [4, 8] out."""
    mod = emit_module(tmp_path, {"op": entry(
        [{"name": "x", "shape": "[M, K]", "dtype": "bfloat16 | float32"}],
        [{"name": "y", "shape": "[M, K]", "dtype": "bool"}], flops="M * K")})
    call = call_of("op", {"x": ((4, 8), "bfloat16"), "y": ((4, 8), "bool")}, {"M": 4, "K": 8})
    assert mod.ENTRIES["op"].roofline(call) == (32, 4 * 8 * 2 + 4 * 8 * 1)


def test_derived_read_half_counts_reads_only(tmp_path: Path) -> None:
    mod = emit_module(tmp_path, {"op": entry([t("x", mutated=True), t("w")], [t("y")])})
    call = call_of("op", {k: ((100,), "float32") for k in ("x", "w", "y")}, {"N": 100})
    assert mod.ENTRIES["op"].read_bytes(call) == 800  # x and w read; writes excluded


def test_explicit_bytes_without_read_half_declares_none(tmp_path: Path) -> None:
    mod = emit_module(tmp_path, {"op": entry([t("x")], [t("y")], bytes="bytes(x)")})
    assert mod.ENTRIES["op"].read_bytes is None  # the audit gives NO-VERDICT: there is no fallback


def test_inline_formula_with_primitives_and_presence(tmp_path: Path) -> None:
    mod = emit_module(tmp_path, {"op": {
        **entry([{"name": "x", "shape": "[*B, K]", "dtype": "float32"},
                 {"name": "bias", "shape": "[K]", "dtype": "float32", "optional": True}],
                [{"name": "y", "shape": "[*B, ceil_div(K, 2)]", "dtype": "float32"}],
                flops="prod(B) * ceil_div(K, 2) + (K if present(bias) else 0)",
                bytes="bytes(x) + bytes(bias) + bytes(y) * bits(x) // 32")}})
    call = call_of("op", {"x": ((3, 5, 7), "float32"), "bias": ((7,), "float32"), "y": ((3, 5, 4), "float32")},
                   {"B": (3, 5), "K": 7}, {"bias"})
    assert mod.ENTRIES["op"].roofline(call) == (15 * 4 + 7, 105 * 4 + 7 * 4 + 60 * 4)
    assert mod.ENTRIES["op"].output_shapes({"B": (3, 5), "K": 7}) == {"y": (3, 5, 4)}


def test_fractional_count_is_a_formula_error_not_rounded(tmp_path: Path) -> None:
    mod = emit_module(tmp_path, {"op": entry([t("x")], [t("y")], flops="N / 3")})
    call = call_of("op", {"x": ((100,), "float32"), "y": ((100,), "float32")}, {"N": 100})
    with pytest.raises(ValueError, match="not a whole number"):
        mod.ENTRIES["op"].roofline(call)


def test_a_count_beyond_int64_is_a_formula_error(tmp_path: Path) -> None:
    """Each factor is a fine constant; the product at these sizes is not a count a record holds."""
    mod = emit_module(tmp_path, {"op": entry([t("x")], [t("y")], flops="N ** 64")})
    call = call_of("op", {"x": ((100,), "float32"), "y": ((100,), "float32")}, {"N": 100})
    with pytest.raises(ValueError, match="op flops is a 426-bit integer, above the largest count"):
        mod.ENTRIES["op"].roofline(call)


# -- the shipped module ---------------------------------------------------------------------------


def test_shipped_generated_module_is_current() -> None:
    ok, target = is_current()
    assert ok, f"{target} is stale: run `tileops codegen`"


def test_a_stale_generated_module_is_detected(tmp_path: Path) -> None:
    mdir = tmp_path / "manifest"
    shutil.copytree(shipped_manifest_dir(), mdir)
    target, text, _ = generate(mdir)
    target.write_text(text, encoding="utf-8")
    assert is_current(mdir)[0]
    f = next(iter(sorted(mdir.glob("*.yaml"))))
    doc = yaml.safe_load(f.read_text())
    name = next(iter(doc))
    doc[name]["roofline"] = {"flops": "1"} if "flops" in doc[name]["roofline"] else doc[name]["roofline"]
    doc[name]["description"] = "edited"  # any edit that reaches the emitted module
    doc[name]["family"] = doc[name]["family"] + "x"
    f.write_text(yaml.safe_dump(doc))
    assert not is_current(mdir)[0]
    assert (mdir / GENERATED_NAME).exists()


def test_codegen_check_cli_fails_on_stale(tmp_path: Path) -> None:
    from tileops.cli import main

    mdir = tmp_path / "m"
    shutil.copytree(shipped_manifest_dir(), mdir)
    assert main(["codegen", "--manifest", str(mdir)]) == 0
    assert main(["codegen", "--check", "--manifest", str(mdir)]) == 0
    (mdir / GENERATED_NAME).write_text("ENTRIES = {}\n")
    assert main(["codegen", "--check", "--manifest", str(mdir)]) == 1


def test_codegen_manifest_on_a_missing_directory_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tileops.cli import main

    assert main(["codegen", "--manifest", str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().err


# -- what the generated module carries -------------------------------------------------------------


def test_the_generated_module_carries_the_checked_entries_a_run_needs() -> None:
    """Signature, rows (indices, params, presence, dtype cases, tags, seed), status, ref_api and the
    roofline field as written: the run reads these, never the YAML (§4.4.5)."""
    from tileops.manifest.load import read_manifest
    from tileops.ops.catalog import load_entries

    analysed = read_manifest([shipped_manifest_dir()]).entries()
    carried = load_entries()
    assert set(carried) == set(analysed)
    for name, entry in analysed.items():
        assert carried[name] == entry, name  # the same checked entry, field for field (file included)


def func_entry(func: str, status: str) -> dict:
    e = entry([t("x")], [t("y")])
    e["status"] = status
    e["roofline"] = {"func": f"tileops.ops.formulas.{func}"}
    if status == "implemented":
        e["workloads"] = [{"label": "w", "indices": {"N": 4}, "dtypes": ["float32"]}]
    return e


def test_an_implemented_func_that_does_not_resolve_is_left_out_by_codegen(tmp_path: Path) -> None:
    """A bad func path of an implemented entry would stop the generated module's import (its formula is bound
    then, so it fails when the op classes are created, not at first pricing): codegen leaves the entry out
    and says why, and the module it writes imports (issue 27)."""
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"op": func_entry("no_such_formula", "implemented")}),
                                     encoding="utf-8")
    target, text, report = generate(tmp_path)
    assert [d.code for d in report.defects] == ["func-unresolved"] and "defines no 'no_such_formula'" in \
        report.defects[0].message
    assert "def op__roofline" not in text
    target.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("gen_unresolved", target)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.ENTRIES == {}


def test_a_spec_only_func_resolves_when_priced(tmp_path: Path) -> None:
    """A spec-only entry has no class yet: its formula may be written later, and resolves when called."""
    from tileops.errors import ManifestError

    mod = emit_module(tmp_path, {"op": func_entry("not_written_yet", "spec-only")})
    call = call_of("op", {"x": ((4,), "float32"), "y": ((4,), "float32")}, {"N": 4})
    with pytest.raises(ManifestError, match="not_written_yet"):
        mod.ENTRIES["op"].roofline(call)
