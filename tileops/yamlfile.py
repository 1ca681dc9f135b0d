"""Read a YAML file a person wrote, in bounded time and memory: the one YAML reader of the package.

Every YAML input goes through here: the manifest, profiles, the audit's EXEMPT
configuration and the stored per-device calibration results. A path is read
only when it is a regular file of bounded size (``tileops.fsutil``: a FIFO
would block, ``/dev/zero`` never ends); the bytes must be UTF-8; the document
is composed into nodes and its aliases counted *before* anything is built, so a
"billion laughs" document (nine aliases of nine aliases ...) is refused in
milliseconds instead of expanding into memory, and an alias that contains
itself is refused instead of recursing. Documents nest at most
``MAX_NESTING`` levels. Every key declared twice in one mapping is recorded
(``yaml.safe_load`` silently keeps the last): the manifest reports them as
defects, the other readers refuse them (:func:`refuse_duplicates`).

Every error is a :class:`YamlError` whose message starts ``file:line:``.
PyYAML is the parser (libyaml's where it is built in, the same documents and
errors in a tenth of the time); the bench never imports this module (§5.2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tileops.errors import TileOpsError
from tileops.fsutil import FileRefused, read_regular

#: Bounds on one document (a profile or a manifest file is a few kB and a few thousand nodes).
MAX_EXPANDED_NODES = 200_000
MAX_NESTING = 64  # PyYAML's scanner is quadratic in flow nesting and its composer recursive

_MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlError(TileOpsError):
    """A YAML file that cannot be read; the message is located (``file:line: ...``) and says the fix."""

    def __init__(self, message: str, *, file: Path | str, line: int | None = None) -> None:
        super().__init__(message)
        self.file = str(file)
        self.line = line


@dataclass(frozen=True)
class DuplicateKey:
    key: Any
    first_line: int
    line: int


@dataclass
class YamlDoc:
    """A document as read: its data, its root node (for line numbers), and every key declared twice."""

    data: Any
    root: yaml.Node | None
    duplicates: list[DuplicateKey] = field(default_factory=list)


class _Guarded:
    """A loader that records every key declared twice in one mapping. Merge keys (``<<: *base``) are not
    duplicates: overriding a merged key is what they are for."""

    duplicates: list[DuplicateKey]

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node)  # type: ignore[attr-defined]  # a mixin of yaml's loader
                try:
                    first = seen.get(key)
                except TypeError:
                    continue
                line = key_node.start_mark.line + 1
                if first is None:
                    seen[key] = line
                else:
                    self.duplicates.append(DuplicateKey(key, first, line))
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]  # the loader's, after this mixin


class _PyLoader(_Guarded, yaml.SafeLoader):
    """The pure-Python parser, bounded in nesting while it scans (its scanner is quadratic in flow nesting)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates = []

    def _too_deep(self) -> yaml.scanner.ScannerError:
        return yaml.scanner.ScannerError(None, None, f"the document nests more than {MAX_NESTING} levels deep",
                                         self.get_mark())

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:  # PyYAML's name
        if self.flow_level >= MAX_NESTING:
            raise self._too_deep()
        super().fetch_flow_collection_start(TokenClass)

    def add_indent(self, column: int) -> bool:
        if len(self.indents) >= MAX_NESTING:
            raise self._too_deep()
        return super().add_indent(column)


if getattr(yaml, "__with_libyaml__", False):
    class _CLoader(_Guarded, yaml.CSafeLoader):
        """libyaml's parser (it bounds nesting itself; the node walk bounds it to ``MAX_NESTING``)."""

        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self.duplicates = []

    _FAST: type = _CLoader
else:  # pragma: no cover - PyYAML built without libyaml
    _FAST = _PyLoader


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def check_nodes(root: yaml.Node, where: Path | str) -> None:
    """Refuse a document whose aliases expand past ``MAX_EXPANDED_NODES`` nodes, refer to themselves, or
    nest more than ``MAX_NESTING`` levels.

    Counts the tree the aliases stand for without building it: each distinct
    node once, its expanded size and height memoised, no recursion.
    """
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            visiting.discard(key)
            kids = _children(node)
            size[key] = min(1 + sum(size[id(c)] for c in kids), MAX_EXPANDED_NODES + 1)
            height[key] = 1 + max((height[id(c)] for c in kids), default=0)
            if size[key] > MAX_EXPANDED_NODES:
                raise YamlError(f"{where}:{root.start_mark.line + 1}: the document's aliases expand to more than "
                                f"{MAX_EXPANDED_NODES:,} nodes; write the entries out, or alias less",
                                file=where, line=root.start_mark.line + 1)
            if height[key] > MAX_NESTING + 1:
                raise YamlError(f"{where}:{node.start_mark.line + 1}: the document nests more than {MAX_NESTING} "
                                "levels deep", file=where, line=node.start_mark.line + 1)
            continue
        if key in size:
            continue
        if key in visiting:
            raise YamlError(f"{where}:{node.start_mark.line + 1}: an alias refers to a node that contains it "
                            "(a recursive structure); write the document as a tree", file=where,
                            line=node.start_mark.line + 1)
        visiting.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)


def _located(where: Path | str, exc: BaseException) -> tuple[str, int | None]:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is None:
        return str(where), None
    return f"{where}:{mark.line + 1}:{mark.column + 1}", mark.line + 1


def parse_yaml(text: str, where: Path | str, *, fast: bool = True) -> YamlDoc:
    """The document in ``text`` (read from ``where``), its nodes checked before it is built. Raises
    YamlError (located), nothing else. ``fast``: libyaml's parser where PyYAML has it; False, the Python
    one, which also stops a deeply nested document while it scans."""
    loader = None
    try:
        loader = (_FAST if fast else _PyLoader)(text)
        root = loader.get_single_node()
        if root is None:
            return YamlDoc(None, None, [])
        check_nodes(root, where)
        data = loader.construct_document(root)
        return YamlDoc(data, root, loader.duplicates)
    except YamlError:
        raise
    except yaml.YAMLError as exc:
        at, line = _located(where, exc)
        problem = getattr(exc, "problem", None) or str(exc)
        raise YamlError(f"{at}: YAML syntax error: {problem}; fix the syntax at that line", file=where,
                        line=line) from None
    except RecursionError:
        raise YamlError(f"{where}: the YAML nests too deeply to read", file=where) from None
    except Exception as exc:  # a value YAML accepts but Python cannot build (a bad date, a 5,000-digit int)
        at, line = _located(where, exc)
        raise YamlError(f"{at}: cannot read a value: {type(exc).__name__}: {exc}", file=where, line=line) from None
    finally:
        if loader is not None:
            loader.dispose()


def read_yaml(path: Path | str, max_bytes: int, *, fast: bool = True, whole: bool = False) -> YamlDoc:
    """Read and parse the YAML file ``path``: a regular file of at most ``max_bytes``, UTF-8 text, bounded
    nodes (:func:`parse_yaml`). Raises YamlError naming the file (and line), nothing else: a missing file
    is one too.

    ``whole``: a store file (a profile, a calibration result) must end with its newline, as every writer and
    editor ends it. A file cut short in mid-line (a copy stopped half-way, a full disk under another tool) is
    often still valid YAML, with a number cut to fewer digits or the rest of a mapping gone, and would be read
    as a smaller, wrong file; without its last newline it is refused instead, naming its last line."""
    path = Path(path)
    try:
        raw = read_regular(path, max_bytes)
    except FileRefused as exc:
        raise YamlError(str(exc), file=path) from None
    except OSError as exc:
        raise YamlError(f"{path}: cannot read: {exc.strerror or exc}", file=path) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise YamlError(f"{path}:{line}: not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                        "save the file as UTF-8", file=path, line=line) from None
    if whole and text and not text.endswith("\n"):
        line = text.count("\n") + 1
        raise YamlError(f"{path}:{line}: the file ends in mid-line, without its last newline: cut short (a copy or a "
                        "write stopped half-way); restore the whole file, or, if it is whole, end it with a newline",
                        file=path, line=line)
    return parse_yaml(text, path, fast=fast)


def refuse_duplicates(doc: YamlDoc, where: Path | str) -> Any:
    """``doc``'s data, or YamlError naming the first key declared twice in one mapping (YAML would silently
    keep the last, so the file does not say what its author meant)."""
    if doc.duplicates:
        d = doc.duplicates[0]
        raise YamlError(f"{where}:{d.line}: key {d.key!r} is declared twice in one mapping (lines "
                        f"{d.first_line} and {d.line}); YAML would silently keep the last: keep one",
                        file=where, line=d.line)
    return doc.data
