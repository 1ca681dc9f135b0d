"""Contract objects straight from JSON bytes, for readers of many records (``tileops roofline``, ``export``, ``serve``).

The records contract (``tileops.records``) is standard-library dataclasses
checked field by field, which is what the benchmark layer may use (§5.2) and
what words every error. Read that way a record cost about 45 µs on the
development VM; msgspec parses a line and checks its types and bounds in C in
about 3 µs, and copying the result into the contract classes about 8 more.
So each contract class gets a *mirror*: a msgspec Struct with the same fields,
the same types, the same bounds (``field(metadata=...)`` becomes
``msgspec.Meta``), unknown fields refused; a decoded mirror is then copied into
the contract class. A line the mirror refuses is not an error here: the caller
reads it the standard way, which accepts it after all (msgspec refuses a lone
surrogate that ``json`` reads) or words the error with file, line and field.
So this reader only ever accepts what the field decoder accepts, and builds
the same object (``tests/test_records.py`` holds both alike over every
one-value mutation of a record).

The mirror differs where msgspec's reading could differ from the contract's:
times stay strings and go through the contract's own parser. An
object that repeats across a file's rows (a run's environment) is kept as its
raw bytes and decoded once per distinct text, so the rows share one instance.

msgspec is imported here only: the benchmark layer never imports this module
(``tests/test_architecture.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from datetime import datetime
from typing import Annotated, Any, Callable, Literal

import msgspec

from tileops import records

#: A line's object, or None: the mirror declines it and the standard reader decides.
LineReader = Callable[[bytes], Any]

#: Distinct texts a repeating object's memo keeps (a run has one environment per device).
SHARED_LIMIT = 64

_NONE = type(None)
_READERS: dict[type, LineReader | None] = {}


class _Unmirrored(TypeError):
    """A field type the mirror does not carry: that class is read the standard way."""


def line_reader(cls: type) -> LineReader | None:
    """A function reading one JSON line into ``cls`` (None where it declines), or None for a class with a
    field type the mirror cannot carry."""
    if cls not in _READERS:
        try:
            struct, convert = _mirror(cls)
        except _Unmirrored:
            _READERS[cls] = None
        else:
            decode = msgspec.json.Decoder(struct).decode
            error = msgspec.MsgspecError

            def read(raw: bytes) -> Any:
                try:
                    return convert(decode(raw))
                except (error, ValueError):  # ValueError: a time the contract's parser refuses
                    return None

            _READERS[cls] = read
    return _READERS[cls]


def _bounded(kind: type, meta: dict[str, Any]) -> Any:
    """``kind`` with the field's bounds. A float needs no bound to be finite: msgspec refuses a number beyond
    float's range (and JSON has no NaN), where the contract refuses the infinity it would become."""
    bounds = {k: meta[k] for k in ("gt", "ge", "le") if meta.get(k) is not None}
    return Annotated[kind, msgspec.Meta(**bounds)] if bounds else kind


_Convert = Callable[[Any], Any]


def _field(tp: Any, meta: dict[str, Any]) -> tuple[Any, _Convert | None]:
    """The mirror's type for a contract field's annotation, and how its decoded value becomes the contract's."""
    origin = typing.get_origin(tp)
    if tp is Any or tp is str or tp is bool:
        return tp, None  # msgspec reads only finite floats, so an Any holds no NaN or infinity
    if tp is int or tp is float:
        return _bounded(tp, meta), None
    if tp is datetime:
        return str, records.parse_time
    if origin is Literal and all(type(a) is str for a in typing.get_args(tp)):
        return tp, None
    if origin in (typing.Union, types.UnionType):
        inner_tp = [a for a in typing.get_args(tp) if a is not _NONE]
        if len(inner_tp) != 1:
            raise _Unmirrored(tp)
        inner, conv = _field(inner_tp[0], meta)
        if conv is None:
            return inner | None, None
        return inner | None, lambda v: None if v is None else conv(v)
    if origin is list or origin is dict:
        args = typing.get_args(tp)
        if origin is dict and args[0] is not str:
            raise _Unmirrored(tp)
        inner, conv = _field(args[-1], {})
        if conv is not None:  # a container of times or contract objects: not in the contract today
            raise _Unmirrored(tp)
        return (list[inner] if origin is list else dict[str, inner]), None  # type: ignore[valid-type]
    if dataclasses.is_dataclass(tp):
        return _mirror(tp)
    raise _Unmirrored(tp)


@functools.cache
def _mirror(cls: type) -> tuple[type, _Convert]:
    """``cls``'s mirror Struct and the function copying a decoded one into ``cls``."""
    hints = typing.get_type_hints(cls)
    fields: list[tuple] = []
    converts: list[tuple[str, _Convert]] = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp) and getattr(tp, "repeats_across_rows", False):
            struct_tp, conv = msgspec.Raw, _shared(*_mirror(tp))
        else:
            struct_tp, conv = _field(tp, dict(f.metadata))
        if f.default is not dataclasses.MISSING:
            fields.append((f.name, struct_tp, f.default))
        elif f.default_factory is not dataclasses.MISSING:
            fields.append((f.name, struct_tp, msgspec.field(default_factory=f.default_factory)))
        else:
            fields.append((f.name, struct_tp))
        if conv is not None:
            converts.append((f.name, conv))
    struct = msgspec.defstruct(f"Mirror{cls.__name__}", fields, kw_only=True, gc=False,
                               forbid_unknown_fields=not getattr(cls, "ignore_unknown", False))
    asdict = msgspec.structs.asdict  # the fields in order, not recursive
    # Building the instance without __init__ is the same object only for a plain dataclass.
    plain = not hasattr(cls, "__post_init__") and not hasattr(cls, "__slots__")
    new, set_dict = object.__new__, object.__setattr__

    def convert(s: Any) -> Any:
        values = asdict(s)
        for name, conv in converts:
            values[name] = conv(values[name])
        if not plain:
            return cls(**values)
        obj = new(cls)
        set_dict(obj, "__dict__", values)  # what the frozen __init__ would set
        return obj

    return struct, convert


def _shared(struct: type, convert: _Convert) -> _Convert:
    """Decode a repeating object's raw bytes once per distinct text (rows then share one instance)."""
    decode = msgspec.json.Decoder(struct).decode
    memo: dict[bytes, Any] = {}

    def from_raw(raw: msgspec.Raw) -> Any:
        key = bytes(raw)
        hit = memo.get(key)
        if hit is None:
            hit = convert(decode(key))  # raises for an invalid object: nothing is remembered
            if len(memo) < SHARED_LIMIT:
                memo[key] = hit
        return hit

    return from_raw
