"""The ``tileops`` command. Each subcommand lives in ``tileops.commands.<name>``.

A command module defines ``register(subparsers)``, which adds its parser and
sets ``func`` to a callable taking the parsed args and returning an exit code.

Only the command being run is imported: the others are listed by their one-line
help (:data:`COMMANDS`), so ``tileops --help`` and every command start without
loading what the other commands use (rich, pydantic, prometheus_client,
torch). A test holds each line equal to the help its module registers.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from tileops import __version__, exitcodes
from tileops.errors import TileOpsError
from tileops.interrupts import exit_code, signal_name

#: Subcommands in the order ``tileops --help`` lists them, with their one-line help.
COMMANDS: dict[str, str] = {
    "bench": "run the benchmarks and print SOL efficiency (the main job)",
    "roofline": "price benchmark records against a device profile: SOL efficiency, verdicts, physics check",
    "report": "write a run's report as one HTML page to open in a browser: plot, table, health, host",
    "calibrate": "measure this device's bandwidth mixes, compute roofs and latency floor",
    "profile": "list and show device profiles (theoretical, calibration, effective)",
    "export": "publish priced runs to Prometheus: Pushgateway, node_exporter textfile, or stdout",
    "serve": "HTTP exporter: /metrics of the newest results in a directory, /healthz",
    "audit": "the read-side bytes audit: DRAM reads under Nsight Compute against each op's read formula",
    "fleet": "run calibrate or bench in one container per GPU of this host (Docker)",
    "ops": "list the ops of the manifest, or show one with its workload rows",
    "validate": "check manifest files: schema, formulas, registry",
    "codegen": "write the generated roofline evaluators from the manifest",
}


def _command_in(argv: list[str]) -> str | None:
    """The subcommand named on this command line (the first word that is not an option), if any."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv``, only the command it names is imported and registered in full."""
    parser = argparse.ArgumentParser(
        prog="tileops",
        description="Measure how close GPU (or CPU) ops run to the hardware's speed of light.",
    )
    parser.add_argument("--version", action="version", version=f"tileops {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = _command_in(argv) if argv is not None else None
    for name, help_line in COMMANDS.items():
        if argv is None or name == chosen:
            importlib.import_module(f"tileops.commands.{name}").register(sub)
        else:
            sub.add_parser(name, help=help_line, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return exitcodes.USAGE
    try:
        rc = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not as a traceback at exit
        return rc
    except BrokenPipeError:  # `... | head`: the reader has what it wanted; stop as a Unix filter does
        _drop_stdout()
        return exitcodes.PIPE_CLOSED
    except TileOpsError as exc:
        print(f"tileops {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code  # exitcodes.USAGE unless the error says otherwise (--require-quiet: BUSY)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM where the command handles it (tileops.interrupts)
        print(f"tileops {args.command}: interrupted ({signal_name(exc)})", file=sys.stderr)
        return exit_code(exc)


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what is still buffered cannot fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a file descriptor (a test's capture)
        pass


if __name__ == "__main__":
    sys.exit(main())
