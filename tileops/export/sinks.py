"""Send priced runs to the sinks asked for: the textfile first, then the Pushgateway.

The local sink goes first so a network failure never costs it; the records
are only ever read. The result is an exit code, so ``tileops export`` and the
end of ``tileops bench`` report a failed push the same way (``exitcodes.PUSH``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from tileops import exitcodes
from tileops.calibrate.results import device_profile_reader
from tileops.errors import TileOpsError
from tileops.fsutil import unwritable_dir
from tileops.profiles import ProfileChooser

from .calibration import device_calibrations
from .metrics import DEFAULT_DETAIL
from .push import DEFAULT_JOB, RetryPolicy, check_gateway_url, push_snapshot
from .snapshot import AuditSnapshot, Snapshot, load_results, split_audit
from .textfile import write_textfile

__all__ = ["check_sinks", "export_run", "export_snapshots"]


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


def export_snapshots(snapshots: list[Snapshot], push_url: str | None = None, textfile_dir: Path | None = None,
                     *, job: str = DEFAULT_JOB, instance: str | None = None, policy: RetryPolicy = RetryPolicy(),
                     log: Callable[[str], None] = _stderr, detail: str = DEFAULT_DETAIL) -> int:
    """Send already-loaded snapshots to the sinks, their metrics at ``detail`` (``lean`` or ``full``).

    A device's audit goes apart from its run (``split_audit``): its own textfile and Pushgateway group.
    0; ``exitcodes.PUSH`` when any device's push failed; ``exitcodes.USAGE`` when the
    textfile directory cannot be written (the push is still attempted).
    """
    rc = exitcodes.OK
    snapshots = [part for snap in snapshots for part in split_audit(snap)]
    if textfile_dir is not None:
        for snap in snapshots:
            try:
                path = write_textfile(Path(textfile_dir), snap, detail=detail)
            except OSError as exc:
                log(f"tileops export: cannot write the textfile in {textfile_dir}: {exc.strerror or exc}; "
                    "check the directory exists and is writable (node_exporter --collector.textfile.directory)")
                rc = exitcodes.USAGE
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
                rc = rc or exitcodes.PUSH
    return rc


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


def export_run(run_dir: Path | str, push_url: str | None = None, textfile_dir: Path | str | None = None, *,
               chooser: ProfileChooser | None = None, job: str = DEFAULT_JOB, instance: str | None = None,
               policy: RetryPolicy = RetryPolicy(), log: Callable[[str], None] = _stderr,
               detail: str = DEFAULT_DETAIL) -> int:
    """Export a finished run (``tileops bench --out DIR``), or an audit folder of its own (``tileops audit
    --out DIR``), to a Pushgateway and/or a textfile directory.

    Call it after ``run.json`` holds the run's final status: a run is healthy
    (and sets the last-success timestamp) only when it completed without a
    physics breach. ``chooser`` picks each device's profile (default: the
    profile matching each device). Returns 0; ``exitcodes.PUSH`` (4) when a push
    still failed after its retries (the textfile, if asked, is written and the
    records are untouched); ``exitcodes.USAGE`` (2) when the run cannot be read.
    """
    try:
        snapshots = load_results(Path(run_dir), chooser or ProfileChooser.resolve(per_device=device_profile_reader()),
                                 device_calibrations())
        return export_snapshots(snapshots, push_url, Path(textfile_dir) if textfile_dir else None, job=job,
                                instance=instance, policy=policy, log=log, detail=detail)
    except TileOpsError as exc:
        log(f"tileops export: error: {exc}")
        return exitcodes.USAGE
