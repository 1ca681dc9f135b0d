"""Reading an entry's roofline: inline formulas (flops, bytes, read_bytes) or a function of
``tileops.ops.formulas``, never both."""

from __future__ import annotations

from tileops.manifest.facts import Fact, State
from tileops.manifest.scope import Scope
from tileops.manifest.values import is_ident, is_text, short
from tileops.ops.spec import Roofline, Signature

ROOFLINE_FIELDS = ("flops", "bytes", "read_bytes", "func", "read_func")
FUNC_MODULE = "tileops.ops.formulas"
FUNC_PREFIX = FUNC_MODULE + "."

INLINE_FIELDS = ("flops", "bytes", "read_bytes")
FUNC_FIELDS = ("func", "read_func")


class RooflineReader(Scope):
    def roofline(self, e: dict, sig: Signature | None) -> Roofline | None:
        r = self.get(e, "roofline", "roofline", required=True, kind="a mapping with flops (and bytes) or func",
                     check=lambda v: isinstance(v, dict))
        if not r.ok:
            self.unreached("formula checks", "roofline", "roofline")
            return None
        rd: dict = r.value
        self.unknown_keys(rd, ROOFLINE_FIELDS, "roofline")
        fields: dict[str, Fact] = {}
        ok = True
        for k in ROOFLINE_FIELDS:
            f = self.get(rd, k, f"roofline.{k}", required=False, kind="a non-empty string", check=is_text)
            ok &= f.state is not State.MALFORMED
            fields[k] = f
        inline = [k for k in INLINE_FIELDS if fields[k].state is not State.ABSENT]
        func = [k for k in FUNC_FIELDS if fields[k].state is not State.ABSENT]
        mode_ok = self.check_mode(inline, func, fields)
        if mode_ok is None:
            return None
        ok &= mode_ok
        for k in INLINE_FIELDS:
            if fields[k].ok:
                ok &= self.check_expr(fields[k].value, f"roofline.{k}", allow_tensors=True,
                                      names_known=self.inputs_read)
        for k in FUNC_FIELDS:
            if fields[k].ok:
                ok &= self.check_func_path(k, fields[k].value.strip())
        if not ok or sig is None:
            return None
        v = {k: (f.value.strip() if f.ok else None) for k, f in fields.items()}
        mode = "func" if func else "inline"
        return Roofline(mode=mode, flops=v["flops"], bytes=v["bytes"], read_bytes=v["read_bytes"],
                        func=v["func"], read_func=v["read_func"])

    def check_mode(self, inline: list[str], func: list[str], fields: dict[str, Fact]) -> bool | None:
        """Inline formulas or a function, not both: whether the given fields make one mode (None: neither is
        given, so nothing else can be judged)."""
        if inline and func:
            self.defect("roofline-mode", "roofline", f"inline fields {inline} and func fields {func} coexist",
                        "use either flops (+ bytes) or func, not both")
            return False
        if not inline and not func:
            self.defect("roofline-mode", "roofline", "neither flops nor func is given",
                        f"add flops: \"<expression>\" or func: \"{FUNC_PREFIX}<name>\"")
            return None
        if inline and fields["flops"].state is State.ABSENT:
            self.defect("missing-field", "roofline.flops", "an inline roofline needs flops",
                        "add flops: \"<expression>\" (bytes may be derived)")
            return False
        if func and fields["func"].state is State.ABSENT:
            self.defect("missing-field", "roofline.func", "read_func without func",
                        f"add func: \"{FUNC_PREFIX}<name>\"")
            return False
        return True

    def check_func_path(self, k: str, path: str) -> bool:
        """A func field names a public function of ``tileops.ops.formulas``."""
        tail = path[len(FUNC_PREFIX):]
        if path.startswith(FUNC_PREFIX) and is_ident(tail) and not tail.startswith("_"):
            return True
        self.defect("bad-func-path", f"roofline.{k}", f"{short(path)} is not {FUNC_PREFIX}<name>",
                    f"put a plain function in tileops/ops/formulas.py and write \"{FUNC_PREFIX}<name>\""
                    " (a public name: no leading underscore)")
        return False
