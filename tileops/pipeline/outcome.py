"""A workflow's exit code, decided here for every command (``tileops.exitcodes`` names them).

Each workflow of the pipeline returns a result that says what happened; its
exit code comes from :func:`exit_code`, so "a physics breach outranks a failed
row, which outranks a failed push" is written once, not once per command. A
bad input never gets here: it is a ``TileOpsError`` before any work (exit 2).
"""

from __future__ import annotations

from tileops import exitcodes


def exit_code(*, stopped: int | None = None, unwritable: bool = False, breached: bool = False, failed: int = 0,
              below_floor: bool = False, no_floor: bool = False, busy: bool = False, below_stored: bool = False,
              sinks_unwritable: bool = False, push_failed: bool = False) -> int:
    """The exit code of a workflow's result, in the order a reader should worry.

    ``stopped``: the signal's exit code (130 Ctrl-C, 143 SIGTERM) when the work was interrupted: what
    finished is kept, and the resume is what matters. ``unwritable``: the work's own files could not be
    written (a full disk): exit 2. ``breached``: a physics-check breach (a formula claims the impossible):
    exit 3. ``failed``: rows, regressions, audit verdicts or devices that failed while the work finished:
    exit 1. ``below_floor``: a node's intake found a ceiling under its SKU's floor: exit 6. A calibration
    refused, nothing stored: ``busy``, measured contended: exit 5 (retry later); ``below_stored``, a ceiling below
    the stored calibration's beyond noise: exit 8. ``no_floor``: no floor judged a device: exit 7 (never a
    silent pass). Then the sinks, which never hide the above: a textfile
    directory that could not be written (exit 2), or a push that failed after its retries (exit 4).
    """
    if stopped is not None:
        return stopped
    if unwritable:
        return exitcodes.USAGE
    if breached:
        return exitcodes.PHYSICS
    if failed:
        return exitcodes.FAILED
    if below_floor:
        return exitcodes.BELOW_FLOOR
    if busy:
        return exitcodes.BUSY
    if below_stored:
        return exitcodes.BELOW_STORED
    if no_floor:
        return exitcodes.NO_FLOOR
    if sinks_unwritable:
        return exitcodes.USAGE
    if push_failed:
        return exitcodes.PUSH
    return exitcodes.OK
