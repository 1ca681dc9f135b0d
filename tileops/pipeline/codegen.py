"""``tileops codegen [--check] [--manifest DIR]`` composed: the generated evaluator module written, or verified.

The manifest is read and analysed, and every entry without a defect becomes
one plain-Python ``eval_roofline()`` in the generated module
(``tileops.manifest.codegen``); an entry with a defect is left out and named,
so the module that is written always imports. ``--check`` writes nothing and
fails when the module on disk is not what the manifest generates now (CI).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tileops.errors import TileOpsError
from tileops.pipeline.outcome import exit_code

if TYPE_CHECKING:
    from tileops.report.printer import Printer


@dataclass(frozen=True)
class CodegenRequest:
    """Which manifest to generate from, and whether to write or only compare."""

    manifest: Path | None = None  # an extra manifest directory (writes DIR/_roofline_gen.py); None: the shipped one
    check: bool = False  # compare with the module on disk; write nothing


@dataclass(frozen=True)
class CodegenResult:
    """The module generated, whether it was already current, and whether every entry could be emitted."""

    target: Path
    entries: int
    current: bool  # the module on disk was (``--check``) or now is what the manifest generates
    manifest_ok: bool  # no entry left out for a defect, no unreadable file

    @property
    def exit_code(self) -> int:
        """1 when the module is stale (``--check``) or an entry had to be left out, else 0."""
        return exit_code(failed=int(not self.current or not self.manifest_ok))


def run_codegen(req: CodegenRequest, printer: Printer | None = None) -> CodegenResult:
    """Generate the module, telling ``printer`` (default: plain lines) what was left out (stderr) and what was
    written or found current (stdout). TileOpsError, before anything is read, for a ``--manifest`` that is not a
    directory."""
    if req.manifest is not None and not req.manifest.is_dir():
        raise TileOpsError(f"--manifest {req.manifest} is not a directory "
                           "(give the directory that holds the extra manifest's YAML files)")
    from tileops.fsutil import write_atomic
    from tileops.manifest.codegen import generate
    from tileops.report.printer import make_printer

    printer = printer if printer is not None else make_printer("log")
    target, text, report = generate(req.manifest)
    for a in report.analyses:
        if not a.ok:
            printer.say(f"skipped {a.name}: {len(a.defects)} defect(s) (see `tileops validate`)")
    for u in report.unreadable:
        printer.say(f"unreadable: {u}")
    for d in report.file_defects:
        printer.say(d.render())
    entries = len(report.entries())
    if req.check:
        current = target.exists() and target.read_text(encoding="utf-8") == text
        if not current:
            again = f" --manifest {req.manifest}" if req.manifest else ""
            printer.say(f"{target} is stale: run `tileops codegen`{again}")
        else:
            printer.say(f"{target} is current ({entries} entries)", result=True)
        return CodegenResult(target, entries, current=current, manifest_ok=report.ok)
    write_atomic(target, text)
    printer.say(f"wrote {target} ({entries} entries)", result=True)
    return CodegenResult(target, entries, current=True, manifest_ok=report.ok)
