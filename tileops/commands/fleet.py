"""`tileops fleet calibrate|bench`: one appliance container per GPU of this host (docker SDK).

Each container requests one GPU by uuid; its log lines are echoed prefixed with
the device; its results and profiles are copied to ``--out DIR/<device>/``; a
calibration's profiles are installed in the host's profile store. Exit 0 when
every device succeeded, 1 naming each device that failed, 2 when nothing could
start (no engine, no image, no GPU).

Arguments after ``--`` go to the command in the container, e.g.
``tileops fleet calibrate --cpu -- --quick``. The workflow is
``tileops.pipeline.fleet``; this module parses its arguments.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from tileops.commands import argtypes
from tileops.defaults import FLEET_IMAGE


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fleet", help="run calibrate or bench in one container per GPU of this host (Docker)",
                       description="Start one appliance container per GPU of this host (a device request for its "
                                   "uuid), stream their logs, collect their results, name any device that failed.")
    tasks = p.add_subparsers(dest="task", metavar="TASK", required=True)
    for task, what in (("calibrate", "calibrate each device; install the profiles in the host's store"),
                       ("bench", "benchmark each device against the host's profiles; collect the results")):
        t = tasks.add_parser(task, help=what, description=what + ". Arguments after -- go to "
                             f"`tileops {task}` in each container.")
        t.add_argument("--image", default=os.environ.get("TILEOPS_IMAGE", FLEET_IMAGE),
                       help="the appliance image (default: $TILEOPS_IMAGE or %(default)s)")
        t.add_argument("--cpu", action="store_true", help="one container on the CPU, no GPU request")
        t.add_argument("--out", type=Path, default=None,
                       help="where each device's results and profiles are copied (default: results/fleet-<run-id>)")
        t.add_argument("--profile-dir", type=argtypes.profile_store, default=None,
                       help="host profile store: calibrations are installed here, bench containers start with "
                            "a copy of it (default: $TILEOPS_PROFILE_DIR or the user data dir)")
        t.add_argument("args", nargs=argparse.REMAINDER, metavar="-- ARGS",
                       help=f"arguments for `tileops {task}` in each container")
        t.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tileops.pipeline.fleet import FleetOptions, run_fleet

    extra = list(args.args)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    return run_fleet(FleetOptions(task=args.task, image=args.image, cpu=args.cpu, out=args.out,
                                  profile_dir=args.profile_dir, args=extra)).exit_code
