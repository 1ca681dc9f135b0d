"""`tileops serve DIR`: an HTTP Prometheus exporter of the newest run per device under DIR.

``/metrics`` for Prometheus, ``/healthz`` for a liveness probe (200 when DIR is
readable, else 503; it lists the runs and profiles it had to leave out). Runs
until interrupted (Ctrl-C or SIGTERM); exit 0. Binds 127.0.0.1 unless told
otherwise: on a host, results are not published to the network by accident.
The workflow is ``tileops.pipeline.serve``; this module parses its arguments.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from tileops.commands import argtypes
from tileops.commands.export import add_detail_argument
from tileops.defaults import SERVE_HOST, SERVE_MAX_FILE_BYTES, SERVE_PORT

#: The bind address when --host is not given: the image sets it to 0.0.0.0 (Dockerfile).
HOST_ENV = "TILEOPS_SERVE_HOST"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="HTTP exporter: /metrics of the newest results in a directory, /healthz",
                       description="Serve Prometheus metrics of the newest run of each device found under DIR "
                                   "(DIR/records.jsonl, DIR/<run>/, DIR/<host>/<run>/), priced at scrape time.")
    p.add_argument("directory", type=Path, metavar="DIR", nargs="?", default=Path("results"),
                   help="the results directory (default: %(default)s)")
    p.add_argument("--host", default=os.environ.get(HOST_ENV) or SERVE_HOST,
                   help=f"address to bind (default: ${HOST_ENV} or {SERVE_HOST}, this machine only; the image "
                        "sets 0.0.0.0, since a container's port is reached from outside it)")
    p.add_argument("--port", type=argtypes.port, default=SERVE_PORT, help="port to bind, 0-65535; 0 picks a "
                   "free one (default %(default)s)")
    p.add_argument("--max-file-mb", type=argtypes.positive, default=SERVE_MAX_FILE_BYTES / 2**20, metavar="MB",
                   help="the largest records.jsonl or audit.jsonl a scrape reads; a larger run is left out and "
                        "listed in /healthz (default %(default)g)")
    p.add_argument("--profile", metavar="NAME|FILE",
                   help="a profile name or YAML file (default: the profile matching each device, re-read at "
                        "each scrape so a new calibration shows at once)")
    add_detail_argument(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tileops.pipeline.serve import ServeOptions, serve

    return serve(ServeOptions(directory=args.directory, host=args.host, port=args.port,
                              max_file_bytes=int(args.max_file_mb * 2**20), profile=args.profile,
                              detail=args.metrics_detail)).exit_code
