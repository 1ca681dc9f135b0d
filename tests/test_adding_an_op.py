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


def tileops(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tileops.cli", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env})


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

    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", f"{name} or every_implemented",
                        str(ROOT / "tests" / "test_ops_correctness.py"), str(ROOT / "tests" / "test_oracle.py")],
                       capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, **env})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    passed = int(re.search(r"(\d+) passed", r.stdout).group(1))  # type: ignore[union-attr]
    # correctness: the cpu row x each of its three dtypes, and every op has a reference; oracle: level one,
    # and every op sits at one level
    assert passed >= 6, r.stdout[-2000:]
    assert "failed" not in r.stdout and "error" not in r.stdout.lower().split("passed")[-1]
