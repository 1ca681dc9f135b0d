"""Boxed text tables for a terminal, written as plain strings: no per-cell objects.

rich's ``Table`` measures and renders every cell as a renderable, which for a
table of 100,000 rows takes minutes (docs/architecture.md, "Figures behind the code").
These tables look the same (rich's default heavy-head box, left-aligned title,
bold header) but are plain string formatting: column widths are the widest
cell, and a cell's style is one ANSI escape when the output takes colour.
The table is as wide as its cells; nothing is wrapped or cut (a narrow
terminal wraps the lines, ``less -S`` scrolls them). A sentence around it is
folded at spaces (:func:`fold`) only on a terminal (:func:`terminal_columns`):
a pipe or a file keeps each sentence on one line, for grep.
"""

from __future__ import annotations

import os
import textwrap
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from typing import IO
from collections.abc import Callable, Iterable, Sequence

#: SGR codes of the style words the reports use (rich's names for them).
_SGR = {"bold": "1", "dim": "2", "italic": "3", "red": "31", "green": "32", "yellow": "33", "magenta": "35"}


@lru_cache(maxsize=64)
def ansi(style: str) -> str:
    """The escape that starts ``style`` ("bold red"); empty for no style."""
    codes = [_SGR[w] for w in style.split()]
    return f"\x1b[{';'.join(codes)}m" if codes else ""


def colour_wanted(stream: IO[str]) -> bool:
    """Colour for a terminal, not for a pipe or a file; NO_COLOR and FORCE_COLOR decide first."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"


def terminal_columns(stream: IO[str]) -> int | None:
    """How wide a terminal ``stream`` is, to fold a long sentence at (``$COLUMNS`` first, as rich reads it);
    None for a pipe or a file, whose lines are never folded: a log keeps each sentence whole for grep."""
    isatty = getattr(stream, "isatty", None)
    if not (isatty and isatty()):
        return None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        return os.get_terminal_size(stream.fileno()).columns or None
    except (OSError, ValueError, AttributeError):
        return None


#: How much further a folded line's continuation sits than the line, so the next line's start stands out.
HANG = "    "


def fold(line: str, columns: int | None) -> list[str]:
    """``line`` folded at spaces to ``columns`` (None: whole), its continuations indented :data:`HANG` more
    than it; a word longer than the width (a path, a command to copy) stays whole."""
    if columns is None or width(line) <= columns:
        return [line]
    indent = line[:len(line) - len(line.lstrip(" "))] + HANG
    return textwrap.wrap(line, max(columns, len(indent) + 20), subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [line]


@lru_cache(maxsize=4096)
def _wide_width(text: str) -> int:
    return sum(0 if unicodedata.combining(c) or unicodedata.category(c) in ("Mn", "Me", "Cf")
               else 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in text)


def width(text: str) -> int:
    """Columns the text takes on a terminal (a wide character takes two, a combining mark none)."""
    return len(text) if text.isascii() else _wide_width(text)


#: A row: its cells, one style per cell ("" for none) or None, and whether a rule follows it
#: (the end of an op's group).
Row = tuple[Sequence[str], Sequence[str] | None, bool]


@dataclass
class TextTable:
    """A table: columns, rows, and how they are aligned; :meth:`lines` draws it."""

    columns: Sequence[str]
    right: frozenset[str] = frozenset()  # columns aligned right (numbers)
    title: str | None = None
    rows: list[Row] = field(default_factory=list)

    def add(self, *cells: str, styles: Sequence[str] | None = None, end_section: bool = False) -> None:
        self.rows.append((cells, styles, end_section))

    def lines(self, colour: bool = False) -> list[str]:
        """The table's lines (no newlines); ANSI styles only when ``colour``."""
        n = len(self.columns)
        widths = [width(c) for c in self.columns]
        for cells, _, _ in self.rows:
            widths = [max(w, width(c)) for w, c in zip(widths, cells)]
        align: list[Callable[[str, int], str]] = [str.rjust if c in self.right else str.ljust for c in self.columns]

        def fit(cells: Iterable[str]) -> list[str]:
            out = []
            for fn, text, w in zip(align, cells, widths):
                if text.isascii():
                    out.append(fn(text, w))
                else:
                    pad = " " * (w - width(text))
                    out.append(pad + text if fn is str.rjust else text + pad)
            return out

        def rule(left: str, fill: str, mid: str, right: str) -> str:
            return left + mid.join(fill * (w + 2) for w in widths) + right

        reset = "\x1b[0m" if colour else ""
        bold = ansi("bold") if colour else ""
        out: list[str] = []
        if self.title:
            out.append((ansi("italic") + self.title + reset) if colour else self.title)
        out.append(rule("┏", "━", "┳", "┓"))
        out.append("┃ " + " ┃ ".join(bold + c + reset for c in fit(self.columns)) + " ┃")
        out.append(rule("┡", "━", "╇", "┩"))
        section = rule("├", "─", "┼", "┤")
        last = len(self.rows) - 1
        for i, (row, styles, end_section) in enumerate(self.rows):
            cells = fit(row)
            if colour and styles:
                cells = [ansi(s) + c + reset if s else c for s, c in zip(styles, cells)]
            if len(cells) < n:
                cells += [" " * w for w in widths[len(cells):]]
            out.append("│ " + " │ ".join(cells) + " │")
            if end_section and i != last:
                out.append(section)
        out.append(rule("└", "─", "┴", "┘"))
        return out
