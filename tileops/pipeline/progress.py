"""Progress of long work on a terminal or in a log: the sweep's rows (a bar with the current row, or one line
per row) and a calibration's steps."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from tileops.bench.select import Planned
from tileops.bench.stopping import NOISE_REACHED, SAMPLE_CAP, TIME_CAP
from tileops.records import Record
from tileops.report.columns import seconds
from tileops.roofline import interval_words, rerun_interval, time_interval


#: How a progress line words a row's stop reason (``tileops.bench.stopping``'s reasons).
STOP_WORDS = {NOISE_REACHED: "precision reached", TIME_CAP: "time cap", SAMPLE_CAP: "sample cap"}


def row_line(rec: Record) -> str:
    """One row's outcome in a line: its level, how well this run knows it and where a rerun may read, the
    samples and why it stopped, the contention it met; why it was skipped; or its error."""
    if rec.status == "ok" and rec.timing:
        t = rec.timing
        level, rerun = time_interval(t), rerun_interval(t)
        if level is None:
            spread = " (no interval: too few blocks)"
        else:
            spread = " " + interval_words(t.actual_time_s, *level, t.ci_df).removeprefix("known to ")
            if rerun is not None and t.level_ci_s is not None and rerun != level:
                spread += f" (a rerun: {interval_words(t.actual_time_s, *rerun, t.ci_df).removeprefix('known to ')})"
        line = f"{seconds(t.median_s)}{spread} (n={t.n}, {STOP_WORDS.get(t.stop_reason, t.stop_reason)})"
        c = rec.conditions
        if c is not None and (c.contended or c.throttled):
            line += "; " + ("; ".join(c.contention) if c.contention else "throttled")
        return line + (f"; timed with {t.timer}: {t.fallback_reason}" if t.fallback_reason else "")
    if rec.status == "skipped":
        return f"skipped: {rec.skip_reason}"
    return f"ERROR ({rec.error.kind}): {rec.error.message.splitlines()[0][:160]}" if rec.error else "error"


def describe(p: Planned) -> str:
    return f"{p.op} {p.row.label} {p.case_name}" + (f" [{p.backend}]" if p.backend != "torch" else "")


class RowProgress:
    """A :class:`tileops.bench.sweep.SweepObserver` that draws on a rich console."""

    def __init__(self, console: Console, total: int) -> None:
        self.console = console
        self.live = console.is_terminal
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                 console=console, transient=False, disable=not self.live)
        self.bar = self.progress.add_task("benchmarking", total=total)

    def __enter__(self) -> RowProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def row_started(self, index: int, total: int, planned: Planned) -> None:
        self.progress.update(self.bar, description=escape(describe(planned)))  # "[compile]" is no markup tag
        if not self.live and planned.backend != "torch" and not planned.skip_reason:
            # a log shows a row when it ends; a first compile can take a minute, which must not read as a hang
            self.console.print(f"[{index}/{total}] {describe(planned)}: compiling its first call (up to "
                               "--compile-timeout); its time follows", highlight=False, markup=False, soft_wrap=True)

    def pass_started(self, number: int, total: int) -> None:
        """The sweep's second pass: the bar starts again over the rows it revisits, and a line says why."""
        self.progress.reset(self.bar, total=total, description="second pass")
        self.console.print(f"second pass: {total} row(s) visited again in a fresh worker process, so each row's "
                           "interval also covers what moves between processes and over the sweep; each line shows "
                           "this visit alone, every row's interval is set from both visits at the end (--passes 1 "
                           "skips the pass)", highlight=False, markup=False, soft_wrap=True)

    def row_finished(self, index: int, total: int, planned: Planned, record: Record) -> None:
        self.progress.advance(self.bar)
        if not self.live:  # logs (docker, CI): one line per row
            self.console.print(f"[{index}/{total}] {describe(planned)}: {row_line(record)}", highlight=False,
                               markup=False, soft_wrap=True)  # never folded at the console's width
        else:  # a terminal: every finished row's line stays, printed above the live bar
            self.progress.console.print(f"{describe(planned)}: {row_line(record)}", highlight=False, markup=False,
                                        soft_wrap=True)


class CalibrationProgress:
    """The device's calibration before the rows (``progress(what, step, steps)``): a bar on a terminal,
    nothing in a log (the calibration's own lines say what happens). Starts only if a step is reported."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(TextColumn("[bold]calibrating[/] {task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True,
                                 disable=not console.is_terminal)
        self.task: TaskID | None = None

    def __enter__(self) -> CalibrationProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.task is not None:
            self.progress.stop()

    def __call__(self, what: str, step: int, steps: int) -> None:
        if self.task is None:
            self.progress.start()
            self.task = self.progress.add_task(what, total=steps)
        self.progress.update(self.task, description=what, completed=step)


class StepBar:
    """A calibration's ``progress(what, step, steps)`` as a bar on ``console`` (stderr) that stays when done:
    ``tileops calibrate`` shows what it measured, step by step."""

    def __init__(self, console: Console, label: str) -> None:
        self.progress = Progress(TextColumn(f"[bold]{label}[/] {{task.description}}"), BarColumn(),
                                 TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                 console=console, transient=False)
        self.task: TaskID | None = None

    def __call__(self, what: str, step: int, steps: int) -> None:
        if self.task is None:
            self.task = self.progress.add_task(what, total=steps)
        self.progress.update(self.task, description=what, completed=step)

    def __enter__(self) -> StepBar:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
