"""The CLI starts without loading what its commands use: only the command being run is imported."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from tileops import cli

HEAVY = ("rich", "pydantic", "prometheus_client", "torch", "yaml", "matplotlib")


def _loaded_after(*argv: str) -> list[str]:
    """Top-level packages of HEAVY imported by `tileops ARGV` (run in a fresh interpreter)."""
    code = ("import sys, json\nfrom tileops.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n"
            "    pass\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & set(%r))))" % (HEAVY,))
    res = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_help_imports_no_command_module() -> None:
    assert _loaded_after("--help") == []


def _loaded_by(code: str) -> list[str]:
    """Top-level packages of HEAVY imported by running ``code`` in a fresh interpreter."""
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_a_command_imports_only_what_it_needs() -> None:
    assert _loaded_after("roofline", "--help") == []  # roofline's parser needs none of them
    assert _loaded_after("ops", "--help") == []  # nor does ops's: its tables (rich) are drawn by the workflow


def test_no_command_parser_imports_a_heavy_module() -> None:
    """Every parser registered in full (as the docs test walks them) shows its defaults from tileops.defaults and
    the pipeline's light tops: none imports the layer behind a flag."""
    assert _loaded_by("from tileops.cli import build_parser\nbuild_parser()") == []
    assert _loaded_by("import yaml") == ["yaml"]  # the probe sees a heavy import where there is one


def _registered_help() -> dict[str, str | None]:
    parser = cli.build_parser()  # every command, imported and registered in full
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {c.dest: c.help for c in sub._choices_actions}


def test_the_one_line_help_is_the_one_each_command_registers() -> None:
    assert _registered_help() == cli.COMMANDS


@pytest.mark.parametrize("argv", [["roofline", "x"], ["-h"], ["--version"], ["nope"], []])
def test_only_the_named_command_is_registered_in_full(argv: list[str]) -> None:
    parser = cli.build_parser(argv)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    full = {name for name, p in sub.choices.items() if p.get_default("func") is not None}
    assert full == ({argv[0]} if argv and argv[0] in cli.COMMANDS else set())

