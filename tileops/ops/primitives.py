"""The primitive set: the only functions an inline roofline formula may call (§4.4.3).

This module is the single place a primitive is defined. The build-time
analysis reads ``PRIMITIVES`` to refuse unknown names (and to list the allowed
ones), the validator renders what the analysis says, and generated evaluators
call the implementations below by name at run time. Adding a primitive means
adding it here and nowhere else. It lives on the run-time side (``tileops.ops``)
because the generated code calls it; it imports nothing but the standard
library, so the analysis can read it anywhere.

Tensor-valued arguments (``bytes(t)``, ``present(t)``, ``bits(t)``) name a
tensor of the signature; codegen passes the checked call and the tensor's name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Iterable

#: Bit widths of every dtype the manifest may name. Packed dtypes count by carrier.
DTYPE_BITS: dict[str, int] = {
    "bool": 8,
    "int8": 8,
    "uint8": 8,
    "int16": 16,
    "int32": 32,
    "int64": 64,
    "float16": 16,
    "bfloat16": 16,
    "float32": 32,
    "float64": 64,
    "float8_e4m3fn": 8,
    "float8_e5m2": 8,
}


@dataclass(frozen=True)
class Primitive:
    """A callable the expression language exposes.

    ``impl`` is the function generated code calls (``_p.<impl name>``).
    ``tensor_arg`` marks primitives whose single argument is a tensor name, not
    a value; their ``impl`` takes the checked call and the tensor's name.
    """

    name: str
    arity: tuple[int, int | None]  # (min, max); None = variadic
    doc: str
    impl: Callable[..., Any]
    tensor_arg: bool = False


def _flatten(args: Iterable[Any]) -> list[int]:
    out: list[int] = []
    for a in args:
        if isinstance(a, (tuple, list)):
            out.extend(_flatten(a))
        else:
            out.append(a)
    return out


def prod(*args: Any) -> int:
    """Product of its arguments; tuples (variadic indices) are flattened. prod() == 1."""
    return math.prod(_flatten(args))


def total(*args: Any) -> int:
    """Sum of its arguments; tuples are flattened."""
    return sum(_flatten(args))


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def min_(*args: Any) -> Any:
    return min(_flatten(args))


def max_(*args: Any) -> Any:
    return max(_flatten(args))


def ceil(x: float) -> int:
    return math.ceil(x)


def floor(x: float) -> int:
    return math.floor(x)


def log2(x: float) -> float:
    return math.log2(x)


def rank(t: Any) -> int:
    """Number of dims of a variadic index (a tuple)."""
    return len(t) if isinstance(t, (tuple, list)) else 1


def broadcast(*shapes: Any) -> tuple[int, ...]:
    """The broadcast of several shapes (tuples), NumPy rules. Used in output shapes."""
    tuples = [tuple(s) if isinstance(s, (tuple, list)) else (s,) for s in shapes]
    n = max((len(s) for s in tuples), default=0)
    out: list[int] = []
    for i in range(n):
        dims = {s[len(s) - n + i] for s in tuples if len(s) - n + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ValueError(f"shapes {tuples} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def bits(dtype_name: str) -> int:
    """Bits of a dtype name. Codegen resolves ``bits(t)`` to the call's dtype of t."""
    return DTYPE_BITS[dtype_name]


# --- tensor-argument primitives, evaluated against a checked call ------------------


def tensor_bytes(call: Any, name: str) -> int:
    """bytes(t): the byte size of tensor t in this call; 0 when t is absent."""
    return call.nbytes(name)


def present(call: Any, name: str) -> bool:
    """present(t): whether optional tensor t is bound in this call."""
    return call.is_present(name)


def tensor_bits(call: Any, name: str) -> int:
    """bits(t): the bit width of t's dtype (or of a dtype parameter) in this call."""
    return bits(call.dtype_of(name))


#: Every primitive, by manifest name, with its implementation (generated code calls ``impl``).
PRIMITIVES: dict[str, Primitive] = {
    p.name: p
    for p in [
        Primitive("prod", (0, None), "product of the arguments; variadic indices flatten", prod),
        Primitive("sum", (0, None), "sum of the arguments; variadic indices flatten", total),
        Primitive("ceil_div", (2, 2), "ceil(a / b) for integers", ceil_div),
        Primitive("min", (1, None), "smallest argument", min_),
        Primitive("max", (1, None), "largest argument", max_),
        Primitive("ceil", (1, 1), "round up to an integer", ceil),
        Primitive("floor", (1, 1), "round down to an integer", floor),
        Primitive("log2", (1, 1), "base-2 logarithm", log2),
        Primitive("rank", (1, 1), "number of dims in a variadic index", rank),
        Primitive("broadcast", (1, None), "broadcast of several shapes (output shapes)", broadcast),
        Primitive("bytes", (1, 1), "byte size of a tensor in the call (0 if absent)", tensor_bytes, tensor_arg=True),
        Primitive("bits", (1, 1), "bit width of a tensor's dtype or a dtype parameter", tensor_bits, tensor_arg=True),
        Primitive("present", (1, 1), "whether an optional tensor is bound", present, tensor_arg=True),
    ]
}


def allowed_names() -> str:
    """The allowed primitive names, for refusal messages."""
    return ", ".join(sorted(PRIMITIVES))


#: The largest count a formula may yield: a record stores it as a signed 64-bit integer, and no
#: single call moves or computes 9.2e18 of anything on any device.
COUNT_LIMIT = 2**63 - 1


def count(value: Any, what: str) -> int:
    """Turn a formula's value into the integer count the output contract requires (§2.1).

    Generated evaluators call this on every flops/bytes value: a fractional,
    negative, non-finite or out-of-range count is a formula error and is
    raised, not rounded or clipped.
    """
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ValueError(f"{what} = {value!r} is not a whole number")
        value = int(value)
    if not isinstance(value, int):
        raise ValueError(f"{what} = {value!r} is not a number")
    if value < 0:
        raise ValueError(f"{what} = {value} is negative")
    if value > COUNT_LIMIT:
        raise ValueError(f"{what} is a {value.bit_length()}-bit integer, above the largest count a record "
                         "holds (2**63 - 1)")
    return value
