"""`tileops validate [PATH...]` (§4.1): structural checks plus every analysis defect.

Exit 0 clean, 1 defects, 2 unreadable input. The validator judges no formula
and keeps no copy of the primitive set: it renders what the analysis found and
adds the checks that need the package (func importability, the op registry).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tileops.errors import ManifestError
from tileops.manifest.analysis import Defect
from tileops.manifest.funcs import func_defects
from tileops.manifest.load import ManifestReport, read_manifest

#: Codes the validator adds to the analysis's (docs/manifest.md lists them all).
VALIDATOR_CODES = {
    "func-unresolved": "a func path of an implemented entry is not a plain function in tileops/ops/formulas.py",
    "stale-codegen": "a generated module does not match the manifest (or does not import)",
    "no-class": "an implemented entry no Op class claims",
    "no-entry": "an Op class claims an entry that does not exist",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check manifest files: schema, formulas, registry",
                       description="Check manifest YAML (default: the shipped manifest and TILEOPS_MANIFEST_PATH).")
    p.add_argument("paths", nargs="*", type=Path, help="YAML files or directories")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(func=run)


def registry_defects(report: ManifestReport) -> list[Defect]:
    """Entries and Op classes pair up; the generated modules the classes bind are current."""
    from tileops.ops import registry

    try:
        classes = registry.load_all()
    except ManifestError as exc:  # a stale or missing generated module: the classes cannot be created
        return [Defect("stale-codegen", "generated module", str(exc),
                       "run `tileops codegen` (and `tileops codegen --manifest DIR` for each extra directory)")]
    out: list[Defect] = []
    for e in report.entries().values():
        if e.status == "implemented" and e.name not in classes:
            out.append(Defect("no-class", f"{e.file}:{e.name}.status",
                              f"{e.name} is implemented but no Op class claims it",
                              f"add a class with name = {e.name!r}, or set status: spec-only"))
    names = {a.name for a in report.analyses}
    for name in sorted(set(classes) - names):
        out.append(Defect("no-entry", f"class {classes[name].__module__}.{classes[name].__qualname__}",
                          f"class claims manifest entry {name!r}, which does not exist",
                          "add the manifest entry, or remove the class"))
    return out


def package_defects(report: ManifestReport, *, check_registry: bool) -> list[Defect]:
    """Checks that need the package: func paths resolve, entries and classes pair up."""
    return [*func_defects(report), *(registry_defects(report) if check_registry else [])]


def run(args: argparse.Namespace) -> int:
    report = read_manifest(args.paths or None)
    extra = package_defects(report, check_registry=not args.paths)
    defects = [*report.defects, *extra]
    unreached = [u for a in report.analyses for u in a.unreached]
    if args.format == "json":
        print(json.dumps({
            "ok": not defects and not report.unreadable,
            "entries": len(report.analyses),
            "unreadable": report.unreadable,
            "defects": [d.__dict__ for d in defects],
            "unreached": [u.__dict__ for u in unreached],
        }, indent=2))
    else:
        for u in report.unreadable:
            print(u, file=sys.stderr)
        for d in defects:
            print(d.render())
        for gap in unreached:
            print(gap.render())
        n = len(report.analyses)
        if defects or report.unreadable:
            print(f"\n{len(defects)} defect(s) in {n} entr{'y' if n == 1 else 'ies'}"
                  + (f"; {len(report.unreadable)} unreadable file(s)" if report.unreadable else ""), file=sys.stderr)
        else:
            print(f"ok: {n} entr{'y' if n == 1 else 'ies'}, no defects")
    if report.unreadable:
        return 2
    return 1 if defects else 0
