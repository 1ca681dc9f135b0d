"""The state one analysis shares across its readers: the names the signature declares, the facts found
broken (a judgment needing one is recorded as not reached, never as a second defect), and the recording of
defects. Formulas are checked here, against those names, wherever they appear (shapes, lets, the roofline)."""

from __future__ import annotations

from typing import Any
from collections.abc import Iterable

from tileops.manifest import expr
from tileops.manifest.facts import ABSENT, DEFECT_CODES, MALFORMED, Analysis, Defect, Fact, State, Unreached
from tileops.manifest.values import short
from tileops.ops.primitives import PRIMITIVES
from tileops.ops.spec import ParamSpec, TensorSpec


class Scope:
    def __init__(self, entry: Any, name: Any, file: str) -> None:
        self.entry = entry
        self.name = name if isinstance(name, str) else short(name)
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
            self.defect("bad-type", path, f"{key} must be {kind}, got {short(v)}", fix or f"write {key} as {kind}")
            return self.fact(path, MALFORMED)
        return self.fact(path, Fact(State.VALID, v))

    def unknown_keys(self, mapping: dict, allowed: tuple[str, ...], path: str) -> None:
        for k in mapping:
            if k not in allowed:
                key = k if isinstance(k, str) and len(k) <= 60 else short(k)
                self.defect("unknown-field", f"{path}.{key}" if path else key,
                            f"{short(k)} is not a field here",
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

    def declare(self, name: str, path: str, what: str) -> bool:
        taken = (set(self.tensors) | set(self.indices) | set(self.params) | {n for n, _ in self.lets}
                 | set(self.broken) | set(PRIMITIVES))
        if name in taken:
            self.defect("duplicate-name", path, f"{what} {name!r} is already declared (or is a primitive)",
                        "give it a name of its own")
            return False
        return True

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
        ok &= self.names_resolve(p.names, path)
        for prim, refs in p.tensor_refs.items():
            for ref in sorted(refs):
                ok &= self.tensor_ref_resolves(prim, ref, path, allow_tensors=allow_tensors)
        return ok

    def names_resolve(self, names: Iterable[str], path: str) -> bool:
        """Every value name of a formula is an index, a parameter or a let (or the fact that would declare it
        is broken: not reached)."""
        scope = set(self.value_names())
        ok = True
        for n in sorted(set(names) - scope):
            ok = False
            if self.depends_on_broken(n, f"{n!r} resolves", path):
                continue
            hint = " (tensors are named only inside bytes(), bits() or present())" if n in self.tensors else ""
            self.defect("unknown-name", path, f"{n!r} is not an index, parameter or let{hint}",
                        f"use one of: {', '.join(sorted(scope)) or '(none)'}; "
                        f"primitives: {', '.join(sorted(PRIMITIVES))}")
        return ok

    def tensor_ref_resolves(self, prim: str, ref: str, path: str, *, allow_tensors: bool) -> bool:
        """``prim(ref)`` (bytes, bits, present) names a tensor it applies to; ``bits`` also takes a dtype
        parameter."""
        if not allow_tensors:
            self.defect("tensor-arg", path, f"{prim}({ref}) is not allowed here",
                        "shapes and lets depend on indices and parameters only")
            return False
        t = self.tensors.get(ref)
        if t is not None:
            if prim == "present" and not t.optional:
                self.defect("tensor-arg", path, f"present({ref}): {ref!r} is not optional, so it is always present",
                            f"mark {ref} optional: true, or drop present()")
                return False
            return True
        param = self.params.get(ref)
        if prim == "bits" and param is not None and param.type == "dtype":
            return True
        if self.depends_on_broken(ref, f"{prim}({ref}) names a tensor", path):
            return False
        if self.unnamed_tensors:  # it may be the tensor whose name is broken
            self.unreached(f"{prim}({ref}) names a tensor", path, "name of every tensor")
            return False
        self.defect("tensor-arg", path, f"{prim}({ref}): {ref!r} is not a tensor of the signature",
                    f"name one of: {', '.join(self.tensors) or '(none)'}")
        return False
