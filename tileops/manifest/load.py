"""Find and read manifest files, and analyse every entry in them (build time only).

The search path is the one the run-time catalog uses (:mod:`tileops.ops.catalog`):
the shipped manifest followed by every directory in ``TILEOPS_MANIFEST_PATH``.
``tileops validate`` and ``tileops codegen`` read YAML here; a run never does
(§4.4.5): it reads the generated modules.

Reading is total like the analysis (§4.4): whatever the bytes, the result is a
report of unreadable files and defects, never an exception, in bounded time
and memory. A file that is not UTF-8, is larger than ``MAX_FILE_BYTES``, nests
too deeply, or whose aliases expand past ``MAX_EXPANDED_NODES`` (a "billion
laughs" document) is unreadable with its location. A key declared twice in one
mapping is a defect (``yaml.safe_load`` would silently keep the last), and so
are two op names that differ only in case.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Iterable

import yaml

from tileops.manifest.analysis import Analysis, Defect, analyze
from tileops.ops.catalog import ENV_PATH, extra_manifest_dirs, manifest_dirs, manifest_files, shipped_manifest_dir
from tileops.ops.spec import OpEntry
from tileops.yamlfile import MAX_EXPANDED_NODES, MAX_NESTING, DuplicateKey, YamlError, read_yaml

__all__ = ["ENV_PATH", "ManifestReport", "extra_manifest_dirs", "manifest_dirs", "read_manifest",
           "shipped_manifest_dir", "load_yaml", "FILE_DEFECT_CODES", "MAX_EXPANDED_NODES", "MAX_NESTING"]

#: Bounds on one manifest file (the shipped ones are a few kB and a few thousand nodes).
MAX_FILE_BYTES = 4 * 2**20

#: Defect codes found while reading a file, before any entry is analysed.
FILE_DEFECT_CODES: dict[str, str] = {
    "entry-type": "the file's top level is not a mapping of op names to entries",
    "duplicate-name": "an op name is declared twice (in one file or two), or two differ only in case",
    "duplicate-key": "a key is declared twice in one mapping (YAML would silently keep the last)",
}


@dataclass
class ManifestReport:
    analyses: list[Analysis] = field(default_factory=list)
    file_defects: list[Defect] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.file_defects and not self.unreadable and all(a.ok for a in self.analyses)

    def entries(self) -> dict[str, OpEntry]:
        """The clean entries: what codegen emits."""
        return {a.name: a.entry for a in self.analyses if a.emittable and a.entry is not None}

    @property
    def defects(self) -> list[Defect]:
        return [*self.file_defects, *(d for a in self.analyses for d in a.defects)]


def yaml_files(paths: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        out.extend(manifest_files(p) if p.is_dir() else [p])
    return out


# --- reading one file: the package's YAML reader (tileops.yamlfile) -------------------------------


class Unreadable(Exception):
    """The file cannot be read as a manifest at all; the message is located (file or file:line)."""


def load_yaml(path: Path) -> tuple[Any, list[DuplicateKey], yaml.Node | None]:
    """The file's document, its duplicate keys and its root node. Raises Unreadable (located), nothing else.

    The Python parser, not libyaml's: it stops a deeply nested document while scanning, at the same
    ``MAX_NESTING`` (build-time tooling reads a few files, so its speed does not matter).
    """
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise Unreadable(f"{path}: larger than {MAX_FILE_BYTES // 2**20} MiB; a manifest file is a few kB")
        doc = read_yaml(path, MAX_FILE_BYTES, fast=False)
    except YamlError as exc:
        raise Unreadable(str(exc)) from None
    except OSError as exc:
        raise Unreadable(f"{path}: cannot read: {exc.strerror or exc}") from None
    return doc.data, doc.duplicates, doc.root


def _entry_spans(root: yaml.Node | None) -> list[tuple[Any, int, int]]:
    """(op name, first line, last line) of each top-level entry, to place a duplicate key in its op."""
    if not isinstance(root, yaml.MappingNode):
        return []
    out = []
    for k, v in root.value:
        if isinstance(k, yaml.ScalarNode):
            out.append((k.value, k.start_mark.line + 1, v.end_mark.line + 1))
    return out


# --- reading the manifest ------------------------------------------------------------------------


def read_file(path: Path, report: ManifestReport, seen: dict[str, tuple[str, str]]) -> None:
    """Analyse every entry of one YAML file into ``report``. ``seen``: casefolded name -> (name, file)."""
    try:
        doc, duplicates, root = load_yaml(path)
    except Unreadable as exc:
        report.unreadable.append(str(exc))
        return
    if doc is None:
        return
    if not isinstance(doc, dict):
        report.file_defects.append(Defect(
            "entry-type", str(path), f"a manifest file must map op names to entries, got {type(doc).__name__}",
            "write 'op_name: {family: ..., signature: ..., workloads: ..., roofline: ...}' at top level"))
        return
    spans = _entry_spans(root)
    by_op: dict[str, list[Defect]] = {}
    for dup in duplicates:
        owner = next((name for name, lo, hi in spans if lo <= dup.line <= hi), None)
        top = any(dup.line == lo for _, lo, _ in spans)
        key = dup.key if isinstance(dup.key, str) else repr(dup.key)
        if top:
            d = Defect("duplicate-name", f"{path}:{dup.line}",
                       f"op {key!r} is declared twice in this file (lines {dup.first_line} and {dup.line}); "
                       "YAML would silently keep the last", "give each op one entry")
        else:
            d = Defect("duplicate-key", f"{path}:{dup.line}",
                       f"key {key!r}" + (f" of op {owner!r}" if owner is not None else "")
                       + f" is declared twice in one mapping (lines {dup.first_line} and {dup.line}); "
                       "YAML would silently keep the last", "keep one of them")
        if owner is not None and isinstance(owner, str):
            by_op.setdefault(owner, []).append(d)
        else:
            report.file_defects.append(d)
    for name, entry in doc.items():
        a = analyze(entry, name, str(path))
        a.defects.extend(by_op.pop(name, []) if isinstance(name, str) else [])
        if isinstance(name, str):
            folded = name.casefold()
            if folded in seen:
                first, where = seen[folded]
                same = first == name
                a.defects.append(Defect(
                    "duplicate-name", f"{path}:{name}",
                    f"op {name!r} is already declared in {where}" if same else
                    f"op {name!r} differs from {first!r} (declared in {where}) only in case",
                    "give each op one entry" if same else "op names must differ by more than case: rename one"))
            else:
                seen[folded] = (name, str(path))
        if not a.ok:
            a.entry = None
        report.analyses.append(a)
    for defects in by_op.values():  # a duplicate inside an entry whose key YAML did not keep
        report.file_defects.extend(defects)


def read_manifest(paths: Iterable[Path] | None = None) -> ManifestReport:
    """Analyse every entry on the search path (or in ``paths``). Never raises on content."""
    report = ManifestReport()
    seen: dict[str, tuple[str, str]] = {}
    for f in yaml_files(manifest_dirs() if paths is None else paths):
        if not f.exists():
            report.unreadable.append(f"{f}: no such file or directory")
            continue
        read_file(f, report, seen)
    return report
