"""`tileops ops`: the library listing and one entry with its rows."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tileops.cli import main
from tileops.ops.catalog import load_entries
from cli_support import tileops

ENTRIES = load_entries()


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    assert main(["ops", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_listing_has_every_entry_with_family_status_roof_keys_and_rows(capsys: pytest.CaptureFixture[str]) -> None:
    rows = {r["name"]: r for r in run_json(capsys)}  # type: ignore[union-attr]
    assert set(rows) == set(ENTRIES)
    for name, r in rows.items():
        e = ENTRIES[name]
        assert (r["family"], r["status"], r["mode"]) == (e.family, e.status, e.roofline.mode)
        assert r["rows"] == len(e.workloads)
        assert r["cpu_rows"] == sum("cpu" in w.tags for w in e.workloads)
        assert r["roof_keys"], f"{name}: no roof key"
    assert rows["scaled_mm"]["roof_keys"] == ["tensor_core.fp8"]
    assert {"tensor_core.bf16", "tensor_core.fp16"} <= set(rows["linear"]["roof_keys"])
    assert "tensor_core.bf16" in rows["sdpa_fwd"]["roof_keys"] and "tensor_core.bf16" in rows["moe_ffn"]["roof_keys"]
    for name in ("relu", "softmax", "rms_norm", "rope", "topk_softmax", "embedding"):
        assert rows[name]["roof_keys"] == ["cuda_core.fp32"], name


def test_family_and_tag_filters(capsys: pytest.CaptureFixture[str]) -> None:
    rows = run_json(capsys, "--family", "norm", "--tag", "cpu")
    assert {r["name"] for r in rows} == {"rms_norm", "layer_norm", "fused_add_rms_norm"}  # type: ignore[union-attr]
    layer = next(r for r in rows if r["name"] == "layer_norm")  # type: ignore[union-attr]
    assert layer["rows"] == 2  # only the cpu-tagged rows


def test_one_entry_shows_signature_and_priced_rows(capsys: pytest.CaptureFixture[str]) -> None:
    d = run_json(capsys, "fused_add_rms_norm")
    assert [t["name"] for t in d["inputs"]] == ["x", "residual", "weight"]  # type: ignore[index]
    assert d["inputs"][1]["flags"] == "mutated"  # type: ignore[index]
    assert d["roofline"] == {"flops": "prod(B) * (5 * N + 3)", "bytes": "derived"}  # type: ignore[index]
    priced = d["priced"]  # type: ignore[index]
    assert len(priced) == sum(len(w.dtypes) for w in ENTRIES["fused_add_rms_norm"].workloads)
    assert all(p["flops"] > 0 and p["bytes"] > 0 and not p["note"] for p in priced)


def test_a_value_decided_op_says_it_needs_real_tensors(capsys: pytest.CaptureFixture[str]) -> None:
    d = run_json(capsys, "embedding")
    assert all(p["flops"] is None and "value-decided" in p["note"] for p in d["priced"])  # type: ignore[index]


def test_the_table_renders(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ops", "--family", "attention"]) == 0
    out = capsys.readouterr().out
    assert "sdpa_fwd" in out and "tensor_core.bf16" in out
    first = run_json(capsys, "sdpa_fwd", "--tag", "cpu")["priced"][0]  # type: ignore[index]
    assert main(["ops", "sdpa_fwd", "--tag", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "[batch, heads" in out  # markup in descriptions is printed, not swallowed
    assert first["label"] in out and f"{first['flops']:,}" in out and f"{first['bytes']:,}" in out


def test_an_unknown_op_is_a_usage_error_with_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ops", "rmsnorm"]) == 2
    err = capsys.readouterr().err
    assert "no op named 'rmsnorm'" in err and "rms_norm" in err


def test_families_that_name_no_op_are_a_usage_error_that_lists_the_families(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ops", "--family", "nope", "--no-price"]) == 2
    out = capsys.readouterr().out
    families = ", ".join(sorted({e.family for e in ENTRIES.values()}))
    assert out == f"no ops in family nope; families: {families}\n"
    assert main(["ops", "--family", "nope", "--family", "norm", "--no-price", "--format", "json"]) == 0
    assert {r["name"] for r in json.loads(capsys.readouterr().out)} == {  # the one that names some is shown
        n for n, e in ENTRIES.items() if e.family == "norm"}


@pytest.mark.slow
def test_no_price_lists_without_running_any_op(tmp_path: Path) -> None:
    """--no-price executes nothing: an extra manifest whose op kills its process still lists."""
    extra = tmp_path / "faulty_ops"
    shutil.copytree(Path(__file__).parent / "data" / "faulty_ops", extra)
    env = {**os.environ, "TILEOPS_MANIFEST_PATH": str(extra)}
    gen = tileops("codegen", "--manifest", str(extra), environ=env)
    assert gen.returncode == 0, gen.stderr
    r = tileops("ops", "--no-price", "--format", "json", environ=env)
    assert r.returncode == 0, r.stderr
    rows = {x["name"]: x for x in json.loads(r.stdout)}
    assert "crash_op" in rows and rows["crash_op"]["roof_keys"] == [] and "relu" in rows
