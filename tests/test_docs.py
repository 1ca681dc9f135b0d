"""The docs are true: README.md and docs/*.md checked against the running tool (docs/conventions.md).

Runnable examples are run for real, in a temporary directory per page, with this checkout's
`tileops` and a profile store holding a quick calibration of this CPU; their outputs are compared
line by line or by structure with what the tool printed and wrote. Commands and flags are walked
against `tileops.cli.build_parser()`. Section references, repository paths, environment variables,
exit codes and PromQL examples are checked against the repository and promtool.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
import yaml

from docs_support import (PAGES, REPO, SHELL, Block, all_blocks, anchors, commands, flag_tables, invocations, marked,
                          options, parse_invocation, prose, read_page, table_flags, usage_flags)
from export_support import need_binary
from tileops.cli import build_parser
from cli_support import tileops

ROOT = build_parser()
TIMEOUT_S = 240


# --------------------------------------------------------------------------- fences and markers


def test_every_fence_names_its_language() -> None:
    bare = [b.where for b in all_blocks() if b.fenced and not b.info]
    assert not bare, f"fences without an info string (sh, console, text, yaml, ...): {bare}"


def test_every_shell_example_says_whether_it_runs() -> None:
    """A shell block is run by the tests or says why not: a new example cannot slip by unchecked."""
    for b in all_blocks():
        if b.info not in SHELL:
            continue
        assert b.marker is not None and b.marker.kind in ("runnable", "not-runnable"), \
            f"{b.where}: a {b.info} block needs <!-- runnable: exit=N --> or <!-- not-runnable: REASON --> above it"
        if b.marker.kind == "not-runnable":
            assert len(b.marker.text) > 10, f"{b.where}: say why the example is not run"


def test_markers_are_well_formed() -> None:
    for page in PAGES:  # a misspelt marker would silently mark nothing
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            m = re.match(r"^\s*<!--\s*([a-z-]+):", line)
            if m:
                assert m.group(1) in ("runnable", "not-runnable", "file", "output", "usage", "promql-test"), \
                    f"{page.name}:{n}: unknown marker {m.group(1)!r}"
    for b in all_blocks():
        if b.marker is None:
            continue
        kind, args = b.marker.kind, b.marker.args
        if kind == "runnable":
            assert b.info in (*SHELL, "python"), f"{b.where}: only shell and python blocks run"
            assert re.fullmatch(r"\d+", args.get("exit", "")), f"{b.where}: runnable needs exit=N"
            assert set(args) <= {"exit", "output", "timeout"}, f"{b.where}: unknown option in {b.marker.text}"
            out = args.get("output")
            assert out is None or out == "lines" or out in OUTPUT_CHECKS, f"{b.where}: unknown output check {out}"
            assert out != "lines" or b.info == "console", f"{b.where}: output=lines needs a console block"
        elif kind == "output":
            assert b.marker.text in OUTPUT_CHECKS, f"{b.where}: no output check named {b.marker.text!r}"
        elif kind == "usage":
            assert tuple(b.marker.text.split()) in commands(ROOT), f"{b.where}: no command {b.marker.text!r}"
        elif kind == "file":
            assert re.fullmatch(r"[\w.-]+", b.marker.text) and b.fenced, f"{b.where}: file: NAME above a fence"


def test_every_output_check_is_used() -> None:
    used = {b.marker.text for b in marked("output")} | {b.marker.args.get("output") for b in marked("runnable")}
    assert set(OUTPUT_CHECKS) <= used, f"output checks no page uses: {sorted(set(OUTPUT_CHECKS) - used)}"


# --------------------------------------------------------------------------- running a page's examples


@dataclass
class Result:
    block: Block
    rc: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


@dataclass
class PageRun:
    workdir: Path
    env: dict[str, str]
    results: dict[int, Result] = field(default_factory=dict)  # by the block's line


@pytest.fixture(scope="session")
def docs_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment a runnable example sees: this checkout's tileops and python3 first on PATH, no
    TILEOPS_* variable of the caller's, a profile store holding a quick calibration of this CPU, and no GPU
    (the examples marked runnable are the CPU's, on a GPU host too)."""
    shims = tmp_path_factory.mktemp("bin")
    for name, argv in (("tileops", f'"{sys.executable}" -m tileops.cli'), ("python3", f'"{sys.executable}"')):
        (shims / name).write_text(f'#!/bin/sh\nexec {argv} "$@"\n')
        (shims / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILEOPS_")}
    env.update(PATH=f"{shims}{os.pathsep}{env.get('PATH', '')}", COLUMNS="250", CUDA_VISIBLE_DEVICES="",
               TILEOPS_PROFILE_DIR=str(tmp_path_factory.mktemp("profiles")),
               PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH")))))
    r = tileops("calibrate", "--device", "cpu", "--quick", "--force", environ=env, timeout=600)  # busy host: marked
    assert r.returncode == 0, r.stdout + r.stderr
    return env


_RUNS: dict[Path, PageRun] = {}


def page_run(page: Path, env: dict[str, str], tmp_root: Path) -> PageRun:
    """The page's runnable examples, run once, in order, in one directory (its file: blocks written first)."""
    if page in _RUNS:
        return _RUNS[page]
    workdir = tmp_root / page.stem
    workdir.mkdir()
    run = _RUNS[page] = PageRun(workdir, env)
    blocks = read_page(page)
    for b in blocks:
        if b.marker is not None and b.marker.kind == "file":
            (workdir / b.marker.text).write_text(b.body, encoding="utf-8")
    for b in blocks:
        if b.marker is None or b.marker.kind != "runnable":
            continue
        timeout = float(b.marker.args.get("timeout", TIMEOUT_S))
        if b.info == "python":
            script = workdir / f"example_{b.line}.py"
            script.write_text(b.body, encoding="utf-8")
            argv = [sys.executable, str(script)]
        else:
            argv = ["bash", "-e", "-o", "pipefail", "-c", "\n".join(b.commands())]
        try:
            p = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
            run.results[b.line] = Result(b, p.returncode, p.stdout, p.stderr)
        except subprocess.TimeoutExpired as exc:
            run.results[b.line] = Result(b, -1, str(exc.stdout or ""), f"timed out after {timeout:.0f} s")
    return run


@pytest.fixture(scope="session")
def docs_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("docs")


RUNNABLE = marked("runnable")


@pytest.mark.slow  # each page's examples run tileops for real: seconds to tens of seconds a page
@pytest.mark.parametrize("block", RUNNABLE, ids=[b.where for b in RUNNABLE])
def test_runnable_example(block: Block, docs_env: dict[str, str], docs_tmp: Path) -> None:
    """The example exits with the code the docs state, and prints what they show (docs/conventions.md)."""
    result = page_run(block.page, docs_env, docs_tmp).results[block.line]
    said = f"{block.where}: {block.body.strip()[:300]}\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}"
    assert result.rc == int(block.marker.args["exit"]), said
    check = block.marker.args.get("output")
    if check == "lines":
        assert_lines_shown(block.shown_output(), result.text, block.where)
    elif check is not None:
        OUTPUT_CHECKS[check](block, page_run(block.page, docs_env, docs_tmp))


OUTPUTS = marked("output")


@pytest.mark.slow
@pytest.mark.parametrize("block", OUTPUTS, ids=[b.where for b in OUTPUTS])
def test_output_example_has_the_structure_of_a_real_run(block: Block, docs_env: dict[str, str],
                                                         docs_tmp: Path) -> None:
    run = page_run(block.page, docs_env, docs_tmp)
    failed = [r for r in run.results.values() if r.rc != int(r.block.marker.args["exit"])]
    assert not failed, f"the page's examples failed first: {[r.block.where for r in failed]}"
    OUTPUT_CHECKS[block.marker.text](block, run)


# --------------------------------------------------------------------------- comparing outputs

_NUM = r"\d[\d.,]*(?:e[+-]?\d+)?"
_UNIT = r"(?:\s?[kMGTPEµmn]?(?:FLOP/s|B/s|FLOP|B|s)\b)?"


def _collapse(line: str) -> str:
    return " ".join(line.split())


def line_pattern(shown: str) -> re.Pattern[str]:
    """A shown line as a pattern: ``...`` is anything, a number with its unit any number with any prefix."""
    parts = re.split(rf"(\.\.\.|{_NUM}{_UNIT})", _collapse(shown))
    regex = "".join(".*" if p == "..." else f"{_NUM}{_UNIT}" if i % 2 else re.escape(p) for i, p in enumerate(parts))
    return re.compile(regex)


def assert_lines_shown(shown: list[str], printed: str, where: str) -> None:
    actual = [_collapse(x) for x in printed.splitlines()]
    for line in shown:
        if not line.strip() or line.strip() == "...":
            continue
        pattern = line_pattern(line)
        assert any(pattern.fullmatch(a) for a in actual), \
            f"{where}: the docs show\n  {line.strip()}\nbut the command printed:\n" + "\n".join(actual[-40:])


def _md_sections(text: str) -> tuple[str, dict[str, dict]]:
    lines = [x.rstrip() for x in text.splitlines() if x.strip()]
    title, sections, current = lines[0], {}, None
    for line in lines[1:]:
        if line.startswith("## "):
            current = sections[line[3:]] = {"header": None, "rows": [], "bullets": [], "items": [], "other": []}
        elif current is None:
            raise AssertionError(f"text before the first section: {line}")
        elif line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            if current["header"] is None:
                current["header"] = cells
            elif not set(line) <= set("|-: "):
                current["rows"].append(cells)
        elif line.startswith("- "):
            current["bullets"].append(line[2:])
        elif line.startswith("  - ") and current["bullets"]:  # an item of the bullet above (issue 37)
            current["items"].append(line[4:])
        else:
            current["other"].append(line)
    return title, sections


def check_md_report(block: Block, run: PageRun) -> None:
    """`tileops roofline --format md`: a heading naming the profile, one section per op (its table without
    an `op` column: the same columns and rows), and the summary as a list."""
    shown_title, shown = _md_sections("\n".join(block.shown_output()))
    real_title, real = _md_sections(run.results[block.line].stdout)
    for title in (shown_title, real_title):
        assert re.fullmatch(r"# Roofline — profile \S+", title), title
    assert list(shown) == list(real), f"{block.where}: sections {list(shown)} against {list(real)}"
    for name, sec in real.items():
        doc = shown[name]
        assert not sec["other"] and not doc["other"], (name, sec["other"], doc["other"])
        if name == "Summary":
            assert sec["bullets"] and doc["bullets"] and not sec["rows"] and not doc["rows"]
            kind = lambda b: re.sub(_NUM, "#", b).split(":")[0]
            assert [kind(b) for b in doc["bullets"][:2]] == [kind(b) for b in sec["bullets"][:2]]
            assert doc["bullets"][-1].startswith("health:") and sec["bullets"][-1].startswith("health:")
            continue
        kinds = lambda header: [column_kind(c) for c in header]  # units follow the run's rows
        assert kinds(doc["header"]) == kinds(sec["header"]) and "op" not in sec["header"], \
            (name, doc["header"], sec["header"])
        assert [r[:3] for r in doc["rows"]] == [r[:3] for r in sec["rows"]], name


def _bench_tables(run: PageRun) -> list[list[str]]:
    """The header cells of every rich table the page's commands printed."""
    out = []
    for r in run.results.values():
        for line in r.stdout.splitlines():
            if line.startswith("┃"):
                out.append([c.strip() for c in line.strip("┃").split("┃")])
    return out


def column_kind(header: str) -> str:
    """A table header without its unit: ``time (µs)`` is ``time``, ``GFLOP/s`` is ``FLOP/s``, ``GB/s`` is ``B/s``
    (each number column's unit is chosen by the run's rows, docs/roofline.md)."""
    header = re.sub(r" \((?:s|ms|µs|ns)\)$", "", header)
    return re.sub(r"^[kMGTP]?(FLOP/s|B/s)$", r"\1", header)


def check_table_columns(block: Block, run: PageRun) -> None:
    documented = re.findall(r"^\| `([A-Za-z0-9/ ()%]+)` \|", block.body, flags=re.M)
    # a column described "only when ..." appears only in runs that have it (SOL (95 % CI), compile time, vs best)
    optional = set(re.findall(r"^\| `([A-Za-z0-9/ ()%]+)` \| only when", block.body, flags=re.M))
    headers = [[column_kind(c) for c in h] for h in _bench_tables(run)]
    assert headers, "no SOL table was printed on this page"
    assert all(h == [c for c in documented if c in h or c not in optional] for h in headers), \
        f"{block.where}: documented {documented} (optional {sorted(optional)}), printed {headers}"


def _run_files(run: PageRun, name: str) -> list[Path]:
    return sorted(run.workdir.rglob(name))


def check_machine_columns(block: Block, run: PageRun) -> None:
    documented = [c for row in re.findall(r"^\| (`[^|]+) \|", block.body, flags=re.M)
                  for c in re.findall(r"`([a-z_]+)`", row)]
    (doc_json, *_) = _run_files(run, "roofline.json")
    rows = json.loads(doc_json.read_text())["rows"]
    assert rows and all(list(r) == documented for r in rows), f"{block.where}: {documented} against {list(rows[0])}"
    r = subprocess.run(["tileops", "roofline", str(doc_json.parent), "--format", "csv"], cwd=run.workdir,
                       env=run.env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].split(",") == documented


def _keys(shown: dict, real: dict, where: str) -> None:
    assert set(shown) == set(real), f"{where}: the docs show {sorted(shown)}, a real run has {sorted(real)}"


def check_roofline_json(block: Block, run: PageRun) -> None:
    """The keys of roofline.json, of its health, and of one ceiling's judgment (their values are the run's)."""
    shown = json.loads(block.body)
    (real_file, *_) = _run_files(run, "roofline.json")
    real = json.loads(real_file.read_text())
    _keys(shown, real, "roofline.json")
    _keys(shown["health"], real["health"], "roofline.json health")
    _keys(shown["health"]["ceilings"][0], real["health"]["ceilings"][0], "roofline.json health.ceilings[]")


def check_run_dir(block: Block, run: PageRun) -> None:
    first = block.body.splitlines()[0].strip()
    documented = set(re.findall(r"[├└]── (\S+)", block.body))
    real = run.workdir / first
    assert real.is_dir(), f"{block.where}: the page's examples wrote no {first}"
    assert documented == {p.name for p in real.iterdir()}, f"{block.where}: {sorted(documented)} against " \
                                                           f"{sorted(p.name for p in real.iterdir())}"


def check_audit_fields(block: Block, run: PageRun) -> None:
    fields = block.body.split("Fields:", 1)[1].split(".\n", 1)[0]
    documented = set(re.findall(r"`([a-z_]+)`", fields))
    (audit, *_) = _run_files(run, "audit.jsonl")
    for line in audit.read_text().splitlines():
        assert set(json.loads(line)) == documented, f"{block.where}: {sorted(documented)} against {sorted(json.loads(line))}"


OUTPUT_CHECKS: dict[str, Callable[[Block, PageRun], None]] = {
    "md-report": check_md_report,
    "table-columns": check_table_columns,
    "machine-columns": check_machine_columns,
    "roofline-json": check_roofline_json,
    "run-dir": check_run_dir,
    "audit-fields": check_audit_fields,
}


def test_the_output_checks_fail_on_drift() -> None:
    """The comparisons can fail: a renamed column, a missing section, a changed word."""
    with pytest.raises(AssertionError):
        assert_lines_shown(["health: OK (physics check passed on every ceiling: memory)"],
                           "health: PARTLY JUDGED — physics check passed on cpu.fp32", "here")
    assert_lines_shown(["implies 3.89 TFLOP/s on cpu.fp32, 2486% of its theoretical 156 GFLOP/s; ..."],
                       "x\nimplies 812 GFLOP/s on cpu.fp32, 130% of its theoretical 624 GFLOP/s; physically\n", "here")
    with pytest.raises(AssertionError):
        _keys({"ok": True}, {"ok": True, "state": "held"}, "x")
    shown = ("# Roofline — profile a\n\n## relu\n\n| label | dtype | backend |\n|---|---|---|\n| r | f | t |\n\n"
             "## Summary\n\n- 1 row(s): 1 below\n- health: OK\n")
    fake = Block(REPO / "x.md", 1, "console", "$ x\n" + shown, None, ())
    check_md_report(fake, PageRun(REPO, {}, {1: Result(fake, 0, shown, "")}))
    for drift in (shown.replace("| label |", "| row |"), shown.replace("## relu", "## silu"),
                  shown.replace("- health: OK", "health: OK")):
        with pytest.raises(AssertionError):
            check_md_report(fake, PageRun(REPO, {}, {1: Result(fake, 0, drift, "")}))


# --------------------------------------------------------------------------- commands and flags


USAGE = marked("usage")


@pytest.mark.parametrize("block", USAGE, ids=[b.where for b in USAGE])
def test_a_synopsis_names_exactly_its_commands_flags(block: Block) -> None:
    path = tuple(block.marker.text.split())
    real = {f: a for p, parser in commands(ROOT).items() if p[:len(path)] == path
            for f, a in options(parser).items()}
    written = usage_flags(block)
    assert set(written) == set(real), f"{block.where}: missing {sorted(set(real) - set(written))}, " \
                                      f"not a flag {sorted(set(written) - set(real))}"
    for flag, choices in written.items():
        if choices is not None and real[flag].choices is not None:
            assert set(choices.split("|")) == {str(c) for c in real[flag].choices}, f"{block.where}: {flag} {choices}"


def test_every_documented_command_and_flag_exists() -> None:
    errors = [f"{inv.where}: `{inv.text}`: {e}" for inv in invocations(ROOT) for e in inv.errors]
    for where, path, flags in flag_tables(ROOT):
        if path is None:
            errors.append(f"{where}: a flag table under no heading naming its command (`tileops X`)")
            continue
        own = set().union(*table_flags(ROOT, path).values())
        errors += [f"{where}: tileops {' '.join(path)} has no {f}" for f in flags if f not in own]
    assert not errors, "\n".join(errors)


def test_every_command_and_flag_is_documented() -> None:
    seen: set[tuple[tuple[str, ...], str | None]] = set()
    for inv in invocations(ROOT):
        seen |= {(p, f) for p, f, _ in inv.flags} | {(p, None) for p in inv.paths}
    for b in USAGE:
        seen |= {(tuple(b.marker.text.split()), f) for f in usage_flags(b)}
    for _, path, flags in flag_tables(ROOT):
        if path is not None:
            seen |= {(p, f) for p, own in table_flags(ROOT, path).items() for f in flags if f in own}
    missing = [f"tileops {' '.join(path)} {flag or ''}".rstrip() for path, parser in commands(ROOT).items()
               for flag in ([None] if path else []) + list(options(parser)) if (path, flag) not in seen]
    assert not missing, f"undocumented (docs/conventions.md, 'Commands and flags'): {missing}"


def test_the_walk_catches_a_flag_that_does_not_exist() -> None:
    inv = parse_invocation("tileops bench --quick --op relu --format md", "here", ROOT)
    assert inv is not None and inv.path == ("bench",) and inv.errors == ["tileops bench has no --format"]
    inv = parse_invocation("tileops roofline rl --format html", "here", ROOT)
    assert inv is not None and inv.errors and "html" in inv.errors[0]
    inv = parse_invocation("tileops fleet bench --image x -- --family gemm --all-devices", "here", ROOT)
    assert inv is not None and inv.errors == ["tileops bench has no --all-devices"]
    assert parse_invocation("helm install tileops helm/tileops", "here", ROOT) is None


# --------------------------------------------------------------------------- what the docs cite

SPEC = REPO / "docs" / "spec.md"
_SECTION = re.compile(r"§\s?(\d+(?:\.\d+)*)")
_NOT_THE_SPEC = re.compile(r"(?i)(issue \d+ |report, )(§[\d.]+-)?$")


def spec_sections() -> set[str]:
    return {m.group(1) for m in re.finditer(r"^#+ (\d+(?:\.\d+)*) ", SPEC.read_text(encoding="utf-8"), flags=re.M)}


def test_every_section_reference_resolves_to_the_spec() -> None:
    sections = spec_sections()
    assert {"1.2", "1.3", "1.4", "2.2", "4.1", "4.4.5", "4.7", "5.1", "5.2"} <= sections
    files = [*PAGES, *(p for d in ("tileops", "tests", "scripts", "benchmarks") for p in (REPO / d).rglob("*")
                       if p.suffix in (".py", ".md", ".sh", "") and p.is_file() and "__pycache__" not in p.parts)]
    dangling = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for m in _SECTION.finditer(line):
                if not _NOT_THE_SPEC.search(line[:m.start()]) and m.group(1) not in sections:
                    dangling.append(f"{path.relative_to(REPO)}:{n}: §{m.group(1)}")
    assert not dangling, f"section references docs/spec.md does not have: {dangling}"


_TOP = ("tileops/", "tests/", "docs/", "scripts/", "benchmarks/", "exporters/", "helm/", "manifest/", "profiles/",
        "audit/", ".ci/")
_TOP_FILES = ("Dockerfile", "Makefile", "compose.yaml", "compose.cpu.yaml", "pyproject.toml", "constraints.txt",
              "README.md")


def test_docs_cite_only_what_the_repository_holds() -> None:
    missing = []
    for page in PAGES:
        text = prose(page)
        full = page.read_text(encoding="utf-8")
        assert "../shared" not in full and "/work/" not in full, f"{page.name} cites a path outside the repository"
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"https?://|mailto:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                missing.append(f"{page.name}: link {target}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                missing.append(f"{page.name}: link {target}: no such heading")
        for token in re.findall(r"`([^`\s]+)`", text):
            token = token.rstrip(".,:;")
            if not (token.startswith(_TOP) or token in _TOP_FILES) or re.search(r"[<>*{}$…]|\.\.\.", token):
                continue
            if not (REPO / token.split(":")[0]).exists():
                missing.append(f"{page.name}: `{token}`")
    assert not missing, f"cited but not in the repository: {missing}"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    """A link a reader can follow (`[...](docs/x.md)`), not a path in backticks (issue 27: timing.md was one)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(docs/([^)#\s]+)", readme))
    unlinked = [p.name for p in PAGES[1:] if p.name not in linked]
    assert not unlinked, f"docs pages README.md does not link to: {unlinked}"


# --------------------------------------------------------------------------- statements a test can check (issue 27)


def _alerts() -> list[str]:
    rules = yaml.safe_load((REPO / "exporters" / "prometheus" / "rules" / "tileops-alerts.rules.yml").read_text())
    return [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]


def test_the_alert_routing_table_and_the_grafana_count_name_every_alert() -> None:
    """docs/deploy.md's receivers table left two alerts out, and said "five expressions" of seven."""
    deploy = read_page(REPO / "docs" / "deploy.md") and (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")
    routing = deploy.split("## Alerts reach a person", 1)[1].split("\n\n", 3)[2]
    named = re.findall(r"`(TileOps\w+)`", routing)
    assert sorted(set(named)) == sorted(_alerts()), routing
    words = {"five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
             "thirteen": 13}
    (count,) = re.findall(r"rebuild the (\w+) expressions", deploy)
    assert words[count] == len(_alerts())


def test_the_jobs_the_docs_name_are_the_charts() -> None:
    """docs named a per-SKU calibration Job the chart no longer renders (calibration is an init container)."""
    kinds = {re.sub(r"^job-|\.yaml$", "", t.name) for t in (REPO / "helm" / "tileops" / "templates").glob("job-*.yaml")}
    named = set()
    for page in PAGES:
        text = " ".join(prose(page).split())
        named |= {m.lower() for m in re.findall(r"\b(\w+) Jobs?\b", text)}
    assert named - {"a", "the", "one", "per", "its", "own", "of", "each", "finished"} <= kinds, named


def test_device_check_steps_are_the_ones_timing_md_lists() -> None:
    """docs/timing.md's table of scripts/device-check's steps, against the script's own (the audit step ran
    while the table still said it was skipped), and every command the profiles page says it runs."""
    script = (REPO / "scripts" / "device-check").read_text(encoding="utf-8")
    (steps_array,) = re.findall(r"^STEPS=\((.*?)\)$", script, flags=re.M)
    steps = steps_array.split()
    timing = (REPO / "docs" / "timing.md").read_text(encoding="utf-8")
    table = [m for m in re.findall(r"^\| ([a-z-]+) \|", timing, flags=re.M)]
    assert [s for s in table if s in steps] == steps and "does not exist" not in timing
    gpu = (REPO / "docs" / "profiles.md").read_text(encoding="utf-8").split("## On a GPU", 1)[1]
    runs = gpu.split("It runs neither", 1)[0]
    claimed = re.findall(r"`tileops (\w+)[^`]*`", runs)
    assert claimed and all(re.search(rf"tileops(\.cli)? {verb}\b", script) for verb in claimed), claimed


def test_the_bench_says_how_long_a_full_calibration_takes_as_the_docs_do() -> None:
    """The bench said "about a minute" where a full CPU calibration takes 10 to 23 s; docs and message agree."""
    import inspect

    from tileops.pipeline import calibrate as calibration

    source = inspect.getsource(calibration.ensure_calibrated)
    profiles = (REPO / "docs" / "profiles.md").read_text(encoding="utf-8")
    assert "tens of seconds" in source and "full on a CPU (tens of seconds" in profiles
    assert "about a minute" not in source + profiles


def test_the_tf32_api_ops_md_names_is_the_one_the_code_uses() -> None:
    from tileops import tf32

    ops = " ".join((REPO / "docs" / "ops.md").read_text(encoding="utf-8").split())
    assert "`torch.backends.cuda.matmul.fp32_precision`" in ops and "allow_tf32` only on an older torch" in ops
    assert tf32.new_api() or "allow_tf32" in ops


def test_no_example_reads_a_path_no_example_writes() -> None:
    """roofline.md's streaming example read /tmp/rl, which the worked example (writing `rl`) never made."""
    for page in PAGES:
        written: set[str] = set()  # by this block (a redirect, --out) or an earlier one of the page
        for b in read_page(page):
            if b.info not in ("python", *SHELL):
                continue
            written |= set(re.findall(r"(?:>|--out[= ])\s*(/tmp/[\w.-]+)", b.body))
            for path in re.findall(r"/tmp/[\w.-]+", b.body):
                assert path in written, f"{b.where}: reads {path}, which no example before it writes"


def test_the_json_report_keeps_a_row_per_line_for_grep_and_head() -> None:
    """roofline.md: "`rows` (one object per line, so `grep` and `head` work on it)"; a closed pipe is a quiet
    exit 141 (tests/test_reliability_hostile.py)."""
    sys.path.insert(0, str(REPO / "tests"))
    from export_support import record

    from tileops.profiles import ProfileChooser
    from tileops.report import render_text
    from tileops.roofline import price_all

    text = render_text(price_all([record(label=f"r{i}") for i in range(3)], ProfileChooser.only(None)), "json")
    lines = text.splitlines()
    rows = [line for line in lines if line.lstrip().startswith('{"run_id"')]
    assert len(rows) == 3 and all(json.loads(line.strip().rstrip(",")) for line in rows)


# --------------------------------------------------------------------------- figures, artifacts, series counts (issue 37)

NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
                "ten": 10, "eleven": 11, "twelve": 12}


def _one_line(path: Path) -> str:
    return " ".join(path.read_text(encoding="utf-8").split())


def _significant(cell: str) -> int:
    """The significant figures a plain number cell shows: ``0.0201`` 3, ``49600`` 3, ``20.0`` 3, ``400`` 1."""
    digits = cell.replace(".", "").lstrip("0")
    return len(digits if "." in cell else digits.rstrip("0"))


def test_the_table_cells_have_the_figures_roofline_md_states() -> None:
    """roofline.md said "each cell has three significant figures" while a value of 1000 or more in the column's
    unit printed every digit (`49641`). The table is rendered with such a row, and every number cell is held to
    the documented count and the documented example."""
    sys.path.insert(0, str(REPO / "tests"))
    from export_support import record

    from tileops.profiles import ProfileChooser
    from tileops.report import render_text
    from tileops.roofline import price_all

    doc = _one_line(REPO / "docs" / "roofline.md")
    (word,) = re.findall(r"each cell has (\w+) significant figures", doc)
    figures = NUMBER_WORDS[word]
    ((ms, shown),) = re.findall(r"([\d.]+) ms in a `time \(µs\)` column reads `(\d+)`", doc)
    times = (2.01e-5, 3.0e-5, 4.444e-5, float(ms) * 1e-3, 1.234567e-5)  # the median in µs: a µs column
    text = render_text(price_all([record(label=f"r{i}", seconds=t) for i, t in enumerate(times)],
                                 ProfileChooser.only(None)), "table")
    lines = [[c.strip() for c in line.strip("┃│").split("┃" if line.startswith("┃") else "│")]
             for line in text.splitlines() if line.startswith(("┃", "│"))]
    header, rows = lines[0], lines[1:]
    assert "time (µs)" in header and len(rows) == len(times), text
    numeric = [i for i, h in enumerate(header) if h == "time (µs)" or re.fullmatch(r"[kMGTP]?(FLOP|B)/s", h)]
    assert len(numeric) == 3, header
    for row in rows:
        for i in numeric:
            assert re.fullmatch(r"\d+(\.\d+)?", row[i]) and _significant(row[i]) <= figures, (header[i], row[i])
            if "." in row[i]:  # a decimal shows exactly that many (20.0, not 20)
                assert _significant(row[i]) == figures, (header[i], row[i])
    assert rows[3][header.index("time (µs)")] == shown
    assert [_significant(c) for c in ("0.0201", "49600", "20.0", "400")] == [3, 3, 3, 1]


def test_a_row_the_bench_writes_has_an_interval_as_roofline_md_says() -> None:
    """roofline.md listed "too few blocks" among the reasons a record has no interval (and before that named only
    records written before intervals). The bench finishes a first visit of a single block, which has no interval
    of its own, under the host's stored model, as its sweep does: so the docs name only what can lack one."""
    sys.path.insert(0, str(REPO / "tests"))
    from export_support import record

    from tileops.bench.execute import visit_timing
    from tileops.bench.hostnoise import prior_model
    from tileops.bench.interval import visit_of
    from tileops.bench.revisit import finish

    block = [[0.040, 0.041, 0.039]]  # a slow row under --quick: its time cap left room for one block
    alone = dataclasses.replace(record(seconds=0.04), timing=visit_timing(block, timer="cpu-wall", warmup=1,
                                                                           total_s=0.12, stop_reason="time cap"))
    assert alone.timing is not None and alone.timing.level_ci_s is None  # the visit alone: no interval
    written = finish(alone, [visit_of(block)], "compute", prior_model("cpu"))
    assert written.timing is not None and written.timing.level_ci_s is not None
    doc = _one_line(REPO / "docs" / "roofline.md")
    assert "Every row the bench writes has one, a row timed in a single block too" in doc
    for text in (doc, _one_line(REPO / "docs" / "metrics.md")):
        assert "too few blocks)" not in text and "(written before intervals)" not in text


#: What an artifact's name ends with: the files the tool, its scripts and its deployment write or read.
ARTIFACT = re.compile(r"[\w.-]+\.(?:tgz|tar\.gz|json|jsonl|png|svg|html|yaml|yml|prom|csv|txt|log|ncu-rep)")
#: Where a file name the docs mention may be written: the product, not its tests.
WRITERS = ("tileops", "scripts", "exporters", "helm", ".ci", "benchmarks", "audit")


def _code_text() -> str:
    files = [p for d in WRITERS for p in (REPO / d).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    files += [REPO / f for f in _TOP_FILES if f != "README.md"]
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in files if p.suffix != ".png")


def unknown_artifacts(pages: dict[str, str], code: str, repo_files: set[str]) -> list[str]:
    """The file names in backticks on ``pages`` (name -> text) that nothing writes: not a literal of the code,
    not a file of the repository, not a file a docs page writes for its examples (``<!-- file: NAME -->``)."""
    written = {m for text in pages.values() for m in re.findall(r"<!--\s*file:\s*([\w.-]+)\s*-->", text)}
    out = []
    for name, text in pages.items():
        for token in re.findall(r"`([^`\s]+)`", text):
            base = token.rstrip(".,:;").split("/")[-1].split(":")[0]
            if re.search(r"[<>*{}$…]", token) or not ARTIFACT.fullmatch(base):
                continue
            if base not in code and base not in repo_files and base not in written:
                out.append(f"{name}: `{base}`")
    return sorted(set(out))


def test_every_artifact_the_docs_name_is_one_the_code_writes() -> None:
    """profiles.md said scripts/device-check leaves the calibration as `calibration.tgz`; it packs `runs.tgz`.
    Every file name in backticks that ends like an artifact is a literal of the code that writes it (or a file
    of the repository, or one a page writes for its own examples)."""
    repo_files = {p.name for p in REPO.rglob("*") if ".git" not in p.parts and ".venv" not in p.parts}
    pages = {p.name: p.read_text(encoding="utf-8") for p in PAGES}
    assert not unknown_artifacts(pages, _code_text(), repo_files)
    # the check itself: the old sentence is caught, the fixed one is not
    old = {"profiles.md": "leaves that store under `OUT` as `calibration.tgz` beside `traces.tgz`"}
    assert unknown_artifacts(old, _code_text(), repo_files) == ["profiles.md: `calibration.tgz`"]


def _series_per_row(tmp_path: Path, detail: str) -> dict[str, int]:
    """Series per row of a real export at ``detail``, by row label: a healthy CPU row with an interval, one
    without, and a CUPTI row (its span recorded) with an interval."""
    sys.path.insert(0, str(REPO / "tests"))
    from export_support import env, profile, record, write_run
    from prometheus_client.parser import text_string_to_metric_families

    from tileops.export.metrics import exposition
    from tileops.export.snapshot import load_run
    from tileops.profiles import ProfileChooser

    def interval(rec, **timing):  # ±1 %: a verdict that stands
        t = rec.timing
        ci = [0.99 * t.median_s, 1.01 * t.median_s]
        return dataclasses.replace(rec, timing=dataclasses.replace(t, level_ci_s=ci, median_ci_s=ci, **timing))

    gpu = env(device="Test GPU 1", uuid="GPU-1", kind="cuda")
    run = write_run(tmp_path / detail, [
        interval(record("relu", "cpu")),
        record("relu", "cpu-no-interval"),
        interval(record("relu", "cupti", e=gpu), timer="cupti", span_s=1.1e-3),
    ])
    chooser = ProfileChooser([profile(), profile(name="TestGPU", match="Test GPU 1")])
    text = exposition(load_run(run, chooser), detail=detail).decode()
    counts: dict[str, int] = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            if "op" in smp.labels:
                counts[smp.labels["label"]] = counts.get(smp.labels["label"], 0) + 1
    return counts


def test_the_series_per_row_are_the_numbers_metrics_md_states(tmp_path: Path) -> None:
    """metrics.md said "seven series per row" at full detail where a real export wrote eight (nine on a CUPTI
    row). The documented counts, read from their number words, against a real export's series per row."""
    doc = _one_line(REPO / "docs" / "metrics.md")
    ((lean, lean_bare),) = re.findall(r"\*\*(\w+) series per healthy row\*\* \((\w+) on a record without an "
                                      r"interval\)", doc)
    ((full, full_bare, full_cupti),) = re.findall(r"(\w+) series per row in all \((\w+) on a record without an "
                                                  r"interval\), (\w+) on a CUPTI row", doc)
    ((capacity, capacity_bare),) = re.findall(r"Per GPU: (\d+) per row \((\d+) on a record without an interval",
                                              doc)
    lean_counts, full_counts = _series_per_row(tmp_path, "lean"), _series_per_row(tmp_path, "full")
    assert lean_counts == {"cpu": NUMBER_WORDS[lean], "cpu-no-interval": NUMBER_WORDS[lean_bare],
                           "cupti": NUMBER_WORDS[lean]}
    assert (int(capacity), int(capacity_bare)) == (NUMBER_WORDS[lean], NUMBER_WORDS[lean_bare])
    assert full_counts == {"cpu": NUMBER_WORDS[full], "cpu-no-interval": NUMBER_WORDS[full_bare],
                           "cupti": NUMBER_WORDS[full_cupti]}


def _env_vars(text: str) -> set[str]:
    return set(re.findall(r"\bTILEOPS_[A-Z0-9_]+\b", text))


def test_every_environment_variable_is_documented() -> None:
    docs = set().union(*(_env_vars(p.read_text(encoding="utf-8")) for p in PAGES))
    package = set().union(*(_env_vars(p.read_text(encoding="utf-8")) for p in (REPO / "tileops").rglob("*.py")))
    deploy = set().union(*(_env_vars(p.read_text(encoding="utf-8")) for p in
                           [REPO / "Dockerfile", *REPO.glob("compose*.yaml"), *(REPO / "helm").rglob("*")]
                           if p.is_file()))
    assert package <= docs, f"read or set by the package, not documented: {sorted(package - docs)}"
    assert docs <= package | deploy, f"documented, but nothing reads or sets them: {sorted(docs - package - deploy)}"


def test_every_exit_code_is_documented() -> None:
    tree = ast.parse((REPO / "tileops" / "exitcodes.py").read_text(encoding="utf-8"))
    codes = {node.value.value for node in tree.body if isinstance(node, ast.Assign)
             and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int)}
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    paragraph = readme.split("Exit codes, shared by every command:", 1)[1].split("\n\n", 1)[0]
    documented = {int(c) for c in re.findall(r"`(\d+)`", paragraph)}
    assert codes == documented, f"tileops/exitcodes.py {sorted(codes)}, README.md {sorted(documented)}"


# --------------------------------------------------------------------------- PromQL


def promql_expressions(body: str) -> list[str]:
    """A promql block's expressions: comments dropped; a line at column 0 (not a closing bracket) starts a
    new expression once the brackets of the previous one are closed; blank lines separate too."""
    exprs: list[list[str]] = []
    depth = 0
    for raw in body.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            if depth == 0 and exprs and exprs[-1]:
                exprs.append([])
            continue
        if depth == 0 and (not exprs or not exprs[-1] or not line[0].isspace() and line[0] != ")"):
            exprs.append([])
        exprs[-1].append(line)
        depth += line.count("(") - line.count(")")
    return ["\n".join(e) for e in exprs if e]


PROMQL = [b for b in all_blocks() if b.info == "promql"]


@pytest.mark.parametrize("block", PROMQL, ids=[b.where for b in PROMQL])
def test_promql_examples_parse(block: Block, tmp_path: Path) -> None:
    exe = need_binary("promtool")
    exprs = promql_expressions(block.body)
    assert exprs, block.where
    rules = [{"record": f"docs:example_{i}", "expr": e} for i, e in enumerate(exprs)]
    path = tmp_path / "docs-examples.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "docs", "rules": rules}]}))
    r = subprocess.run([exe, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"{block.where}:\n{r.stdout}{r.stderr}"


def test_the_dcgm_join_shows_the_clock(tmp_path: Path) -> None:
    """docs/metrics.md "Joining with dcgm-exporter", evaluated by Prometheus's engine on two GPUs of one host:
    A is each row's SOL, B each row's SM clock (the clock itself, not 0 * clock + 1), C the rows of the GPU
    whose clock fell."""
    exe = need_binary("promtool")
    (block,) = [b for b in marked("promql-test") if b.marker.text == "sol-and-clock"]
    sol, clock, throttled = promql_expressions(block.body)
    row = 'Hostname="n1",modelName="NVIDIA H200",op="relu",label="r",dtype="bfloat16",backend="torch"'
    series = []
    for uuid, gpu, clocks, ratio in (("GPU-a", "0", "1980x70", "0.5x70"), ("GPU-b", "1", "1980x30 1200x40", "0.3x70")):
        dev = f'UUID="{uuid}",Hostname="n1",gpu="{gpu}",modelName="NVIDIA H200"'
        series += [
            {"series": f'DCGM_FI_DEV_SM_CLOCK{{{dev},job="dcgm",instance="n1:9400"}}', "values": clocks},
            {"series": f'tileops_sol_ratio{{UUID="{uuid}",{row},job="tileops",instance="n1"}}', "values": ratio},
            {"series": f'tileops_row_verdict{{UUID="{uuid}",{row},verdict="below",bound="memory",'
                       f'roof="cuda_core.fp32",physics="held",job="tileops",instance="n1"}}', "values": "1x70"},
        ]

    def sample(uuid: str, value: float) -> dict:
        return {"labels": f'{{UUID="{uuid}",{row}}}', "value": value}

    tests = {"tests": [{"interval": "1m", "input_series": series, "promql_expr_test": [
        {"expr": sol, "eval_time": "60m", "exp_samples": [sample("GPU-a", 0.5), sample("GPU-b", 0.3)]},
        {"expr": clock, "eval_time": "60m", "exp_samples": [sample("GPU-a", 1980), sample("GPU-b", 1200)]},
        {"expr": throttled, "eval_time": "60m", "exp_samples": [sample("GPU-b", 0.3)]},
    ]}]}
    path = tmp_path / "join.test.yml"
    path.write_text(yaml.safe_dump(tests))
    r = subprocess.run([exe, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_promql_blocks_split_into_their_expressions() -> None:
    body = textwrap.dedent("""\
        a == 1      # one
        b == 1      # two
        max by (x) (
            c
          * on (y) group_right
            d
        )
        e
          and on (z)
          (
              f
          )
        """)
    assert len(promql_expressions(body)) == 4
