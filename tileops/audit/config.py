"""The audit's EXEMPT configuration: YAML under ``audit/``, checked before anything runs.

A file holds a list under ``exempt``; each entry names an op, a ``when`` over
the call (:mod:`tileops.audit.condition`), the ``reason`` the premise fails
there, and the ``measurement`` that earns the exception (§4.5: the form is
checked, the aptness is not; review reads the reason, and the measurement
shows the behaviour it names)::

    exempt:
      - op: where
        when: "prod(T) == 1"
        reason: "..."
        measurement: "<device>, <row and dtype>: <measured / declared>, <where the reading is kept>"

Every problem in every file is reported at once, each located by file and
line, with the allowed names where a name is wrong. Unknown ops and fields
are refused; nothing in the file is evaluated except a checked ``when``, and
that only against a measured call.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tileops.audit.condition import Condition, ConditionError, Scope, check
from tileops.audit.verdict import Exemption
from tileops.errors import TileOpsError
from tileops.ops.spec import OpEntry
from tileops.paths import data_dir
from tileops.yamlfile import YamlError, read_yaml, refuse_duplicates

FIELDS = ("op", "when", "reason", "measurement")
#: An EXEMPT file is a page of rules; anything this large is not one (and is not read into memory).
MAX_FILE_BYTES = 2**20


class ConfigError(TileOpsError):
    """The EXEMPT configuration has problems; the message lists each, located by file and line."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("the audit's EXEMPT configuration is invalid:\n  " + "\n  ".join(problems))
        self.problems = problems


class EntryModel(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    op: str = Field(min_length=1)
    when: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    measurement: str = Field(min_length=1)


class FileModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    exempt: list[EntryModel] = Field(default_factory=list)


@dataclass(frozen=True)
class ExemptRule:
    op: str
    condition: Condition
    reason: str
    measurement: str
    where: str  # file:line

    def exemption(self) -> Exemption:
        return Exemption(where=self.where, reason=self.reason, measurement=self.measurement)


@dataclass(frozen=True)
class ExemptConfig:
    rules: tuple[ExemptRule, ...] = ()
    files: tuple[str, ...] = ()

    def match(self, op: str, call: Any) -> tuple[Exemption | None, str | None]:
        """The first rule of ``op`` whose ``when`` holds for ``call``; else None and why none applies.

        A ``when`` that cannot be evaluated on this call never exempts: the
        note says so, and the row is judged as usual.
        """
        notes: list[str] = []
        for rule in self.rules:
            if rule.op != op:
                continue
            try:
                if rule.condition.holds(call):
                    return rule.exemption(), None
                notes.append(f"outside the exception at {rule.where} (`{rule.condition.source}` is false)")
            except ConditionError as exc:
                notes.append(f"the exception at {rule.where} could not be evaluated on this call ({exc})")
        return None, ("; ".join(notes) or None)


def default_path() -> Path:
    return data_dir("audit")


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted([*path.glob("*.yaml"), *path.glob("*.yml")])
    return [path]


def _line_map(root: yaml.Node) -> dict[tuple[Any, ...], int]:
    """The 1-based line of every mapping key and list item, by its path in the document (the node tree was
    bounded when it was read, aliases included; walked without recursion)."""
    out: dict[tuple[Any, ...], int] = {}
    stack: list[tuple[yaml.Node, tuple[Any, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        out.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = path + (k.value,)
                out[key] = k.start_mark.line + 1
                stack.append((v, key))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, path + (i,)) for i, v in enumerate(node.value))
    return out


def _line(lines: dict[tuple[Any, ...], int], loc: tuple[Any, ...]) -> int:
    for n in range(len(loc), -1, -1):
        if tuple(loc[:n]) in lines:
            return lines[tuple(loc[:n])]
    return 1


def _pydantic_problem(err: Mapping[str, Any]) -> str:
    loc = tuple(err.get("loc", ()))
    field = loc[-1] if loc else ""
    if err.get("type") == "extra_forbidden":
        allowed = ", ".join(FIELDS) if len(loc) >= 3 else "exempt"
        return f"unknown field {field!r}; allowed fields: {allowed}"
    if err.get("type") == "missing":
        return f"missing field {field!r} (every entry needs {', '.join(FIELDS)})"
    where = ".".join(str(x) for x in loc)
    return f"{where}: {err.get('msg')}"


def _read_file(f: Path, entries: dict[str, OpEntry], implemented: list[str], problems: list[str],
               rules: list[ExemptRule]) -> None:
    try:  # a regular file of bounded size, UTF-8, aliases bounded (a FIFO or an alias bomb cannot hang it)
        doc = read_yaml(f, MAX_FILE_BYTES)
        data = refuse_duplicates(doc, f)
    except YamlError as exc:
        problems.append(str(exc))
        return
    if data is None:  # empty, or comments only
        return
    lines = _line_map(doc.root) if doc.root is not None else {}
    try:
        model = FileModel.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            problems.append(f"{f}:{_line(lines, tuple(err.get('loc', ())))}: {_pydantic_problem(err)}")
        return
    for i, e in enumerate(model.exempt):
        where = f"{f}:{_line(lines, ('exempt', i))}"
        if e.op not in entries or e.op not in implemented:
            problems.append(f"{f}:{_line(lines, ('exempt', i, 'op'))}: op {e.op!r} is not an implemented op; "
                            f"allowed ops: {', '.join(implemented)}")
            continue
        cond, found = check(e.when, Scope.of(e.op, entries[e.op].signature))
        for p in found:
            problems.append(f"{f}:{_line(lines, ('exempt', i, 'when'))}: when: {p}")
        if cond is not None:
            rules.append(ExemptRule(e.op, cond, e.reason, e.measurement, where))


def load_config(path: Path | None, entries: dict[str, OpEntry], implemented: list[str]) -> ExemptConfig:
    """Every rule under ``path`` (a file or a folder of ``*.yaml``; default the shipped ``audit/``).

    ``entries``: the manifest's entries (each ``when`` is checked against its
    op's signature); ``implemented``: the op names an exception may name.
    Raises ConfigError listing every problem; a missing default folder is an
    empty configuration, a missing explicit path is a problem.
    """
    explicit = path is not None
    path = Path(path) if path is not None else default_path()
    if not path.exists():
        if explicit:
            raise ConfigError([f"{path}: no such file or folder (--config takes a YAML file or a folder of them)"])
        return ExemptConfig()
    problems: list[str] = []
    rules: list[ExemptRule] = []
    files = _files(path)
    for f in files:
        _read_file(f, entries, sorted(implemented), problems, rules)
    if problems:
        raise ConfigError(problems)
    return ExemptConfig(tuple(rules), tuple(str(f) for f in files))
