"""Reading the record contract strictly, and writing it back: JSON to contract objects and contract objects to JSON.

Reading is strict: a field of the wrong type, a missing one, an unknown one or
a number that is not finite is an error naming the field (the file and line are
added by ``tileops.records.files``), never a silently dropped row or an ``inf``
that crashes a consumer later. The decoder is built per contract class from its
annotations and ``field(metadata=...)`` bounds, with the standard library alone,
which is what the benchmark layer may use (§5.2).

:func:`line_decoder` is the one way to read a line of a JSON Lines file. Where
msgspec is installed (the optional ``fast`` extra) it asks the mirror of the
class first (``tileops.records.fast``: the same objects, parsed and checked in
C), and every line the mirror declines is read by the decoder here, which
accepts it after all or words the error; without msgspec (the GPU machine, the
bench itself) the decoder here reads every line.
"""

from __future__ import annotations

import dataclasses
import json
import json.scanner
import math
import types
import typing
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar
from collections.abc import Callable

from tileops.errors import TileOpsError
from tileops.records.times import parse_time
from tileops.records.identity import ShapeError

class RecordFileError(TileOpsError, ValueError):
    """A results file (records, run file, audit) holds something that is not the contract;
    the message names the file, the line and the field."""


class Invalid(Exception):
    """A value does not fit its field; ``path`` is filled in on the way out."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str] = []


_Decoder = Callable[[Any], Any]
T = TypeVar("T")


def _describe(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _bounds(meta: dict[str, Any]) -> Callable[[Any], None] | None:
    gt, ge, le = meta.get("gt"), meta.get("ge"), meta.get("le")
    if gt is None and ge is None and le is None:
        return None

    def check(v: Any) -> None:
        if gt is not None and not v > gt:
            raise Invalid(f"must be > {gt}, got {_describe(v)}")
        if ge is not None and not v >= ge:
            raise Invalid(f"must be >= {ge}, got {_describe(v)}")
        if le is not None and not v <= le:
            raise Invalid(f"must be <= {le}, got {_describe(v)}")

    return check


def _number_decoder(kind: type, meta: dict[str, Any]) -> _Decoder:
    check = _bounds(meta)

    if kind is int:
        def dec(v: Any) -> Any:
            if type(v) is not int:
                raise Invalid(f"expected a whole number, got {_describe(v)}")
            if check:
                check(v)
            return v
        return dec

    def dec_float(v: Any) -> Any:
        t = type(v)
        if t is not float and t is not int:
            raise Invalid(f"expected a number, got {_describe(v)}")
        if t is int:
            try:
                v = float(v)
            except OverflowError:  # a whole number past float's range
                raise Invalid(f"expected a finite number, got {_describe(v)}") from None
        if not math.isfinite(v):
            raise Invalid(f"expected a finite number, got {v!r}")
        if check:
            check(v)
        return v
    return dec_float


def _datetime(v: Any) -> datetime:
    if type(v) is not str:
        raise Invalid(f"expected an ISO 8601 time, got {_describe(v)}")
    try:
        return parse_time(v)
    except ValueError:
        raise Invalid(f"expected an ISO 8601 time, got {_describe(v)}") from None


def _json_value(v: Any) -> Any:
    """Any JSON value, with every number in it finite."""
    t = type(v)
    if t is float:
        if not math.isfinite(v):
            raise Invalid(f"expected a finite number, got {v!r}")
    elif t is dict:
        for k, x in v.items():
            try:
                _json_value(x)
            except Invalid as exc:
                exc.path.insert(0, str(k))
                raise
    elif t is list:
        for i, x in enumerate(v):
            try:
                _json_value(x)
            except Invalid as exc:
                exc.path.insert(0, str(i))
                raise
    return v


def _simple(kind: type, what: str) -> _Decoder:
    def dec(v: Any) -> Any:
        if type(v) is not kind:
            raise Invalid(f"expected {what}, got {_describe(v)}")
        return v
    return dec


def _literal_decoder(tp: Any, meta: dict[str, Any]) -> _Decoder:
    allowed = typing.get_args(tp)

    def lit(v: Any) -> Any:
        if v not in allowed or type(v) is not str:
            raise Invalid(f"expected one of {', '.join(map(str, allowed))}, got {_describe(v)}")
        return v
    return lit


def _optional_decoder(tp: Any, meta: dict[str, Any]) -> _Decoder:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if len(args) != 1:
        raise TypeError(f"unsupported union {tp}")
    inner = _decoder(args[0], meta)

    def optional(v: Any) -> Any:
        return None if v is None else inner(v)
    return optional


def _list_decoder(tp: Any, meta: dict[str, Any]) -> _Decoder:
    (item_tp,) = typing.get_args(tp)
    item = _decoder(item_tp, {})

    def lst(v: Any) -> Any:
        if type(v) is not list:
            raise Invalid(f"expected a list, got {_describe(v)}")
        out = []
        for i, x in enumerate(v):
            try:
                out.append(item(x))
            except Invalid as exc:
                exc.path.insert(0, str(i))
                raise
        return out
    return lst


def _dict_decoder(tp: Any, meta: dict[str, Any]) -> _Decoder:
    key_tp, val_tp = typing.get_args(tp)
    if key_tp is not str:
        raise TypeError(f"unsupported mapping key {key_tp}")
    val = _decoder(val_tp, {})

    def mapping(v: Any) -> Any:
        if type(v) is not dict:
            raise Invalid(f"expected an object, got {_describe(v)}")
        out = {}
        for k, x in v.items():
            try:
                out[k] = val(x)
            except Invalid as exc:
                exc.path.insert(0, str(k))
                raise
        return out
    return mapping


#: A field annotation that is a plain type: its decoder, given the field's bounds.
_LEAF_DECODERS: dict[Any, Callable[[dict[str, Any]], _Decoder]] = {
    Any: lambda meta: _json_value,
    str: lambda meta: _simple(str, "a string"),
    bool: lambda meta: _simple(bool, "true or false"),
    int: lambda meta: _number_decoder(int, meta),
    float: lambda meta: _number_decoder(float, meta),
    datetime: lambda meta: _datetime,
}
#: A generic annotation (``Literal[...]``, ``X | None``, ``list[X]``, ``dict[str, X]``), by its origin.
_GENERIC_DECODERS: dict[Any, Callable[[Any, dict[str, Any]], _Decoder]] = {
    Literal: _literal_decoder,
    typing.Union: _optional_decoder,
    types.UnionType: _optional_decoder,
    list: _list_decoder,
    dict: _dict_decoder,
}


def _decoder(tp: Any, meta: dict[str, Any]) -> _Decoder:
    leaf = _LEAF_DECODERS.get(tp)
    if leaf is not None:
        return leaf(meta)
    generic = _GENERIC_DECODERS.get(typing.get_origin(tp))
    if generic is not None:
        return generic(tp, meta)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_decoder(tp)
    raise TypeError(f"no decoder for {tp!r}")


_DATACLASS_DECODERS: dict[type, _Decoder] = {}


def _dataclass_decoder(cls: type[T]) -> Callable[[Any], T]:
    """The decoder of a contract class, field by field (an environment shared by the rows that repeat it)."""
    hit = _DATACLASS_DECODERS.get(cls)
    if hit is None:
        hit = _field_decoder(cls)
        if getattr(cls, "repeats_across_rows", False):
            hit = _shared(hit)
        _DATACLASS_DECODERS[cls] = hit
    return hit


#: Distinct objects a :func:`_shared` decoder remembers (a run has one environment per device).
SHARED_LIMIT = 64


def _shared(decode: _Decoder) -> _Decoder:
    """``decode``, answering an object it has decoded before with the same (frozen) instance.

    Every record of a run carries the same environment; decoding it once per run
    instead of once per row is a good part of the reading time saved (docs/architecture.md,
    "Figures behind the code"), and the rows then share one copy in memory. The key holds each
    value's type as well as the value, at every depth (the device is an object inside the environment),
    because ``1``, ``1.0`` and ``True`` are equal keys but not the same input (a field check may take one
    and refuse another).
    """
    seen: dict[Any, Any] = {}
    last: list[Any] = [None, None]  # the last object's key, and what it decoded to

    def dec(v: Any) -> Any:
        if type(v) is not dict:
            return decode(v)
        key = _typed(v)
        if key == last[0]:  # the usual case: the row before's
            return last[1]
        hit = seen.get(key)
        if hit is None:
            hit = decode(v)  # raises for an invalid object: nothing is remembered
            if len(seen) < SHARED_LIMIT:
                seen[key] = hit
        last[:] = (key, hit)
        return hit

    return dec


def _typed(v: Any) -> Any:
    """Parsed JSON as a hashable key that tells ``1``, ``1.0`` and ``True`` apart wherever they are."""
    t = type(v)
    if t is dict:
        return (dict, tuple([(k, _typed(x)) for k, x in v.items()]))
    if t is list:
        return (list, tuple([_typed(x) for x in v]))
    return (t, v)


def _upgraded(older_shape: Callable[[dict[str, Any]], dict[str, Any]], v: dict[str, Any]) -> dict[str, Any]:
    """An object in an older file's shape, in today's; Invalid naming the field the upgrade refused."""
    try:
        return older_shape(v)
    except ShapeError as exc:
        refused = Invalid(exc.message)
        refused.path.insert(0, exc.field)
        raise refused from None


#: What an unknown field is told: a newer tileops adds fields, so upgrading is the first fix (docs/reliability.md,
#: "Stores from elsewhere"); a person's typo the second.
UNKNOWN_FIELD = ("unknown field (a newer tileops may have written it: upgrade tileops to read it; else remove it, or "
                 "fix its spelling)")


def _own_schema(cls: type) -> int | None:
    """The schema version this tileops writes for ``cls`` (its ``schema_version`` field's default), or None."""
    for f in dataclasses.fields(cls):
        if f.name == "schema_version" and isinstance(f.default, int):
            return f.default
    return None


def _not_newer(v: dict[str, Any], schema: int) -> None:
    """Invalid at ``schema_version`` when ``v`` was written by a newer schema than ``schema``: said first, before
    the fields that schema added read as unknown ones, so the fix named is an upgrade, not an edit."""
    found = v.get("schema_version")
    if type(found) is int and found > schema:
        exc = Invalid(f"written by a newer tileops (schema {found}; this tileops reads up to {schema}): upgrade "
                      "tileops to read it, and leave the file as it is")
        exc.path.append("schema_version")
        raise exc


def _as_today(v: dict[str, Any], schema: int | None,
              older_shape: Callable[[dict[str, Any]], dict[str, Any]] | None) -> dict[str, Any]:
    """``v`` refused if a newer schema wrote it, else in today's shape (an older file's upgraded)."""
    if schema is not None:
        _not_newer(v, schema)
    return v if older_shape is None else _upgraded(older_shape, v)


def _field_decoder(cls: type) -> _Decoder:
    """Field by field, in declaration order: the reference decoder, and the one that words every error."""
    hints = typing.get_type_hints(cls)
    specs: list[tuple[str, _Decoder, bool]] = []
    for f in dataclasses.fields(cls):
        needed = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        specs.append((f.name, _decoder(hints[f.name], dict(f.metadata)), needed))
    names = frozenset(s[0] for s in specs)
    required_names = [s[0] for s in specs if s[2]]
    required = frozenset(required_names)
    ignore_unknown = bool(getattr(cls, "ignore_unknown", False))
    checked = hasattr(cls, "contract_check")  # a check across fields (Timing's interval around its median)
    older_shape = getattr(cls, "older_shape", None)  # an older file's shape of the object, upgraded first
    schema = _own_schema(cls)

    def dec(v: Any) -> Any:
        if type(v) is not dict:
            raise Invalid(f"expected an object, got {_describe(v)}")
        v = _as_today(v, schema, older_shape)
        if not ignore_unknown and not names.issuperset(v):
            unknown = sorted(set(v) - names)
            refused = Invalid(UNKNOWN_FIELD)
            refused.path.insert(0, str(unknown[0]))
            raise refused
        kwargs = {}
        for name, d, _ in specs:
            if name in v:
                try:
                    kwargs[name] = d(v[name])
                except Invalid as exc:
                    exc.path.insert(0, name)
                    raise
        if not required.issubset(kwargs):
            missing = Invalid("missing (a required field)")
            missing.path.insert(0, next(n for n in required_names if n not in kwargs))
            raise missing
        obj = cls(**kwargs)
        if checked:
            bad = obj.contract_check()
            if bad is not None:
                refused = Invalid(bad[1])
                refused.path.insert(0, bad[0])
                raise refused
        return obj

    return dec


def from_data(cls: type[T], data: Any) -> T:
    """Build ``cls`` from parsed JSON, strictly; ValueError naming the field otherwise."""
    try:
        return _dataclass_decoder(cls)(data)
    except Invalid as exc:
        where = ".".join(exc.path) or "(top level)"
        raise ValueError(f"{where}: {exc.message}") from None


# --------------------------------------------------------------------------- writing


def to_data(obj: Any) -> Any:
    """A contract object as JSON-ready data: dataclasses to objects, times to ISO 8601."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_data(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, datetime):
        return obj.isoformat()
    if isinstance(obj, dict):
        return {k: to_data(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_data(v) for v in obj]
    return obj


def to_json(obj: Any) -> str:
    """One line of JSON (no NaN or Infinity: they are not JSON and the readers refuse them)."""
    return json.dumps(to_data(obj), separators=(",", ":"), allow_nan=False)



# --------------------------------------------------------------------------- one JSON line


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict, refusing a key given twice: JSON readers disagree on which value counts
    (``json`` and msgspec keep the last, others the first), so the line is not one record but two."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]  # add: None
        exc = Invalid("declared twice in one object (JSON readers disagree on which value counts); keep one")
        exc.path.append(key)
        raise exc
    return obj


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)
# the C scanner json.loads calls, without its wrappers (typeshed declares make_scanner a class taking a decoder's
# context; it is that, called with the decoder)
_scan = json.scanner.make_scanner(_DECODER)  # type: ignore[arg-type]  # see above


def _not_text(data: Any) -> list[str] | None:
    """The path to the first string (or key) holding a lone surrogate (``"\\ud800"``: valid JSON, not text,
    so no output can encode it), or None."""
    stack: list[tuple[Any, list[str]]] = [(data, [])]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:
                    return path
        elif isinstance(value, dict):
            for k, v in value.items():
                stack.append((k, path))
                stack.append((v, [*path, str(k)]))
        elif isinstance(value, list):
            stack.extend((v, [*path, str(i)]) for i, v in enumerate(value))
    return None


def _checked_text(data: Any, text: str) -> Any:
    """``data`` when every string in it is text; Invalid naming the field otherwise. Only a line with a
    ``\\u`` escape can hold a lone surrogate, so the others are not walked."""
    if "\\u" in text:
        where = _not_text(data)
        if where is not None:
            exc = Invalid("holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape without its pair), which is "
                           "not text; write the character itself, or its escaped pair")
            exc.path.extend(where)
            raise exc
    return data


def _json_line(text: str) -> Any:
    """One JSON value filling the line (json.loads's rules; its message on an error), each key once, every
    string text."""
    try:
        data, end = _scan(text, 0)
        if end == len(text) or text[end:].isspace():
            return _checked_text(data, text)
    except (StopIteration, ValueError, RecursionError):
        pass
    try:  # leading whitespace (valid), or not JSON: the decoder decides and words it
        return _checked_text(_DECODER.decode(text), text)
    except (ValueError, RecursionError) as exc:
        raise Invalid(f"not JSON ({exc})") from None


def parse_line(cls: type[T], raw: bytes | str) -> T:
    """Parse and check one object; NaN/Infinity (and 1e400) parse to floats the field checks then refuse."""
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    return _dataclass_decoder(cls)(_json_line(text.strip()))


def located(path: Path, line: int | None, exc: Invalid, what: str, fix: str) -> RecordFileError:
    where = ".".join(exc.path)
    detail = f"{where}: {exc.message}" if where else exc.message
    at = f"{path}:{line}" if line is not None else str(path)
    return RecordFileError(f"{at}: not a valid {what} ({detail}); {fix}")


LineDecoder = Callable[[bytes], Any]


def line_decoder(cls: type[T], *, fast: bool = True) -> Callable[[bytes], T | None]:
    """The reader of one line of a JSON Lines file into ``cls``: the object, or None for a blank line.

    It raises :class:`Invalid` naming the field, or UnicodeDecodeError for bytes that are not UTF-8 (the
    caller adds the file and line). ``fast``: where msgspec is installed, its mirror of ``cls`` reads the
    line first and hands every line it declines to the standard decoder (which accepts it after all or
    words the error), so both paths accept exactly the same objects; False (the benchmark layer, §5.2),
    the standard decoder alone.
    """
    decode = _dataclass_decoder(cls)

    def standard(raw: bytes) -> T | None:
        if raw.isspace():
            return None
        return decode(_json_line(raw.decode("utf-8")))

    mirror = _fast_reader(cls, standard) if fast else None
    return standard if mirror is None else mirror


def _fast_reader(cls: type[T], declined: Callable[[bytes], T | None]) -> Callable[[bytes], T | None] | None:
    """msgspec's reader of ``cls`` (``tileops.records.fast``), handing what it declines to ``declined``; None
    where msgspec is not installed or cannot mirror ``cls``. Imported here, not at module level: the
    benchmark layer writes and reads records with the standard library alone (§5.2)."""
    try:
        from tileops.records.fast import line_reader
    except ImportError:
        return None
    return line_reader(cls, declined)
