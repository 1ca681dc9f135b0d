"""``tileops export`` composed, and the metrics step every workflow that exports shares (``tileops bench``).

Results on disk (run directories, records files, audit folders) are priced once
per device (``tileops.export.snapshot``, through the roofline tool), the newest
run of each device is joined with its newest audit, and the snapshots go to the
sinks asked for (a textfile directory, a Pushgateway) or, without one, to
stdout as the exposition a scrape would see. The exporter (prometheus_client,
pydantic) is imported when a workflow publishes, not when this module loads:
``tileops bench`` without sinks, and every command's ``--help``, never load it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING
from collections.abc import Callable, Sequence

from tileops.defaults import METRICS_DETAIL, PUSH_ATTEMPTS, PUSH_BACKOFF_S, PUSH_JOB, PUSH_TIMEOUT_S
from tileops.errors import TileOpsError
from tileops.pipeline.outcome import exit_code

if TYPE_CHECKING:
    from tileops.export.push import RetryPolicy
    from tileops.export.sinks import Published
    from tileops.export.snapshot import Snapshot
    from tileops.profiles import ProfileChooser

@dataclass(frozen=True)
class Sinks:
    """Where a workflow's metrics go, and how: the sink flags of ``bench`` and ``export``."""

    push_url: str | None = None
    textfile_dir: Path | None = None
    job: str | None = None  # None: PUSH_JOB
    instance: str | None = None  # None: the host that ran the bench
    push_attempts: int = PUSH_ATTEMPTS
    push_backoff_s: float = PUSH_BACKOFF_S
    push_timeout_s: float = PUSH_TIMEOUT_S
    detail: str = METRICS_DETAIL

    @property
    def wanted(self) -> bool:
        """A sink is asked for (else ``tileops export`` prints the exposition, and the bench exports nothing)."""
        return bool(self.push_url) or self.textfile_dir is not None

    def policy(self) -> RetryPolicy:
        from tileops.export.push import RetryPolicy

        return RetryPolicy(attempts=self.push_attempts, backoff_s=self.push_backoff_s, timeout_s=self.push_timeout_s)

    def check(self) -> None:
        """TileOpsError (exit 2) for a push URL that is not one or a textfile directory that cannot be
        written: checked before any work, so a typo costs nothing (not even a bench's hours)."""
        if self.wanted:
            from tileops.export.sinks import check_sinks

            check_sinks(self.push_url, self.textfile_dir)

    def publish(self, snapshots: Sequence[Snapshot], log: Callable[[str], None] | None = None) -> Published:
        """The snapshots to every sink asked for (textfile first, then the push); what each did."""
        from tileops.export.sinks import export_snapshots

        kw = {"log": log} if log is not None else {}
        return export_snapshots(snapshots, self.push_url, self.textfile_dir, job=self.job or PUSH_JOB,
                                instance=self.instance, policy=self.policy(), detail=self.detail, **kw)


@dataclass(frozen=True)
class ExportOptions:
    """``tileops export RESULTS...``: what to read, how to price it, where to send it."""

    results: Sequence[Path]
    profile: str | None = None  # a profile name or file; None: each device's own profile
    sinks: Sinks = field(default_factory=Sinks)
    jobs: int | None = None  # processes reading a large records file; None: the CPUs this process may use


@dataclass(frozen=True)
class ExportResult:
    """What ``tileops export`` did: the sinks' outcome (None: the exposition went to stdout)."""

    snapshots: int
    published: Published | None = None

    @property
    def exit_code(self) -> int:
        p = self.published
        if p is None:
            return exit_code()
        return exit_code(sinks_unwritable=p.textfile_error is not None, push_failed=bool(p.failed_pushes))


def chooser(profile: str | None) -> ProfileChooser:
    """The profile chooser every reader of results uses: ``--profile`` for every device, else each device's
    own calibration over its model's profile (``tileops.ledger.profile_chooser``)."""
    from tileops.ledger import profile_chooser

    return profile_chooser(profile)


def load(results: Sequence[Path], chooser_: ProfileChooser, *, jobs: int | None = None) -> list[Snapshot]:
    """Each device's newest run (with its newest audit) among ``results``; TileOpsError naming a path that
    holds no records (an empty run is a mistake to name, not a silent 0)."""
    from tileops.export.calibration import device_calibrations
    from tileops.export.snapshot import latest_per_device, load_results
    from tileops.report.stream import default_jobs

    calibrations = device_calibrations()
    n = default_jobs() if jobs is None else jobs  # a large records file is read by one process per CPU
    loaded: list[Snapshot] = []
    for path in results:
        found = load_results(path, chooser_, calibrations, jobs=n)
        if not found:
            raise TileOpsError(f"results {path}: no records (nothing to export; a run stopped before its first row, "
                               "or the wrong directory)")
        loaded += found
    return latest_per_device(loaded)


def run_export(opts: ExportOptions, stdout: IO[bytes]) -> ExportResult:
    """``tileops export``: check the sinks, price and load every result, then publish (or print the exposition
    on ``stdout`` when no sink is asked for). A bad input is a TileOpsError before anything is sent."""
    from tileops.records import collecting_rarely

    with collecting_rarely():
        opts.sinks.check()
        snaps = load(opts.results, chooser(opts.profile), jobs=opts.jobs)
        if not opts.sinks.wanted:
            from tileops.export.metrics import exposition

            stdout.write(exposition(snaps, detail=opts.sinks.detail))
            stdout.flush()
            return ExportResult(len(snaps))
        return ExportResult(len(snaps), opts.sinks.publish(snaps))


def export_run(run_dir: Path | str, sinks: Sinks, *, chooser_: ProfileChooser | None = None,
               log: Callable[[str], None] | None = None) -> ExportResult:
    """Export one finished run (``tileops bench --out DIR``), or an audit folder of its own (``tileops audit
    --out DIR``), to the sinks. Call it after ``run.json`` holds the run's final status: a run is healthy
    (and sets the last-success timestamp) only when it completed without a physics breach. A results path
    that cannot be read is a TileOpsError naming it."""
    from tileops.export.calibration import device_calibrations
    from tileops.export.snapshot import load_results

    snapshots = load_results(Path(run_dir), chooser_ or chooser(None), device_calibrations())
    return ExportResult(len(snapshots), sinks.publish(snapshots, log))
