"""Reading an entry's signature: its parameters, its tensors (name, flags, shape, dtype), its lets, and
the output shapes, declaring each name in the analysis's scope."""

from __future__ import annotations

import ast
import re
from typing import Any

from tileops.manifest import expr
from tileops.manifest.facts import MALFORMED, Fact, State
from tileops.manifest.scope import Scope
from tileops.manifest.values import DIGITS, MAX_INDEX, is_ident, is_text, short, value_fits
from tileops.ops.primitives import DTYPE_BITS, PRIMITIVES
from tileops.ops.spec import ParamSpec, Signature, TensorSpec

SIGNATURE_FIELDS = ("inputs", "outputs", "params", "let")
TENSOR_FIELDS = ("name", "shape", "dtype", "optional", "mutated", "write_only", "alias", "metadata")
PARAM_TYPES = ("int", "float", "bool", "str", "dtype")
#: A tensor's flags: an input's only (an output is always written).
_FLAGS = ("optional", "mutated", "write_only", "metadata")


class SignatureReader(Scope):
    def signature(self, e: dict) -> Signature | None:
        s = self.get(e, "signature", "signature", required=True, kind="a mapping",
                     check=lambda v: isinstance(v, dict))
        if not s.ok:
            for j in ("tensor declarations", "output shapes", "derived indices (let)"):
                self.unreached(j, "signature", "signature")
            return None
        sd: dict = s.value
        self.unknown_keys(sd, SIGNATURE_FIELDS, "signature")
        params = self.namespace(sd, "params", "a mapping of name to {type, default}")
        ok = params.state is not State.MALFORMED
        if params.ok:
            ok &= self.read_params(params.value)
        ins = self.get(sd, "inputs", "signature.inputs", required=True, kind="a list of tensors",
                       check=lambda v: isinstance(v, list))
        self.inputs_read = ins.ok
        outs = self.get(sd, "outputs", "signature.outputs", required=True, kind="a non-empty list of tensors",
                        check=lambda v: isinstance(v, list) and len(v) > 0)
        inputs, inputs_ok = self.read_tensors(ins, "signature.inputs", is_input=True)
        outputs, outputs_ok = self.read_tensors(outs, "signature.outputs", is_input=False)
        ok &= inputs_ok and outputs_ok
        # dtype references can only be resolved once every tensor is known.
        ok &= self.check_dtype_refs(inputs, outputs)
        lets = self.namespace(sd, "let", "a mapping of name to expression")
        ok &= lets.state is not State.MALFORMED
        if lets.ok:
            ok &= self.read_lets(lets.value)
        if ins.ok:
            ok &= self.check_output_shapes(outputs)
        else:
            self.unreached("output shapes name bound indices", "signature.outputs", "signature.inputs")
        if not ok:
            return None
        return Signature(tuple(inputs), tuple(outputs), tuple(self.params.values()), tuple(self.lets))

    def namespace(self, sd: dict, key: str, kind: str) -> Fact:
        """An optional mapping that declares names (params, let). A malformed one is unknowable: a name not
        found elsewhere may be declared there, so judging it is not reached rather than a defect."""
        f = self.get(sd, key, f"signature.{key}", required=False, kind=kind, check=lambda v: isinstance(v, dict))
        if f.state is State.MALFORMED:
            self.unknowable.append(f"signature.{key}")
        return f

    def read_tensors(self, f: Fact, path: str, *, is_input: bool) -> tuple[list[TensorSpec], bool]:
        """The tensors of a list fact that were declared well, and whether every one was (and the list was)."""
        if not f.ok:
            return [], False
        specs: list[TensorSpec] = []
        for i, t in enumerate(f.value):
            spec = self.read_tensor(t, f"{path}[{i}]", is_input=is_input)
            if spec is not None:
                specs.append(spec)
        return specs, len(specs) == len(f.value)

    def read_params(self, pd: dict) -> bool:
        ok = True
        for k, v in pd.items():
            path = f"signature.params.{k}" if is_ident(k) else "signature.params"
            if not is_ident(k):
                self.defect("bad-name", path, f"parameter name {short(k)} is not an identifier",
                            "use letters, digits and underscores")
                ok = False
                continue
            if not isinstance(v, dict) or "type" not in v:
                self.defect("bad-param", path, f"parameter {k} must be a mapping with a type, got {short(v)}",
                            f"write {k}: {{type: int|float|bool|str|dtype, default: ...}}")
                self.mark_broken(k, path)
                ok = False
                continue
            ptype = v.get("type")
            if not isinstance(ptype, str) or ptype not in PARAM_TYPES:
                self.defect("bad-param", f"{path}.type", f"type {short(ptype)} is unknown",
                            f"use one of: {', '.join(PARAM_TYPES)}")
                self.mark_broken(k, f"{path}.type")
                ok = False
                continue
            extra = set(v) - {"type", "default"} if all(isinstance(x, str) for x in v) else {"?"}
            if extra:
                self.defect("unknown-field", path,
                            f"parameter {k} has unknown keys {short(sorted(map(short, extra)))}",
                            "a parameter has only type and default")
                ok = False
            has_default = "default" in v
            default = v.get("default")
            if has_default and default is not None and not value_fits(ptype, default):
                self.defect("bad-param", f"{path}.default", f"default {short(default)} is not a {ptype}"
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
            self.defect("bad-type", path, f"a tensor must be a mapping, got {short(t)}",
                        "write {name: x, shape: \"[M, K]\", dtype: \"float16 | bfloat16\"}")
            self.unnamed_tensors += 1
            return None
        self.unknown_keys(t, TENSOR_FIELDS, path)
        bad: list[str] = []  # the defective facts of this declaration, in order
        name, path = self.tensor_name(t, path, bad)
        flags, alias = self.tensor_flags(t, path, bad, is_input=is_input)
        dims = self.tensor_shape(t, path, bad, is_input=is_input)
        dt = self.tensor_dtype(t, path, bad)
        if name.ok and is_input:
            self.input_names.append(name.value)
        if bad or not name.ok or dt is None:  # ``bad`` names the dtype when it is None
            if name.ok and name.value not in self.tensors:  # not a duplicate of a valid declaration
                self.mark_broken(name.value, bad[0])
            return None
        dtypes, same_as, dparam = dt
        spec = TensorSpec(name=name.value, shape=dims, dtypes=dtypes, same_as=same_as, dtype_param=dparam,
                          optional=flags["optional"], mutated=flags["mutated"], write_only=flags["write_only"],
                          alias=alias, metadata=flags["metadata"])
        self.tensors[name.value] = spec
        return spec

    def tensor_name(self, t: dict, path: str, bad: list[str]) -> tuple[Fact, str]:
        """The tensor's name, declared, and the path its other facts are reported under (naming it)."""
        name = self.get(t, "name", f"{path}.name", required=True, kind="a string",
                        check=lambda v: isinstance(v, str))
        if name.ok and not is_ident(name.value):
            self.defect("bad-name", f"{path}.name", f"tensor name {short(name.value)} is not an identifier",
                        "use letters, digits and underscores, not starting with a digit")
            name = self.fact(f"{path}.name", MALFORMED)
        if not name.ok:
            self.unnamed_tensors += 1
            bad.append(f"{path}.name")
            return name, path
        path = f"{path}({name.value})"
        if not self.declare(name.value, f"{path}.name", "tensor"):
            bad.append(f"{path}.name")
        return name, path

    def tensor_flags(self, t: dict, path: str, bad: list[str], *,
                     is_input: bool) -> tuple[dict[str, bool], str | None]:
        """The tensor's flags and its alias (an output's), each checked against the side it is declared on."""
        flags = {}
        for flag in _FLAGS:
            f = self.get(t, flag, f"{path}.{flag}", required=False, kind="true or false",
                         check=lambda v: isinstance(v, bool))
            if f.state is State.MALFORMED:
                bad.append(f"{path}.{flag}")
            flags[flag] = bool(f.value) if f.ok else False
        alias = self.get(t, "alias", f"{path}.alias", required=False, kind="an input's name", check=is_ident)
        if alias.state is State.MALFORMED:
            bad.append(f"{path}.alias")
        if is_input:
            self.check_input_flags(flags, alias, path, bad)
        else:
            self.check_output_flags(flags, alias, path, bad)
        return flags, alias.value if alias.ok else None

    def check_input_flags(self, flags: dict[str, bool], alias: Fact, path: str, bad: list[str]) -> None:
        if alias.ok:
            self.defect("bad-flag", f"{path}.alias", "alias applies to outputs only",
                        "declare the alias on the output that shares this input's storage")
            bad.append(f"{path}.alias")
        if flags["mutated"] and flags["write_only"]:
            self.defect("bad-flag", f"{path}.write_only", "an input cannot be both mutated and write_only",
                        "mutated: read and written; write_only: only written. Keep one")
            bad.append(f"{path}.write_only")

    def check_output_flags(self, flags: dict[str, bool], alias: Fact, path: str, bad: list[str]) -> None:
        for flag in _FLAGS:
            if flags[flag]:
                self.defect("bad-flag", f"{path}.{flag}", f"{flag} applies to inputs only",
                            "drop it; an output is always written")
                bad.append(f"{path}.{flag}")
        if alias.ok and alias.value not in self.input_names:
            self.defect("bad-flag", f"{path}.alias", f"alias {alias.value!r} names no declared input",
                        f"name one of the inputs: {', '.join(self.input_names) or '(none)'}")
            bad.append(f"{path}.alias")

    def tensor_shape(self, t: dict, path: str, bad: list[str], *, is_input: bool) -> tuple[str, ...]:
        """The tensor's dims (empty when unreadable; ``bad`` then says so). An input's unreadable shape may
        bind indices, so it is unknowable."""
        shape = self.get(t, "shape", f"{path}.shape", required=True, kind="a shape pattern such as \"[*B, N]\"",
                         check=lambda v: isinstance(v, (str, list)))
        parsed = self.read_shape(shape.value, f"{path}.shape", is_input=is_input) if shape.ok else None
        if parsed is not None:
            return parsed
        bad.append(f"{path}.shape")
        if is_input:
            self.unknowable.append(f"{path}.shape")
        return ()

    def tensor_dtype(self, t: dict, path: str, bad: list[str]) -> tuple[tuple[str, ...], str | None, str | None] | None:
        dtype = self.get(t, "dtype", f"{path}.dtype", required=True,
                         kind="a dtype union (\"float16 | bfloat16\"), same_as(x) or param(p)", check=is_text)
        dt = self.read_dtype(dtype.value, f"{path}.dtype") if dtype.ok else None
        if dt is None:
            bad.append(f"{path}.dtype")
        return dt

    def read_shape(self, raw: Any, path: str, *, is_input: bool) -> tuple[str, ...] | None:
        """A shape's dims: an input's bind indices (or are fixed sizes), an output's are formulas of them."""
        items = self.shape_items(raw, path)
        if items is None:
            return None
        variadic = 0
        ok = True
        for i, item in enumerate(items):
            star = item.startswith("*")
            body = item[1:].strip() if star else item.strip()
            if not is_input:
                ok &= self.check_output_dim(body, i, path)
            elif is_ident(body):
                bound = self.bind_index(body, star, path)
                ok &= bound is True
                if star and bound is not None:
                    variadic += 1
            else:
                ok &= self.check_fixed_dim(body, star, i, item, path)
        if variadic > 1:
            self.defect("bad-shape", path, "a shape may hold at most one variadic index",
                        "split the tensor's dims into one *Name and named dims")
            ok = False
        return tuple(item.strip() for item in items) if ok else None

    def shape_items(self, raw: Any, path: str) -> list[str] | None:
        """A shape's items as text: from a YAML list of names and sizes, or a bracketed list written as text."""
        if isinstance(raw, list):
            if not all((isinstance(x, str) and len(x) <= expr.MAX_CHARS)
                       or (isinstance(x, int) and not isinstance(x, bool) and 0 < x <= MAX_INDEX) for x in raw):
                self.defect("bad-shape", path, f"shape items must be names or positive integers, got {short(raw)}",
                            "write the shape as \"[*B, N]\"")
                return None
            return [str(x) for x in raw]
        node = None
        if len(raw) <= expr.MAX_CHARS:
            try:
                node = ast.parse(raw.strip(), mode="eval").body
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                node = None
        if not isinstance(node, ast.List):
            self.defect("bad-shape", path, f"shape {short(raw)} is not a bracketed list",
                        "write the shape as \"[M, K]\" or \"[*B, N]\"")
            return None
        try:
            return [ast.unparse(x) for x in node.elts]
        except (ValueError, RecursionError, MemoryError):  # too deep, or an over-long integer literal
            self.defect("bad-shape", path, f"shape {short(raw)} has an item too large to read",
                        "write the shape as \"[M, K]\" or \"[*B, N]\"")
            return None

    def bind_index(self, body: str, star: bool, path: str) -> bool | None:
        """Bind an input dim's index: True, False when it was bound before the other way (variadic or one
        dim; it still counts as variadic here), None when its name is taken (not bound)."""
        if body in PRIMITIVES:
            self.defect("duplicate-name", path, f"index {body!r} shadows a primitive", "rename the index")
            return None
        if body in self.params or body in self.tensors or body in self.broken:
            self.defect("duplicate-name", path,
                        f"index {body!r} is already a parameter or tensor name", "rename the index")
            return None
        prev = self.indices.get(body)
        conflict = prev is not None and prev != star
        if conflict:
            self.defect("bad-shape", path, f"index {body!r} is used both as variadic and as one dim",
                        "use *Name everywhere or Name everywhere")
        self.indices[body] = star
        return not conflict

    def check_fixed_dim(self, body: str, star: bool, i: int, item: str, path: str) -> bool:
        """An input dim that is not an index: a positive size in ASCII digits."""
        if not star and DIGITS.match(body) and 0 < int(body) <= MAX_INDEX:
            return True
        self.defect("bad-shape", path,
                    f"input dim {i} ({short(item)}) must be an index name, *Name or a positive "
                    "integer written with the digits 0-9",
                    "input shapes bind indices; compute extents in output shapes or let")
        return False

    def check_output_dim(self, body: str, i: int, path: str) -> bool:
        """An output dim: a formula that parses (its names are checked once every index is bound)."""
        p = expr.parse(body)
        for pr in p.problems:
            self.defect("bad-shape", path, f"dim {i}: {pr.message}", pr.fix)
        return not p.problems

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
            self.defect("bad-dtype", path, f"unknown dtype(s) {short(bad)} in {short(raw)}",
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
            path = f"signature.let.{k}" if is_ident(k) else "signature.let"
            if not is_ident(k):
                self.defect("bad-name", path, f"let name {short(k)} is not an identifier",
                            "use letters, digits and underscores")
                ok = False
                continue
            if not is_text(v) and not (isinstance(v, int) and not isinstance(v, bool) and abs(v) < expr.MAX_LITERAL):
                self.defect("bad-type", path, f"let {k} must be an expression string, got {short(v)}",
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
