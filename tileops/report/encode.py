"""A report row as machine text (JSON, CSV): one function per format, fast where msgspec is installed.

:func:`json_row` and :func:`csv_line` are the only ways the reports write a
row. Where msgspec is installed (the optional ``fast`` extra, in the image) it
writes the text; where it is not (the GPU test machine, a slim image), or for a
CSV line it declines (a cell JSON escapes, a number that is not finite), the
standard library writes text that reads back to the same values. Tests hold
the two writers alike over every kind of cell, and run the reports without
msgspec (``tests/device_support.py``).
"""

from __future__ import annotations

import csv
import json
import math
from typing import Any

try:  # the `fast` extra: rows encoded in C; without it the standard library writes the same documents
    import msgspec
except ImportError:
    msgspec = None  # type: ignore[assignment]  # optional: the standard library path below stands in

import tileops.report.columns as columns

#: The JSON row's columns up to its race columns (the race columns need every backend of the row: later).
ROW_COLUMNS = columns.RAW_COLUMNS[:-len(columns.RACE_COLUMNS)]

if msgspec is not None:
    _encode_json = msgspec.json.Encoder().encode
    #: A JSON row up to its race columns, as msgspec encodes it: the columns in order, from the row's values
    #: without building a dict or cutting the race columns off.
    _JsonRow = msgspec.defstruct("_JsonRow", [(c, Any) for c in ROW_COLUMNS])


# --------------------------------------------------------------------------- JSON


def _json_msgspec(values: list[Any]) -> str:
    """One row as compact JSON up to its race columns, without the closing brace: msgspec writes every
    whole number exact (a row's data terms may hold one beyond 64 bits)."""
    return _encode_json(_JsonRow(*values)).decode()[:-1]


def finite(value: Any) -> Any:
    """``value`` with every float that is not finite as None, which is what msgspec writes for one (JSON
    has no NaN): the standard encoder's rows then read back as msgspec's do."""
    if type(value) is float:
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def _json_std(values: list[Any]) -> str:
    """:func:`_json_msgspec` with the standard library alone: the same values, every whole number exact too."""
    doc = dict(zip(ROW_COLUMNS, map(finite, values)))
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)[:-1]


#: A row's values (``columns.raw_values``, up to the race columns) as compact JSON without the closing brace.
json_row = _json_msgspec if msgspec is not None else _json_std


# --------------------------------------------------------------------------- CSV


class Lines:
    """A file-like sink that keeps each write (one CSV row) as its own string."""

    __slots__ = ("write", "items")

    def __init__(self) -> None:
        self.items: list[str] = []
        self.write = self.items.append


_STD_LINES = Lines()
_STD_WRITER = csv.writer(_STD_LINES, lineterminator="\n")


def csv_line(values: list[Any]) -> str:
    """A row's CSV line, as the csv module writes it (or text that reads back to the same cells)."""
    line = _csv_fast(values)
    if line is None:
        _STD_WRITER.writerow(values)
        line = _STD_LINES.items.pop()
    return line


#: What a CSV line's cells may be for :func:`_csv_fast` (a line holding another is the csv module's).
_CSV_CELL_TYPES = frozenset({str, float, int, bool, type(None)})


def _csv_fast(values: list[Any]) -> str | None:
    """A row's CSV line from msgspec's JSON text of its values, or None: this line is the csv module's
    (every line is, where msgspec is not installed).

    Writing each float's ``repr`` is much of what the csv module spends on a
    row; msgspec writes the whole row at once, each number as the shortest text
    that reads back to the same float (``1e-5`` where Python writes ``1e-05``),
    and breach rows (a sentence with commas) need the csv module no more. The
    JSON array becomes the CSV line: ``null`` is an empty cell, ``true`` is
    ``True``, and a string keeps its quotes only where it holds a comma, as the
    csv module quotes it. A line with a cell JSON escapes (a quote, a line
    break, a control character) or a number that is not finite is declined. A
    test reads both writers' lines back to the same cells over every kind of
    cell and floats of every size.
    """
    if msgspec is None or not _CSV_CELL_TYPES.issuperset(map(type, values)):
        return None
    text = _encode_json(values).decode()
    if "\\" in text:  # a quote, a line break or a control character in a cell
        return None
    text = "," + text[1:-1]  # each cell follows a comma
    if text.count(",") == len(values):  # no cell holds a comma: every comma starts a cell
        atoms = _csv_atoms(text, values)
        return None if atoms is None else atoms[1:].replace('"', "") + "\n"
    parts = text.split('"')  # no cell holds a quote: outside, a string, outside, a string, ...
    outside = _csv_atoms("\0".join(parts[0::2]), values)  # no cell holds a NUL (JSON escapes it)
    if outside is None:
        return None
    parts[0::2] = outside.split("\0")
    parts[1::2] = [f'"{s}"' if "," in s else s for s in parts[1::2]]
    return "".join(parts)[1:] + "\n"


def _csv_atoms(text: str, values: list[Any]) -> str | None:
    """``null``, ``true`` and ``false`` outside strings as the csv module writes them; None where a ``null``
    is a float msgspec could not write (an infinity, NaN)."""
    if ",null" in text:
        if text.count(",null") != values.count(None):
            return None
        text = text.replace(",null", ",")
    if ",true" in text or ",false" in text:
        text = text.replace(",true", ",True").replace(",false", ",False")
    return text
