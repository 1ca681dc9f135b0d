"""`tileops validate` (§4.1): exit codes, every defect at once with its location, JSON output."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tileops.ops.catalog import shipped_manifest_dir
from cli_support import tileops


def validate(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return tileops("validate", *args, environ=env, timeout=120)


def test_shipped_manifest_is_clean() -> None:
    r = validate()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no defects" in r.stdout


@pytest.mark.slow
def test_broken_manifest_copy_yields_every_defect_at_once(tmp_path: Path) -> None:
    mdir = tmp_path / "manifest"
    shutil.copytree(shipped_manifest_dir(), mdir)
    f = mdir / "broken.yaml"
    f.write_text(yaml.safe_dump({
        "broken_op": {
            "family": "",
            "ref_api": "torch.x",
            "status": "finished",
            "signature": {
                "inputs": [{"name": "x", "shape": "[M, K]", "dtype": "float33"}],
                "outputs": [{"name": "y", "shape": "[M, Q]", "dtype": "same_as(x)"}],
            },
            "workloads": [{"label": "w", "indices": {"M": 2}, "dtypes": ["float32"]}],
            "roofline": {"flops": "2 * M * N * sqrt(K)", "func": "tileops.ops.formulas.nope"},
        }
    }))
    r = validate(str(mdir), "--format", "json")
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    mine = [d for d in out["defects"] if "broken_op" in d["location"]]
    got = {d["code"] for d in mine}
    assert {"bad-type", "bad-status", "bad-dtype", "unknown-name", "roofline-mode", "unknown-function"} <= got, got
    for d in mine:
        assert d["location"].startswith(str(f)) and d["fix"], d
    # the text form renders each with its location and fix
    r2 = validate(str(f))
    assert r2.returncode == 1
    assert r2.stdout.count(f"{f}:broken_op") >= len(got)
    assert "fix:" in r2.stdout


def test_yaml_syntax_error_names_file_and_line_and_exits_2(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("relu:\n  family: elementwise\n  status: [unclosed\n")
    r = validate(str(f))
    assert r.returncode == 2
    assert f"{f}:4" in r.stderr or f"{f}:3" in r.stderr
    assert "YAML syntax error" in r.stderr


def test_missing_path_exits_2(tmp_path: Path) -> None:
    assert validate(str(tmp_path / "nope.yaml")).returncode == 2


@pytest.mark.slow
def test_implemented_entry_without_class_is_a_defect(tmp_path: Path) -> None:
    """The registry check: an implemented entry no Op class claims."""
    import os

    from tileops.ops.catalog import load_entries

    relu = load_entries()["relu"]
    extra = tmp_path / "extra"
    extra.mkdir()
    doc = yaml.safe_load((Path(relu.file)).read_text())["relu"]
    (extra / "orphan.yaml").write_text(yaml.safe_dump({"orphan_relu": doc}))
    env = {**os.environ, "TILEOPS_MANIFEST_PATH": str(extra)}
    # before codegen: the directory's generated module is missing, so no class can be created
    r = validate("--format", "json", env=env)
    assert r.returncode == 1
    defects = json.loads(r.stdout)["defects"]
    assert [d["code"] for d in defects] == ["stale-codegen"], defects
    assert f"run `tileops codegen --manifest {extra}`" in defects[0]["message"]
    # the documented order: codegen, then validate
    assert tileops("codegen", "--manifest", str(extra), timeout=120).returncode == 0
    r = validate("--format", "json", env=env)
    assert r.returncode == 1
    defects = json.loads(r.stdout)["defects"]
    assert any(d["code"] == "no-class" and d["location"] == f"{extra / 'orphan.yaml'}:orphan_relu.status"
               for d in defects), defects


def test_a_func_that_is_not_a_plain_function_of_the_formulas_module_is_a_located_defect(tmp_path: Path) -> None:
    """Issue 15 §3: a class, a module or a missing name passes the path's form but not the validator."""
    from tileops.ops.catalog import load_entries

    cast = yaml.safe_load(Path(load_entries()["cast"].file).read_text())["cast"]
    entries = {}
    for name, func in (("via_class", "CheckedCall"), ("via_module", "math"), ("via_missing", "nope"),
                       ("via_function", "cast_roofline")):
        entries[name] = {**cast, "roofline": {"func": f"tileops.ops.formulas.{func}"}}
    f = tmp_path / "funcs.yaml"
    f.write_text(yaml.safe_dump(entries))
    r = validate(str(f), "--format", "json")
    assert r.returncode == 1, r.stderr
    got = {d["location"]: d["message"] for d in json.loads(r.stdout)["defects"] if d["code"] == "func-unresolved"}
    assert set(got) == {f"{f}:via_class.roofline.func", f"{f}:via_module.roofline.func",
                        f"{f}:via_missing.roofline.func"}, got
    assert "is a type, not a function" in got[f"{f}:via_class.roofline.func"]
    assert "is a module, not a function" in got[f"{f}:via_module.roofline.func"]
    assert "defines no 'nope'" in got[f"{f}:via_missing.roofline.func"]


@pytest.mark.slow
def test_a_fifo_is_refused_with_its_name_not_read(tmp_path: Path) -> None:
    """A FIFO given as a manifest (or left in a manifest directory) would block the read forever: it is refused,
    named, with the fix, and the rest is still validated. validate() times out at 120 s, so a hang fails."""
    import os

    fifo = tmp_path / "ops.yaml"
    os.mkfifo(fifo)
    r = validate(str(fifo))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{fifo}: a FIFO, not a regular file" in r.stderr and "replace it with one, or remove it" in r.stderr
    mdir = tmp_path / "manifest"
    shutil.copytree(shipped_manifest_dir(), mdir)
    os.mkfifo(mdir / "zz-fifo.yaml")
    r = validate(str(mdir), "--format", "json")
    assert r.returncode == 2, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert [u.split(":")[0] for u in out["unreadable"]] == [str(mdir / "zz-fifo.yaml")]
    from tileops.manifest.load import read_manifest

    shipped = len(read_manifest([shipped_manifest_dir()]).analyses)
    assert out["entries"] == shipped > 0 and not out["defects"]  # the shipped files were read as usual
