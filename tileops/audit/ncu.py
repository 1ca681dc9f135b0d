"""Nsight Compute on the command line: where ``ncu`` is, what we run, what its output says went wrong.

The profiling command (one per row)::

    ncu --target-processes application-only --nvtx --nvtx-include tileops@call/
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum
        --cache-control all --clock-control none --replay-mode app-range
        --export <row>.ncu-rep --force-overwrite
        <python> -m tileops.audit.child ...

``--nvtx-include tileops@call/`` names the push/pop range ``call`` of domain
``tileops`` (``<domain>@<range>/``; the trailing slash marks a push/pop range),
so the warm-up calls outside it are never profiled. ``--cache-control all``
flushes every cache before each replay pass: the premise of the read-side
bound. ``--clock-control none`` leaves the clocks alone (the default, and the
device machines' rule: bytes do not depend on clocks, and locking them disturbs
the fleet's other jobs; ``--clock-control base`` locks them to base).

``--replay-mode app-range`` (the default) measures the call as one range: the
application runs once per metric pass, the caches are flushed once at the
range's start, and the call's kernels then share the caches as they do when it
runs for real. A multi-kernel op's intermediate (written by one kernel, read by
the next) is read back from L2 as in production, where ``--replay-mode kernel``
replayed each kernel from cold caches and charged every intermediate as DRAM
reads: readings far above the formula that describe the replay, not the op.
``range`` replays the captured range in one process (faster, but CUDA calls
such as allocations inside the range are refused); ``kernel`` is kept for
comparison. The read-side lower bound holds under all three: the first pass
starts cold, so every distinct byte the call reads comes from DRAM at least once.

Every message for a failure says what to do about it; ``docs/deploy.md`` has
the details.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tileops.audit.reports import METRICS, NOT_COLLECTABLE
from tileops.defaults import AUDIT_CLOCK_CONTROLS as CLOCK_CONTROLS  # --clock-control's choices, the default first
from tileops.defaults import AUDIT_REPLAY_MODE as DEFAULT_REPLAY_MODE
from tileops.defaults import AUDIT_READ_SIDE
from tileops.defaults import AUDIT_REPLAY_MODES as REPLAY_MODES  # --replay-mode's choices and each one's premise

#: The NVTX domain and range the child opens around the audited call.
NVTX_DOMAIN = "tileops"
NVTX_RANGE = "call"
#: Where Nsight Compute lands when it is not on PATH (the CUDA images link it here).
FALLBACK_PATHS = ("/usr/local/cuda/bin/ncu",)

FIX_PERMISSION = (
    "ncu may not read the GPU's performance counters (ERR_NVGPUCTRPERM): the driver restricts them to "
    "administrators. Run the audit with CAP_SYS_ADMIN (compose's `audit` service; `docker run --user 0 "
    "--cap-drop ALL --cap-add SYS_ADMIN`; the Helm chart's audit Job), or load the NVIDIA driver with "
    "NVreg_RestrictProfilingToAdminUsers=0 on the host (docs/deploy.md)")
FIX_BUSY = (
    "another tool holds the GPU's performance monitors (ncu: a driver resource was unavailable), usually DCGM's "
    "profiling metrics (dcgm-exporter's DCGM_FI_PROF_* fields) or another ncu/nsys, so pause DCGM's profiling "
    "with `dcgmi profile --pause`, run the audit, then `dcgmi profile --resume` (or let `tileops audit "
    "--pause-dcgm` do both; docs/deploy.md)")
FIX_COUNTERS_UNAVAILABLE = (
    "ncu could not start its profiler here (\"Failed to initialize the profiler: LibraryNotLoaded\"): this "
    "container runtime does not give ncu the GPU's performance counters (the device machines' gVisor runtime "
    "answers so; their Firecracker runtime reads them). Run the audit where the counters can be read: a VM or "
    "bare-metal host, a container runtime that passes the GPU through (runc with the NVIDIA container toolkit, "
    "CAP_SYS_ADMIN or NVreg_RestrictProfilingToAdminUsers=0; docs/deploy.md)")
#: Problems of the host, not of a row: the first row that meets one speaks for every row after it. The
#: profiler held by DCGM is the node's state for as long as DCGM collects, not a row's: ncu is not started
#: again for each of the rows only to be refused.
HOST_PROBLEMS = frozenset({"permission", "counters-unavailable", "profiler-busy"})
FIX_MISSING = (
    "Nsight Compute's `ncu` was not found on PATH (nor at /usr/local/cuda/bin/ncu): install Nsight Compute "
    "(the CUDA *devel* images ship it) or pass --ncu PATH")


def nvtx_include(domain: str | None) -> str:
    """The ``--nvtx-include`` filter for our range: ``tileops@call/``, or ``call/`` in the default domain."""
    return f"{domain}@{NVTX_RANGE}/" if domain else f"{NVTX_RANGE}/"


def nvtx_domain_available() -> str | None:
    """``tileops`` when the ``nvtx`` module can open a named domain; None: torch.cuda.nvtx's default domain."""
    import importlib.util

    return NVTX_DOMAIN if importlib.util.find_spec("nvtx") is not None else None


def find_ncu(explicit: str | None = None) -> str | None:
    """The ncu executable: ``explicit`` (a path or a name on PATH), else ``ncu`` on PATH, else the CUDA default."""
    if explicit:
        hit = shutil.which(explicit) or (explicit if os.access(explicit, os.X_OK) else None)
        return str(Path(hit).resolve()) if hit and Path(hit).is_file() else None
    hit = shutil.which("ncu")
    if hit:
        return hit
    return next((p for p in FALLBACK_PATHS if os.access(p, os.X_OK)), None)


def ncu_version(ncu: str, timeout_s: float = 60.0) -> str | None:
    """``2025.2.1.0`` from ``ncu --version`` (its last ``Version ...`` line); None when it will not say
    within ``timeout_s`` (the audit's ``--row-timeout``). Output that is not UTF-8 is read with replacements."""
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, errors="replace",
                             timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.findall(r"Version\s+(\S+)", out.stdout + out.stderr)
    return found[-1] if found else None


def premise(replay_mode: str) -> str:
    """What every reading of an audit replayed in ``replay_mode`` rests on (the entries' ``premise``)."""
    return f"{REPLAY_MODES[replay_mode]}; {AUDIT_READ_SIDE}"


def profile_command(ncu: str, report: Path, child_args: list[str], *, domain: str | None,
                    python: str = sys.executable, replay_mode: str = DEFAULT_REPLAY_MODE,
                    clock_control: str = CLOCK_CONTROLS[0]) -> list[str]:
    """The full ncu command line for one row (module docstring: what each option is for)."""
    if replay_mode not in REPLAY_MODES or clock_control not in CLOCK_CONTROLS:
        raise ValueError(f"replay mode {replay_mode!r} / clock control {clock_control!r}: use one of "
                         f"{', '.join(REPLAY_MODES)} / {', '.join(CLOCK_CONTROLS)}")
    return [
        ncu, "--target-processes", "application-only",
        "--nvtx", "--nvtx-include", nvtx_include(domain),
        "--metrics", ",".join(METRICS),
        "--cache-control", "all", "--clock-control", clock_control, "--replay-mode", replay_mode,
        "--export", str(report), "--force-overwrite",
        python, "-m", "tileops.audit.child", *child_args,
    ]


def import_command(ncu: str, report: Path) -> list[str]:
    """ncu's own reader: the report as raw-page CSV with every value in its base unit."""
    return [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]


@dataclass(frozen=True)
class Problem:
    kind: str  # permission | profiler-busy | metric | ncu-failed
    message: str


def diagnose(log: str, *, generic: bool = True) -> Problem | None:
    """What ncu's output says went wrong with the profiling itself, or None when it reports nothing.

    Recognised: ERR_NVGPUCTRPERM; a profiler library that cannot load
    (``LibraryNotLoaded``: a runtime without the counters, gVisor); the
    driver's "resource was unavailable" (another profiler, typically DCGM); a
    metric ncu cannot find or collect; then (``generic``) any other
    ``==ERROR==`` line. ncu's "The application returned an error code" is not
    ncu's problem: the child wrote why.
    """
    if "ERR_NVGPUCTRPERM" in log:
        return Problem("permission", FIX_PERMISSION)
    if "LibraryNotLoaded" in log:
        return Problem("counters-unavailable", FIX_COUNTERS_UNAVAILABLE)
    if "driver resource was unavailable" in log or "concurrently collecting profiling data" in log:
        return Problem("profiler-busy", FIX_BUSY)
    m = re.search(r"==ERROR==[^\n]*(?:Failed to find metric|[Uu]nknown metric|metric[^\n]*not (?:found|supported"
                  r"|available))[^\n]*", log)
    if m:
        return Problem(NOT_COLLECTABLE, f"ncu cannot collect a metric the audit needs ({', '.join(METRICS)}): "
                                 f"{m.group(0).removeprefix('==ERROR==').strip()}; use an Nsight Compute that "
                                 "supports this GPU (`ncu --query-metrics` lists what it offers)")
    errors = [ln.removeprefix("==ERROR==").strip() for ln in log.splitlines() if ln.startswith("==ERROR==")
              and "application returned an error code" not in ln]  # the child's failure: the child says why
    if errors and generic:
        return Problem("ncu-failed", f"ncu reported: {' / '.join(errors[:3])[:600]}")
    return None


def log_tail(log: str, lines: int = 6) -> str:
    kept = [ln for ln in log.splitlines() if ln.strip()]
    return " | ".join(kept[-lines:])[:800]
