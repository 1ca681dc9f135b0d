"""Export one finished run to the sinks asked for: the textfile first, then the Pushgateway.

The local sink goes first so a network failure never costs it; the records
are only ever read. The result is an exit code, so ``tileops export`` and the
end of ``tileops bench`` report a failed push the same way (``EXIT_PUSH``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from tileops.cli import EXIT_OK, EXIT_PUSH, EXIT_USAGE
from tileops.errors import TileOpsError

from .calibration import device_calibrations
from .push import DEFAULT_JOB, RetryPolicy, push_snapshot
from .snapshot import RunSnapshot, load_run, resolve_profiles
from .textfile import write_textfile

__all__ = ["EXIT_PUSH", "export_run", "export_snapshots"]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def export_snapshots(snapshots: list[RunSnapshot], push_url: str | None = None, textfile_dir: Path | None = None,
                     *, job: str = DEFAULT_JOB, instance: str | None = None, policy: RetryPolicy = RetryPolicy(),
                     log: Callable[[str], None] = _stderr) -> int:
    """Send already-loaded snapshots to the sinks.

    0; EXIT_PUSH when any device's push failed; EXIT_USAGE when the textfile
    directory cannot be written (the push is still attempted).
    """
    rc = EXIT_OK
    if textfile_dir is not None:
        for snap in snapshots:
            try:
                path = write_textfile(Path(textfile_dir), snap)
            except OSError as exc:
                log(f"tileops export: cannot write the textfile in {textfile_dir}: {exc.strerror or exc}; "
                    "check the directory exists and is writable (node_exporter --collector.textfile.directory)")
                rc = EXIT_USAGE
                break
            log(f"tileops export: wrote {path}")
    if push_url:
        for snap in snapshots:
            res = push_snapshot(push_url, snap, job=job, instance=instance, policy=policy, log=log)
            if res.ok:
                log(f"tileops export: pushed {snap.device.model} {snap.device.uuid} to {res.url} "
                    f"(job={job}, attempt {res.attempts})")
            else:
                log(f"tileops export: push to {res.url} failed after {res.attempts} attempt(s): {res.error}; "
                    f"the results in {snap.run_dir} are untouched, re-export them with "
                    f"`tileops export {snap.run_dir} --push {push_url}`")
                rc = rc or EXIT_PUSH
    return rc


def export_run(run_dir: Path | str, push_url: str | None = None, textfile_dir: Path | str | None = None, *,
               profile: str | Path | None = None, job: str = DEFAULT_JOB, instance: str | None = None,
               policy: RetryPolicy = RetryPolicy(), log: Callable[[str], None] = _stderr) -> int:
    """Export a finished run (``tileops bench --out DIR``) to a Pushgateway and/or a textfile directory.

    Call it after ``run.json`` holds the run's final status: a run is healthy
    (and sets the last-success timestamp) only when it completed without a
    physics breach. ``profile`` is a profile name or file (default: the
    profile matching each device). Returns 0; ``EXIT_PUSH`` (4) when a push
    still failed after its retries (the textfile, if asked, is written and the
    records are untouched); ``EXIT_USAGE`` (2) when the run cannot be read.
    """
    try:
        snapshots = load_run(Path(run_dir), resolve_profiles(profile), device_calibrations())
        return export_snapshots(snapshots, push_url, Path(textfile_dir) if textfile_dir else None, job=job,
                                instance=instance, policy=policy, log=log)
    except TileOpsError as exc:
        log(f"tileops export: error: {exc}")
        return EXIT_USAGE
