"""§4.4.5: nothing parses, AST-walks or evaluates a formula string at run time.

Only the manifest tooling (analysis, expression checker, codegen, loader) and
static code scanners may use ``ast``; nothing in the package may call
eval/exec/compile. One more module walks a checked tree at run time:
``audit/condition.py``, the audit's EXEMPT ``when``. It is not a formula (it
prices nothing, it says whether a measured call lies inside an exception),
its form is the manifest's own check, and it never compiles or evals.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tileops

PKG = Path(tileops.__file__).parent
TOOLING = {"manifest/analysis.py", "manifest/expr.py", "manifest/codegen.py", "formula_guard.py",
           "audit/condition.py"}


def offenders() -> list[str]:
    found = []
    for f in sorted(PKG.rglob("*.py")):
        rel = f.relative_to(PKG).as_posix()
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"eval", "exec", "compile"}:
                found.append(f"{rel}:{node.lineno} calls {node.func.id}()")
            if rel in TOOLING:
                continue
            if isinstance(node, ast.Import) and any(a.name == "ast" for a in node.names):
                found.append(f"{rel}:{node.lineno} imports ast")
            if isinstance(node, ast.ImportFrom) and node.module == "ast":
                found.append(f"{rel}:{node.lineno} imports from ast")
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                if any(m.startswith("tileops.manifest.expr") or m.startswith("tileops.manifest.analysis") for m in mods) \
                        and not rel.startswith(("manifest/", "commands/validate.py", "commands/codegen.py",
                                                "audit/condition.py")):
                    found.append(f"{rel}:{node.lineno} imports the expression tooling")
    return found


def test_no_runtime_formula_evaluation() -> None:
    assert offenders() == []


def test_the_scan_catches_a_planted_eval(tmp_path: Path) -> None:
    planted = PKG / "ops" / "_planted_eval_test.py"
    planted.write_text("def f(s):\n    return eval(s)\n")
    try:
        assert any("_planted_eval_test.py" in o for o in offenders())
    finally:
        planted.unlink()


def test_generated_module_does_not_import_the_tooling() -> None:
    src = (PKG / "ops" / "_roofline_gen.py").read_text()
    assert "manifest.expr" not in src and "manifest.analysis" not in src and "import ast" not in src
