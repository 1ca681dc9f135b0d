"""`tileops ops [NAME]`: the op library as the manifest declares it.

Without NAME, one line per op: family, status, formula mode, the roof keys its
rows price on (``op.roof_key()`` after a call on meta tensors, one per dtype
case), and its workload rows. With NAME, the entry itself: signature,
parameters, derived indices, the roofline field, and every workload row with
the (flops, bytes) ``op.eval_roofline()`` gives it; a value-decided op is
priced only on real tensors, so its rows say so instead (`tileops bench`
prices them). Exit 0 shown; 2 an unknown op, or families that name none.
The workflow is ``tileops.pipeline.ops``; this module parses its arguments.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ops", help="list the ops of the manifest, or show one with its workload rows",
                       description="List the ops (family, status, roof keys, workload rows), or show one "
                                   "entry with its signature and rows.")
    p.add_argument("name", nargs="?", metavar="NAME", help="show this op in full")
    p.add_argument("--family", action="append", metavar="FAMILY", help="only these families (repeatable)")
    p.add_argument("--tag", metavar="TAG", help="count and show only rows with this tag (e.g. cpu)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--no-price", action="store_true",
                   help="do not call the ops on meta tensors (no roof keys or numbers; nothing is executed)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tileops.pipeline.ops import OpsRequest, run_ops

    return run_ops(OpsRequest(name=args.name, families=args.family or (), tag=args.tag, format=args.format,
                              price=not args.no_price)).exit_code
