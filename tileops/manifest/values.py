"""What counts as a value of the manifest's format: a name, a text, a size, a parameter's value; and a
value quoted in a message, bounded whatever YAML produced."""

from __future__ import annotations

import keyword
import math
import re
import reprlib
from typing import Any

from tileops.ops.primitives import DTYPE_BITS

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DIGITS = re.compile(r"^[0-9]{1,18}$")  # ASCII digits only: "١٢" or "²" is not a dim
#: The largest index size or integer a workload row may bind (a dim a tensor library can index).
MAX_INDEX = 2**62


def is_text(v: Any) -> bool:
    return isinstance(v, str) and v.strip() != ""


def is_ident(v: Any) -> bool:
    return isinstance(v, str) and bool(IDENT.match(v)) and not keyword.iskeyword(v)


def is_pos_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_INDEX


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 4, 4, 50, 50, 40


def short(v: Any) -> str:
    """A bounded repr: whatever the value (deeply nested, huge, aliased many times), a short string."""
    s = _REPR.repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def value_fits(ptype: str, v: Any) -> bool:
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
