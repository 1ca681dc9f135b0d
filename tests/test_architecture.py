"""The layers hold (docs/architecture.md): who may import whom, and what a bench run loads.

Two checks. Statically, every ``import`` in the package (module level or
inside a function) stays inside the allowed-import table below; the same
table is printed in docs/architecture.md and the two must agree. Dynamically,
a subprocess that imports ``tileops.bench`` and measures a real CPU row must
end with no third-party library beyond torch, and none of the pricing,
reporting, export or manifest-tooling modules, in ``sys.modules`` (§5.2, §4.4.5).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tileops

PKG = Path(tileops.__file__).parent
ROOT = PKG.parent
DOC = ROOT / "docs" / "architecture.md"

#: Foundation modules: small, importable by every layer; standard-library only but for records.fast (msgspec)
#: and yamlfile (PyYAML), which the bench never imports (the run-time probe below holds it).
FOUNDATION = ("errors", "fsutil", "paths", "exitcodes", "interrupts", "revision", "dtypes", "durations", "records",
              "yamlfile", "stats", "defaults")

#: layer -> the layers it may import (besides itself and the foundation). A layer is a
#: top-level module or package of ``tileops``. Data flows one way: manifest -> ops -> bench ->
#: roofline -> report/export, composed by the pipeline, driven by the commands.
ALLOWED: dict[str, tuple[str, ...]] = {
    "device": (),
    "tf32": (),
    "ops": ("tf32",),
    "manifest": ("ops",),
    "formula_guard": (),
    "profiles": (),
    "bench": ("device", "ops"),
    "roofline": ("profiles",),
    "ceilings": ("device", "profiles", "roofline"),  # roofline: its rate formatting (si)
    "ledger": ("profiles",),
    "calibrate": ("device", "profiles", "ledger", "bench", "tf32", "ceilings"),
    "report": ("profiles", "roofline"),
    "export": ("profiles", "ledger", "roofline", "report"),  # report: its streaming reader (report.stream)
    "audit": ("device", "ops", "bench", "manifest", "profiles"),
    "fleet": ("device", "profiles", "ledger"),
    "pipeline": ("device", "ops", "bench", "ledger", "calibrate", "ceilings", "profiles", "roofline", "report",
                 "export", "audit", "fleet", "manifest"),  # manifest: validate and codegen (build-time tooling)
    "commands": ("pipeline",),
    "cli": ("commands",),
}

#: What a bench run must never load (spec §5.2: the benchmark layer has no third-party dependency
#: beyond the project; §4.4.5: no formula tooling at run time).
FORBIDDEN_AT_RUN_TIME = ("pydantic", "rich", "yaml", "matplotlib", "prometheus_client", "docker", "msgspec",
                         "tileops.roofline", "tileops.report", "tileops.export", "tileops.pipeline",
                         "tileops.profiles", "tileops.ledger", "tileops.calibrate", "tileops.manifest.analysis",
                         "tileops.manifest.signature", "tileops.manifest.roofline_fields", "tileops.manifest.workloads",
                         "tileops.manifest.scope", "tileops.manifest.facts", "tileops.manifest.values",
                         "tileops.manifest.expr", "tileops.manifest.load")


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "tileops" or len(parts) < 2:
        return None
    return parts[1].removeprefix("_") if parts[1] != "__main__" else "cli"


def _module_runs(tree: ast.AST) -> list[tuple[int, str]]:
    """Every ``python -m tileops.X`` a module starts (``[..., "-m", "tileops.X", ...]`` in a list or tuple):
    a child process re-enters the package at ``tileops.X``, an import by another road."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            out += [(node.lineno, nxt) for flag, nxt in zip(items, items[1:])
                    if flag == "-m" and isinstance(nxt, str) and nxt.startswith("tileops.")]
    return out


def _typing_only(tree: ast.AST) -> set[ast.AST]:
    """The imports under ``if TYPE_CHECKING:``: names for annotations, never executed."""
    return {node for block in ast.walk(tree)
            if isinstance(block, ast.If) and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
            for stmt in block.body for node in ast.walk(stmt)}


def _imports(source: str, module: str, is_package: bool, at_run_time: bool = False) -> list[tuple[int, str]]:
    """What ``module`` imports (any depth) and the ``python -m`` children it starts; ``at_run_time``: without the
    imports under ``if TYPE_CHECKING:`` (the cycle scan: an annotation's import runs nowhere)."""
    tree = ast.parse(source)
    out = _module_runs(tree)
    package = module if is_package else module.rsplit(".", 1)[0]
    skipped = _typing_only(tree) if at_run_time else set()
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from tileops import exitcodes`: a name that is a module. For the cycle scan, `from tileops.device
            # import nvml` is an import of that module, not of the package (a false circle through __init__); a
            # name that is not a module is stripped back to the module defining it (import_cycles).
            if base == "tileops":
                out += [(node.lineno, f"tileops.{a.name}") for a in node.names
                        if (PKG / f"{a.name}.py").exists() or (PKG / a.name).is_dir()]
            elif at_run_time:  # each name: the cycle scan needs the submodule, where a name is one
                out += [(node.lineno, f"{base}.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, base))
    return out


def _package_sources() -> list[tuple[str, str, bool]]:
    """(path relative to the repository, source, is a package's __init__) of every module of the package."""
    return [(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"), path.name == "__init__.py")
            for path in sorted(PKG.rglob("*.py"))]


def violations(sources: list[tuple[str, str, bool]] | None = None) -> list[str]:
    """Every import outside the allowed table, in ``sources`` (default: the package as it is on disk)."""
    found = []
    for rel, source, is_package in _package_sources() if sources is None else sources:
        module = ".".join(Path(rel).with_suffix("").parts)
        here = _layer(module) if module != "tileops.__init__" else None
        if here is None or here in FOUNDATION:
            allowed: set[str] = set(FOUNDATION)
        else:
            assert here in ALLOWED, f"{module}: layer {here!r} is not in the allowed-import table"
            allowed = {here, *FOUNDATION, *ALLOWED[here]}
        for line, target in _imports(source, module, is_package):
            there = _layer(target)
            if there is None or there == "__init__" or target == "tileops":
                continue
            if here in FOUNDATION and there not in FOUNDATION:
                found.append(f"{Path(rel).with_suffix('')}.py:{line}: foundation module imports {target}")
            elif there not in allowed:
                found.append(f"{Path(rel).with_suffix('')}.py:{line}: {here} imports {target} (layer {there})")
    return found


def test_every_import_follows_the_allowed_table() -> None:
    assert violations() == []


def test_the_scan_catches_a_lower_layer_starting_the_command_line() -> None:
    """``python -m tileops.cli`` from a lower layer re-enters every layer above it (calibrate -> cli -> pipeline ->
    calibrate, as ``--all-devices`` once did): the scan reads it as an import of the module started."""
    planted = ("tileops/calibrate/_planted_reentry.py",
               "import subprocess, sys\n"
               "def f():\n    subprocess.run([sys.executable, '-m', 'tileops.cli', 'calibrate'])\n", False)
    assert any("_planted_reentry.py:3: calibrate imports tileops.cli (layer cli)" in v
               for v in violations([*_package_sources(), planted]))
    sibling = ("tileops/calibrate/_planted_child.py",
               "import sys\nCMD = (sys.executable, '-m', 'tileops.calibrate.child')\n", False)
    assert not any("_planted_child" in v for v in violations([*_package_sources(), sibling]))


def test_no_reader_of_calibrations_imports_the_measuring_package() -> None:
    """Export and the fleet read each device's calibration through the ledger: no arrow to ``calibrate``
    (which imports torch to measure) from a layer that only reads results."""
    assert all("calibrate" not in ALLOWED[layer] for layer in ("export", "fleet", "ledger", "report", "roofline"))


def test_the_scan_catches_an_upward_import() -> None:
    """A module planted in memory (nothing is written into the tree, which may be read-only)."""
    planted = ("tileops/bench/_planted_upward_import.py",
               "def f():\n    from tileops.report import render\n    return render\n", False)
    assert any("_planted_upward_import.py:2: bench imports tileops.report" in v
               for v in violations([*_package_sources(), planted]))


def import_cycles(sources: list[tuple[str, str, bool]] | None = None) -> list[list[str]]:
    """Every circle of modules importing each other at run time (module level, inside functions, or a
    ``python -m`` child; not an annotation's import under ``if TYPE_CHECKING:``),
    as its strongly connected component (Tarjan's), each sorted."""
    return _circles(_import_graph(_package_sources() if sources is None else sources))


def _import_graph(sources: list[tuple[str, str, bool]]) -> dict[str, set[str]]:
    """Each module and the modules it imports at run time (a name imported is the module defining it)."""
    names = {rel: ".".join(Path(rel).with_suffix("").parts).removesuffix(".__init__") for rel, _, _ in sources}
    modules = set(names.values())
    graph: dict[str, set[str]] = {}
    for rel, source, is_package in sources:
        here = names[rel]
        deps = graph.setdefault(here, set())
        for _, target in _imports(source, here, is_package, at_run_time=True):
            while target and target not in modules:  # `tileops.x.name`: the module that defines the name
                target = target.rpartition(".")[0]
            if target and target != here:
                deps.add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_modules_import_each_other_in_a_circle() -> None:
    """A circle (a package's __init__ and a module that imports the package back, a launcher and the child it
    starts) means neither side can be read, tested or moved alone."""
    assert import_cycles() == []


def test_the_cycle_scan_catches_a_circle() -> None:
    """Two modules planted in memory that import each other, one of them inside a function."""
    planted = [("tileops/bench/_planted_a.py", "from tileops.bench import _planted_b\n", False),
               ("tileops/bench/_planted_b.py", "def f():\n    import tileops.bench._planted_a\n", False)]
    assert ["tileops.bench._planted_a", "tileops.bench._planted_b"] in import_cycles([*_package_sources(), *planted])


def command_imports_beyond_the_pipeline(sources: list[tuple[str, str, bool]] | None = None) -> list[str]:
    """Every import of a module under ``tileops/commands/`` (module level or in a function) that is not the
    pipeline, another command module (``argtypes``, a shared flag) or the foundation (``tileops.defaults``:
    the defaults a parser shows)."""
    return [f"{rel}:{line}: {target}"
            for rel, source, is_package in (_package_sources() if sources is None else sources)
            if rel.startswith("tileops/commands/")
            for line, target in _imports(source, ".".join(Path(rel).with_suffix("").parts), is_package)
            if _layer(target) is not None and target != "tileops"
            and _layer(target) not in {"commands", "pipeline", *FOUNDATION}]


def test_no_command_imports_a_layer_the_pipeline_composes() -> None:
    """A command is a parse and one call: it turns its arguments into its workflow's request and returns the
    outcome's exit code; everything it would compose (ops, manifest, bench, roofline, report, export, ...) is
    the pipeline's."""
    assert command_imports_beyond_the_pipeline() == []
    assert ALLOWED["commands"] == ("pipeline",)  # and the table says so too


def test_the_command_check_catches_a_command_that_composes() -> None:
    planted = ("tileops/commands/_planted.py", "from tileops.roofline import price_all\n", False)
    assert any("commands imports tileops.roofline" in v for v in violations([*_package_sources(), planted]))
    lazy = ("tileops/commands/_planted_lazy.py",
            "def run():\n    from tileops.ops.catalog import load_entries\n    return load_entries()\n", False)
    assert command_imports_beyond_the_pipeline([*_package_sources(), lazy]) == [
        "tileops/commands/_planted_lazy.py:2: tileops.ops.catalog"]


def pipeline_calls(source: str) -> list[str]:
    """Every call in ``source`` of a function it imports from the pipeline (a lowercase name, PEP 8; a
    CapWords name is a request's type, built, not called to work), as ``line: name``."""
    tree = ast.parse(source)
    functions = {a.asname or a.name for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tileops.pipeline")
                 for a in node.names if a.name[:1].islower()}
    modules = {a.asname for node in ast.walk(tree) if isinstance(node, ast.Import)
               for a in node.names if a.name.startswith("tileops.pipeline") and a.asname}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in functions:
                found.append(f"{node.lineno}: {f.id}")
            elif (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in modules
                  and f.attr[:1].islower()):
                found.append(f"{node.lineno}: {f.value.id}.{f.attr}")
    return sorted(found, key=lambda w: int(w.split(":")[0]))


def commands_that_compose(sources: list[tuple[str, str, bool]] | None = None) -> list[str]:
    """Each module under ``tileops/commands/`` that calls more than one function of the pipeline (it would be
    composing: making the request, then the printer, then choosing what to run), or prints by itself (a
    printer or a rich console built there): ``path: what``."""
    found = []
    for rel, source, _ in _package_sources() if sources is None else sources:
        if not rel.startswith("tileops/commands/"):
            continue
        calls = pipeline_calls(source)
        if len(calls) > 1:
            found.append(f"{rel}: {len(calls)} calls of the pipeline ({'; '.join(calls)})")
        found += [f"{rel}:{where}" for where in direct_output(source)]
    return found


def test_every_command_is_a_parse_and_one_call() -> None:
    """A command turns its flags into its workflow's arguments and makes one call; how the output looks
    (``--output-format``), new or resumed, list or run, is decided by the workflow, where it can be tested
    without a command line."""
    assert commands_that_compose() == []


def test_the_one_call_check_catches_a_command_that_composes() -> None:
    composing = ("tileops/commands/_planted_composing.py", textwrap.dedent("""
        def run(args):
            from tileops.pipeline.bench import make_printer, new_request, run_bench
            from tileops.pipeline.listing import list_plan as plan

            req = new_request({})
            printer = make_printer(args.output_format)
            return (plan(req, printer) if args.list_only else run_bench(req, printer)).exit_code
        """), False)
    printing = ("tileops/commands/_planted_printing.py", textwrap.dedent("""
        def run(args):
            import tileops.pipeline.ops as workflow
            from rich.console import Console

            Console().print("ops")
            return workflow.run_ops(workflow.OpsRequest()).exit_code
        """), False)
    one_call = ("tileops/commands/_planted_one_call.py", textwrap.dedent("""
        def run(args):
            from tileops.pipeline.audit import AuditRequest, run_audit

            return run_audit(AuditRequest(ops=args.op)).exit_code
        """), False)
    found = commands_that_compose([*_package_sources(), composing, printing, one_call])
    assert found == [
        "tileops/commands/_planted_composing.py: 4 calls of the pipeline "
        "(6: new_request; 7: make_printer; 8: plan; 8: run_bench)",
        "tileops/commands/_planted_printing.py:4: imports rich.console",
        "tileops/commands/_planted_printing.py:6: .print()",
    ]
    assert pipeline_calls(printing[1]) == ["7: workflow.run_ops"]


def direct_output(source: str) -> list[str]:
    """Where ``source`` prints by itself instead of through a printer (``tileops.report.printer``): a call of
    ``print``, of anything's ``.print`` or of ``sys.stdout``/``sys.stderr``'s ``write``, or an import of rich."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == "print":
                found.append(f"{node.lineno}: print()")
            elif isinstance(f, ast.Attribute) and f.attr == "print":
                found.append(f"{node.lineno}: .print()")
            elif (isinstance(f, ast.Attribute) and f.attr in ("write", "writelines")
                  and isinstance(f.value, ast.Attribute) and f.value.attr in ("stdout", "stderr")):
                found.append(f"{node.lineno}: {f.value.attr}.{f.attr}()")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"{node.lineno}: imports {n}" for n in names if n.split(".")[0] == "rich"]
    return found


def test_no_workflow_prints_by_itself() -> None:
    """pipeline/ composes; what it tells a person or a machine goes through the printer it is handed, so a
    workflow's output is a console, a plain log or JSON lines by one choice (``--output-format``)."""
    found = [f"{rel}:{where}" for rel, source, _ in _package_sources() if rel.startswith("tileops/pipeline/")
             for where in direct_output(source)]
    assert found == []


def test_the_output_check_catches_a_workflow_that_prints() -> None:
    planted = ("import sys\nfrom rich.console import Console\n\ndef f(console):\n    print('x')\n"
               "    console.print('y')\n    sys.stderr.write('z')\n")
    assert direct_output(planted) == ["2: imports rich.console", "5: print()", "6: .print()", "7: stderr.write()"]


def test_the_docs_print_the_same_table() -> None:
    text = DOC.read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([a-z_0-9]+)` \|([^|]*)\|", text, re.M))
    documented = {k: tuple(sorted(re.findall(r"`([a-z_0-9]+)`", v))) for k, v in rows.items()}
    assert documented == {k: tuple(sorted(v)) for k, v in ALLOWED.items()}
    assert all(f"`{m}`" in text for m in FOUNDATION)


def test_the_docs_name_every_module_of_the_split_packages() -> None:
    """docs/architecture.md's "Modules, one job each" names each module of each package it lists, and no
    module that is not there: the page is redrawn when the layout changes."""
    text = DOC.read_text(encoding="utf-8").split("## Modules, one job each", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `tileops\.([a-z_]+)` \| (.*) \|$", text, re.M)
    assert {pkg for pkg, _ in rows} >= {"records", "profiles", "roofline", "bench", "report", "export", "pipeline"}
    for pkg, cells in rows:
        if pkg == "commands":  # "one module per command": their names are the commands' (cli.COMMANDS)
            continue
        named = set(re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", cells)))  # outside the asides
        actual = {p.stem for p in (PKG / pkg).glob("*.py") if p.stem != "__init__"}
        assert named == actual, (pkg, sorted(named - actual), sorted(actual - named))


_PROBE = textwrap.dedent("""
    import json, sys, tempfile
    from pathlib import Path
    import tileops.bench
    from tileops.bench import sweep
    from tileops.bench.execute import Task, run_task
    from tileops.bench.interval import QUICK_BLOCKS
    from tileops.device import describe_device
    from tileops.records import RunOptions

    out = Path(tempfile.mkdtemp()) / "run"
    prep = sweep.prepare(RunOptions(ops=["relu"], dtypes=["float32"], device="cpu", quick=True),
                         describe_device("cpu"), out=out)
    p = prep.todo[0]
    # the worker's own code path, in this process: one row measured and priced by its evaluator
    rec = run_task(Task(op=p.op, label=p.row.label, case=p.case, case_name=p.case_name, backend=p.backend,
                        device=prep.device, rule=QUICK_BLOCKS, env=prep.env))
    result = sweep.run(prep)  # and the sweep, with its worker process
    print(json.dumps({"status": rec.status, "error": rec.error and rec.error.message,
                      "records": [r.status for r in result.records], "modules": sorted(sys.modules)}))
""")


@pytest.mark.slow
def test_a_bench_run_loads_no_third_party_library_and_no_upper_layer() -> None:
    r = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["status"] == "ok", got["error"]
    assert got["records"] and set(got["records"]) == {"ok"}
    loaded = [m for m in got["modules"] if any(m == f or m.startswith(f + ".") for f in FORBIDDEN_AT_RUN_TIME)]
    assert loaded == []


def test_the_bench_building_blocks_load_no_third_party_library() -> None:
    """The rerun interval, the sensors and the quiet check (issues 26 and 28) are standard library only: not even
    torch, so the worker pays nothing to import them and a record's reader could reuse them."""
    code = ("import sys; import tileops.bench.interval, tileops.bench.sensors, tileops.bench.quiet; "
            "print(sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert [m for m in json.loads(r.stdout.replace("'", '"')) if m not in ("tileops", "__main__", "_distutils_hack")] \
        == []
