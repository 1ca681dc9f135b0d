"""`tileops report RUN`: one self-contained HTML page of a run, to open in a browser.

The roofline plot (each point's row on hover: its SOL and interval, verdict
and conditions), the table (sortable, filterable by op, dtype, backend and
verdict), the health, the host's noise, the calibration and the device, and
with ``--baseline`` each row's change. Nothing is fetched when the page is
opened. Exit codes are roofline's: 0, 3 a physics breach, 1 a baseline
regression or an error record, 2 unreadable input (the page is written in
every case but the last).

The workflow is ``tileops.pipeline.report``; this module parses its arguments
and imports only argparse at load time.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tileops.commands import argtypes  # argparse only
from tileops.defaults import BASELINE_THRESHOLD


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report", help="write a run's report as one HTML page to open in a browser: plot, table, health, host",
        description="Write one self-contained HTML page of a run (default RUN/report.html): the roofline plot "
                    "with each point's row on hover, the table sortable and filterable, the health, host noise, "
                    "calibration and device, and a baseline comparison. Exit 0, 3 physics breach (a formula "
                    "error), 1 baseline regression or error rows, 2 unreadable input.")
    p.add_argument("run", type=Path, metavar="RUN", help="a run directory (holding records.jsonl) or a records.jsonl")
    p.add_argument("--baseline", type=Path, action="append", metavar="OLD",
                   help="an older run (directory or records.jsonl) to compare with, row by row; repeatable")
    p.add_argument("--threshold", type=argtypes.fraction, default=BASELINE_THRESHOLD,
                   help="the smallest change that matters against the baseline, as for `tileops roofline` "
                        "(default 0.10 = 10%%)")
    p.add_argument("--profile", metavar="NAME|FILE",
                   help="a profile name or a profile YAML file (default: match each record's device name)")
    p.add_argument("-o", "--output", type=Path, metavar="FILE",
                   help="where to write the page (default: report.html beside the records)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tileops.pipeline.report import ReportRequest, run_report

    return run_report(ReportRequest(run=args.run, baseline=args.baseline or (), output=args.output,
                                    profile=args.profile, threshold=args.threshold)).exit_code
