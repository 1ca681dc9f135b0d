"""DCGM's profiling paused for the audit (``tileops audit --pause-dcgm``) and always resumed after it.

DCGM's profiling metrics (dcgm-exporter's ``DCGM_FI_PROF_*`` fields) hold the
GPU's performance monitors, and while they do Nsight Compute cannot profile
("a driver resource was unavailable"). ``dcgmi profile --pause`` releases them
and ``dcgmi profile --resume`` takes them back. A node left paused silently
loses its DCGM profiling series, so the resume runs whatever ends the audit (a
finished run, an error, Ctrl-C, SIGTERM: the caller runs under
``tileops.interrupts.handled``), an interrupt arriving during either dcgmi
call waits for that call to finish, and a failed resume is returned for the
caller to report loudly rather than raised over the audit's own outcome.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tileops import interrupts
from tileops.errors import TileOpsError

#: Seconds one ``dcgmi profile`` call may take (it asks the host engine, which answers at once).
DCGMI_TIMEOUT_S = 60.0
PAUSE = ("profile", "--pause")
RESUME = ("profile", "--resume")


class DcgmPauseError(TileOpsError):
    """``--pause-dcgm`` could not pause DCGM's profiling: nothing was audited (exit 2)."""


@dataclass(frozen=True)
class ResumeFailure:
    """``dcgmi profile --resume`` failed: the node's DCGM profiling metrics stay paused until resumed by hand."""

    message: str


def find_dcgmi(explicit: str | None = None) -> str | None:
    """The dcgmi executable: ``explicit`` (a path or a name on PATH), else ``dcgmi`` on PATH; None when absent."""
    name = explicit or "dcgmi"
    hit = shutil.which(name)
    return str(Path(hit).resolve()) if hit and Path(hit).is_file() else None


def _call(dcgmi: str, args: tuple[str, ...]) -> str | None:
    """Run ``dcgmi ARGS``; None when it succeeded, else what went wrong (its exit status and last words)."""
    cmd = [dcgmi, *args]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=DCGMI_TIMEOUT_S,
                             stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"`{' '.join(cmd)}` did not answer within {DCGMI_TIMEOUT_S:g} s"
    except OSError as exc:
        return f"`{' '.join(cmd)}` could not start: {exc}"
    if out.returncode != 0:
        said = " | ".join(ln.strip() for ln in (out.stdout + out.stderr).splitlines() if ln.strip())[-400:]
        return f"`{' '.join(cmd)}` exited {out.returncode}" + (f": {said}" if said else "")
    return None


def pause(dcgmi: str | None) -> None:
    """``dcgmi profile --pause``, or DcgmPauseError naming the fix (then nothing is paused, nothing audited)."""
    if dcgmi is None:
        raise DcgmPauseError("--pause-dcgm: DCGM's `dcgmi` was not found on PATH: install DCGM's command line "
                             "(the datacenter-gpu-manager package), pass --dcgmi PATH, or run the audit without "
                             "--pause-dcgm on a node where DCGM's profiling metrics are off")
    failed = _call(dcgmi, PAUSE)
    if failed is not None:
        raise DcgmPauseError(f"--pause-dcgm: {failed}; nothing was audited. Check that DCGM's host engine "
                             "(nv-hostengine, or dcgm-exporter's embedded one) is running and reachable, or "
                             "pause it where it runs (`kubectl exec <dcgm-exporter-pod> -- dcgmi profile "
                             "--pause`) and audit without --pause-dcgm (docs/deploy.md)")


def resume(dcgmi: str) -> ResumeFailure | None:
    """``dcgmi profile --resume``; a ResumeFailure saying how to resume by hand when it fails."""
    failed = _call(dcgmi, RESUME)
    if failed is None:
        return None
    return ResumeFailure(f"{failed}: DCGM's profiling metrics on this node are still PAUSED (dcgm-exporter's "
                         "DCGM_FI_PROF_* series stay empty) until someone runs `dcgmi profile --resume`")


@contextmanager
def profiling_paused(dcgmi: str | None, on_resume_failure: Callable[[ResumeFailure], None]) -> Iterator[None]:
    """DCGM's profiling paused inside the block and resumed after it, however the block ends.

    The pause raises DcgmPauseError before the block runs. An interrupt that
    arrives during a dcgmi call is held until the call is done (so a paused
    node is always known to be paused, and resumed); a failed resume goes to
    ``on_resume_failure`` and does not replace the block's own outcome.
    """
    paused = False
    try:
        with interrupts.deferred():
            pause(dcgmi)
            paused = True
        yield
    finally:
        if paused and dcgmi is not None:
            with interrupts.deferred():
                failure = resume(dcgmi)
                if failure is not None:
                    on_resume_failure(failure)
