"""``tileops validate [PATH...]`` composed (§4.1): the manifest's structural checks and every analysis defect.

The validator judges no formula and keeps no copy of the primitive set: it
shows what the analysis found (``tileops.manifest.load``) and adds the checks
that need the package: each func path resolves (``tileops.manifest.funcs``),
and, on the manifest the package runs (no PATH given), entries and Op classes
pair up (``tileops.manifest.classes``). Exit 0 clean, 1 defects, 2 unreadable
input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from collections.abc import Sequence

from tileops import exitcodes
from tileops.pipeline.outcome import exit_code

if TYPE_CHECKING:
    from tileops.manifest.analysis import Defect
    from tileops.manifest.load import ManifestReport
    from tileops.report.printer import Printer


@dataclass(frozen=True)
class ValidateRequest:
    """The manifest files to check, and how to say what was found."""

    paths: Sequence[Path] = ()  # YAML files or directories; empty: the shipped manifest and TILEOPS_MANIFEST_PATH
    format: str = "text"  # text or json


@dataclass(frozen=True)
class ValidateResult:
    """What the checks found: entries read, defects, and files that could not be read."""

    entries: int
    defects: int
    unreadable: int

    @property
    def exit_code(self) -> int:
        """2 when a file could not be read (the check is incomplete), else 1 on any defect, else 0."""
        return exitcodes.USAGE if self.unreadable else exit_code(failed=self.defects)


def run_validate(req: ValidateRequest, printer: Printer | None = None) -> ValidateResult:
    """Check the manifest, telling ``printer`` (default: plain lines) the defects and the analysis's unreached
    judgments (stdout, text or JSON), the unreadable files and the count of defects (stderr, text)."""
    from tileops.manifest.classes import class_defects
    from tileops.manifest.funcs import func_defects
    from tileops.manifest.load import read_manifest
    from tileops.report.printer import make_printer

    printer = printer if printer is not None else make_printer("log")
    report = read_manifest(req.paths or None)
    extra = [*func_defects(report), *(class_defects(report) if not req.paths else [])]
    defects = [*report.defects, *extra]
    if req.format == "json":
        printer.text(json.dumps({
            "ok": not defects and not report.unreadable,
            "entries": len(report.analyses),
            "unreadable": report.unreadable,
            "defects": [d.__dict__ for d in defects],
            "unreached": [u.__dict__ for a in report.analyses for u in a.unreached],
        }, indent=2) + "\n")
    else:
        _say(report, defects, printer)
    return ValidateResult(entries=len(report.analyses), defects=len(defects), unreadable=len(report.unreadable))


def _say(report: ManifestReport, defects: Sequence[Defect], printer: Printer) -> None:
    """The text form: each unreadable file (stderr), each defect and unreached judgment (stdout), then the count
    of defects (stderr) or that there were none (stdout)."""
    n = len(report.analyses)
    for u in report.unreadable:
        printer.say(u)
    for d in defects:
        printer.say(d.render(), result=True)
    for gap in (u for a in report.analyses for u in a.unreached):
        printer.say(gap.render(), result=True)
    if defects or report.unreadable:
        printer.say(f"\n{len(defects)} defect(s) in {n} entr{'y' if n == 1 else 'ies'}"
                    + (f"; {len(report.unreadable)} unreadable file(s)" if report.unreadable else ""))
    else:
        printer.say(f"ok: {n} entr{'y' if n == 1 else 'ies'}, no defects", result=True)
