"""§4.4.5: nothing parses, AST-walks or evaluates a formula string at run time.

Two proofs. Statically: nothing in the package calls eval/exec/compile (but the
records reader, which writes its field checks out as code from the contract
classes alone, as ``dataclasses`` does, and is held to generated names); only the
build-time tooling (the manifest analysis, expression checker, codegen and the
formula guard) imports ``ast``; and only the tooling and the two workflows that
drive it (``validate``, ``codegen``) import ``tileops.manifest``. Transitively,
in a fresh interpreter: importing ``tileops.bench`` and running one CPU row end
to end (instantiate, build inputs, time, price) leaves no manifest loader,
analysis or expression module, and no yaml, in ``sys.modules``. And a stale
generated module stops the run with "run `tileops codegen`" instead of pairing
old evaluators with edited rows.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import tileops
from tileops.errors import ManifestError
from tileops.ops.catalog import GENERATED_NAME, load_entries, shipped_manifest_dir

PKG = Path(tileops.__file__).parent
TOOLING = {"manifest/analysis.py", "manifest/signature.py", "manifest/expr.py", "manifest/codegen.py", "formula_guard.py",
           "audit/condition.py"}
#: Modules that drive the tooling: the two build-time workflows (``tileops validate``, ``tileops codegen``), and the audit's EXEMPT `when`, which is
#: checked by the manifest's own expression rules (it prices nothing; it says whether a measured call
#: lies inside an exception, by walking the checked tree: nothing is compiled or evaluated as text).
DRIVES_TOOLING = ("manifest/", "pipeline/validate.py", "pipeline/codegen.py", "audit/condition.py")
BUILD_TIME = ("tileops.manifest.load", "tileops.manifest.analysis", "tileops.manifest.signature",
              "tileops.manifest.roofline_fields", "tileops.manifest.workloads", "tileops.manifest.scope",
              "tileops.manifest.facts", "tileops.manifest.values", "tileops.manifest.expr", "tileops.manifest.codegen")
FAULTY = Path(__file__).parent / "data" / "faulty_ops"


def offenders() -> list[str]:
    found = []
    for f in sorted(PKG.rglob("*.py")):
        rel = f.relative_to(PKG).as_posix()
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"eval", "exec", "compile"}:
                found.append(f"{rel}:{node.lineno} calls {node.func.id}()")
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                if rel not in TOOLING and "ast" in mods:
                    found.append(f"{rel}:{node.lineno} imports ast")
                if any(m == "tileops.manifest" or m.startswith("tileops.manifest.") for m in mods) \
                        and not rel.startswith(DRIVES_TOOLING):
                    found.append(f"{rel}:{node.lineno} imports the manifest tooling")
                if rel.startswith("ops/") and any(m.split(".")[0] in {"yaml", "pydantic"} for m in mods):
                    found.append(f"{rel}:{node.lineno} imports {mods} on the run-time path")
    return found


def test_no_runtime_formula_evaluation() -> None:
    assert offenders() == []


def test_the_scan_catches_a_planted_eval_and_a_planted_tooling_import() -> None:
    planted = PKG / "ops" / "_planted_eval_test.py"
    planted.write_text("import yaml\nfrom tileops.manifest.load import read_manifest\n\ndef f(s):\n    return eval(s)\n")
    try:
        got = [o for o in offenders() if "_planted_eval_test.py" in o]
        assert len(got) == 3, got
    finally:
        planted.unlink()


def test_generated_module_imports_only_run_time_modules() -> None:
    tree = ast.parse((PKG / "ops" / GENERATED_NAME).read_text(encoding="utf-8"))
    mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | \
        {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert mods == {"tileops.ops", "tileops.ops.catalog", "tileops.ops.spec"}, mods


# --- transitively, in a fresh interpreter ----------------------------------------------------------

ONE_ROW = """
import json, sys
import tileops.bench
from tileops.bench.environment import run_environment
from tileops.bench.execute import Task, run_task
from tileops.bench.interval import QUICK_BLOCKS
from tileops.device import describe_device
from tileops.ops.catalog import load_entries

relu = load_entries()["relu"]
row = next(w for w in relu.workloads if "cpu" in w.tags)
cpu = describe_device("cpu")
env = run_environment(cpu, "no-runtime-eval", 1)
rec = run_task(Task(op="relu", label=row.label, case="float32", case_name="float32", backend="torch",
                    device=cpu, rule=QUICK_BLOCKS, env=env))
print(json.dumps({"status": rec.status, "error": str(rec.error), "flops": rec.flops, "bytes": rec.bytes,
                  "modules": sorted(m for m in sys.modules if m.startswith(("tileops", "yaml")))}))
"""


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_a_bench_row_runs_end_to_end_without_the_manifest_tooling_or_yaml() -> None:
    r = run_python(ONE_ROW)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "ok", out["error"]
    assert out["flops"] > 0 and out["bytes"] > 0
    mods = set(out["modules"])
    assert "tileops.ops._roofline_gen" in mods and "tileops.bench.execute" in mods  # the row really ran
    assert not mods & set(BUILD_TIME), sorted(mods & set(BUILD_TIME))
    assert not any(m == "yaml" or m.startswith("yaml.") for m in mods), sorted(m for m in mods if "yaml" in m)


def test_the_probe_would_see_the_tooling_if_it_were_imported() -> None:
    """Control: the same sys.modules probe, after importing the build-time loader, reports it."""
    r = run_python("import sys, json\nimport tileops.manifest.load\n"
                   "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('tileops', 'yaml')))))")
    assert r.returncode == 0, r.stderr[-3000:]
    mods = set(json.loads(r.stdout.strip().splitlines()[-1]))
    assert {"tileops.manifest.load", "tileops.manifest.analysis", "tileops.manifest.expr", "yaml"} <= mods


# --- a stale generated module stops the run ---------------------------------------------------------


@pytest.fixture()
def extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the test-only manifest directory with its generated module, as `tileops codegen` writes
    it, on the search path of this process."""
    from tileops.manifest.codegen import generate

    d = tmp_path / "faulty_ops"
    shutil.copytree(FAULTY, d)
    target, text, report = generate(d)
    assert report.ok
    target.write_text(text, encoding="utf-8")
    monkeypatch.setenv("TILEOPS_MANIFEST_PATH", str(d))
    return d


def test_a_current_extra_module_loads(extra: Path) -> None:
    entries = load_entries()
    assert {"crash_op", "relu"} <= set(entries)
    assert entries["crash_op"].file == str(extra / "faulty.yaml")


def test_an_edited_manifest_without_codegen_stops_with_run_tileops_codegen(extra: Path) -> None:
    f = extra / "faulty.yaml"
    doc = yaml.safe_load(f.read_text())
    doc["raise_op"]["workloads"][0]["indices"]["N"] = 2048  # a row edited; codegen not rerun
    f.write_text(yaml.safe_dump(doc))
    (extra / "more.yaml").write_text("{}\n")  # and a new file
    with pytest.raises(ManifestError) as exc:
        load_entries()
    msg = str(exc.value)
    assert msg.startswith(f"{extra / GENERATED_NAME} is stale")
    assert f"changed: {f}" in msg and f"new: {extra / 'more.yaml'}" in msg
    assert msg.endswith(f"run `tileops codegen --manifest {extra}`")


def test_the_cli_reports_a_stale_module_as_a_clear_error_not_a_traceback(
        extra: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tileops.cli import main

    (extra / "faulty.yaml").write_text((extra / "faulty.yaml").read_text() + "\n# an edit\n")
    assert main(["ops", "--no-price"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tileops ops: error: ") and f"run `tileops codegen --manifest {extra}`" in err


def test_an_extra_directory_without_its_generated_module_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "faulty_ops"
    shutil.copytree(FAULTY, d)
    monkeypatch.setenv("TILEOPS_MANIFEST_PATH", str(d))
    with pytest.raises(ManifestError, match=f"no {GENERATED_NAME}; run `tileops codegen --manifest {d}`"):
        load_entries()
    monkeypatch.setenv("TILEOPS_MANIFEST_PATH", str(tmp_path / "missing"))
    with pytest.raises(ManifestError, match="which is not a directory"):
        load_entries()


def test_the_shipped_module_checks_the_shipped_manifest(tmp_path: Path) -> None:
    """The shipped module's digests are those of manifest/*.yaml now; the check is what refuses a
    stale one (exercised on a copy: the same function runs at the top of every generated module)."""
    from tileops.ops import _roofline_gen
    from tileops.ops.catalog import source_digests, verify_sources

    assert _roofline_gen.SOURCES == source_digests(shipped_manifest_dir())
    copy = tmp_path / "m"
    shutil.copytree(shipped_manifest_dir(), copy)
    gen = copy / GENERATED_NAME
    verify_sources(str(gen), source_digests(copy), shipped=False)  # current: silent
    (copy / "gemm.yaml").write_text((copy / "gemm.yaml").read_text().replace("llama", "lama"))
    (copy / "norm.yaml").unlink()
    with pytest.raises(ManifestError) as exc:
        verify_sources(str(gen), _roofline_gen.SOURCES, shipped=False)
    msg = str(exc.value)
    assert f"changed: {copy / 'gemm.yaml'}" in msg and f"missing: {copy / 'norm.yaml'}" in msg
    assert "elementwise.yaml" not in msg
