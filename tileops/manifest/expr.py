"""The manifest expression language: parse, form-check, and translate to Python.

Expressions are a small subset of Python's expression grammar: integer and
float literals, ``True``/``False``, names, ``+ - * / // % **``, unary ``-``,
comparisons, ``and``/``or``/``not``, ``a if cond else b`` and calls to the
primitives of :mod:`tileops.ops.primitives`. Everything else (attributes,
subscripts, strings, lambdas, comprehensions, keyword arguments) is refused.

Parsing is bounded, so any string gives problems rather than an exception or
a hang (§4.4 "total"): a formula longer than ``MAX_CHARS``, deeper than
``MAX_DEPTH`` or larger than ``MAX_NODES`` is refused before anything recurses
over it; literals are finite and within ``MAX_LITERAL``; constant
subexpressions are folded with their size bounded, and the exponent of ``**``
is a constant of magnitude at most ``MAX_EXPONENT`` (``10**10**10`` is a
defect here, not a hang in ``tileops ops``).

This module is manifest tooling: it parses formula strings once, before
emission (§4.4.5). Generated evaluators never import it.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

from tileops.ops.primitives import PRIMITIVES, allowed_names

#: Bounds on a formula (real ones are a few dozen nodes deep and wide).
MAX_CHARS = 2000
MAX_DEPTH = 40
MAX_NODES = 400
#: Largest magnitude of a literal or a folded constant, and of a power's exponent.
MAX_LITERAL = 2**64
MAX_EXPONENT = 64

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


def _excerpt(source: str) -> str:
    return repr(source) if len(source) <= 80 else repr(source[:77]) + "..."


def _too_complex(message: str) -> ExprProblem:
    return ExprProblem("too-complex", message,
                       "write a shorter formula: name repeated subexpressions with let, or move Python "
                       "logic into a func formula (tileops/ops/formulas.py)")


def _shape_problem(tree: ast.AST) -> ExprProblem | None:
    """Depth and size of the tree, measured without recursion."""
    stack = [(tree, 1)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if depth > MAX_DEPTH:
            return _too_complex(f"the formula nests deeper than {MAX_DEPTH} levels")
        if nodes > MAX_NODES:
            return _too_complex(f"the formula has more than {MAX_NODES} parts")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return None


def parse(source: str) -> ParsedExpr:
    """Parse and form-check an expression. Never raises, whatever the string; problems are collected."""
    text = source.strip()
    if len(text) > MAX_CHARS:
        return ParsedExpr(source, None, problems=[_too_complex(
            f"the formula is {len(text)} characters long, more than {MAX_CHARS}")])
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes, an over-long integer literal
        msg = getattr(exc, "msg", None) or str(exc)
        return ParsedExpr(source, None, problems=[ExprProblem(
            "syntax", f"does not parse: {msg} in {_excerpt(source)}",
            "write an arithmetic expression over indices and primitives, e.g. \"2 * M * N * K\"")])
    except (RecursionError, MemoryError):
        return ParsedExpr(source, None, problems=[_too_complex("the formula nests too deeply to parse")])
    shape = _shape_problem(tree)
    if shape is not None:
        return ParsedExpr(source, None, problems=[shape])
    out = ParsedExpr(source, tree)
    _check(tree, out)
    _fold(tree, out)
    return out


# --- constants: finite, bounded, and folded with their size bounded ---------------------------------

_NOT_CONSTANT = object()


def _bad_constant(out: ParsedExpr, message: str) -> None:
    out.problems.append(ExprProblem(
        "bad-constant", message,
        f"use finite constants below 2**64 and powers with a constant exponent of at most {MAX_EXPONENT}"))


def _in_range(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value) and abs(value) < MAX_LITERAL
    return isinstance(value, int) and abs(value) < MAX_LITERAL


def _fold(node: ast.AST, out: ParsedExpr) -> object:
    """The value of a constant subexpression (checked and bounded), or _NOT_CONSTANT.

    Recursion is safe: the tree's depth is already bounded by MAX_DEPTH.
    """
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, (int, float)) and not _in_range(v):
            _bad_constant(out, f"literal {_excerpt(ast.unparse(node))} is not a finite number below 2**64")
            return _NOT_CONSTANT
        return v if isinstance(v, (int, float)) else _NOT_CONSTANT
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        folded = _fold(node.operand, out)
        if not isinstance(folded, (int, float)):  # _NOT_CONSTANT: folds are numbers or that
            return _NOT_CONSTANT
        return -folded if isinstance(node.op, ast.USub) else folded
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _fold_binop(node, _fold(node.left, out), _fold(node.right, out), out)
    for child in ast.iter_child_nodes(node):  # not constant itself: still check what is inside
        _fold(child, out)
    return _NOT_CONSTANT


def _fold_binop(node: ast.BinOp, left: object, right: object, out: ParsedExpr) -> object:
    """A binary operation on its folded operands: its value when both are constant and it is bounded; a
    power's exponent must be a small constant and a divisor not a constant zero even when the rest is not."""
    if isinstance(node.op, ast.Pow) and not _exponent_bounded(node, right, out):
        return _NOT_CONSTANT
    if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right is not _NOT_CONSTANT and right == 0:
        _bad_constant(out, f"{_excerpt(ast.unparse(node))} divides by zero")
        return _NOT_CONSTANT
    if left is _NOT_CONSTANT or right is _NOT_CONSTANT:
        return _NOT_CONSTANT
    try:  # both operands are below 2**64 and any exponent is at most 64: this is cheap
        value = _APPLY[type(node.op)](left, right)
    except ZeroDivisionError:
        _bad_constant(out, f"{_excerpt(ast.unparse(node))} divides by zero")
        return _NOT_CONSTANT
    except (OverflowError, ValueError, TypeError) as exc:
        _bad_constant(out, f"{_excerpt(ast.unparse(node))} cannot be computed: {exc}")
        return _NOT_CONSTANT
    if isinstance(value, complex) or not _in_range(value):
        _bad_constant(out, f"{_excerpt(ast.unparse(node))} is not a finite number below 2**64")
        return _NOT_CONSTANT
    return value


def _exponent_bounded(node: ast.BinOp, right: object, out: ParsedExpr) -> bool:
    """A power's exponent is a constant of at most MAX_EXPONENT (else a problem says which)."""
    if not isinstance(right, (int, float)):  # _NOT_CONSTANT
        out.problems.append(ExprProblem(
            "bad-constant", f"the exponent of {_excerpt(ast.unparse(node))} is not a constant",
            f"raise to a constant power of at most {MAX_EXPONENT}, or write the product out"))
        return False
    if abs(right) > MAX_EXPONENT:
        _bad_constant(out, f"the exponent of {_excerpt(ast.unparse(node))} is {right!r}, "
                           f"more than {MAX_EXPONENT}")
        return False
    return True


#: The folds' operations, on the ints and floats _fold has checked (Any: either, in any pairing).
_APPLY: dict[type, Callable[[Any, Any], object]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a ** b,
}


def _check(node: ast.AST, out: ParsedExpr) -> None:
    if isinstance(node, ast.Constant):
        number = isinstance(node.value, (int, float)) and not isinstance(node.value, complex)
        if isinstance(node.value, bool) or number:
            return
        out.problems.append(ExprProblem(
            "bad-form", f"literal {node.value!r} is not a number",
            "use integer or float literals only; name tensors inside bytes(), bits() or present()"))
    elif isinstance(node, ast.Name):
        out.names.add(node.id)
    elif isinstance(node, ast.Call):
        _check_call(node, out)
    else:
        operands = _operands(node)
        if operands is None:
            out.problems.append(ExprProblem(
                "bad-form", f"{type(node).__name__} is not allowed in a formula ({ast.unparse(node)!r})",
                "use arithmetic, comparisons, 'a if c else b' and primitive calls only"))
            return
        for sub in operands:
            _check(sub, out)


def _operands(node: ast.AST) -> list[ast.expr] | None:
    """The sub-expressions of a compound form the language allows (arithmetic, comparisons, boolean
    operators, 'a if c else b'), in order; None for any other form."""
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
        return [node.operand]
    if isinstance(node, ast.BoolOp):
        return list(node.values)
    if isinstance(node, ast.Compare) and all(type(o) in _CMPOPS for o in node.ops):
        return [node.left, *node.comparators]
    if isinstance(node, ast.IfExp):
        return [node.test, node.body, node.orelse]
    return None


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
            fn = prim.impl.__name__
            if prim.tensor_arg:
                arg = n.args[0]
                assert isinstance(arg, ast.Name)
                return f"_p.{fn}({call_var}, {arg.id!r})"
            return f"_p.{fn}(" + ", ".join(r(a) for a in n.args) + ")"
        raise AssertionError(f"unchecked node {ast.dump(n)}")  # analysis refuses these first

    return r(tree)
