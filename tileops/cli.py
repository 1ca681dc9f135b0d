"""The ``tileops`` command. Each subcommand lives in ``tileops.commands.<name>``.

A command module defines ``register(subparsers)``, which adds its parser and
sets ``func`` to a callable taking the parsed args and returning an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from tileops import __version__, exitcodes
from tileops.errors import TileOpsError
from tileops.interrupts import exit_code, signal_name

#: Subcommand modules, in the order ``tileops --help`` lists them.
COMMANDS = (
    "tileops.commands.bench",
    "tileops.commands.roofline",
    "tileops.commands.calibrate",
    "tileops.commands.profile",
    "tileops.commands.export",
    "tileops.commands.serve",
    "tileops.commands.audit",
    "tileops.commands.fleet",
    "tileops.commands.ops",
    "tileops.commands.validate",
    "tileops.commands.codegen",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tileops",
        description="Measure how close GPU (or CPU) ops run to the hardware's speed of light.",
    )
    parser.add_argument("--version", action="version", version=f"tileops {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for modname in COMMANDS:
        importlib.import_module(modname).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return exitcodes.USAGE
    try:
        return int(args.func(args) or 0)
    except TileOpsError as exc:
        print(f"tileops {args.command}: error: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM where the command handles it (tileops.interrupts)
        print(f"tileops {args.command}: interrupted ({signal_name(exc)})", file=sys.stderr)
        return exit_code(exc)


if __name__ == "__main__":
    sys.exit(main())
