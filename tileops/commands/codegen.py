"""`tileops codegen [--check] [--manifest DIR]`: write (or verify) the generated evaluator module."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tileops.fsutil import write_atomic
from tileops.manifest.codegen import generate


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("codegen", help="write the generated roofline evaluators from the manifest",
                       description="Emit one plain-Python eval_roofline() per manifest entry (§4.4.1).")
    p.add_argument("--check", action="store_true", help="exit 1 if the committed module is stale; write nothing")
    p.add_argument("--manifest", type=Path, default=None,
                   help="an extra manifest directory (writes DIR/_roofline_gen.py); default: the shipped manifest")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.manifest is not None and not args.manifest.is_dir():
        print(f"tileops codegen: error: --manifest {args.manifest} is not a directory "
              "(give the directory that holds the extra manifest's YAML files)", file=sys.stderr)
        return 2
    target, text, report = generate(args.manifest)
    bad = [a for a in report.analyses if not a.ok]
    for a in bad:
        print(f"skipped {a.name}: {len(a.defects)} defect(s) (see `tileops validate`)", file=sys.stderr)
    for u in report.unreadable:
        print(f"unreadable: {u}", file=sys.stderr)
    for d in report.file_defects:
        print(d.render(), file=sys.stderr)
    if args.check:
        current = target.exists() and target.read_text(encoding="utf-8") == text
        if not current:
            again = f" --manifest {args.manifest}" if args.manifest else ""
            print(f"{target} is stale: run `tileops codegen`{again}",
                  file=sys.stderr)
            return 1
        print(f"{target} is current ({len(report.entries())} entries)")
        return 0 if report.ok else 1
    write_atomic(target, text)
    print(f"wrote {target} ({len(report.entries())} entries)")
    return 0 if report.ok else 1
