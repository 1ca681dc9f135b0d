"""`tileops roofline RESULTS...`: price benchmark records against a device profile (§4.3).

Exit codes (tileops.cli): 0 no physics breach (the summary's health line says
whether the check judged every ceiling, part, or none); 3 a physics breach (a formula error,
checked first); 1 a row ``slower`` than ``--baseline`` (its level significantly
and more than ``--threshold`` slower; an ``ambiguous`` or ``unjudged`` row
never fails), or an error record in the results; 2 unreadable input (a missing or invalid
records file, an unknown or invalid profile, no records).

The workflow is ``tileops.pipeline.roofline``; this module parses its
arguments and imports only argparse and ``tileops.defaults`` at load time:
``tileops --help`` and every other command do not pay for what roofline uses.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tileops.commands import argtypes  # argparse only
from tileops.defaults import BASELINE_THRESHOLD, REPORT_FORMATS


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
    p.add_argument("--format", choices=REPORT_FORMATS, default="table")
    p.add_argument("--full-table", action="store_true",
                   help="the table format: print every row even above 500 rows (default: a digest of a large run)")
    p.add_argument("--baseline", type=Path, action="append", metavar="OLD",
                   help="an older run (directory or records.jsonl) to compare with, row by row; repeatable")
    p.add_argument("--threshold", type=argtypes.fraction, default=BASELINE_THRESHOLD,
                   help="the smallest change that matters: a row is slower (or faster) than the baseline when "
                        "the two runs' levels differ by more than this fraction and significantly (a 5%% false "
                        "discovery rate over the rows) (default 0.10 = 10%%); rows the intervals cannot decide are "
                        "ambiguous, rows without an interval unjudged, never a failure")
    p.add_argument("--plot", type=Path, metavar="DIR",
                   help="write roofline.png and roofline.svg into DIR (one pair per profile)")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="processes reading a large records file (default: the CPUs this process may use)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tileops.pipeline.roofline import RooflineOptions, run_roofline

    opts = RooflineOptions(results=args.results, profile=args.profile, format=args.format,
                           full_table=args.full_table, baseline=args.baseline or (), threshold=args.threshold,
                           plot_dir=args.plot, jobs=args.jobs)
    return run_roofline(opts).exit_code
