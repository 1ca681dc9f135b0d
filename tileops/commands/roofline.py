"""`tileops roofline RESULTS...`: price benchmark records against a device profile (§4.3).

Exit codes (tileops.cli): 0 no physics breach (the summary's health line says
whether the check judged every ceiling, part, or none); 3 a physics breach (a formula error,
checked first); 1 a row more than ``--threshold`` slower than ``--baseline``,
or an error record in the results; 2 unreadable input (a missing or invalid
records file, an unknown or invalid profile, no records).

The records stream through pricing into the report (``tileops.report.stream``),
so memory follows the size of the output, not of the records; nothing is
written until every record has been read, so a bad line exits 2 with no
partial report. This module imports only argparse at load time: ``tileops
--help`` and every other command do not pay for what roofline uses.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tileops.commands import argtypes  # argparse only

FORMATS = ("table", "json", "md", "csv")  # tileops.report.FORMATS
DEFAULT_THRESHOLD = 0.10  # tileops.report.baseline.DEFAULT_THRESHOLD


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
    p.add_argument("--full-table", action="store_true",
                   help="the table format: print every row even above 500 rows (default: a digest of a large run)")
    p.add_argument("--baseline", type=Path, action="append", metavar="OLD",
                   help="an older run (directory or records.jsonl) to compare with, row by row; repeatable")
    p.add_argument("--threshold", type=argtypes.fraction, default=DEFAULT_THRESHOLD,
                   help="flag rows slower than the baseline by more than this fraction (default 0.10 = 10%%)")
    p.add_argument("--plot", type=Path, metavar="DIR",
                   help="write roofline.png and roofline.svg into DIR (one pair per profile)")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="processes reading a large records file (default: the CPUs this process may use)")
    p.set_defaults(func=run)


def _error(msg: str) -> int:
    from tileops import exitcodes

    print(f"tileops roofline: error: {msg}", file=sys.stderr)
    return exitcodes.USAGE


def _say(msg: str, style: str = "") -> None:
    from tileops.report.texttable import ansi, colour_wanted

    if style and colour_wanted(sys.stderr):
        msg = ansi(style) + msg + "\x1b[0m"
    print(msg, file=sys.stderr)


class _Keep:
    """A sink holding every priced row (only the plot needs them all)."""

    def __init__(self) -> None:
        self.rows: list = []

    def add(self, p) -> None:  # noqa: ANN001 - a Priced
        self.rows.append(p)

    def merge(self, later: "_Keep") -> None:
        self.rows += later.rows


def _plot(priced: list, chooser, out_dir: Path) -> None:  # noqa: ANN001
    from tileops.report.plot import write_plot  # matplotlib only when asked

    used = [p for p in chooser.profiles if any(q.profile == p.name for q in priced)]
    if not used:
        _say("roofline: no row is priced on a profile, so there is no roofline to plot")
        return
    for prof in used:
        stem = "roofline" if len(used) == 1 else f"roofline-{prof.name}"
        for path in write_plot(priced, prof, out_dir, stem=stem):
            _say(f"wrote {path}")


def run(args: argparse.Namespace) -> int:
    from tileops.records import collecting_rarely

    with collecting_rarely():
        return _roofline(args)


def _roofline(args: argparse.Namespace) -> int:
    from tileops import exitcodes
    from tileops.calibrate.results import device_profile_reader
    from tileops.fsutil import unwritable_dir
    from tileops.profiles import ProfileChooser, ProfileError
    from tileops.records import RecordFileError
    from tileops.report.baseline import TimeIndex, compare_indexes
    from tileops.report.stream import default_jobs, read_priced
    from tileops.report.summary import RunFacts
    from tileops.report.tables import new_report
    from tileops.report.texttable import colour_wanted

    jobs = default_jobs() if args.jobs is None else args.jobs
    if jobs < 1:
        return _error("--jobs must be >= 1")
    if args.plot is not None:
        why = unwritable_dir(args.plot)
        if why:
            return _error(f"--plot {args.plot}: cannot write the plot there ({why}); give a writable directory")
        jobs = 1  # the plot needs every priced row in this process
    baseline = bool(args.baseline)

    def sinks() -> list:
        out: list = [RunFacts(), new_report(args.format, baseline=baseline, full_table=args.full_table)]
        out.append(TimeIndex() if baseline else None)
        out.append(_Keep() if args.plot else None)
        return [s for s in out if s is not None]

    try:
        # --profile: a file, a name, or a device name it matches; else each device's own calibration
        chooser = ProfileChooser.resolve(args.profile, per_device=device_profile_reader())
        old = None
        if baseline:
            (old,) = read_priced(args.baseline, chooser, lambda: [TimeIndex()], jobs=jobs)
            if not len(old):
                return _error(f"baseline {', '.join(map(str, args.baseline))}: no records")
        facts, report, *rest = read_priced(args.results, chooser, sinks, jobs=jobs)
    except (FileNotFoundError, RecordFileError) as exc:
        return _error(str(exc))
    except ProfileError as exc:  # unknown/invalid profile, or a device claimed by two profiles
        return _error(str(exc))
    if not facts.rows:
        return _error(f"results {', '.join(map(str, args.results))}: no records")
    new = rest.pop(0) if baseline else None
    comparison = compare_indexes(new, old, args.threshold) if (new is not None and old is not None) else None
    h = facts.health()
    report.write(sys.stdout, facts, comparison, h, colour=args.format == "table" and colour_wanted(sys.stdout))
    sys.stdout.flush()
    if args.plot:
        try:
            _plot(rest.pop(0).rows, chooser, args.plot)
        except OSError as exc:
            return _error(f"cannot write the plot in {args.plot}: {exc.strerror or exc}")

    if not h.ok:
        _say(f"roofline: physics check FAILED: {h.breaches} row(s) breach a theoretical ceiling "
             f"(FORMULA ERROR); exit {exitcodes.PHYSICS}", "bold red")
        return exitcodes.PHYSICS
    if comparison is not None and comparison.regressions:
        _say(f"roofline: {len(comparison.regressions)} row(s) more than {args.threshold:.0%} slower than the "
             f"baseline; exit {exitcodes.FAILED}", "red")
        return exitcodes.FAILED
    if h.errors:
        _say(f"roofline: {h.errors} error record(s) in the results; exit {exitcodes.FAILED}", "red")
        return exitcodes.FAILED
    return exitcodes.OK
