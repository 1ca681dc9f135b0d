"""`tileops roofline RESULTS...`: price benchmark records against a device profile (§4.3).

Exit codes (tileops.cli): 0 no physics breach (the summary's health line says
whether the check judged every ceiling, part, or none); 3 a physics breach (a formula error,
checked first); 1 a row more than ``--threshold`` slower than ``--baseline``,
or an error record in the results; 2 unreadable input (a missing or invalid
records file, an unknown or invalid profile, no records).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.console import Console

from tileops import exitcodes
from tileops.calibrate.results import device_profile_reader
from tileops.commands import argtypes
from tileops.errors import TileOpsError
from tileops.fsutil import unwritable_dir
from tileops.profiles import ProfileChooser, ProfileError
from tileops.records import Record, RecordFileError, load_records
from tileops.report import FORMATS, compare, render, render_summary
from tileops.report.baseline import DEFAULT_THRESHOLD
from tileops.roofline import Priced, health, price_all


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "roofline", help="price benchmark records against a device profile: SOL efficiency, verdicts, physics check",
        description="Price benchmark records against a device profile (SOL efficiency, bound, verdicts, "
                    "physics check). Exit 0 no breach (the health line says what was judged), 3 physics breach "
                    "(a formula error), 1 baseline "
                    "regression or error rows, 2 unreadable input.")
    p.add_argument("results", nargs="+", type=Path, metavar="RESULTS",
                   help="run directories (holding records.jsonl) or records.jsonl files")
    p.add_argument("--profile", metavar="NAME|FILE",
                   help="a profile name or a profile YAML file (default: match each record's device name)")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("--baseline", type=Path, action="append", metavar="OLD",
                   help="an older run (directory or records.jsonl) to compare with, row by row; repeatable")
    p.add_argument("--threshold", type=argtypes.fraction, default=DEFAULT_THRESHOLD,
                   help="flag rows slower than the baseline by more than this fraction (default 0.10 = 10%%)")
    p.add_argument("--plot", type=Path, metavar="DIR",
                   help="write roofline.png and roofline.svg into DIR (one pair per profile)")
    p.set_defaults(func=run)


class InputError(TileOpsError):
    """A RESULTS or --baseline path holds no records."""


def _load(paths: list[Path], what: str) -> list[Record]:
    records = load_records(paths)
    if not records:
        raise InputError(f"{what} {', '.join(map(str, paths))}: no records")
    return records


def _stdout_console() -> Console:
    """A terminal's own width; piped into a log, wide enough that no column wraps (COLUMNS overrides)."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=160)
    return console


def _plot(priced: list[Priced], chooser: ProfileChooser, out_dir: Path, err: Console) -> None:
    from tileops.report.plot import write_plot  # matplotlib only when asked

    used = [p for p in chooser.profiles if any(q.profile == p.name for q in priced)]
    if not used:
        err.print("roofline: no row is priced on a profile, so there is no roofline to plot")
        return
    for prof in used:
        stem = "roofline" if len(used) == 1 else f"roofline-{prof.name}"
        for path in write_plot(priced, prof, out_dir, stem=stem):
            err.print(f"wrote {path}")


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True, soft_wrap=True)
    try:
        records = _load(args.results, "results")
        baseline = _load(args.baseline, "baseline") if args.baseline else None
        # --profile: a file, a name, or a device name it matches; else each device's own calibration
        chooser = ProfileChooser.resolve(args.profile, per_device=device_profile_reader())
    except (FileNotFoundError, RecordFileError, ProfileError, InputError) as exc:
        print(f"tileops roofline: error: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    if args.plot is not None:
        why = unwritable_dir(args.plot)
        if why:
            print(f"tileops roofline: error: --plot {args.plot}: cannot write the plot there ({why}); give a "
                  "writable directory", file=sys.stderr)
            return exitcodes.USAGE

    try:
        priced = price_all(records, chooser)
        old = price_all(baseline, chooser) if baseline is not None else None
    except ProfileError as exc:  # a device claimed by two profiles: either choice would be a guess
        print(f"tileops roofline: error: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    comparison = compare(priced, old, args.threshold) if old is not None else None
    h = health(priced)
    if args.format == "table":
        render_summary(priced, _stdout_console(), comparison=comparison, health=h)
    else:
        sys.stdout.write(render(priced, args.format, comparison=comparison, health=h))
    if args.plot:
        try:
            _plot(priced, chooser, args.plot, err)
        except OSError as exc:
            print(f"tileops roofline: error: cannot write the plot in {args.plot}: {exc.strerror or exc}",
                  file=sys.stderr)
            return exitcodes.USAGE

    if not h.ok:
        err.print(f"roofline: physics check FAILED: {h.breaches} row(s) breach a theoretical ceiling "
                  f"(FORMULA ERROR); exit {exitcodes.PHYSICS}", style="bold red")
        return exitcodes.PHYSICS
    if comparison is not None and comparison.regressions:
        err.print(f"roofline: {len(comparison.regressions)} row(s) more than {args.threshold:.0%} slower than the "
                  f"baseline; exit {exitcodes.FAILED}", style="red")
        return exitcodes.FAILED
    if h.errors:
        err.print(f"roofline: {h.errors} error record(s) in the results; exit {exitcodes.FAILED}", style="red")
        return exitcodes.FAILED
    return exitcodes.OK
