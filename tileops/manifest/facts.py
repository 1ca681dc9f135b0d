"""What an analysis of a manifest entry reports: its defects, the judgments it could not reach, each fact's
state, and the entry it yields when clean (§4.4). The readers record into these; codegen and ``tileops
validate`` read them."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from tileops.ops.spec import OpEntry

#: Every defect code the analysis can emit, with what it means. Tests provoke each one.
DEFECT_CODES: dict[str, str] = {
    "entry-type": "the entry is not a mapping",
    "unknown-field": "a field the format does not define",
    "missing-field": "a required field is absent",
    "bad-type": "a field has the wrong type or is empty",
    "bad-status": "status is not one of spec-only, implemented",
    "bad-name": "a tensor, parameter or index name is not an identifier",
    "duplicate-name": "a name is declared twice in one namespace",
    "bad-shape": "a shape pattern is malformed",
    "bad-dtype": "a dtype expression is malformed or names an unknown dtype",
    "bad-flag": "optional/mutated/write_only/alias/metadata used where it means nothing",
    "bad-param": "a parameter's type or default is malformed",
    "roofline-mode": "flops/bytes and func mixed, or neither given",
    "syntax": "a formula does not parse",
    "bad-form": "a formula uses a construct the language does not allow",
    "unknown-function": "a formula calls something that is not a primitive",
    "bad-arity": "a primitive is called with the wrong number of arguments",
    "tensor-arg": "bytes()/bits()/present() is given something that is not a suitable tensor",
    "unknown-name": "a formula or shape names something not in scope",
    "too-complex": "a formula exceeds the size, depth or length bounds",
    "bad-constant": "a literal or constant subexpression is non-finite, out of range, or a power is unbounded",
    "bad-func-path": "func is not tileops.ops.formulas.<public name>",
    "no-workloads": "an implemented entry has no workload rows",
    "bad-workload": "a workload row is malformed or does not fit the signature",
    "duplicate-label": "two workload rows share a label",
}


class State(Enum):
    ABSENT = "absent"
    MALFORMED = "malformed"
    VALID = "valid"


@dataclass
class Fact:
    """One fact of the entry, in one of three states (lossless)."""

    state: State
    value: Any = None

    @property
    def ok(self) -> bool:
        return self.state is State.VALID


ABSENT = Fact(State.ABSENT)
MALFORMED = Fact(State.MALFORMED)


@dataclass(frozen=True)
class Defect:
    code: str
    location: str  # file:Op.field
    message: str
    fix: str

    def render(self) -> str:
        return f"{self.location}: [{self.code}] {self.message}\n    fix: {self.fix}"


@dataclass(frozen=True)
class Unreached:
    judgment: str
    location: str
    missing: str  # the fact it lacked

    def render(self) -> str:
        return f"{self.location}: not checked: {self.judgment} (needs a valid {self.missing})"


@dataclass
class Analysis:
    name: str
    file: str
    defects: list[Defect] = field(default_factory=list)
    unreached: list[Unreached] = field(default_factory=list)
    facts: dict[str, State] = field(default_factory=dict)  # field path -> state
    entry: OpEntry | None = None  # set only when the analysis is clean

    @property
    def ok(self) -> bool:
        return not self.defects

    @property
    def emittable(self) -> bool:
        return self.ok and self.entry is not None
