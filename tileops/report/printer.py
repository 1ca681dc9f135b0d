"""One way out for everything a workflow tells a person or a machine: its messages, the ``--list`` plan, the
progress of its rows and steps, the results table and the run's summary.

A workflow is handed a :class:`Printer` and never prints by itself, so how the output looks is chosen once, on
the command line (``--output-format``), and every event can be read three ways:

- :class:`ConsolePrinter`: rich on a terminal (colour, a live bar); the results on stdout, the rest on stderr.
- :class:`LogPrinter`: plain lines for ``kubectl logs``, CI and grep: no markup, no escape codes, never wrapped
  mid-phrase, one line per finished row; the results on stdout, the rest on stderr.
- :class:`JsonLinesPrinter`: one JSON object per event on stdout, its ``kind`` first (``message``, ``note``,
  ``warning``, ``error``, ``list``, ``progress``, ``row``, ``summary``, ``table``, ``text``), for a machine.

Nothing here imports rich until a printer needs it: the bench and the records stay light.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Literal, Protocol

from tileops.defaults import OUTPUT_FORMATS
from tileops.report.texttable import TextTable, colour_wanted, fold, terminal_columns

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from tileops.report.baseline import Comparison
    from tileops.roofline import Health, Priced


#: What an event is: a message's kind sets the word before it (``note: ...``) and its JSON ``kind``.
Kind = Literal["message", "note", "warning", "error"]

#: A line to show: plain text, or spans of (text, rich style) where a word of it is coloured on a console.
Styled = str | Sequence[tuple[str, str]]

#: A calibration's ``progress(what, step, steps)``.
StepCallback = Callable[[str, int, int], None]

_LABEL_STYLE = {"note": "yellow", "warning": "yellow", "error": "red"}


def plain(line: Styled) -> str:
    """The text of a line, without its styles."""
    return line if isinstance(line, str) else "".join(text for text, _ in line)


def _spans(line: Styled) -> list[tuple[str, str]]:
    return [(line, "")] if isinstance(line, str) else list(line)


def _labelled(line: Styled, kind: Kind, bare: bool) -> list[tuple[str, str]]:
    """The line with its kind's word before it (``warning: ...``), unless it is a message or ``bare``."""
    spans = _spans(line)
    if kind == "message" or bare:
        return spans
    return [(kind, _LABEL_STYLE[kind]), (": ", ""), *spans]


@dataclass(frozen=True)
class Listing:
    """``tileops bench --list``: a table of the rows a run would run, notes about the selection, and the lines
    that say what the run will cost."""

    title: str
    columns: tuple[str, ...]
    rows: list[tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)  # (cells, their styles)
    notes: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def table(self) -> TextTable:
        """The plan for a person: an op is named on its first row only, so each op reads as a group."""
        t = TextTable(self.columns, title=self.title)
        last = None
        for (first, *rest), styles in self.rows:
            t.add(first if first != last else "", *rest, styles=list(styles))
            last = first
        return t


class RowEvents(Protocol):
    """The progress of a sweep's rows, told to a printer (``tileops.pipeline.progress`` words them)."""

    def started(self, index: int, total: int, what: str, wait: str | None) -> None:
        """Row ``index`` of ``total`` starts; ``wait`` says why a log may hear nothing from it for a while."""

    def new_pass(self, total: int, text: str) -> None:
        """A second pass over ``total`` rows begins; ``text`` says why."""

    def finished(self, index: int, total: int, what: str, line: str, fields: Mapping[str, Any]) -> None:
        """Row ``index`` ended: ``line`` for a person, ``fields`` for a machine."""


class Printer(Protocol):
    """Where a workflow's output goes. ``result=True`` marks what the run produced (stdout on a console or a
    log), the rest is about the run (stderr there)."""

    def say(self, line: Styled, *, kind: Kind = "message", result: bool = False, bare: bool = False,
            **fields: Any) -> None:
        """A message, note, warning or error (``bare``: without the word naming its kind)."""

    def show(self, renderable: Any, *, data: Any = None, result: bool = True) -> None:
        """A rich renderable (a table, a panel); ``data`` is what a JSON reader gets instead of its text."""

    def text(self, text: str) -> None:
        """A document already formatted (JSON, CSV, markdown), its line ends included: written on stdout as it
        is."""

    def listing(self, plan: Listing) -> None:
        """The ``--list`` plan."""

    def results(self, priced: Sequence[Priced], *, health: Health | None = None, title: str | None = None,
                comparison: Comparison | None = None, full_table: bool = False) -> None:
        """The SOL table grouped by op (a digest above 500 rows) and the run's summary."""

    def rows(self, total: int) -> contextlib.AbstractContextManager[RowEvents]:
        """The progress of ``total`` rows, for as long as the sweep runs."""

    def steps(self, label: str, *, keep: bool) -> contextlib.AbstractContextManager[StepCallback]:
        """A calibration's steps (``keep``: the bar stays when done, else it starts only on the first step)."""


# --------------------------------------------------------------------------- the console (rich)


class ConsolePrinter:
    """Today's terminal: rich consoles for stdout (results) and stderr (the rest), a live bar on a terminal."""

    def __init__(self, out: Console | None = None, err: Console | None = None, *, piped_width: int = 200) -> None:
        from rich.console import Console

        if out is None:
            out = Console()
            out = out if out.is_terminal else Console(width=piped_width)  # a log keeps the SOL table whole
        if err is None:
            err = Console(stderr=True)
            err = err if err.is_terminal else Console(stderr=True, width=piped_width)
        self.out, self.err = out, err

    def _text(self, spans: Sequence[tuple[str, str]]) -> Text:
        from rich.text import Text

        t = Text()
        for text, style in spans:
            t.append(text, style=style or None)
        return t

    def say(self, line: Styled, *, kind: Kind = "message", result: bool = False, bare: bool = False,
            **fields: Any) -> None:
        console = self.out if result else self.err
        # folded at spaces on a terminal only (a path or a command stays whole, to copy); a pipe gets whole lines
        console.print(_folded(self._text(_labelled(line, kind, bare)), terminal_columns(console.file)),
                      soft_wrap=True, highlight=False)

    def show(self, renderable: Any, *, data: Any = None, result: bool = True) -> None:
        console = self.out if result else self.err
        # a log or a pipe: tables at the piped width, sentences whole (never folded mid-phrase for grep)
        console.print(renderable, soft_wrap=not console.is_terminal)

    def text(self, text: str) -> None:
        self.out.file.write(text)
        self.out.file.flush()

    def listing(self, plan: Listing) -> None:
        _write_listing(self.out.file, plan, colour_wanted(self.out.file))

    def results(self, priced: Sequence[Priced], *, health: Health | None = None, title: str | None = None,
                comparison: Comparison | None = None, full_table: bool = False) -> None:
        from tileops.report.tables import render_text

        console = self.out
        colour = console.color_system is not None and not console.no_color and not console.record
        text = render_text(priced, "table", comparison=comparison, health=health, title=title,
                           full_table=full_table, colour=colour, width=terminal_columns(console.file))
        if console.record:  # a recording console keeps what is printed through it
            from rich.text import Text

            console.print(Text(text, end=""), soft_wrap=True, end="")
        else:
            console.file.write(text)
            console.file.flush()

    @contextlib.contextmanager
    def rows(self, total: int) -> Iterator[RowEvents]:
        bar = _LiveRows(self.err, total)
        with bar.progress:
            yield bar

    @contextlib.contextmanager
    def steps(self, label: str, *, keep: bool) -> Iterator[StepCallback]:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        from rich.markup import escape

        if keep:  # tileops calibrate: what it measured, step by step, stays on the screen
            columns = (TextColumn(f"[bold]{escape(label)}[/] {{task.description}}"), BarColumn(),
                       TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn())
            progress = Progress(*columns, console=self.err, transient=False)
        else:  # before a bench's rows: a bar on a terminal only, gone when done
            progress = Progress(TextColumn(f"[bold]{escape(label)}[/] {{task.description}}"), BarColumn(),
                                MofNCompleteColumn(), TimeElapsedColumn(), console=self.err, transient=True,
                                disable=not self.err.is_terminal)
        task: list[Any] = []

        def step(what: str, done: int, steps: int) -> None:
            if not task:
                if not keep:
                    progress.start()  # started only when a step is reported: nothing shows when none is
                task.append(progress.add_task(what, total=steps))
            progress.update(task[0], description=what, completed=done)

        if keep:
            progress.start()
        try:
            yield step
        finally:
            if keep or task:
                progress.stop()


class _LiveRows:
    """The sweep on a rich console: a bar with the current row on a terminal, each finished row's line above it;
    in a log, one line per row (and a line when a compile may keep a row quiet)."""

    def __init__(self, console: Console, total: int) -> None:
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        self.console = console
        self.live = console.is_terminal
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                 console=console, transient=False, disable=not self.live)
        self.bar = self.progress.add_task("benchmarking", total=total)

    def _line(self, text: str) -> None:
        from rich.text import Text

        # folded at spaces on a terminal, each continuation indented; whole lines in a log
        self.console.print(_folded(Text(text), terminal_columns(self.console.file)), highlight=False,
                           soft_wrap=True)

    def started(self, index: int, total: int, what: str, wait: str | None) -> None:
        from rich.markup import escape

        self.progress.update(self.bar, description=escape(what))  # "[compile]" is no markup tag
        if not self.live and wait:  # a log shows a row when it ends: a long wait must not read as a hang
            self._line(f"[{index}/{total}] {what}: {wait}")

    def new_pass(self, total: int, text: str) -> None:
        self.progress.reset(self.bar, total=total, description="second pass")
        self._line(text)

    def finished(self, index: int, total: int, what: str, line: str, fields: Mapping[str, Any]) -> None:
        self.progress.advance(self.bar)
        # a log: one numbered line per row; a terminal: every finished row's line stays above the live bar
        self._line(f"[{index}/{total}] {what}: {line}" if not self.live else f"{what}: {line}")


def _folded(text: Text, columns: int | None) -> Text:
    """``text`` folded as :func:`~tileops.report.texttable.fold` folds each of its lines, its styles kept (None:
    as it is)."""
    if columns is None:
        return text
    from rich.text import Text

    out = Text()
    for n, line in enumerate(text.split("\n", allow_blank=True)):
        if n:
            out.append("\n")
        pos = 0
        for i, part in enumerate(fold(line.plain, columns)):
            body = part.lstrip(" ") if i else part
            start = line.plain.find(body, pos)
            if start < 0:  # not a piece of the line (a tab textwrap turned into a space): the line unfolded
                return text
            out.append_text(Text("\n" + part[:len(part) - len(body)]) if i else Text())
            out.append_text(line[start:start + len(body)])
            pos = start + len(body)
    return out


def _write_listing(out: IO[str], plan: Listing, colour: bool) -> None:
    out.write("\n".join(plan.table().lines(colour)) + "\n")
    for note in plan.notes:
        out.write(f"note: {note}\n")
    out.write("\n".join(plan.lines) + "\n")
    out.flush()


# --------------------------------------------------------------------------- the plain log


def _plain_render(renderable: Any) -> str:
    """A rich renderable as plain text, wide enough that no table folds."""
    from rich.console import Console

    buf = io.StringIO()
    width = max(int(os.environ.get("COLUMNS", "0") or 0), 200)
    Console(file=buf, width=width, color_system=None, no_color=True, highlight=False,
            force_terminal=False).print(renderable, soft_wrap=True)  # sentences whole, however long
    return buf.getvalue()


class LogPrinter:
    """Plain lines for a log: what the console says, without markup, escape codes or wrapping."""

    def __init__(self, out: IO[str] | None = None, err: IO[str] | None = None) -> None:
        self._out, self._err = out, err

    @property
    def out(self) -> IO[str]:
        return self._out if self._out is not None else sys.stdout  # the stream of the moment (a test's capture)

    @property
    def err(self) -> IO[str]:
        return self._err if self._err is not None else sys.stderr

    def _write(self, text: str, result: bool) -> None:
        stream = self.out if result else self.err
        stream.write(text if text.endswith("\n") else text + "\n")
        stream.flush()

    def say(self, line: Styled, *, kind: Kind = "message", result: bool = False, bare: bool = False,
            **fields: Any) -> None:
        self._write(plain(_labelled(line, kind, bare)), result)

    def show(self, renderable: Any, *, data: Any = None, result: bool = True) -> None:
        self._write("\n".join(line.rstrip() for line in _plain_render(renderable).splitlines()), result)

    def text(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def listing(self, plan: Listing) -> None:
        _write_listing(self.out, plan, colour=False)

    def results(self, priced: Sequence[Priced], *, health: Health | None = None, title: str | None = None,
                comparison: Comparison | None = None, full_table: bool = False) -> None:
        from tileops.report.tables import render_text

        self._write(render_text(priced, "table", comparison=comparison, health=health, title=title,
                                full_table=full_table, colour=False), True)

    @contextlib.contextmanager
    def rows(self, total: int) -> Iterator[RowEvents]:
        yield _LogRows(self)

    @contextlib.contextmanager
    def steps(self, label: str, *, keep: bool) -> Iterator[StepCallback]:
        yield lambda what, step, steps: None  # the calibration's own lines say what happens


class _LogRows:
    def __init__(self, printer: LogPrinter) -> None:
        self.printer = printer

    def started(self, index: int, total: int, what: str, wait: str | None) -> None:
        if wait:
            self.printer.say(f"[{index}/{total}] {what}: {wait}")

    def new_pass(self, total: int, text: str) -> None:
        self.printer.say(text)

    def finished(self, index: int, total: int, what: str, line: str, fields: Mapping[str, Any]) -> None:
        self.printer.say(f"[{index}/{total}] {what}: {line}")


# --------------------------------------------------------------------------- JSON lines


class JsonLinesPrinter:
    """One JSON object per line on stdout for every event, ``kind`` first: a machine reads the run as it goes."""

    def __init__(self, out: IO[str] | None = None) -> None:
        self._out = out

    def emit(self, kind: str, **fields: Any) -> None:
        out = self._out if self._out is not None else sys.stdout
        out.write(json.dumps({"kind": kind, **fields}, default=str, allow_nan=False) + "\n")
        out.flush()

    def say(self, line: Styled, *, kind: Kind = "message", result: bool = False, bare: bool = False,
            **fields: Any) -> None:
        self.emit(kind, text=plain(line), **fields)

    def show(self, renderable: Any, *, data: Any = None, result: bool = True) -> None:
        if data is not None:
            self.emit("table", data=data)
        else:
            self.emit("table", text=_plain_render(renderable).rstrip("\n"))

    def text(self, text: str) -> None:
        self.emit("text", text=text)

    def listing(self, plan: Listing) -> None:
        for cells, _ in plan.rows:
            self.emit("list", **dict(zip(plan.columns, cells)))
        for note in plan.notes:
            self.emit("note", text=note)
        self.emit("summary", lines=plan.lines)

    def results(self, priced: Sequence[Priced], *, health: Health | None = None, title: str | None = None,
                comparison: Comparison | None = None, full_table: bool = False) -> None:
        from tileops.report.tables import as_json

        doc = as_json(priced, comparison=comparison, health=health)
        for row in doc.pop("rows", []):
            self.emit("row", **row)
        self.emit("summary", title=title, **doc)

    @contextlib.contextmanager
    def rows(self, total: int) -> Iterator[RowEvents]:
        yield _JsonRows(self)

    @contextlib.contextmanager
    def steps(self, label: str, *, keep: bool) -> Iterator[StepCallback]:
        yield lambda what, step, steps: self.emit("progress", label=label, what=what, step=step, steps=steps)


class _JsonRows:
    def __init__(self, printer: JsonLinesPrinter) -> None:
        self.printer = printer

    def started(self, index: int, total: int, what: str, wait: str | None) -> None:
        self.printer.emit("progress", event="started", index=index, total=total, row=what)

    def new_pass(self, total: int, text: str) -> None:
        self.printer.emit("progress", event="pass", total=total, text=text)

    def finished(self, index: int, total: int, what: str, line: str, fields: Mapping[str, Any]) -> None:
        self.printer.emit("progress", event="finished", index=index, total=total, row=what, text=line, **fields)


# --------------------------------------------------------------------------- choosing one


def on_a_terminal() -> bool:
    """Whether stdout or stderr is a terminal (rich's judgement: FORCE_COLOR and TTY_COMPATIBLE count)."""
    from rich.console import Console

    return Console().is_terminal or Console(stderr=True).is_terminal


def printer_on(out: IO[str], err: IO[str]) -> Printer:
    """A printer on these streams: the console where ``err`` takes colour (a terminal), plain lines elsewhere."""
    if colour_wanted(err):
        from rich.console import Console

        return ConsolePrinter(Console(file=out), Console(file=err, force_terminal=True))
    return LogPrinter(out, err)


def make_printer(output_format: str = "auto", *, piped_width: int = 200) -> Printer:
    """The printer ``--output-format`` names: auto is the console on a terminal, the plain log elsewhere.
    ``piped_width``: how wide the console draws on a stream that is not a terminal."""
    if output_format == "auto":
        output_format = "console" if on_a_terminal() else "log"
    if output_format == "console":
        return ConsolePrinter(piped_width=piped_width)
    if output_format == "log":
        return LogPrinter()
    if output_format == "jsonl":
        return JsonLinesPrinter()
    raise ValueError(f"unknown output format {output_format!r}; formats are {', '.join(OUTPUT_FORMATS)}")
