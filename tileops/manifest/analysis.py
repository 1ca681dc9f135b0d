"""Roofline analysis (§4.4): read one manifest entry, report every defect, decide emission.

Three rules shape this module:

* Total: ``analyze`` accepts whatever YAML produced and never raises on it.
  A defect is a value in the result, not an exception.
* Lossless: each fact is absent, malformed or valid, and the three are told
  apart (``Fact``). A missing field and a broken one are different defects.
* Accumulating: a defect does not stop the pass. A judgment that cannot be
  reached because a fact it needs is unusable is recorded in ``unreached``,
  naming that fact.

Only a clean analysis yields an :class:`OpEntry`, which codegen emits from.
"""

from __future__ import annotations

import ast
import keyword
import math
import re
import reprlib
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from tileops.manifest import expr
from tileops.ops.primitives import DTYPE_BITS, PRIMITIVES
from tileops.ops.spec import (
    OpEntry, ParamSpec, Roofline, Signature, TensorSpec, Workload,
)

ENTRY_FIELDS = ("family", "ref_api", "status", "description", "signature", "workloads", "roofline")
SIGNATURE_FIELDS = ("inputs", "outputs", "params", "let")
TENSOR_FIELDS = ("name", "shape", "dtype", "optional", "mutated", "write_only", "alias", "metadata")
ROOFLINE_FIELDS = ("flops", "bytes", "read_bytes", "func", "read_func")
WORKLOAD_FIELDS = ("label", "indices", "params", "present", "dtypes", "tags", "seed")
STATUSES = ("spec-only", "implemented")
PARAM_TYPES = ("int", "float", "bool", "str", "dtype")
FUNC_MODULE = "tileops.ops.formulas"
FUNC_PREFIX = FUNC_MODULE + "."
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DIGITS = re.compile(r"^[0-9]{1,18}$")  # ASCII digits only: "١٢" or "²" is not a dim
#: The largest index size or integer a workload row may bind (a dim a tensor library can index).
MAX_INDEX = 2**62

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


def analyze(entry: Any, name: Any = "<entry>", file: str = "<memory>") -> Analysis:
    """Analyse one entry. Total: never raises, whatever ``entry`` and ``name`` are.

    The pass is bounded by construction (formula size and depth, repr length);
    should a check still fail unexpectedly, that becomes an ``internal`` defect
    at the entry's location instead of a traceback, and the tests treat it as a
    bug in the analysis.
    """
    an = _Analyzer(entry, name, file)
    try:
        return an.run()
    except Exception as exc:  # RecursionError and MemoryError included
        an.a.entry = None
        an.a.defects.append(Defect("internal", an.loc(""), f"the analysis could not finish: "
                                   f"{type(exc).__name__}: {_short(str(exc))}",
                                   "this is a bug in tileops; report it with the entry"))
        return an.a


# ---------------------------------------------------------------------------------------


def _is_str(v: Any) -> bool:
    return isinstance(v, str) and v.strip() != ""


def _is_ident(v: Any) -> bool:
    return isinstance(v, str) and bool(_IDENT.match(v)) and not keyword.iskeyword(v)


def _is_pos_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_INDEX


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 4, 4, 50, 50, 40


def _short(v: Any) -> str:
    """A bounded repr: whatever the value (deeply nested, huge, aliased many times), a short string."""
    s = _REPR.repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


class _Analyzer:
    def __init__(self, entry: Any, name: Any, file: str) -> None:
        self.entry = entry
        self.name = name if isinstance(name, str) else _short(name)
        self.file = file if isinstance(file, str) else "<memory>"
        self.a = Analysis(self.name, self.file)
        # Namespaces built while reading the signature.
        self.tensors: dict[str, TensorSpec] = {}
        self.input_names: list[str] = []
        self.indices: dict[str, bool] = {}  # index name -> variadic
        self.params: dict[str, ParamSpec] = {}
        self.lets: list[tuple[str, str]] = []
        self.unnamed_tensors = 0  # tensors whose name is absent or malformed
        # Broken facts other judgments depend on (§4.4 "accumulating"): a judgment that needs one is
        # recorded as not reached, naming it, never as a second defect.
        self.broken: dict[str, str] = {}  # a declared name whose declaration is defective -> that fact's path
        self.unknowable: list[str] = []  # facts that may declare names but could not be read (an input's
        # shape, the params or let mapping): a name not found may be declared there
        self.inputs_read = False  # the inputs list was readable: names in formulas can be judged

    # -- recording ---------------------------------------------------------------------

    def loc(self, path: str) -> str:
        return f"{self.file}:{self.name}.{path}" if path else f"{self.file}:{self.name}"

    def defect(self, code: str, path: str, message: str, fix: str) -> None:
        assert code in DEFECT_CODES, code
        self.a.defects.append(Defect(code, self.loc(path), message, fix))

    def unreached(self, judgment: str, path: str, missing: str) -> None:
        self.a.unreached.append(Unreached(judgment, self.loc(path), missing))

    def fact(self, path: str, f: Fact) -> Fact:
        self.a.facts[path] = f.state
        return f

    def get(self, mapping: dict, key: str, path: str, *, required: bool, kind: str,
            check: Any = None, fix: str = "") -> Fact:
        """Read ``mapping[key]`` as a lossless fact, recording a defect when it is not valid."""
        if key not in mapping or mapping[key] is None:
            if required:
                self.defect("missing-field", path, f"{key} is required", fix or f"add {key}: <{kind}>")
            return self.fact(path, ABSENT)
        v = mapping[key]
        good = check(v) if check else True
        if not good:
            self.defect("bad-type", path, f"{key} must be {kind}, got {_short(v)}", fix or f"write {key} as {kind}")
            return self.fact(path, MALFORMED)
        return self.fact(path, Fact(State.VALID, v))

    def unknown_keys(self, mapping: dict, allowed: tuple[str, ...], path: str) -> None:
        for k in mapping:
            if k not in allowed:
                key = k if isinstance(k, str) and len(k) <= 60 else _short(k)
                self.defect("unknown-field", f"{path}.{key}" if path else key,
                            f"{_short(k)} is not a field here",
                            f"remove it, or use one of: {', '.join(allowed)}")

    def mark_broken(self, name: Any, path: str) -> None:
        """Record that ``name``'s declaration is defective at ``path`` (the first such fact wins)."""
        if isinstance(name, str):
            self.broken.setdefault(name, path)

    def depends_on_broken(self, name: str, judgment: str, path: str) -> bool:
        """If ``name`` is unknown because a fact it needs is broken, record the judgment as not
        reached (naming that fact) and return True; the caller then records no defect."""
        if name in self.broken:
            self.unreached(judgment, path, self.broken[name])
            return True
        if self.unknowable:
            self.unreached(judgment, path, self.unknowable[0])  # it may be declared in that fact
            return True
        return False

    # -- the pass ----------------------------------------------------------------------

    def run(self) -> Analysis:
        e = self.entry
        if not isinstance(e, dict):
            self.defect("entry-type", "", f"an entry must be a mapping, got {type(e).__name__}",
                        "write the entry as 'name: {family: ..., signature: ..., roofline: ...}'")
            for part in ("signature", "workloads", "roofline"):
                self.unreached(f"{part} checks", part, "entry mapping")
            return self.a
        if not _is_ident(self.entry_name_raw()):
            self.defect("bad-name", "", f"op name {_short(self.name)} is not an identifier",
                        "name the op with letters, digits and underscores, e.g. silu_and_mul")
        self.unknown_keys(e, ENTRY_FIELDS, "")
        family = self.get(e, "family", "family", required=True, kind="a non-empty string", check=_is_str)
        ref_api = self.get(e, "ref_api", "ref_api", required=True, kind="a non-empty string", check=_is_str)
        status = self.get(e, "status", "status", required=True, kind="spec-only or implemented",
                          check=lambda v: isinstance(v, str))
        if status.ok and status.value not in STATUSES:
            self.defect("bad-status", "status", f"status {_short(status.value)} is unknown",
                        f"use one of: {', '.join(STATUSES)}")
            status = self.fact("status", MALFORMED)
        desc = self.get(e, "description", "description", required=False, kind="a string",
                        check=lambda v: isinstance(v, str))

        sig = self.signature(e)
        roof = self.roofline(e, sig)
        rows = self.workloads(e, sig, status)

        if self.a.ok and sig is not None and roof is not None and rows is not None:
            self.a.entry = OpEntry(
                name=self.name, family=family.value, ref_api=ref_api.value, status=status.value,
                signature=sig, workloads=tuple(rows), roofline=roof, file=self.file,
                description=desc.value or "",
            )
        return self.a

    def entry_name_raw(self) -> Any:
        return self.name

    # -- signature ---------------------------------------------------------------------

    def signature(self, e: dict) -> Signature | None:
        s = self.get(e, "signature", "signature", required=True, kind="a mapping",
                     check=lambda v: isinstance(v, dict))
        if not s.ok:
            for j in ("tensor declarations", "output shapes", "derived indices (let)"):
                self.unreached(j, "signature", "signature")
            return None
        sd: dict = s.value
        self.unknown_keys(sd, SIGNATURE_FIELDS, "signature")
        ok = True
        params = self.get(sd, "params", "signature.params", required=False, kind="a mapping of name to {type, default}",
                          check=lambda v: isinstance(v, dict))
        ok &= params.state is not State.MALFORMED
        if params.state is State.MALFORMED:
            self.unknowable.append("signature.params")
        if params.ok:
            ok &= self.read_params(params.value)
        ins = self.get(sd, "inputs", "signature.inputs", required=True, kind="a list of tensors",
                       check=lambda v: isinstance(v, list))
        self.inputs_read = ins.ok
        outs = self.get(sd, "outputs", "signature.outputs", required=True, kind="a non-empty list of tensors",
                        check=lambda v: isinstance(v, list) and len(v) > 0)
        inputs: list[TensorSpec] = []
        outputs: list[TensorSpec] = []
        if ins.ok:
            for i, t in enumerate(ins.value):
                spec = self.read_tensor(t, f"signature.inputs[{i}]", is_input=True)
                ok &= spec is not None
                if spec is not None:
                    inputs.append(spec)
        else:
            ok = False
        if outs.ok:
            for i, t in enumerate(outs.value):
                spec = self.read_tensor(t, f"signature.outputs[{i}]", is_input=False)
                ok &= spec is not None
                if spec is not None:
                    outputs.append(spec)
        else:
            ok = False
        # dtype references can only be resolved once every tensor is known.
        ok &= self.check_dtype_refs(inputs, outputs)
        lets = self.get(sd, "let", "signature.let", required=False, kind="a mapping of name to expression",
                        check=lambda v: isinstance(v, dict))
        ok &= lets.state is not State.MALFORMED
        if lets.state is State.MALFORMED:
            self.unknowable.append("signature.let")
        if lets.ok:
            ok &= self.read_lets(lets.value)
        if ins.ok:
            ok &= self.check_output_shapes(outputs)
        else:
            self.unreached("output shapes name bound indices", "signature.outputs", "signature.inputs")
        if not ok:
            return None
        return Signature(tuple(inputs), tuple(outputs), tuple(self.params.values()), tuple(self.lets))

    def declare(self, name: str, path: str, what: str) -> bool:
        taken = (set(self.tensors) | set(self.indices) | set(self.params) | {n for n, _ in self.lets}
                 | set(self.broken) | set(PRIMITIVES))
        if name in taken:
            self.defect("duplicate-name", path, f"{what} {name!r} is already declared (or is a primitive)",
                        "give it a name of its own")
            return False
        return True

    def read_params(self, pd: dict) -> bool:
        ok = True
        for k, v in pd.items():
            path = f"signature.params.{k}" if _is_ident(k) else "signature.params"
            if not _is_ident(k):
                self.defect("bad-name", path, f"parameter name {_short(k)} is not an identifier",
                            "use letters, digits and underscores")
                ok = False
                continue
            if not isinstance(v, dict) or "type" not in v:
                self.defect("bad-param", path, f"parameter {k} must be a mapping with a type, got {_short(v)}",
                            f"write {k}: {{type: int|float|bool|str|dtype, default: ...}}")
                self.mark_broken(k, path)
                ok = False
                continue
            ptype = v.get("type")
            if not isinstance(ptype, str) or ptype not in PARAM_TYPES:
                self.defect("bad-param", f"{path}.type", f"type {_short(ptype)} is unknown",
                            f"use one of: {', '.join(PARAM_TYPES)}")
                self.mark_broken(k, f"{path}.type")
                ok = False
                continue
            extra = set(v) - {"type", "default"} if all(isinstance(x, str) for x in v) else {"?"}
            if extra:
                self.defect("unknown-field", path,
                            f"parameter {k} has unknown keys {_short(sorted(map(_short, extra)))}",
                            "a parameter has only type and default")
                ok = False
            has_default = "default" in v
            default = v.get("default")
            if has_default and default is not None and not _value_fits(ptype, default):
                self.defect("bad-param", f"{path}.default", f"default {_short(default)} is not a {ptype}"
                            + (" (it must be finite)" if ptype == "float" and isinstance(default, float) else ""),
                            f"give a finite {ptype} default or drop it" if ptype == "float"
                            else f"give a {ptype} default or drop it")
                self.mark_broken(k, f"{path}.default")
                ok = False
                continue
            if not self.declare(k, path, "parameter"):
                ok = False
                continue
            self.params[k] = ParamSpec(k, ptype, default, required=not has_default)
        return ok

    def read_tensor(self, t: Any, path: str, *, is_input: bool) -> TensorSpec | None:
        if not isinstance(t, dict):
            self.defect("bad-type", path, f"a tensor must be a mapping, got {_short(t)}",
                        "write {name: x, shape: \"[M, K]\", dtype: \"float16 | bfloat16\"}")
            self.unnamed_tensors += 1
            return None
        self.unknown_keys(t, TENSOR_FIELDS, path)
        bad: list[str] = []  # the defective facts of this declaration, in order
        name = self.get(t, "name", f"{path}.name", required=True, kind="a string",
                        check=lambda v: isinstance(v, str))
        if name.ok and not _is_ident(name.value):
            self.defect("bad-name", f"{path}.name", f"tensor name {_short(name.value)} is not an identifier",
                        "use letters, digits and underscores, not starting with a digit")
            name = self.fact(f"{path}.name", MALFORMED)
        if not name.ok:
            self.unnamed_tensors += 1
            bad.append(f"{path}.name")
        else:
            path = f"{path}({name.value})"
            if not self.declare(name.value, f"{path}.name", "tensor"):
                bad.append(f"{path}.name")
        flags = {}
        for flag in ("optional", "mutated", "write_only", "metadata"):
            f = self.get(t, flag, f"{path}.{flag}", required=False, kind="true or false",
                         check=lambda v: isinstance(v, bool))
            if f.state is State.MALFORMED:
                bad.append(f"{path}.{flag}")
            flags[flag] = bool(f.value) if f.ok else False
        alias = self.get(t, "alias", f"{path}.alias", required=False, kind="an input's name", check=_is_ident)
        if alias.state is State.MALFORMED:
            bad.append(f"{path}.alias")
        if not is_input:
            for flag in ("optional", "mutated", "write_only", "metadata"):
                if flags[flag]:
                    self.defect("bad-flag", f"{path}.{flag}", f"{flag} applies to inputs only",
                                "drop it; an output is always written")
                    bad.append(f"{path}.{flag}")
            if alias.ok and alias.value not in self.input_names:
                self.defect("bad-flag", f"{path}.alias", f"alias {alias.value!r} names no declared input",
                            f"name one of the inputs: {', '.join(self.input_names) or '(none)'}")
                bad.append(f"{path}.alias")
        else:
            if alias.ok:
                self.defect("bad-flag", f"{path}.alias", "alias applies to outputs only",
                            "declare the alias on the output that shares this input's storage")
                bad.append(f"{path}.alias")
            if flags["mutated"] and flags["write_only"]:
                self.defect("bad-flag", f"{path}.write_only", "an input cannot be both mutated and write_only",
                            "mutated: read and written; write_only: only written. Keep one")
                bad.append(f"{path}.write_only")
        shape = self.get(t, "shape", f"{path}.shape", required=True, kind="a shape pattern such as \"[*B, N]\"",
                         check=lambda v: isinstance(v, (str, list)))
        dims: tuple[str, ...] = ()
        parsed = self.read_shape(shape.value, f"{path}.shape", is_input=is_input) if shape.ok else None
        if parsed is None:
            bad.append(f"{path}.shape")
            if is_input:
                self.unknowable.append(f"{path}.shape")
        else:
            dims = parsed
        dtype = self.get(t, "dtype", f"{path}.dtype", required=True,
                         kind="a dtype union (\"float16 | bfloat16\"), same_as(x) or param(p)", check=_is_str)
        dt = self.read_dtype(dtype.value, f"{path}.dtype") if dtype.ok else None
        if dt is None:
            bad.append(f"{path}.dtype")
        if name.ok and is_input:
            self.input_names.append(name.value)
        if bad or not name.ok:
            if name.ok and name.value not in self.tensors:  # not a duplicate of a valid declaration
                self.mark_broken(name.value, bad[0])
            return None
        assert dt is not None  # ``bad`` names it when it is None, and returned above
        dtypes, same_as, dparam = dt
        spec = TensorSpec(name=name.value, shape=dims, dtypes=dtypes, same_as=same_as, dtype_param=dparam,
                          optional=flags["optional"], mutated=flags["mutated"], write_only=flags["write_only"],
                          alias=alias.value if alias.ok else None, metadata=flags["metadata"])
        self.tensors[name.value] = spec
        return spec

    def read_shape(self, raw: Any, path: str, *, is_input: bool) -> tuple[str, ...] | None:
        if isinstance(raw, list):
            if not all((isinstance(x, str) and len(x) <= expr.MAX_CHARS)
                       or (isinstance(x, int) and not isinstance(x, bool) and 0 < x <= MAX_INDEX) for x in raw):
                self.defect("bad-shape", path, f"shape items must be names or positive integers, got {_short(raw)}",
                            "write the shape as \"[*B, N]\"")
                return None
            items = [str(x) for x in raw]
        else:
            node = None
            if len(raw) <= expr.MAX_CHARS:
                try:
                    node = ast.parse(raw.strip(), mode="eval").body
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    node = None
            if not isinstance(node, ast.List):
                self.defect("bad-shape", path, f"shape {_short(raw)} is not a bracketed list",
                            "write the shape as \"[M, K]\" or \"[*B, N]\"")
                return None
            try:
                items = [ast.unparse(x) for x in node.elts]
            except (ValueError, RecursionError, MemoryError):  # too deep, or an over-long integer literal
                self.defect("bad-shape", path, f"shape {_short(raw)} has an item too large to read",
                            "write the shape as \"[M, K]\" or \"[*B, N]\"")
                return None
        out: list[str] = []
        variadic = 0
        ok = True
        for i, item in enumerate(items):
            star = item.startswith("*")
            body = item[1:].strip() if star else item.strip()
            if is_input:
                if _is_ident(body):
                    if body in PRIMITIVES:
                        self.defect("duplicate-name", path, f"index {body!r} shadows a primitive",
                                    "rename the index")
                        ok = False
                        continue
                    if body in self.params or body in self.tensors or body in self.broken:
                        self.defect("duplicate-name", path,
                                    f"index {body!r} is already a parameter or tensor name", "rename the index")
                        ok = False
                        continue
                    prev = self.indices.get(body)
                    if prev is not None and prev != star:
                        self.defect("bad-shape", path, f"index {body!r} is used both as variadic and as one dim",
                                    "use *Name everywhere or Name everywhere")
                        ok = False
                    self.indices[body] = star
                    variadic += star
                elif not star and _DIGITS.match(body) and 0 < int(body) <= MAX_INDEX:
                    pass
                else:
                    self.defect("bad-shape", path,
                                f"input dim {i} ({_short(item)}) must be an index name, *Name or a positive "
                                "integer written with the digits 0-9",
                                "input shapes bind indices; compute extents in output shapes or let")
                    ok = False
                    continue
            else:
                p = expr.parse(body)
                if p.problems:
                    for pr in p.problems:
                        self.defect("bad-shape", path, f"dim {i}: {pr.message}", pr.fix)
                    ok = False
                    continue
            out.append(item.strip())
        if variadic > 1:
            self.defect("bad-shape", path, "a shape may hold at most one variadic index",
                        "split the tensor's dims into one *Name and named dims")
            ok = False
        return tuple(out) if ok else None

    def read_dtype(self, raw: str, path: str) -> tuple[tuple[str, ...], str | None, str | None] | None:
        raw = raw.strip()
        m = re.fullmatch(r"(same_as|param)\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)", raw)
        if m:
            kind, ref = m.groups()
            if kind == "param":
                p = self.params.get(ref)
                if p is None and self.depends_on_broken(ref, f"param({ref}) names a dtype parameter", path):
                    return None
                if p is None or p.type != "dtype":
                    self.defect("bad-dtype", path, f"param({ref}) names no dtype parameter",
                                "declare it under signature.params with type: dtype")
                    return None
                return (), None, ref
            return (), ref, None  # resolved in check_dtype_refs
        names = [x.strip() for x in raw.split("|")]
        bad = [n for n in names if n not in DTYPE_BITS]
        if bad:
            self.defect("bad-dtype", path, f"unknown dtype(s) {_short(bad)} in {_short(raw)}",
                        f"use dtypes from: {', '.join(DTYPE_BITS)}; or same_as(x); or param(p)")
            return None
        if len(set(names)) != len(names):
            self.defect("bad-dtype", path, f"dtype union {raw!r} repeats a member", "list each dtype once")
            return None
        return tuple(names), None, None

    def check_dtype_refs(self, inputs: list[TensorSpec], outputs: list[TensorSpec]) -> bool:
        ok = True
        known = {t.name: t for t in inputs + outputs}
        for t in inputs + outputs:
            seen = {t.name}
            cur = t
            path = f"signature.{t.name}.dtype"
            while cur.same_as is not None:
                nxt = known.get(cur.same_as)
                if nxt is None:
                    ok = False
                    if self.depends_on_broken(cur.same_as, f"same_as({cur.same_as}) resolves", path):
                        pass  # the tensor exists but its declaration is defective: not a second defect
                    elif self.unnamed_tensors:  # the name may belong to a tensor whose name is broken
                        self.unreached(f"same_as({cur.same_as}) resolves", path, "name of every tensor")
                    else:
                        self.defect("bad-dtype", path, f"same_as({cur.same_as}) names no tensor",
                                    f"name one of: {', '.join(known) or '(none)'}")
                    break
                if nxt.name in seen:
                    self.defect("bad-dtype", path, f"same_as cycle through {sorted(seen)}",
                                "anchor the chain on a tensor with a dtype union")
                    ok = False
                    break
                seen.add(nxt.name)
                cur = nxt
        return ok

    def read_lets(self, ld: dict) -> bool:
        ok = True
        for k, v in ld.items():
            path = f"signature.let.{k}" if _is_ident(k) else "signature.let"
            if not _is_ident(k):
                self.defect("bad-name", path, f"let name {_short(k)} is not an identifier",
                            "use letters, digits and underscores")
                ok = False
                continue
            if not _is_str(v) and not (isinstance(v, int) and not isinstance(v, bool) and abs(v) < expr.MAX_LITERAL):
                self.defect("bad-type", path, f"let {k} must be an expression string, got {_short(v)}",
                            f"write {k}: \"H * D\"")
                self.mark_broken(k, path)
                ok = False
                continue
            if not self.check_expr(str(v), path, allow_tensors=False):
                self.mark_broken(k, path)
                ok = False
                continue
            if not self.declare(k, path, "let"):
                ok = False
                continue
            self.lets.append((k, str(v)))
        return ok

    def check_output_shapes(self, outputs: list[TensorSpec]) -> bool:
        ok = True
        for t in outputs:
            for i, d in enumerate(t.shape):
                body = d[1:] if d.startswith("*") else d
                ok &= self.check_expr(body, f"signature.outputs({t.name}).shape[{i}]", allow_tensors=False)
        return ok

    # -- expressions -------------------------------------------------------------------

    def value_names(self) -> list[str]:
        return sorted(set(self.indices) | {p for p, s in self.params.items() if s.type != "dtype"}
                      | {n for n, _ in self.lets})

    def check_expr(self, source: str, path: str, *, allow_tensors: bool, names_known: bool = True) -> bool:
        p = expr.parse(source)
        ok = True
        for pr in p.problems:
            self.defect(pr.code, path, pr.message, pr.fix)
            ok = False
        if p.tree is None:
            self.unreached("names resolve", path, "formula syntax")
            return False
        if not names_known:
            if p.names or p.tensor_refs:
                self.unreached("names resolve", path, "signature")
            return ok
        scope = set(self.value_names())
        for n in sorted(p.names - scope):
            if self.depends_on_broken(n, f"{n!r} resolves", path):
                ok = False
                continue
            hint = " (tensors are named only inside bytes(), bits() or present())" if n in self.tensors else ""
            self.defect("unknown-name", path, f"{n!r} is not an index, parameter or let{hint}",
                        f"use one of: {', '.join(sorted(scope)) or '(none)'}; "
                        f"primitives: {', '.join(sorted(PRIMITIVES))}")
            ok = False
        for prim, refs in p.tensor_refs.items():
            for ref in sorted(refs):
                if not allow_tensors:
                    self.defect("tensor-arg", path, f"{prim}({ref}) is not allowed here",
                                "shapes and lets depend on indices and parameters only")
                    ok = False
                    continue
                t = self.tensors.get(ref)
                if prim == "bits" and t is None and self.params.get(ref) is not None \
                        and self.params[ref].type == "dtype":
                    continue
                if t is None and self.depends_on_broken(ref, f"{prim}({ref}) names a tensor", path):
                    ok = False
                elif t is None and self.unnamed_tensors:  # it may be the tensor whose name is broken
                    self.unreached(f"{prim}({ref}) names a tensor", path, "name of every tensor")
                    ok = False
                elif t is None:
                    self.defect("tensor-arg", path, f"{prim}({ref}): {ref!r} is not a tensor of the signature",
                                f"name one of: {', '.join(self.tensors) or '(none)'}")
                    ok = False
                elif prim == "present" and not t.optional:
                    self.defect("tensor-arg", path, f"present({ref}): {ref!r} is not optional, so it is always present",
                                f"mark {ref} optional: true, or drop present()")
                    ok = False
        return ok

    # -- roofline ----------------------------------------------------------------------

    def roofline(self, e: dict, sig: Signature | None) -> Roofline | None:
        r = self.get(e, "roofline", "roofline", required=True, kind="a mapping with flops (and bytes) or func",
                     check=lambda v: isinstance(v, dict))
        if not r.ok:
            self.unreached("formula checks", "roofline", "roofline")
            return None
        rd: dict = r.value
        self.unknown_keys(rd, ROOFLINE_FIELDS, "roofline")
        fields = {}
        ok = True
        for k in ROOFLINE_FIELDS:
            f = self.get(rd, k, f"roofline.{k}", required=False, kind="a non-empty string", check=_is_str)
            ok &= f.state is not State.MALFORMED
            fields[k] = f
        inline = [k for k in ("flops", "bytes", "read_bytes") if fields[k].state is not State.ABSENT]
        func = [k for k in ("func", "read_func") if fields[k].state is not State.ABSENT]
        if inline and func:
            self.defect("roofline-mode", "roofline", f"inline fields {inline} and func fields {func} coexist",
                        "use either flops (+ bytes) or func, not both")
            ok = False
        elif not inline and not func:
            self.defect("roofline-mode", "roofline", "neither flops nor func is given",
                        f"add flops: \"<expression>\" or func: \"{FUNC_PREFIX}<name>\"")
            return None
        elif inline and fields["flops"].state is State.ABSENT:
            self.defect("missing-field", "roofline.flops", "an inline roofline needs flops",
                        "add flops: \"<expression>\" (bytes may be derived)")
            ok = False
        elif func and fields["func"].state is State.ABSENT:
            self.defect("missing-field", "roofline.func", "read_func without func",
                        f"add func: \"{FUNC_PREFIX}<name>\"")
            ok = False
        for k in ("flops", "bytes", "read_bytes"):
            if fields[k].ok:
                ok &= self.check_expr(fields[k].value, f"roofline.{k}", allow_tensors=True,
                                      names_known=self.inputs_read)
        for k in ("func", "read_func"):
            if fields[k].ok:
                path = fields[k].value.strip()
                tail = path[len(FUNC_PREFIX):]
                if not (path.startswith(FUNC_PREFIX) and _is_ident(tail) and not tail.startswith("_")):
                    self.defect("bad-func-path", f"roofline.{k}", f"{_short(path)} is not {FUNC_PREFIX}<name>",
                                f"put a plain function in tileops/ops/formulas.py and write \"{FUNC_PREFIX}<name>\""
                                " (a public name: no leading underscore)")
                    ok = False
        if not ok or sig is None:
            return None
        v = {k: (f.value.strip() if f.ok else None) for k, f in fields.items()}
        mode = "func" if func else "inline"
        return Roofline(mode=mode, flops=v["flops"], bytes=v["bytes"], read_bytes=v["read_bytes"],
                        func=v["func"], read_func=v["read_func"])

    # -- workloads ---------------------------------------------------------------------

    def workloads(self, e: dict, sig: Signature | None, status: Fact) -> list[Workload] | None:
        w = self.get(e, "workloads", "workloads", required=True, kind="a list of rows",
                     check=lambda v: isinstance(v, list))
        if not w.ok:
            return None
        if status.ok and status.value == "implemented" and not w.value:
            self.defect("no-workloads", "workloads", "an implemented op needs at least one workload row",
                        "add a row: {label: ..., indices: {...}, dtypes: [...]}")
            return None
        rows: list[Workload] = []
        labels: set[str] = set()
        ok = True
        for i, row in enumerate(w.value):
            path = f"workloads[{i}]"
            if not isinstance(row, dict):
                self.defect("bad-workload", path, f"a row must be a mapping, got {_short(row)}",
                            "write {label: ..., indices: {...}, dtypes: [...]}")
                ok = False
                continue
            self.unknown_keys(row, WORKLOAD_FIELDS, path)
            label = self.get(row, "label", f"{path}.label", required=True, kind="a non-empty string", check=_is_str)
            if label.ok:
                path = f"workloads[{label.value}]"
                if label.value in labels:
                    self.defect("duplicate-label", f"{path}.label", f"label {_short(label.value)} is used twice",
                                "give every row its own label")
                    ok = False
                labels.add(label.value)
            parts = {
                "indices": self.get(row, "indices", f"{path}.indices", required=True, kind="a mapping of index to size",
                                    check=lambda v: isinstance(v, dict)),
                "params": self.get(row, "params", f"{path}.params", required=False, kind="a mapping",
                                   check=lambda v: isinstance(v, dict)),
                "present": self.get(row, "present", f"{path}.present", required=False,
                                    kind="a list of optional input names",
                                    check=lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
                "dtypes": self.get(row, "dtypes", f"{path}.dtypes", required=True,
                                   kind="a non-empty list of dtype cases",
                                   check=lambda v: isinstance(v, list) and len(v) > 0),
                "tags": self.get(row, "tags", f"{path}.tags", required=False, kind="a list of strings",
                                 check=lambda v: isinstance(v, list) and all(_is_str(x) for x in v)),
                "seed": self.get(row, "seed", f"{path}.seed", required=False, kind="an integer in [0, 2**63)",
                                 check=lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63),
            }
            if any(p.state is State.MALFORMED for p in parts.values()) or not label.ok \
                    or not parts["indices"].ok or not parts["dtypes"].ok:
                ok = False
                continue
            if sig is None:
                self.unreached("row binds the signature's indices, params and dtypes", path, "signature")
                ok = False
                continue
            row_ok = self.check_row(sig, path, parts)
            ok &= row_ok
            if row_ok:
                rows.append(Workload(
                    label=label.value,
                    indices={k: (tuple(v) if isinstance(v, list) else v) for k, v in parts["indices"].value.items()},
                    params=dict(parts["params"].value or {}),
                    present=tuple(parts["present"].value or ()),
                    dtypes=tuple(c if isinstance(c, str) else dict(c) for c in parts["dtypes"].value),
                    tags=tuple(parts["tags"].value or ()),
                    seed=parts["seed"].value if parts["seed"].ok else None,
                ))
        return rows if ok else None

    def check_row(self, sig: Signature, path: str, parts: dict[str, Fact]) -> bool:
        ok = True
        present = set(parts["present"].value or ())
        optional = {t.name for t in sig.inputs if t.optional}
        for p in sorted(present - optional):
            self.defect("bad-workload", f"{path}.present", f"{_short(p)} is not an optional input",
                        f"list only optional inputs: {', '.join(sorted(optional)) or '(none)'}")
            ok = False
        bound = [t for t in sig.inputs if not t.optional or t.name in present]
        needed: dict[str, bool] = {}
        for t in bound:
            for d in t.shape:
                body = d.lstrip("*")
                if _is_ident(body):
                    needed[body] = d.startswith("*")
        given = parts["indices"].value
        for k in given:
            if not isinstance(k, str) or k not in needed:
                self.defect("bad-workload", f"{path}.indices", f"{_short(k)} is not an index of the bound inputs",
                            f"bind exactly: {', '.join(needed) or '(none)'}")
                ok = False
        for k, variadic in needed.items():
            if k not in given:
                self.defect("bad-workload", f"{path}.indices", f"index {k!r} is not bound",
                            f"add {k}: {'[d0, d1, ...]' if variadic else '<size>'}")
                ok = False
                continue
            v = given[k]
            good = (isinstance(v, list) and all(_is_pos_int(x) for x in v)) if variadic else _is_pos_int(v)
            if not good:
                self.defect("bad-workload", f"{path}.indices.{k}",
                            f"{k} = {_short(v)} is not "
                            f"{'a list of positive integers' if variadic else 'a positive integer'}",
                            "bind sizes as positive integers")
                ok = False
        params = parts["params"].value or {}
        for k, v in params.items():
            spec = self.params.get(k) if isinstance(k, str) else None
            if spec is None:
                self.defect("bad-workload", f"{path}.params", f"{_short(k)} is not a parameter",
                            f"use one of: {', '.join(self.params) or '(none)'}")
                ok = False
            elif not _value_fits(spec.type, v):
                self.defect("bad-workload", f"{path}.params.{k}", f"{_short(v)} is not a {spec.type}",
                            f"give {k} a {spec.type}")
                ok = False
        for p in sig.params:
            if p.required and p.name not in params:
                self.defect("bad-workload", f"{path}.params", f"required parameter {p.name!r} is not bound",
                            f"add params: {{{p.name}: ...}} or give it a default")
                ok = False
        free = [t for t in sig.tensors if t.is_free_dtype and (not t.optional or t.name in present)]
        for j, case in enumerate(parts["dtypes"].value):
            cpath = f"{path}.dtypes[{j}]"
            if isinstance(case, str) and case not in DTYPE_BITS:
                self.defect("bad-workload", cpath, f"dtype {_short(case)} is unknown",
                            f"use dtypes from: {', '.join(DTYPE_BITS)}")
                ok = False
            elif isinstance(case, str):
                for t in free:
                    if case not in t.dtypes:
                        self.defect("bad-workload", cpath,
                                    f"dtype {case} is not allowed for {t.name} ({' | '.join(t.dtypes)})",
                                    f"use a dtype in {t.name}'s union, or a mapping {{tensor: dtype}}")
                        ok = False
            elif isinstance(case, dict):
                for k, v in case.items():
                    named = next((x for x in sig.tensors if x.name == k), None) if isinstance(k, str) else None
                    if named is None or not named.is_free_dtype:
                        self.defect("bad-workload", cpath, f"{_short(k)} is not a tensor whose dtype a case chooses",
                                    f"name one of: {', '.join(x.name for x in free) or '(none)'}")
                        ok = False
                    elif not isinstance(v, str) or v not in named.dtypes:
                        self.defect("bad-workload", cpath, f"dtype {_short(v)} is not allowed for {k}",
                                    f"use one of: {' | '.join(named.dtypes)}")
                        ok = False
                for t in free:
                    if t.name not in case:
                        self.defect("bad-workload", cpath, f"the case does not choose {t.name}'s dtype",
                                    f"add {t.name}: <dtype>")
                        ok = False
            else:
                self.defect("bad-workload", cpath, f"a dtype case must be a name or a mapping, got {_short(case)}",
                            "write bfloat16, or {x: bfloat16, ids: int64}")
                ok = False
        return ok


def _value_fits(ptype: str, v: Any) -> bool:
    """Whether ``v`` is a value of parameter type ``ptype``: numbers finite and within int64
    (codegen writes them as Python literals, and ``.nan`` or ``1e999`` would not be one)."""
    if ptype == "int":
        return isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**63
    if ptype == "float":
        if isinstance(v, float):
            return math.isfinite(v)
        return isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**63
    if ptype == "bool":
        return isinstance(v, bool)
    if ptype == "str":
        return isinstance(v, str)
    if ptype == "dtype":
        return isinstance(v, str) and v in DTYPE_BITS
    return False
