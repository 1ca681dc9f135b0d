"""The sweep's progress in words: each row's outcome as a line for a person and fields for a machine, told to
a printer (``tileops.report.printer``: a bar on a terminal, a line per row in a log, JSON objects)."""

from __future__ import annotations

from typing import Any

from tileops.bench.select import Planned
from tileops.bench.stopping import NOISE_REACHED, SAMPLE_CAP, TIME_CAP
from tileops.records import Record
from tileops.report.columns import seconds
from tileops.report.printer import RowEvents
from tileops.report.summary import ITEM
from tileops.roofline import interval_words, rerun_interval, sliced_words, time_interval


#: How a progress line words a row's stop reason (``tileops.bench.stopping``'s reasons).
STOP_WORDS = {NOISE_REACHED: "precision reached", TIME_CAP: "time cap", SAMPLE_CAP: "sample cap"}


def row_line(rec: Record) -> str:
    """One row's outcome in a line: its level, how well this run knows it and where a rerun may read, the
    samples and why it stopped, the contention it met; why it was skipped; or its error."""
    if rec.status == "ok" and rec.timing:
        t = rec.timing
        level, rerun = time_interval(t), rerun_interval(t)
        sliced = sliced_words(rec)
        if sliced is not None:
            spread = f" (no precise interval: {sliced})"
        elif level is None:  # a second visit's own line: one block cannot tell its spread
            spread = (" (one block, its time cap reached: this visit alone has no interval; the row's is set from "
                      "both visits at the end)")
        else:
            words = interval_words(t.actual_time_s, *level, t.ci_df)
            spread = " " + words.removeprefix("known to ")
            again = interval_words(t.actual_time_s, *rerun, t.ci_df) if rerun is not None else words
            if t.level_ci_s is not None and again != words and words.startswith("known"):
                # a level not known within 10x says where a rerun may read no better: its reason is said once
                spread += f" (a rerun: {again.removeprefix('known to ')})"
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


def row_fields(p: Planned, rec: Record) -> dict[str, Any]:
    """What a machine reads of a finished row: its key, its status, and its level and interval where it has
    them (seconds); the reason it was skipped or its error."""
    fields: dict[str, Any] = {"op": p.op, "label": p.row.label, "dtype": p.case_name, "backend": p.backend,
                              "status": rec.status}
    if rec.status == "ok" and rec.timing:
        t = rec.timing
        level = time_interval(t)
        fields.update(median_s=t.median_s, n=t.n, stop_reason=t.stop_reason,
                      interval_s=list(level) if level is not None else None)
    elif rec.status == "skipped":
        fields["skip_reason"] = rec.skip_reason
    elif rec.error is not None:
        fields["error"] = {"kind": rec.error.kind, "message": rec.error.message}
    return fields


class RowProgress:
    """A :class:`tileops.bench.sweep.SweepObserver` that words each row for a printer's :class:`RowEvents`."""

    def __init__(self, events: RowEvents) -> None:
        self.events = events

    def row_started(self, index: int, total: int, planned: Planned) -> None:
        # a log shows a row when it ends; a first compile can take a minute, which must not read as a hang
        wait = ("compiling its first call (up to --compile-timeout); its time follows"
                if planned.backend != "torch" and not planned.skip_reason else None)
        self.events.started(index, total, describe(planned), wait)

    def pass_started(self, number: int, total: int) -> None:
        """The sweep's second pass: the bar starts again over the rows it revisits, and a line says why."""
        self.events.new_pass(total, f"second pass: {total} row(s) visited again in a fresh worker process "
                             "(--passes 1 skips the pass)\n"
                             f"{ITEM}so each row's interval also covers what moves between processes and over the "
                             "sweep\n"
                             f"{ITEM}each line below shows this visit alone; every row's interval is set from both "
                             "visits at the end")

    def row_finished(self, index: int, total: int, planned: Planned, record: Record) -> None:
        self.events.finished(index, total, describe(planned), row_line(record), row_fields(planned, record))
