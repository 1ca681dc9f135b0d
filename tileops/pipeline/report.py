"""``tileops report RUN`` composed, and the bench's ``report.html``: a run's records priced once, written as one
HTML page a person opens in a browser (``tileops.report.html``).

The records are priced as ``tileops roofline`` prices them (``read_priced``,
the same chooser, the same baseline comparison), so the page and the table
agree row for row; run.json beside the records adds the host and the run. The
exit code is roofline's (3 a physics breach, 1 a baseline regression or an
error record, 2 unreadable input); the page is written whatever the health,
since a failing run is the one a person most needs to read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Mapping, Sequence

from tileops.defaults import BASELINE_THRESHOLD
from tileops.errors import TileOpsError
from tileops.pipeline.outcome import exit_code
from tileops.pipeline.roofline import KeepRows

if TYPE_CHECKING:
    from tileops.profiles import Profile, ProfileChooser
    from tileops.report.baseline import Comparison
    from tileops.report.printer import Printer
    from tileops.roofline import Health, Priced

#: The page's name in a run directory (``tileops bench`` writes it there; ``tileops report`` by default).
REPORT_FILE = "report.html"


@dataclass(frozen=True)
class ReportRequest:
    """What ``tileops report`` reads and where it writes the page."""

    run: Path  # a run directory, or its records.jsonl
    baseline: Sequence[Path] = ()  # older runs to compare with, row by row
    output: Path | None = None  # None: report.html beside the records
    profile: str | None = None  # a profile name, a file, or a device name it matches; None: each device's own
    threshold: float = BASELINE_THRESHOLD


@dataclass(frozen=True)
class ReportResult:
    """Where the page is, and what the rows told (the exit code is roofline's)."""

    path: Path
    rows: int
    health: Health
    comparison: Comparison | None = None

    @property
    def regressions(self) -> int:
        return len(self.comparison.regressions) if self.comparison is not None else 0

    @property
    def exit_code(self) -> int:
        return exit_code(breached=not self.health.ok, failed=self.regressions + self.health.errors)


def run_report(req: ReportRequest, printer: Printer | None = None) -> ReportResult:
    """Price ``req.run`` (and its baseline), write the page, and say where it is. TileOpsError (exit 2), before
    anything is written, for input that cannot be read: a missing or invalid records file or run.json, an
    unknown profile, no records, an output that cannot be written."""
    import sys

    from tileops.records import collecting_rarely, resolve_records_path
    from tileops.report.printer import printer_on

    printer = printer if printer is not None else printer_on(sys.stdout, sys.stderr)
    try:
        records = resolve_records_path(req.run)
    except FileNotFoundError as exc:
        raise TileOpsError(str(exc)) from None
    out = req.output if req.output is not None else records.parent / REPORT_FILE
    with collecting_rarely():
        priced, facts, comparison, chooser = _read(req, records)
    run = _run_info(records.parent)
    html = _render(priced, facts, _profiles_of(priced, chooser), comparison, run, str(req.run))
    _write(out, html)
    h = facts.health()
    result = ReportResult(out, len(priced), h, comparison)
    printer.say(f"report: {out} ({len(priced):,} row(s)"
                + (f", {result.regressions} slower than the baseline" if comparison is not None else "")
                + "; open it in a browser)", result=True, path=str(out))
    if result.exit_code:
        why = ("a physics breach (FORMULA ERROR)" if not h.ok else
               f"{result.regressions} row(s) slower than the baseline" if result.regressions else
               f"{h.errors} error record(s)")
        printer.say(f"report: {why}; exit {result.exit_code}", kind="error", bare=True)
    return result


def _read(req: ReportRequest, records: Path) -> tuple[list[Priced], Any, Comparison | None, ProfileChooser]:
    from tileops.pipeline.export import chooser as make_chooser
    from tileops.profiles import ProfileError
    from tileops.records import RecordFileError
    from tileops.report.baseline import TimeIndex, compare_indexes
    from tileops.report.stream import read_priced
    from tileops.report.summary import RunFacts

    try:
        chooser = make_chooser(req.profile)
        old = None
        if req.baseline:
            (old,) = read_priced(req.baseline, chooser, lambda: [TimeIndex()])
            if not len(old):
                raise TileOpsError(f"baseline {', '.join(map(str, req.baseline))}: no records")
        facts, kept, new = read_priced([records], chooser, lambda: [RunFacts(), KeepRows(), TimeIndex()])
    except (FileNotFoundError, RecordFileError, ProfileError) as exc:
        raise TileOpsError(str(exc)) from None
    if not facts.rows:
        raise TileOpsError(f"{records}: no records (run `tileops bench --out DIR` first)")
    comparison = compare_indexes(new, old, req.threshold) if old is not None else None
    return kept.rows, facts, comparison, chooser


def _run_info(run_dir: Path) -> dict[str, Any] | None:
    """run.json beside the records, as data (None: there is none); TileOpsError naming it when it is bad."""
    from tileops.records import RecordFileError, read_run_info, to_data

    try:
        info = read_run_info(run_dir)
    except RecordFileError as exc:
        raise TileOpsError(str(exc)) from None
    return to_data(info) if info is not None else None


def _profiles_of(priced: Sequence[Priced], chooser: ProfileChooser) -> list[Profile]:
    return [p for p in chooser.profiles if any(q.profile == p.name for q in priced)]


def _render(priced: Sequence[Priced], facts: Any, profiles: Sequence[Profile], comparison: Comparison | None,
            run: Mapping[str, Any] | None, source: str) -> str:
    from tileops.report.html import ReportInput, render_report

    return render_report(ReportInput(priced, facts.health(), facts, profiles, comparison, run, source))


def _write(path: Path, text: str) -> None:
    from tileops.fsutil import write_atomic

    try:
        write_atomic(path, text)
    except OSError as exc:
        raise TileOpsError(f"{path}: cannot write the report ({exc.strerror or exc}); give a writable path with "
                           "-o FILE") from None


def write_run_report(run_dir: Path, priced: Sequence[Priced], profiles: Sequence[Profile],
                     run: Mapping[str, Any] | None) -> Path:
    """A bench run's page, ``run_dir/report.html``, from the rows it has just priced (no second pricing). OSError
    where it cannot be written: the bench reports it as it reports the plot's."""
    from tileops.fsutil import write_atomic
    from tileops.report.summary import RunFacts

    path = run_dir / REPORT_FILE
    write_atomic(path, _render(priced, RunFacts.of(priced), profiles, None, run, str(run_dir)))
    return path
