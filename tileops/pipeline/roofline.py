"""``tileops roofline RESULTS...`` composed: price records on disk against device profiles, report, compare.

The records stream through pricing into the report (``tileops.report.stream``),
so memory follows the size of the output, not of the records; nothing is
written until every record has been read, so a bad line is a TileOpsError
(exit 2) with no partial report. The health is the roofline tool's
(``tileops.roofline.health``); the exit code, ``tileops.pipeline.outcome``'s.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO
from collections.abc import Callable, Sequence

from tileops.defaults import BASELINE_THRESHOLD
from tileops.errors import TileOpsError
from tileops.pipeline.outcome import exit_code

if TYPE_CHECKING:
    from tileops.profiles import ProfileChooser
    from tileops.report.baseline import Comparison
    from tileops.roofline import Health, Priced

@dataclass(frozen=True)
class RooflineOptions:
    """What ``tileops roofline`` reads, how it prices it, and what it writes."""

    results: Sequence[Path]
    profile: str | None = None  # a profile name, a file, or a device name it matches; None: each device's own
    format: str = "table"
    full_table: bool = False
    baseline: Sequence[Path] = ()  # older runs to compare with, row by row
    threshold: float = BASELINE_THRESHOLD
    plot_dir: Path | None = None  # roofline.png and roofline.svg, one pair per profile
    jobs: int | None = None  # processes reading a large records file; None: the CPUs this process may use


@dataclass(frozen=True)
class RooflineResult:
    """What the report found: the run's health and, with a baseline, the comparison."""

    health: Health
    comparison: Comparison | None = None

    @property
    def regressions(self) -> int:
        return len(self.comparison.regressions) if self.comparison is not None else 0

    @property
    def exit_code(self) -> int:
        """3 on a physics breach, else 1 on a baseline regression or an error record, else 0."""
        return exit_code(breached=not self.health.ok, failed=self.regressions + self.health.errors)

    def verdict_line(self, threshold: float) -> str | None:
        """The sentence for stderr that says why the exit code is not 0 (None when it is)."""
        h = self.health
        if not h.ok:
            return (f"roofline: physics check FAILED: {h.breaches} row(s) breach a theoretical ceiling "
                    f"(FORMULA ERROR); exit {self.exit_code}")
        if self.regressions:
            return (f"roofline: {self.regressions} row(s) slower than the baseline (more than {threshold:.0%}, and "
                    f"beyond both runs' intervals where they have them); exit {self.exit_code}")
        if h.errors:
            return f"roofline: {h.errors} error record(s) in the results; exit {self.exit_code}"
        return None


class KeepRows:
    """A sink holding every priced row (the plot and the HTML page need them all)."""

    def __init__(self) -> None:
        self.rows: list[Priced] = []

    def add(self, p: Priced) -> None:
        self.rows.append(p)

    def merge(self, later: KeepRows) -> None:
        self.rows += later.rows


def run_roofline(opts: RooflineOptions, out: TextIO | None = None, err: TextIO | None = None) -> RooflineResult:
    """Price ``opts.results``, write the report on ``out`` (the table in colour where ``out`` is a terminal
    that wants it) and the plot, and return what it found.

    ``out`` and ``err`` default to this moment's stdout and stderr. ``err`` gets the lines for a person beside
    the report: the files written, and why the exit code is not
    0 (in colour where ``err`` wants it). TileOpsError, before anything is written, for input that cannot
    be read: a missing or invalid records file, an unknown or invalid profile, no records, an unwritable
    plot directory."""
    from tileops.records import collecting_rarely
    from tileops.report.printer import printer_on
    from tileops.report.texttable import colour_wanted

    out = sys.stdout if out is None else out  # the streams of the moment (a test's capture), not the import's
    err = sys.stderr if err is None else err
    printer = printer_on(out, err)

    with collecting_rarely():
        result = _run(opts, out, printer.say, opts.format == "table" and colour_wanted(out))
    line = result.verdict_line(opts.threshold)
    if line is not None:
        printer.say([(line, "bold red" if not result.health.ok else "red")], kind="error", bare=True)
    return result


def _run(opts: RooflineOptions, out: TextIO, say: Callable[[str], None], colour: bool) -> RooflineResult:
    from tileops.fsutil import unwritable_dir
    from tileops.pipeline.export import chooser as make_chooser
    from tileops.profiles import ProfileError
    from tileops.records import RecordFileError
    from tileops.report.baseline import TimeIndex, compare_indexes
    from tileops.report.stream import default_jobs, read_priced
    from tileops.report.summary import RunFacts
    from tileops.report.tables import new_report
    from tileops.report.texttable import terminal_columns

    jobs = default_jobs() if opts.jobs is None else opts.jobs
    if jobs < 1:
        raise TileOpsError("--jobs must be >= 1")
    if opts.plot_dir is not None:
        why = unwritable_dir(opts.plot_dir)
        if why:
            raise TileOpsError(f"--plot {opts.plot_dir}: cannot write the plot there ({why}); give a writable "
                               "directory")
        jobs = 1  # the plot needs every priced row in this process
    baseline = bool(opts.baseline)

    def sinks() -> list[Any]:
        made: list[Any] = [RunFacts(), new_report(opts.format, baseline=baseline, full_table=opts.full_table)]
        made.append(TimeIndex() if baseline else None)
        made.append(KeepRows() if opts.plot_dir is not None else None)
        return [s for s in made if s is not None]

    try:
        # --profile: a file, a name, or a device name it matches; else each device's own calibration
        chooser = make_chooser(opts.profile)
        old = None
        if baseline:
            (old,) = read_priced(opts.baseline, chooser, lambda: [TimeIndex()], jobs=jobs)
            if not len(old):
                raise TileOpsError(f"baseline {', '.join(map(str, opts.baseline))}: no records")
        facts, report, *rest = read_priced(opts.results, chooser, sinks, jobs=jobs)
    except (FileNotFoundError, RecordFileError, ProfileError) as exc:  # a profile two profiles claim, too
        raise TileOpsError(str(exc)) from None
    if not facts.rows:
        raise TileOpsError(f"results {', '.join(map(str, opts.results))}: no records")
    new = rest.pop(0) if baseline else None
    comparison = compare_indexes(new, old, opts.threshold) if (new is not None and old is not None) else None
    h = facts.health()
    report.write(out, facts, comparison, h, colour=colour, width=terminal_columns(out))  # folded on a terminal only
    out.flush()
    if opts.plot_dir is not None:
        try:
            _plot(rest.pop(0).rows, chooser, opts.plot_dir, say)
        except OSError as exc:
            raise TileOpsError(f"cannot write the plot {exc.filename or 'in ' + str(opts.plot_dir)}: "
                               f"{exc.strerror or exc}; each picture there is whole, the one before or the new "
                               "one") from None
    return RooflineResult(h, comparison)


def _plot(priced: list[Priced], chooser: ProfileChooser, out_dir: Path, say: Callable[[str], None]) -> None:
    from tileops.report.plot import write_plot  # matplotlib only when asked

    used = [p for p in chooser.profiles if any(q.profile == p.name for q in priced)]
    if not used:
        say("roofline: no row is priced on a profile, so there is no roofline to plot")
        return
    for prof in used:
        stem = "roofline" if len(used) == 1 else f"roofline-{prof.name}"
        for path in write_plot(priced, prof, out_dir, stem=stem):
            say(f"wrote {path}")
