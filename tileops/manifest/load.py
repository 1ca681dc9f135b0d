"""Find and read manifest files, and analyse every entry in them.

The manifest search path is the shipped manifest (the repo's ``manifest/`` in a
checkout, ``tileops/_data/manifest`` when installed) followed by every directory
in ``TILEOPS_MANIFEST_PATH`` (``os.pathsep``-separated). An extra directory may
hold its own ops: an ``ops.py`` beside its YAML is imported by the registry, and
``tileops codegen --manifest DIR`` writes its ``_roofline_gen.py``. This is how
tests add a crashing or hanging op without touching the shipped manifest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import yaml

from tileops.manifest.analysis import Analysis, Defect, analyze
from tileops.manifest.spec import OpEntry
from tileops.paths import data_dir

ENV_PATH = "TILEOPS_MANIFEST_PATH"


def shipped_manifest_dir() -> Path:
    return data_dir("manifest")


def extra_manifest_dirs() -> list[Path]:
    raw = os.environ.get(ENV_PATH, "")
    return [Path(p) for p in raw.split(os.pathsep) if p.strip()]


def manifest_dirs() -> list[Path]:
    return [shipped_manifest_dir(), *extra_manifest_dirs()]


class ManifestReadError(Exception):
    """A manifest file could not be read at all (exit code 2 in `tileops validate`)."""


@dataclass
class ManifestReport:
    analyses: list[Analysis] = field(default_factory=list)
    file_defects: list[Defect] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.file_defects and not self.unreadable and all(a.ok for a in self.analyses)

    def entries(self) -> dict[str, OpEntry]:
        return {a.name: a.entry for a in self.analyses if a.entry is not None}

    @property
    def defects(self) -> list[Defect]:
        return [*self.file_defects, *(d for a in self.analyses for d in a.defects)]


def yaml_files(paths: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(sorted([*p.glob("*.yaml"), *p.glob("*.yml")]))
        else:
            out.append(p)
    return out


def read_file(path: Path, report: ManifestReport, seen: dict[str, str]) -> None:
    """Analyse every entry of one YAML file into ``report``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        report.unreadable.append(f"{path}: cannot read: {exc.strerror or exc}")
        return
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        report.unreadable.append(f"{where}: YAML syntax error: {problem}")
        return
    if doc is None:
        return
    if not isinstance(doc, dict):
        report.file_defects.append(Defect(
            "entry-type", str(path), f"a manifest file must map op names to entries, got {type(doc).__name__}",
            "write 'op_name: {family: ..., signature: ..., workloads: ..., roofline: ...}' at top level"))
        return
    for name, entry in doc.items():
        a = analyze(entry, name, str(path))
        if isinstance(name, str) and name in seen:
            a.defects.append(Defect("duplicate-name", f"{path}:{name}",
                                    f"op {name!r} is already declared in {seen[name]}",
                                    "give each op one entry"))
            a.entry = None
        elif isinstance(name, str):
            seen[name] = str(path)
        report.analyses.append(a)


def read_manifest(paths: Iterable[Path] | None = None) -> ManifestReport:
    """Analyse every entry on the search path (or in ``paths``). Never raises on content."""
    report = ManifestReport()
    seen: dict[str, str] = {}
    for f in yaml_files(manifest_dirs() if paths is None else paths):
        if not f.exists():
            report.unreadable.append(f"{f}: no such file or directory")
            continue
        read_file(f, report, seen)
    return report


_CACHE: dict[tuple[str, ...], dict[str, OpEntry]] = {}


def load_entries() -> dict[str, OpEntry]:
    """The clean entries on the search path, by op name (cached per search path)."""
    key = tuple(str(d) for d in manifest_dirs())
    if key not in _CACHE:
        _CACHE[key] = read_manifest().entries()
    return _CACHE[key]
