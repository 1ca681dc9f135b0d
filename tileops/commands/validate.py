"""`tileops validate [PATH...]` (§4.1): structural checks plus every analysis defect.

Exit 0 clean, 1 defects, 2 unreadable input. The workflow is
``tileops.pipeline.validate``; this module parses its arguments.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check manifest files: schema, formulas, registry",
                       description="Check manifest YAML (default: the shipped manifest and TILEOPS_MANIFEST_PATH).")
    p.add_argument("paths", nargs="*", type=Path, help="YAML files or directories")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tileops.pipeline.validate import ValidateRequest, run_validate

    return run_validate(ValidateRequest(paths=args.paths, format=args.format)).exit_code
