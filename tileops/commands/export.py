"""`tileops export RESULTS... [--push URL] [--textfile DIR]`: publish priced runs to Prometheus.

Without a sink it prints the exposition to stdout (what a scrape would see).
Exit codes (tileops.cli): 0 exported; 4 a push failed after its retries (the
textfile, if asked, is written and the records are untouched); 2 unreadable
input or an unwritable textfile directory.

The exporter (prometheus_client, pydantic) is imported when the command runs,
not when the CLI starts; the defaults shown in --help are written here, and a
test holds them equal to ``tileops.export.push``'s and ``tileops.export.metrics``'.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tileops.commands import argtypes  # argparse only
from tileops.errors import TileOpsError

if TYPE_CHECKING:
    from tileops.export.push import RetryPolicy

DEFAULT_JOB = "tileops"  # tileops.export.push.DEFAULT_JOB
PUSH_ATTEMPTS, PUSH_BACKOFF_S, PUSH_TIMEOUT_S = 5, 1.0, 10.0  # tileops.export.push.RetryPolicy's defaults
DETAILS, DEFAULT_DETAIL = ("lean", "full"), "lean"  # tileops.export.metrics.DETAILS, DEFAULT_DETAIL


def add_sink_arguments(p: argparse.ArgumentParser) -> None:
    """The sink flags, shared with any command that exports at its end."""
    p.add_argument("--push", metavar="URL", help="Pushgateway URL (e.g. http://pushgateway:9091); one group per "
                   "device: job / instance=host / UUID, replaced on each push")
    p.add_argument("--textfile", type=Path, metavar="DIR",
                   help="node_exporter textfile-collector directory: writes tileops_<uuid>.prom atomically")
    p.add_argument("--job", default=None, help=f"the Pushgateway job label (default {DEFAULT_JOB})")
    p.add_argument("--instance", help="the Pushgateway instance label (default: the host that ran the bench)")
    p.add_argument("--push-attempts", type=argtypes.count, default=PUSH_ATTEMPTS, metavar="N",
                   help="tries before giving up, 1-1000 (default %(default)s)")
    p.add_argument("--push-backoff", type=argtypes.seconds(allow_zero=True, example="1"),
                   default=PUSH_BACKOFF_S, metavar="SECONDS",
                   help="first retry delay, doubled each retry (default %(default)s)")
    p.add_argument("--push-timeout", type=argtypes.seconds(example="10"), default=PUSH_TIMEOUT_S,
                   metavar="SECONDS", help="timeout of one push (default %(default)s)")
    add_detail_argument(p)


def add_detail_argument(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--metrics-detail``, shared by export, bench and serve."""
    p.add_argument("--metrics-detail", choices=DETAILS, default=DEFAULT_DETAIL,
                   help="lean (default): per row only device time, SOL ratio and the row's state; full: also SOL "
                        "time, achieved rates and tileops_row_info (shapes, params, data_terms)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export", help="publish priced runs to Prometheus: Pushgateway, node_exporter textfile, or stdout",
        description="Price runs and publish their metrics (docs/metrics.md). Without --push/--textfile, print "
                    "the exposition. Exit 0 exported, 4 push failed after retries (results untouched), "
                    "2 unreadable input.")
    p.add_argument("results", nargs="+", type=Path, metavar="RESULTS",
                   help="run directories (holding records.jsonl), records.jsonl files, or audit folders "
                        "(`tileops audit --out DIR`, holding audit.jsonl); the newest run of each device is "
                        "exported with the device's newest audit")
    p.add_argument("--profile", metavar="NAME|FILE",
                   help="a profile name or YAML file (default: the profile matching each device)")
    add_sink_arguments(p)
    p.set_defaults(func=run)


def retry_policy(args: argparse.Namespace) -> "RetryPolicy":
    """The push flags as a policy (argparse has checked each number)."""
    from tileops.export.push import RetryPolicy

    return RetryPolicy(attempts=args.push_attempts, backoff_s=args.push_backoff, timeout_s=args.push_timeout)


def run(args: argparse.Namespace) -> int:
    from tileops.records import collecting_rarely

    with collecting_rarely():
        return _export(args)


def _export(args: argparse.Namespace) -> int:
    from tileops import exitcodes
    from tileops.calibrate.results import device_profile_reader
    from tileops.export.calibration import device_calibrations
    from tileops.export.metrics import render
    from tileops.export.sinks import check_sinks, export_snapshots
    from tileops.export.snapshot import latest_per_device, load_results
    from tileops.profiles import ProfileChooser
    from tileops.report.stream import default_jobs

    try:
        check_sinks(args.push, args.textfile)
        policy = retry_policy(args)
        chooser = ProfileChooser.resolve(args.profile, per_device=device_profile_reader())
        calibrations = device_calibrations()
        jobs = default_jobs()  # a large records file is read by one process per CPU
        loaded = []
        for path in args.results:
            found = load_results(path, chooser, calibrations, jobs=jobs)
            if not found:  # as `tileops roofline` says it: an empty run is a mistake to name, not a silent 0
                raise TileOpsError(f"results {path}: no records (nothing to export; a run stopped before its "
                                   "first row, or the wrong directory)")
            loaded += found
        snaps = latest_per_device(loaded)
    except TileOpsError as exc:
        print(f"tileops export: error: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    if not args.push and args.textfile is None:
        sys.stdout.buffer.write(render(snaps, detail=args.metrics_detail))
        sys.stdout.flush()
        return exitcodes.OK
    return export_snapshots(snaps, args.push, args.textfile, job=args.job or DEFAULT_JOB, instance=args.instance,
                            policy=policy, detail=args.metrics_detail)
