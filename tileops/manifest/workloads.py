"""Reading an entry's workload rows: each row's label, and its indices, parameters, optional inputs and
dtype cases checked against the signature."""

from __future__ import annotations

from typing import Any

from tileops.manifest.facts import Fact, State
from tileops.manifest.scope import Scope
from tileops.manifest.values import is_ident, is_pos_int, is_text, short, value_fits
from tileops.ops.primitives import DTYPE_BITS
from tileops.ops.spec import Signature, TensorSpec, Workload

WORKLOAD_FIELDS = ("label", "indices", "params", "present", "dtypes", "tags", "seed")


class WorkloadReader(Scope):
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
                self.defect("bad-workload", path, f"a row must be a mapping, got {short(row)}",
                            "write {label: ..., indices: {...}, dtypes: [...]}")
                ok = False
                continue
            self.unknown_keys(row, WORKLOAD_FIELDS, path)
            label = self.get(row, "label", f"{path}.label", required=True, kind="a non-empty string", check=is_text)
            if label.ok:
                path = f"workloads[{label.value}]"
                if label.value in labels:
                    self.defect("duplicate-label", f"{path}.label", f"label {short(label.value)} is used twice",
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
                                 check=lambda v: isinstance(v, list) and all(is_text(x) for x in v)),
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
        """A row fits the signature: its optional inputs, indices, parameters and dtype cases (every defect
        of the row is reported, not only the first)."""
        present = set(parts["present"].value or ())
        ok = self.check_present(sig, path, present)
        ok &= self.check_indices(sig, path, present, parts["indices"].value)
        ok &= self.check_params(sig, path, parts["params"].value or {})
        free = [t for t in sig.tensors if t.is_free_dtype and (not t.optional or t.name in present)]
        for j, case in enumerate(parts["dtypes"].value):
            ok &= self.check_dtype_case(sig, f"{path}.dtypes[{j}]", case, free)
        return ok

    def check_present(self, sig: Signature, path: str, present: set[str]) -> bool:
        optional = {t.name for t in sig.inputs if t.optional}
        for p in sorted(present - optional):
            self.defect("bad-workload", f"{path}.present", f"{short(p)} is not an optional input",
                        f"list only optional inputs: {', '.join(sorted(optional)) or '(none)'}")
        return present <= optional

    def check_indices(self, sig: Signature, path: str, present: set[str], given: dict[Any, Any]) -> bool:
        """The row binds exactly the indices of the inputs it binds (an optional one when present), each a
        positive size (a variadic one, a list of them)."""
        ok = True
        needed: dict[str, bool] = {}  # index -> variadic
        for t in sig.inputs:
            if not t.optional or t.name in present:
                needed.update((d.lstrip("*"), d.startswith("*")) for d in t.shape if is_ident(d.lstrip("*")))
        for k in given:
            if not isinstance(k, str) or k not in needed:
                self.defect("bad-workload", f"{path}.indices", f"{short(k)} is not an index of the bound inputs",
                            f"bind exactly: {', '.join(needed) or '(none)'}")
                ok = False
        for k, variadic in needed.items():
            if k not in given:
                self.defect("bad-workload", f"{path}.indices", f"index {k!r} is not bound",
                            f"add {k}: {'[d0, d1, ...]' if variadic else '<size>'}")
                ok = False
                continue
            v = given[k]
            good = (isinstance(v, list) and all(is_pos_int(x) for x in v)) if variadic else is_pos_int(v)
            if not good:
                self.defect("bad-workload", f"{path}.indices.{k}",
                            f"{k} = {short(v)} is not "
                            f"{'a list of positive integers' if variadic else 'a positive integer'}",
                            "bind sizes as positive integers")
                ok = False
        return ok

    def check_params(self, sig: Signature, path: str, params: dict[Any, Any]) -> bool:
        """The row's parameters are the signature's, each of its type, every required one bound."""
        ok = True
        for k, v in params.items():
            spec = self.params.get(k) if isinstance(k, str) else None
            if spec is None:
                self.defect("bad-workload", f"{path}.params", f"{short(k)} is not a parameter",
                            f"use one of: {', '.join(self.params) or '(none)'}")
                ok = False
            elif not value_fits(spec.type, v):
                self.defect("bad-workload", f"{path}.params.{k}", f"{short(v)} is not a {spec.type}",
                            f"give {k} a {spec.type}")
                ok = False
        for p in sig.params:
            if p.required and p.name not in params:
                self.defect("bad-workload", f"{path}.params", f"required parameter {p.name!r} is not bound",
                            f"add params: {{{p.name}: ...}} or give it a default")
                ok = False
        return ok

    def check_dtype_case(self, sig: Signature, cpath: str, case: Any, free: list[TensorSpec]) -> bool:
        """One dtype case: a dtype every free tensor allows, or a mapping choosing each free tensor's."""
        if isinstance(case, dict):
            return self.check_dtype_mapping(sig, cpath, case, free)
        if not isinstance(case, str):
            self.defect("bad-workload", cpath, f"a dtype case must be a name or a mapping, got {short(case)}",
                        "write bfloat16, or {x: bfloat16, ids: int64}")
            return False
        if case not in DTYPE_BITS:
            self.defect("bad-workload", cpath, f"dtype {short(case)} is unknown",
                        f"use dtypes from: {', '.join(DTYPE_BITS)}")
            return False
        ok = True
        for t in free:
            if case not in t.dtypes:
                self.defect("bad-workload", cpath,
                            f"dtype {case} is not allowed for {t.name} ({' | '.join(t.dtypes)})",
                            f"use a dtype in {t.name}'s union, or a mapping {{tensor: dtype}}")
                ok = False
        return ok

    def check_dtype_mapping(self, sig: Signature, cpath: str, case: dict[Any, Any], free: list[TensorSpec]) -> bool:
        ok = True
        for k, v in case.items():
            named = next((x for x in sig.tensors if x.name == k), None) if isinstance(k, str) else None
            if named is None or not named.is_free_dtype:
                self.defect("bad-workload", cpath, f"{short(k)} is not a tensor whose dtype a case chooses",
                            f"name one of: {', '.join(x.name for x in free) or '(none)'}")
                ok = False
            elif not isinstance(v, str) or v not in named.dtypes:
                self.defect("bad-workload", cpath, f"dtype {short(v)} is not allowed for {k}",
                            f"use one of: {' | '.join(named.dtypes)}")
                ok = False
        for t in free:
            if t.name not in case:
                self.defect("bad-workload", cpath, f"the case does not choose {t.name}'s dtype",
                            f"add {t.name}: <dtype>")
                ok = False
        return ok
