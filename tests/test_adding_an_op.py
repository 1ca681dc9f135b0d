"""docs/manifest.md "Adding an elementwise op" is true: its entry and its two-line class, and nothing
else, give an op that codegen, validate, the correctness test and the structural oracle accept.

The steps run in an extra manifest directory (TILEOPS_MANIFEST_PATH) rather than in the shipped
files, which is the same thing to every consumer (docs/manifest.md "Extra manifest directories").
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from cli_support import tileops

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "manifest.md"


def documented_blocks() -> tuple[str, str]:
    """The yaml entry and the python class of the section, exactly as written there."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Adding an elementwise op", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(yaml|python)\n(.*?)```", section, flags=re.S)
    kinds = dict((k, textwrap.dedent(b)) for k, b in blocks)
    assert set(kinds) == {"yaml", "python"}, blocks
    return kinds["yaml"], kinds["python"]


@pytest.mark.slow
def test_the_documented_steps_give_a_tested_op(tmp_path: Path) -> None:
    entry, cls = documented_blocks()
    name = next(iter(yaml.safe_load(entry)))
    d = tmp_path / "new_op"
    d.mkdir()
    (d / "elementwise.yaml").write_text(entry, encoding="utf-8")
    # the class goes into tileops/ops/elementwise.py, where torch and Unary are in scope
    (d / "ops.py").write_text("import torch\n\nfrom tileops.ops.elementwise import Unary\n\n\n" + cls,
                              encoding="utf-8")
    env = {"TILEOPS_MANIFEST_PATH": str(d)}

    r = tileops("codegen", "--manifest", str(d), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    r = tileops("validate", env=env)
    assert r.returncode == 0 and "no defects" in r.stdout, r.stdout + r.stderr

    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-k",
                        f"{name} or every_implemented", str(ROOT / "tests" / "test_ops_correctness.py"),
                        str(ROOT / "tests" / "test_oracle.py")],
                       capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, **env})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    passed = set(re.findall(r"^PASSED (\S+)", r.stdout, flags=re.M))
    # What the doc says happens, each seen passing: the op against its ref_api on its cpu row in every dtype
    # its union allows (no REFERENCES entry was written), every op having a reference, and the oracle
    # recounting its bytes.
    union = {"float16", "bfloat16", "float32"}
    compared = {m.group(1) for t in passed
                if (m := re.search(rf"test_op_matches_reference\[{name}-cpu-512x1024-(?:x=)?(\w+)\]", t))}
    assert compared == union, sorted(passed)
    assert any(t.endswith(f"test_level_one_recount_equals_eval_roofline[{name}]") for t in passed), sorted(passed)
    assert any(t.endswith("test_every_implemented_op_has_a_reference_and_a_cpu_row") for t in passed)
    assert "failed" not in r.stdout and "error" not in r.stdout.lower().split("passed")[-1]
