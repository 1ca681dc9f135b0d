"""The manifest expression language: parse, form-check, and translate to Python.

Expressions are a small subset of Python's expression grammar: integer and
float literals, ``True``/``False``, names, ``+ - * / // % **``, unary ``-``,
comparisons, ``and``/``or``/``not``, ``a if cond else b`` and calls to the
primitives of :mod:`tileops.manifest.primitives`. Everything else (attributes,
subscripts, strings, lambdas, comprehensions, keyword arguments) is refused.

This module is manifest tooling: it parses formula strings once, before
emission (§4.4.5). Generated evaluators never import it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Callable

from tileops.manifest.primitives import PRIMITIVES, VALUE_IMPLS, allowed_names

_BINOPS: dict[type, str] = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/",
    ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
}
_CMPOPS: dict[type, str] = {
    ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
}


@dataclass
class ExprProblem:
    code: str  # syntax | bad-form | unknown-function | bad-arity | tensor-arg | unknown-name
    message: str
    fix: str


@dataclass
class ParsedExpr:
    """A parsed expression with what it references. ``tree`` is None on a syntax error."""

    source: str
    tree: ast.expr | None
    names: set[str] = field(default_factory=set)  # value names (indices, params, lets)
    tensor_refs: dict[str, set[str]] = field(default_factory=dict)  # primitive -> tensor names
    problems: list[ExprProblem] = field(default_factory=list)


def parse(source: str) -> ParsedExpr:
    """Parse and form-check an expression. Never raises; problems are collected."""
    try:
        tree = ast.parse(source.strip(), mode="eval").body
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes
        msg = getattr(exc, "msg", str(exc))
        return ParsedExpr(source, None, problems=[ExprProblem(
            "syntax", f"does not parse: {msg} in {source!r}",
            "write an arithmetic expression over indices and primitives, e.g. \"2 * M * N * K\"")])
    out = ParsedExpr(source, tree)
    _check(tree, out)
    return out


def _check(node: ast.AST, out: ParsedExpr) -> None:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or (isinstance(node.value, (int, float)) and not isinstance(node.value, complex)):
            return
        out.problems.append(ExprProblem(
            "bad-form", f"literal {node.value!r} is not a number",
            "use integer or float literals only; name tensors inside bytes(), bits() or present()"))
    elif isinstance(node, ast.Name):
        out.names.add(node.id)
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        _check(node.left, out)
        _check(node.right, out)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
        _check(node.operand, out)
    elif isinstance(node, ast.BoolOp):
        for v in node.values:
            _check(v, out)
    elif isinstance(node, ast.Compare) and all(type(o) in _CMPOPS for o in node.ops):
        _check(node.left, out)
        for c in node.comparators:
            _check(c, out)
    elif isinstance(node, ast.IfExp):
        for sub in (node.test, node.body, node.orelse):
            _check(sub, out)
    elif isinstance(node, ast.Call):
        _check_call(node, out)
    else:
        out.problems.append(ExprProblem(
            "bad-form", f"{type(node).__name__} is not allowed in a formula ({ast.unparse(node)!r})",
            "use arithmetic, comparisons, 'a if c else b' and primitive calls only"))


def _check_call(node: ast.Call, out: ParsedExpr) -> None:
    if not isinstance(node.func, ast.Name):
        out.problems.append(ExprProblem(
            "bad-form", f"only primitives can be called, not {ast.unparse(node.func)!r}",
            f"call one of: {allowed_names()}"))
        return
    name = node.func.id
    prim = PRIMITIVES.get(name)
    if prim is None:
        out.problems.append(ExprProblem(
            "unknown-function", f"{name}() is not a primitive",
            f"call one of the allowed names: {allowed_names()}"))
        for a in node.args:
            _check(a, out)
        return
    if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
        out.problems.append(ExprProblem(
            "bad-form", f"{name}() takes positional arguments only",
            f"write {name}(a, b, ...)"))
    lo, hi = prim.arity
    n = len(node.args)
    if n < lo or (hi is not None and n > hi):
        want = f"{lo}" if lo == hi else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
        out.problems.append(ExprProblem(
            "bad-arity", f"{name}() takes {want} argument(s), got {n}",
            f"{name}: {prim.doc}"))
    if prim.tensor_arg:
        for a in node.args:
            if isinstance(a, ast.Name):
                out.tensor_refs.setdefault(name, set()).add(a.id)
            else:
                out.problems.append(ExprProblem(
                    "tensor-arg", f"{name}() takes a tensor name, got {ast.unparse(a)!r}",
                    f"write {name}(x) where x is a tensor of the signature"))
        return
    for a in node.args:
        if not isinstance(a, ast.Starred):
            _check(a, out)


# --- translation to plain Python (codegen) ------------------------------------------


def to_python(tree: ast.expr, name_ref: Callable[[str], str], call_var: str = "call") -> str:
    """Render a checked expression as Python source.

    ``name_ref`` maps a value name to the Python expression reading it (e.g.
    ``ix["M"]``). Primitive calls become calls into ``_p`` (the primitives module).
    """

    def r(n: ast.AST) -> str:
        if isinstance(n, ast.Constant):
            return repr(n.value)
        if isinstance(n, ast.Name):
            return name_ref(n.id)
        if isinstance(n, ast.BinOp):
            return f"({r(n.left)} {_BINOPS[type(n.op)]} {r(n.right)})"
        if isinstance(n, ast.UnaryOp):
            op = {ast.USub: "-", ast.UAdd: "+", ast.Not: "not "}[type(n.op)]
            return f"({op}{r(n.operand)})"
        if isinstance(n, ast.BoolOp):
            j = " and " if isinstance(n.op, ast.And) else " or "
            return "(" + j.join(r(v) for v in n.values) + ")"
        if isinstance(n, ast.Compare):
            parts = [r(n.left)]
            for o, c in zip(n.ops, n.comparators):
                parts += [_CMPOPS[type(o)], r(c)]
            return "(" + " ".join(parts) + ")"
        if isinstance(n, ast.IfExp):
            return f"({r(n.body)} if {r(n.test)} else {r(n.orelse)})"
        if isinstance(n, ast.Call):
            assert isinstance(n.func, ast.Name)
            prim = PRIMITIVES[n.func.id]
            if prim.tensor_arg:
                fn = {"bytes": "tensor_bytes", "bits": "tensor_bits", "present": "present"}[prim.name]
                arg = n.args[0]
                assert isinstance(arg, ast.Name)
                return f"_p.{fn}({call_var}, {arg.id!r})"
            fn = VALUE_IMPLS[prim.name].__name__
            return f"_p.{fn}(" + ", ".join(r(a) for a in n.args) + ")"
        raise AssertionError(f"unchecked node {ast.dump(n)}")  # analysis refuses these first

    return r(tree)
