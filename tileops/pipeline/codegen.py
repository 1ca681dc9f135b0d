"""``tileops codegen [--check] [--manifest DIR]`` composed: the generated evaluator module written, or verified.

The manifest is read and analysed, and every entry without a defect becomes
one plain-Python ``eval_roofline()`` in the generated module
(``tileops.manifest.codegen``); an entry with a defect is left out and named,
so the module that is written always imports. ``--check`` writes nothing and
fails when the module on disk is not what the manifest generates now (CI).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from tileops.errors import TileOpsError
from tileops.pipeline.outcome import exit_code


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


def run_codegen(req: CodegenRequest) -> CodegenResult:
    """Generate the module; what was left out on stderr, what was written or found current on stdout.
    TileOpsError, before anything is read, for a ``--manifest`` that is not a directory."""
    if req.manifest is not None and not req.manifest.is_dir():
        raise TileOpsError(f"--manifest {req.manifest} is not a directory "
                           "(give the directory that holds the extra manifest's YAML files)")
    from tileops.fsutil import write_atomic
    from tileops.manifest.codegen import generate

    target, text, report = generate(req.manifest)
    for a in report.analyses:
        if not a.ok:
            print(f"skipped {a.name}: {len(a.defects)} defect(s) (see `tileops validate`)", file=sys.stderr)
    for u in report.unreadable:
        print(f"unreadable: {u}", file=sys.stderr)
    for d in report.file_defects:
        print(d.render(), file=sys.stderr)
    entries = len(report.entries())
    if req.check:
        current = target.exists() and target.read_text(encoding="utf-8") == text
        if not current:
            again = f" --manifest {req.manifest}" if req.manifest else ""
            print(f"{target} is stale: run `tileops codegen`{again}", file=sys.stderr)
        else:
            print(f"{target} is current ({entries} entries)")
        return CodegenResult(target, entries, current=current, manifest_ok=report.ok)
    write_atomic(target, text)
    print(f"wrote {target} ({entries} entries)")
    return CodegenResult(target, entries, current=True, manifest_ok=report.ok)
