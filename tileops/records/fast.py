"""msgspec's mirror of the records contract: the fast path of ``tileops.records.decode.line_decoder``.

The records contract (``tileops.records.contract``) is standard-library
dataclasses checked field by field (``tileops.records.decode``), which is what
the benchmark layer may use (§5.2) and what words every error. msgspec parses a
line and checks its types and bounds in C, several times faster (docs/roofline.md
gives the figures). So each contract class gets a *mirror*: a msgspec Struct
with the same fields, the same types, the same bounds (``field(metadata=...)``
becomes ``msgspec.Meta``), unknown fields refused; a decoded mirror is then
copied into the contract class. A line the mirror refuses is not an error here:
it goes to the standard decoder, which accepts it after all or words the error
with file, line and field (a lone surrogate, which msgspec refuses and ``json``
reads, is refused there too). So this reader only ever accepts what the field
decoder accepts, and builds the same object (``tests/test_records.py`` holds
both alike over every one-value mutation of a record).

The mirror differs where msgspec's reading could differ from the contract's:
times stay strings and go through the contract's own parser; a key given twice
(msgspec keeps the last) is caught by counting the line's members against the
keys decoded (:func:`line_reader`). An object that repeats across a file's rows
(a run's environment) is kept as its raw bytes and decoded once per distinct
text, so the rows share one instance.

msgspec is optional (the ``fast`` extra) and imported here only;
``tileops.records.decode`` imports this module when a reader is asked for, and
the benchmark layer never does (``tests/test_architecture.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from datetime import datetime
from typing import Annotated, Any, Literal
from collections.abc import Callable

import msgspec

from tileops.records.times import parse_time

#: A line's object (or None for a blank line, from the standard reader).
LineReader = Callable[[bytes], Any]

#: Distinct texts a repeating object's memo keeps (a run has one environment per device).
SHARED_LIMIT = 64

_NONE = type(None)
#: Each class's strict and lenient decoders with their builders (None: the class is not mirrored).
_READERS: dict[type, _Readers | None] = {}
#: The lenient mirror's default for a field with one: tells a key left out (the contract's default then
#: applies) from one given.
_ABSENT = msgspec.UNSET
#: The key-and-colon of a JSON object member as the writers put it (no space before the colon).
_MEMBER = b'":'


class _Unmirrored(TypeError):
    """A field type the mirror does not carry: that class is read the standard way."""


def line_reader(cls: type, declined: LineReader) -> LineReader | None:
    """A function reading one JSON line into ``cls``, handing a line the mirror declines to ``declined`` (the
    standard reader); None for a class with a field type the mirror cannot carry.

    msgspec keeps the last of a key given twice, where the contract refuses the line (JSON readers disagree
    on which value counts). So a line is taken only when its members (``":``, counted in C) are exactly the
    keys the decoded object holds; a duplicate, a ``":`` inside a string or a space before a colon makes the
    counts differ, and the standard reader decides that line. Every key is usually there (the bench writes
    them all): a strict mirror reads such a line, and a line leaving some out (an older file) is read again by
    a lenient one that counts what it left out.
    """
    parts = _decoders(cls)
    if parts is None:
        return None
    strict, build_strict, lenient, build_lenient = parts
    error = msgspec.MsgspecError
    missing = msgspec.ValidationError

    def read(raw: bytes) -> Any:
        try:
            try:
                obj, keys = build_strict(strict(raw))
            except missing:  # a key left out (or a bad value: the lenient mirror refuses it too)
                obj, keys = build_lenient(lenient(raw))
        except (error, ValueError):  # ValueError: a time the contract's parser refuses
            return declined(raw)
        return obj if raw.count(_MEMBER) == keys else declined(raw)

    return read


def _decoders(cls: type) -> _Readers | None:
    """The strict and the lenient mirror's decoders of ``cls`` and their builders, made once per class; None
    for a class with a field type the mirror cannot carry."""
    if cls not in _READERS:
        try:
            made: list[tuple[Callable[[bytes], Any], _Build]] = [
                (msgspec.json.Decoder(struct).decode, build) for struct, build in (_mirror(cls, False),
                                                                                   _mirror(cls, True))]
            (strict, build_strict), (lenient, build_lenient) = made
        except _Unmirrored:
            _READERS[cls] = None
        else:
            _READERS[cls] = (strict, build_strict, lenient, build_lenient)
    return _READERS[cls]


def _bounded(kind: type, meta: dict[str, Any]) -> Any:
    """``kind`` with the field's bounds. A float needs no bound to be finite: msgspec refuses a number beyond
    float's range (and JSON has no NaN), where the contract refuses the infinity it would become."""
    bounds = {k: meta[k] for k in ("gt", "ge", "le") if meta.get(k) is not None}
    return Annotated[kind, msgspec.Meta(**bounds)] if bounds else kind


_Convert = Callable[[Any], Any]
#: A decoded mirror (or a repeating object's raw text) built into the contract's object, with the number of
#: object keys it holds at every depth.
_Build = Callable[[Any], "tuple[Any, int]"]
#: How a field's decoded value becomes the contract's: unchanged, a leaf conversion (a time), a container
#: whose keys count (a dict), or a contract object of its own (its builder).
_Kind = tuple[str, Any]
#: A class's strict decoder and builder, then its lenient ones.
_Readers = tuple[Callable[[bytes], Any], _Build, Callable[[bytes], Any], _Build]


def _field(tp: Any, meta: dict[str, Any], lenient: bool) -> tuple[Any, _Kind | None]:
    """The mirror's type for a contract field's annotation, and how its decoded value becomes the contract's."""
    origin = typing.get_origin(tp)
    if tp is Any or tp is str or tp is bool:
        return tp, None  # msgspec reads only finite floats, so an Any holds no NaN or infinity
    if tp is int or tp is float:
        return _bounded(tp, meta), None
    if tp is datetime:
        return str, ("leaf", parse_time)
    if origin is Literal and all(type(a) is str for a in typing.get_args(tp)):
        return tp, None
    if origin in (typing.Union, types.UnionType):
        inner_tp = [a for a in typing.get_args(tp) if a is not _NONE]
        if len(inner_tp) != 1:
            raise _Unmirrored(tp)
        inner, kind = _field(inner_tp[0], meta, lenient)
        return inner | None, kind  # the builder passes None through
    if origin is list or origin is dict:
        return _container(tp, origin, lenient)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        struct, build = _mirror(tp, lenient)
        return struct, ("object", build)
    raise _Unmirrored(tp)


def _container(tp: Any, origin: Any, lenient: bool) -> tuple[Any, _Kind | None]:
    """A list or a dict field's mirror type and its kind."""
    args = typing.get_args(tp)
    if origin is dict and args[0] is not str:
        raise _Unmirrored(tp)
    inner, kind = _field(args[-1], {}, lenient)
    if kind is not None and origin is list and kind[0] == "object":  # a list of contract objects (probes)
        return list[inner], ("object", _each(kind[1]))  # type: ignore[valid-type]  # a type built at run time
    if kind is not None:  # a container of times, or a dict of contract objects: not in the contract today
        raise _Unmirrored(tp)
    # An Any inside holding an object has more members than are counted: the standard reader decides.
    if origin is list:
        return list[inner], None  # type: ignore[valid-type]  # a type built at run time
    return dict[str, inner], ("keys", None)  # type: ignore[valid-type]  # a type built at run time


def _each(build: _Build) -> _Build:
    """A list of contract objects built one by one, their keys counted together."""

    def build_all(items: list[Any]) -> tuple[Any, int]:
        out, keys = [], 0
        for item in items:
            obj, k = build(item)
            out.append(obj)
            keys += k
        return out, keys

    return build_all


def _struct_field(f: dataclasses.Field[Any], tp: Any, lenient: bool) -> tuple[Any, _Kind | None]:
    """A contract field's mirror type and its kind; a repeating object (a run's environment) is kept raw and
    decoded once per distinct text."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp) and getattr(tp, "repeats_across_rows", False):
        return msgspec.Raw, ("object", _shared(*_mirror(tp, lenient)))
    return _field(tp, dict(f.metadata), lenient)


@dataclasses.dataclass
class _Plan:
    """What a mirror's builder does to each decoded field, sorted by kind."""

    fields: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    leaves: list[tuple[str, _Convert]] = dataclasses.field(default_factory=list)
    counted: list[str] = dataclasses.field(default_factory=list)
    objects: list[tuple[str, _Build]] = dataclasses.field(default_factory=list)
    defaults: list[tuple[str, Any, Callable[[], Any] | None]] = dataclasses.field(default_factory=list)

    def add_kind(self, name: str, kind: _Kind) -> None:
        what, how = kind
        if what == "leaf":
            self.leaves.append((name, how))
        elif what == "keys":
            self.counted.append(name)
        else:
            self.objects.append((name, how))


def _plan(cls: type, lenient: bool) -> _Plan:
    hints = typing.get_type_hints(cls)
    plan = _Plan()
    for f in dataclasses.fields(cls):
        struct_tp, kind = _struct_field(f, hints[f.name], lenient)
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if lenient and has_default:
            plan.fields.append((f.name, struct_tp | msgspec.UnsetType, _ABSENT))
            factory = f.default_factory if f.default_factory is not dataclasses.MISSING else None
            plan.defaults.append((f.name, f.default, factory))
        else:
            plan.fields.append((f.name, struct_tp))
        if kind is not None:
            plan.add_kind(f.name, kind)
    return plan


@functools.cache
def _mirror(cls: type, lenient: bool) -> tuple[type, _Build]:
    """``cls``'s mirror Struct and its builder. Strict: every field required, so a decoded mirror holds every
    key; lenient: a field with a default may be left out (``_ABSENT``, then the contract's default)."""
    plan = _plan(cls, lenient)
    fields, leaves, counted, objects, defaults = plan.fields, plan.leaves, plan.counted, plan.objects, plan.defaults
    struct = msgspec.defstruct(f"Mirror{cls.__name__}{'Lenient' if lenient else ''}", fields, kw_only=True,
                               gc=False, forbid_unknown_fields=not getattr(cls, "ignore_unknown", False))
    asdict = msgspec.structs.asdict  # the fields in order, not recursive
    # Building the instance without __init__ is the same object only for a plain dataclass.
    plain = not hasattr(cls, "__post_init__") and not hasattr(cls, "__slots__")
    new, set_dict = object.__new__, object.__setattr__
    width = len(fields)
    checked = hasattr(cls, "contract_check")

    def build(s: Any) -> tuple[Any, int]:
        values = asdict(s)
        keys = width
        for name, default, factory in defaults:  # lenient only: a key left out takes the contract's default
            if values[name] is _ABSENT:
                values[name] = factory() if factory is not None else default
                keys -= 1
        for name in counted:
            v = values[name]
            if v is not None:
                keys += len(v)
        for name, conv in leaves:
            v = values[name]
            if v is not None:
                values[name] = conv(v)
        for name, sub in objects:
            v = values[name]
            if v is not None:
                values[name], k = sub(v)
                keys += k
        if not plain:
            return cls(**values), keys
        obj: Any = new(cls)
        set_dict(obj, "__dict__", values)  # what the frozen __init__ would set
        if checked and obj.contract_check() is not None:
            raise ValueError("declined: the standard reader words the error")
        return obj, keys

    return struct, build


def _shared(struct: type, build: _Build) -> _Build:
    """Decode a repeating object's raw bytes once per distinct text (rows then share one instance)."""
    decode: Callable[[bytes], Any] = msgspec.json.Decoder(struct).decode
    memo: dict[bytes, tuple[Any, int]] = {}

    def from_raw(raw: msgspec.Raw) -> tuple[Any, int]:
        key = bytes(raw)
        hit = memo.get(key)
        if hit is None:
            hit = build(decode(key))  # raises for an invalid object: nothing is remembered
            if len(memo) >= SHARED_LIMIT:  # a long-lived reader (serve) starts over rather than stop sharing
                memo.clear()
            memo[key] = hit
        return hit

    return from_raw
