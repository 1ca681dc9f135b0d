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
from typing import Any, Iterable

import yaml

from tileops.fsutil import FileRefused, read_regular
from tileops.manifest.analysis import Analysis, Defect, analyze
from tileops.ops.catalog import ENV_PATH, extra_manifest_dirs, manifest_dirs, manifest_files, shipped_manifest_dir
from tileops.ops.spec import OpEntry

__all__ = ["ENV_PATH", "ManifestReport", "extra_manifest_dirs", "manifest_dirs", "read_manifest",
           "shipped_manifest_dir", "load_yaml", "FILE_DEFECT_CODES"]

#: Bounds on one manifest file (the shipped ones are a few kB and a few thousand nodes).
MAX_FILE_BYTES = 4 * 2**20
MAX_EXPANDED_NODES = 200_000
MAX_NESTING = 64  # PyYAML's scanner is quadratic in flow nesting and its composer recursive

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


# --- a YAML reader with bounds and duplicate-key detection --------------------------------------

_MERGE_TAG = "tag:yaml.org,2002:merge"


class Unreadable(Exception):
    """The file cannot be read as a manifest at all; the message is located (file or file:line)."""


@dataclass(frozen=True)
class DuplicateKey:
    key: Any
    first_line: int
    line: int


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that records every key declared twice in one mapping.

    Merge keys (``<<: *base``) are not duplicates: overriding a merged key is
    what they are for.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[DuplicateKey] = []

    def _too_deep(self) -> yaml.scanner.ScannerError:
        return yaml.scanner.ScannerError(None, None, f"the document nests more than {MAX_NESTING} levels deep",
                                         self.get_mark())

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:  # noqa: N803 (PyYAML's name)
        if self.flow_level >= MAX_NESTING:
            raise self._too_deep()
        super().fetch_flow_collection_start(TokenClass)

    def add_indent(self, column: int) -> bool:
        if len(self.indents) >= MAX_NESTING:
            raise self._too_deep()
        return super().add_indent(column)

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue
                line = key_node.start_mark.line + 1
                if first is None:
                    seen[key] = line
                else:
                    self.duplicates.append(DuplicateKey(key, first, line))
        return super().construct_mapping(node, deep=deep)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_expansion(root: yaml.Node, path: Path) -> None:
    """Refuse a document whose aliases expand past MAX_EXPANDED_NODES, or refer to themselves.

    Counts the tree the aliases stand for without building it: each distinct
    node once, its expanded size memoised, no recursion.
    """
    size: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            visiting.discard(key)
            size[key] = min(1 + sum(size[id(c)] for c in _children(node)), MAX_EXPANDED_NODES + 1)
            if size[key] > MAX_EXPANDED_NODES:
                raise Unreadable(f"{path}:{root.start_mark.line + 1}: the document's aliases expand to more than "
                                 f"{MAX_EXPANDED_NODES:,} nodes; write the entries out, or alias less")
            continue
        if key in size:
            continue
        if key in visiting:
            raise Unreadable(f"{path}:{node.start_mark.line + 1}: an alias refers to a node that contains it "
                             "(a recursive structure); a manifest is a tree")
        visiting.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)


def _where(path: Path, exc: BaseException) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)


def load_yaml(path: Path) -> tuple[Any, list[DuplicateKey], yaml.Node | None]:
    """The file's document, its duplicate keys and its root node. Raises Unreadable (located), nothing else."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise Unreadable(f"{path}: larger than {MAX_FILE_BYTES // 2**20} MiB; a manifest file is a few kB")
        # Refused before it is opened, and again once open: a FIFO would block the read forever, a device
        # (/dev/zero) would never end. The message names the file and the fix.
        raw = read_regular(path, MAX_FILE_BYTES)
    except FileRefused as exc:
        raise Unreadable(str(exc)) from None
    except OSError as exc:
        raise Unreadable(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise Unreadable(f"{path}:{line}: not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                         "save the file as UTF-8") from None
    loader = None
    try:
        loader = _Loader(text)
        root = loader.get_single_node()
        if root is None:
            return None, [], None
        _check_expansion(root, path)
        doc = loader.construct_document(root)
        return doc, loader.duplicates, root
    except Unreadable:
        raise
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        raise Unreadable(f"{_where(path, exc)}: YAML syntax error: {problem}") from None
    except RecursionError:
        raise Unreadable(f"{path}: the YAML nests too deeply to read") from None
    except Exception as exc:  # a value YAML accepts but Python cannot build (a bad date, a 5,000-digit int)
        raise Unreadable(f"{_where(path, exc)}: cannot read a value: {type(exc).__name__}: {exc}") from None
    finally:
        if loader is not None:
            loader.dispose()


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
