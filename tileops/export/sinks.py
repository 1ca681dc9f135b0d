"""Send priced runs to the sinks asked for: the textfile first, then the Pushgateway.

The local sink goes first so a network failure never costs it; the records
are only ever read. What the sinks did is a :class:`Published`, from which the
composing layer decides the exit code (``tileops.pipeline.outcome``), so
``tileops export`` and the end of ``tileops bench`` report a failed push the
same way.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable, Sequence

from tileops.errors import TileOpsError
from tileops.fsutil import unwritable_dir

from .metrics import DEFAULT_DETAIL
from .push import DEFAULT_JOB, RetryPolicy, check_gateway_url, push_snapshot
from .snapshot import AuditSnapshot, Snapshot, split_audit
from .textfile import write_textfile

__all__ = ["Published", "check_sinks", "export_snapshots"]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def check_sinks(push_url: str | None, textfile_dir: Path | None) -> None:
    """TileOpsError (exit 2) when ``--push`` is not a URL or ``--textfile`` cannot be written: checked
    before any work, so a typo costs nothing (not even the bench's hours)."""
    if push_url:
        try:
            check_gateway_url(push_url)
        except ValueError as exc:
            raise TileOpsError(str(exc)) from None
    if textfile_dir is not None:
        why = unwritable_dir(textfile_dir)
        if why:
            raise TileOpsError(f"--textfile {textfile_dir}: cannot write the textfile there ({why}); give a "
                               "writable directory (node_exporter --collector.textfile.directory)")


@dataclass(frozen=True)
class Published:
    """What the sinks did with a run's snapshots: the textfile directory's failure, if any (the push is still
    attempted), and how many groups could not be pushed after their retries."""

    textfile_error: str | None = None
    failed_pushes: int = 0

    @property
    def ok(self) -> bool:
        return self.textfile_error is None and not self.failed_pushes


def export_snapshots(snapshots: Sequence[Snapshot], push_url: str | None = None, textfile_dir: Path | None = None,
                     *, job: str = DEFAULT_JOB, instance: str | None = None, policy: RetryPolicy = RetryPolicy(),
                     log: Callable[[str], None] = _stderr, detail: str = DEFAULT_DETAIL) -> Published:
    """Send already-loaded snapshots to the sinks, their metrics at ``detail`` (``lean`` or ``full``).

    A device's audit goes apart from its run (``split_audit``): its own textfile and Pushgateway group.
    Every failure is said through ``log`` and counted in what is returned; none raises.
    """
    textfile_error: str | None = None
    failed = 0
    snapshots = [part for snap in snapshots for part in split_audit(snap)]
    if textfile_dir is not None:
        for snap in snapshots:
            try:
                path = write_textfile(Path(textfile_dir), snap, detail=detail)
            except OSError as exc:
                textfile_error = (f"cannot write the textfile {exc.filename or 'in ' + str(textfile_dir)}: "
                                  f"{exc.strerror or exc}")
                log(f"tileops export: {textfile_error}; check the directory exists and is writable "
                    "(node_exporter --collector.textfile.directory)")
                break
            log(f"tileops export: wrote {path}")
    if push_url:
        for snap in snapshots:
            res = push_snapshot(push_url, snap, job=job, instance=instance, policy=policy, log=log, detail=detail)
            what = "the audit of " if isinstance(snap, AuditSnapshot) else ""
            device = f"{snap.device.model} {snap.device.uuid}".strip() or f"no device ({snap.device.hostname})"
            if res.ok:
                log(f"tileops export: pushed {what}{device} to {res.url} (job={res.job}, attempt {res.attempts})")
            else:
                log(f"tileops export: push of {what}{device} to {res.url} failed after {res.attempts} attempt(s): "
                    f"{res.error}; the results in {snap.results_dir} are untouched, re-export them with "
                    f"`{_reexport(snap.results_dir, push_url, job, instance, detail)}`")
                failed += 1
    return Published(textfile_error, failed)


def _reexport(run_dir: Path, push_url: str, job: str, instance: str | None, detail: str) -> str:
    """The command that pushes the same group again: a hint without the run's --job or --instance would push
    into another group and leave this one stale."""
    cmd = f"tileops export {run_dir} --push {push_url}"
    if job != DEFAULT_JOB:
        cmd += f" --job {job}"
    if instance:
        cmd += f" --instance {instance}"
    if detail != DEFAULT_DETAIL:
        cmd += f" --metrics-detail {detail}"
    return cmd
