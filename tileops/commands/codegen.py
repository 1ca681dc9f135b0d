"""`tileops codegen [--check] [--manifest DIR]`: write (or verify) the generated evaluator module.

Exit 0 written or current; 1 stale (``--check``) or an entry left out for a
defect; 2 a ``--manifest`` that is not a directory. The workflow is
``tileops.pipeline.codegen``; this module parses its arguments.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("codegen", help="write the generated roofline evaluators from the manifest",
                       description="Emit one plain-Python eval_roofline() per manifest entry (§4.4.1).")
    p.add_argument("--check", action="store_true", help="exit 1 if the committed module is stale; write nothing")
    p.add_argument("--manifest", type=Path, default=None,
                   help="an extra manifest directory (writes DIR/_roofline_gen.py); default: the shipped manifest")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tileops.pipeline.codegen import CodegenRequest, run_codegen

    return run_codegen(CodegenRequest(manifest=args.manifest, check=args.check)).exit_code
