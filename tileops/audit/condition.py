"""An EXEMPT ``when``: a condition over one call, in the manifest's expression language.

The form is the manifest's own (``tileops.manifest.expr.parse``: numbers,
``True``/``False``, names, arithmetic, comparisons, ``and``/``or``/``not``,
``a if c else b``, and the primitives of ``tileops.ops.primitives``), and
names resolve as a formula's do: the op's indices (dims of its input shapes,
variadic ones as tuples), its non-dtype parameters and lets; tensors only
inside ``bytes()``, ``bits()`` and ``present()``. Two rules are added: the
whole expression must be a condition (a comparison, ``and``/``or``/``not`` of
conditions, ``present(t)``, ``True``/``False``, or ``c if t else d`` of
conditions), and ``present()`` names an optional input.

A ``when`` is not a formula: it prices nothing, it only says whether the
measured call lies inside an exception. It is evaluated by walking the tree
the checker accepted, with the primitives' one implementation; nothing is
compiled or handed to ``eval``. A name the call did not bind (a dim of an
absent optional tensor) makes the condition unevaluable, which never exempts.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

from tileops.manifest import expr
from tileops.ops.primitives import PRIMITIVES
from tileops.ops.spec import Signature

_BIN: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_CMP: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}


class ConditionError(Exception):
    """A checked condition that cannot be evaluated on this call (an unbound name, a division by zero)."""


@dataclass(frozen=True)
class Scope:
    """What a ``when`` over one op may name."""

    op: str
    values: frozenset[str]  # indices, non-dtype parameters, lets
    tensors: dict[str, bool]  # tensor name -> optional
    dtype_params: frozenset[str]

    @classmethod
    def of(cls, op: str, sig: Signature) -> Scope:
        dims = {d[1:] if d.startswith("*") else d for t in sig.inputs for d in t.shape if not d.isdigit()}
        params = {p.name for p in sig.params if p.type != "dtype"}
        return cls(op=op, values=frozenset(dims | params | {n for n, _ in sig.lets}),
                   tensors={t.name: t.optional for t in sig.tensors},
                   dtype_params=frozenset(p.name for p in sig.params if p.type == "dtype"))


@dataclass(frozen=True)
class Condition:
    """A ``when`` the checker accepted."""

    source: str
    tree: ast.expr

    def holds(self, call: Any) -> bool:
        """Whether the call lies inside the condition; ConditionError when it cannot be decided."""
        value = _eval(self.tree, call)
        if not isinstance(value, bool):  # the form check makes this unreachable; keep it failing closed
            raise ConditionError(f"`{self.source}` gave {value!r}, not True or False")
        return value


def _is_condition(node: ast.expr) -> bool:
    if isinstance(node, ast.Compare):
        return True
    if isinstance(node, ast.BoolOp):
        return all(_is_condition(v) for v in node.values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _is_condition(node.operand)
    if isinstance(node, ast.Constant):
        return isinstance(node.value, bool)
    if isinstance(node, ast.IfExp):
        return _is_condition(node.body) and _is_condition(node.orelse)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "present"


def check(source: str, scope: Scope) -> tuple[Condition | None, list[str]]:
    """The condition, or None and every problem found (each with its fix), never raising."""
    if not isinstance(source, str) or not source.strip():
        return None, ["`when` must be a non-empty expression, e.g. \"prod(T) == 1\""]
    parsed = expr.parse(source)
    problems = [f"{p.message}; fix: {p.fix}" for p in parsed.problems]
    if parsed.tree is None:
        return None, problems
    allowed = sorted(scope.values)
    for name in sorted(parsed.names - scope.values):
        hint = " (a tensor: name it only inside bytes(), bits() or present())" if name in scope.tensors else ""
        problems.append(f"{name!r} is not an index, parameter or let of {scope.op}{hint}; allowed names: "
                        f"{', '.join(allowed) or '(none)'}; primitives: {', '.join(sorted(PRIMITIVES))}")
    for prim, refs in sorted(parsed.tensor_refs.items()):
        for ref in sorted(refs):
            if prim == "bits" and ref in scope.dtype_params:
                continue
            if ref not in scope.tensors:
                problems.append(f"{prim}({ref}): {ref!r} is not a tensor of {scope.op}; tensors: "
                                f"{', '.join(scope.tensors)}")
            elif prim == "present" and not scope.tensors[ref]:
                problems.append(f"present({ref}): {ref!r} is not optional, so it is always present; drop present()")
    if not problems and not _is_condition(parsed.tree):
        problems.append(f"`{source.strip()}` is a value, not a condition: write a comparison, and/or/not of "
                        "comparisons, or present(t), e.g. \"prod(T) == 1\"")
    return (None, problems) if problems else (Condition(source.strip(), parsed.tree), [])


def _eval(node: ast.AST, call: Any) -> Any:
    """Evaluate a checked tree over a call (CheckedCall or CallFacts): the node kinds ``check`` accepts, only."""
    evaluate = _EVAL.get(type(node))
    if evaluate is None:
        raise _not_checked(node)
    return evaluate(node, call)


def _not_checked(node: ast.AST) -> ConditionError:
    return ConditionError(f"{type(node).__name__} is not part of a checked condition")


def _eval_constant(node: ast.Constant, call: Any) -> Any:
    if isinstance(node.value, (bool, int, float)):
        return node.value
    raise _not_checked(node)


def _eval_name(node: ast.Name, call: Any) -> Any:
    try:
        return call.indices[node.id]
    except KeyError:
        raise ConditionError(f"{node.id!r} is not bound in this call (its tensor is absent)") from None


def _eval_binop(node: ast.BinOp, call: Any) -> Any:
    op = _BIN.get(type(node.op))
    if op is None:
        raise _not_checked(node)
    left, right = _eval(node.left, call), _eval(node.right, call)
    try:
        return op(left, right)
    except (ZeroDivisionError, TypeError, OverflowError) as exc:
        raise ConditionError(f"{ast.unparse(node)}: {exc}") from None


def _eval_unary(node: ast.UnaryOp, call: Any) -> Any:
    v = _eval(node.operand, call)
    if isinstance(node.op, ast.Not):
        return not v
    if isinstance(node.op, ast.USub):
        return -v
    if isinstance(node.op, ast.UAdd):
        return +v
    raise _not_checked(node)


def _eval_boolop(node: ast.BoolOp, call: Any) -> Any:
    if isinstance(node.op, ast.And):
        return all(_eval(v, call) for v in node.values)  # short-circuits: present(b) and N > 4
    return any(_eval(v, call) for v in node.values)


def _eval_compare(node: ast.Compare, call: Any) -> Any:
    if not all(type(o) in _CMP for o in node.ops):
        raise _not_checked(node)
    left = _eval(node.left, call)
    for o, comp in zip(node.ops, node.comparators):
        right = _eval(comp, call)
        try:
            if not _CMP[type(o)](left, right):
                return False
        except TypeError as exc:
            raise ConditionError(f"{ast.unparse(node)}: {exc}") from None
        left = right
    return True


def _eval_ifexp(node: ast.IfExp, call: Any) -> Any:
    return _eval(node.body, call) if _eval(node.test, call) else _eval(node.orelse, call)


def _eval_call(node: ast.Call, call: Any) -> Any:
    if not (isinstance(node.func, ast.Name) and node.func.id in PRIMITIVES):
        raise _not_checked(node)
    name = node.func.id
    if PRIMITIVES[name].tensor_arg:
        arg = node.args[0]
        assert isinstance(arg, ast.Name)
        try:
            return PRIMITIVES[name].impl(call, arg.id)
        except KeyError as exc:
            raise ConditionError(f"{name}({arg.id}): {exc}") from None
    try:
        return PRIMITIVES[name].impl(*(_eval(a, call) for a in node.args))
    except (ValueError, TypeError, ZeroDivisionError) as exc:
        raise ConditionError(f"{ast.unparse(node)}: {exc}") from None


#: How each node kind a checked condition holds is evaluated (any other kind is refused).
_EVAL: dict[type, Callable[[Any, Any], Any]] = {
    ast.Constant: _eval_constant, ast.Name: _eval_name, ast.BinOp: _eval_binop, ast.UnaryOp: _eval_unary,
    ast.BoolOp: _eval_boolop, ast.Compare: _eval_compare, ast.IfExp: _eval_ifexp, ast.Call: _eval_call,
}
