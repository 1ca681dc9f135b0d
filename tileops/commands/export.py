"""`tileops export RESULTS... [--push URL] [--textfile DIR]`: publish priced runs to Prometheus.

Without a sink it prints the exposition to stdout (what a scrape would see).
Exit codes (tileops.cli): 0 exported; 4 a push failed after its retries (the
textfile, if asked, is written and the records are untouched); 2 unreadable
input or an unwritable textfile directory. The workflow is
``tileops.pipeline.export``; this module parses its arguments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tileops.commands import argtypes  # argparse only
from tileops.defaults import (METRICS_DETAIL, METRICS_DETAILS, PUSH_ATTEMPTS, PUSH_BACKOFF_S, PUSH_JOB,
                              PUSH_TIMEOUT_S)
from tileops.pipeline.export import Sinks


def add_sink_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup, *, restorable: bool = False) -> None:
    """The sink flags, shared with any command that exports at its end. ``restorable``: every default is None,
    so a resumed run (``tileops bench --resume``) can tell a flag given again from one left out; the help
    still states the default the run takes."""
    unset = restorable
    p.add_argument("--push", dest="push_url", metavar="URL", help="Pushgateway URL (e.g. http://pushgateway:9091); "
                   "one group per device: job / instance=host / UUID, replaced on each push")
    p.add_argument("--textfile", dest="textfile_dir", type=Path, metavar="DIR",
                   help="node_exporter textfile-collector directory: writes tileops_<uuid>.prom atomically")
    p.add_argument("--job", default=None, help=f"the Pushgateway job label (default {PUSH_JOB})")
    p.add_argument("--instance", help="the Pushgateway instance label (default: the host that ran the bench)")
    p.add_argument("--push-attempts", dest="push_attempts", type=argtypes.count,
                   default=None if unset else PUSH_ATTEMPTS, metavar="N",
                   help=f"tries before giving up, 1-1000 (default {PUSH_ATTEMPTS})")
    p.add_argument("--push-backoff", dest="push_backoff_s", type=argtypes.seconds(allow_zero=True, example="1"),
                   default=None if unset else PUSH_BACKOFF_S, metavar="SECONDS",
                   help=f"first retry delay, doubled each retry (default {PUSH_BACKOFF_S})")
    p.add_argument("--push-timeout", dest="push_timeout_s", type=argtypes.seconds(example="10"),
                   default=None if unset else PUSH_TIMEOUT_S, metavar="SECONDS",
                   help=f"timeout of one push (default {PUSH_TIMEOUT_S})")
    add_detail_argument(p, restorable=restorable)


def add_detail_argument(p: argparse.ArgumentParser | argparse._ArgumentGroup, *, restorable: bool = False) -> None:
    """``--metrics-detail``, shared by export, bench and serve."""
    p.add_argument("--metrics-detail", dest="metrics_detail", choices=METRICS_DETAILS,
                   default=None if restorable else METRICS_DETAIL,
                   help="lean (default): per row only device time, SOL ratio and the row's state; full: also SOL "
                        "time, achieved rates and tileops_row_info (shapes, params, data_terms)")


def sinks(args: argparse.Namespace) -> Sinks:
    """The sink flags as the pipeline takes them (argparse has checked each value)."""
    return Sinks(push_url=args.push_url, textfile_dir=args.textfile_dir, job=args.job, instance=args.instance,
                 push_attempts=args.push_attempts, push_backoff_s=args.push_backoff_s,
                 push_timeout_s=args.push_timeout_s, detail=args.metrics_detail)


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


def run(args: argparse.Namespace) -> int:
    from tileops.pipeline.export import ExportOptions, run_export

    result = run_export(ExportOptions(results=args.results, profile=args.profile, sinks=sinks(args)),
                        sys.stdout.buffer)
    return result.exit_code
