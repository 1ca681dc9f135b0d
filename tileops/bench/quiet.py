"""Is the host quiet enough to measure? One look before the first row: a warning, or a refusal.

Why before the rows as well as during each. Each row records its own
contention (``tileops.bench.sensors``), but a user who starts a sweep on a host
already running another job learns it only from a table of unstable rows, an
hour later. One look first costs a fraction of a second and says it at once:
the load average over the CPUs (a minute's history of the host, before this run
adds its own threads) and the steal over a short window (the hypervisor giving
the cores to other guests now; since boot it would be an average of the VM's
life). On a GPU, other processes on the device (``tileops.device``'s check, the
one calibrations use); a GPU run records the host's figures without judging
them, since its rows are timed on the device. ``require_quiet`` turns the
warning into :class:`HostBusyError`, for a CronJob that would rather fail and
retry than publish numbers a neighbour made.

The limits are the sensors' (``STEAL_LIMIT``; the load compared with the CPUs
``/proc/stat`` lists, as the load average counts every CPU's queue).
Standard library only (spec §5.2).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable

from tileops import exitcodes
from tileops.bench.cpusensors import PROC, STEAL_LIMIT, read_cpu_times, read_load1
from tileops.device import DeviceInfo, ProcessCheck, other_gpu_processes
from tileops.errors import TileOpsError

#: How long the steal is watched before the first row.
STEAL_WINDOW_S = 0.5

REQUIRE_QUIET_FIX = ("wait for the other work to finish (or move this job to an idle node), or run without "
                     "--require-quiet: each row then records the contention it met and is marked unstable")


class HostBusyError(TileOpsError):
    """``require_quiet`` and the host is not quiet: nothing was measured (exit 5: retry later)."""

    exit_code = exitcodes.BUSY


@dataclass(frozen=True)
class QuietCheck:
    """The look before the rows: the figures, what is wrong (``warnings``), and what could not be read."""

    cores: int | None = None
    load1: float | None = None
    steal: float | None = None  # share of CPU time stolen over ``window_s``
    window_s: float = 0.0
    gpu_others: list[int] | None = None  # PIDs of other processes on the GPU (None: not checked or unknown)
    warnings: list[str] = field(default_factory=list)
    blank: dict[str, str] = field(default_factory=dict)  # figure -> why it could not be read

    @property
    def quiet(self) -> bool:
        return not self.warnings

    def as_dict(self) -> dict:
        """What ``run.json`` records (figures, warnings, and why a figure is missing)."""
        return {"quiet": self.quiet, "cores": self.cores, "load1": self.load1, "steal": self.steal,
                "window_s": self.window_s, "gpu_other_processes": self.gpu_others, "warnings": list(self.warnings),
                "blank": dict(self.blank)}


def check_quiet(device: DeviceInfo | None = None, *, require_quiet: bool = False, proc: Path = PROC,
                window_s: float = STEAL_WINDOW_S, sleep: Callable[[float], None] = time.sleep,
                gpu_check: Callable[[DeviceInfo], ProcessCheck] = other_gpu_processes) -> QuietCheck:
    """Look at the host (and the GPU) before the rows; raise :class:`HostBusyError` if ``require_quiet`` and
    it is not quiet. ``proc``, ``sleep`` and ``gpu_check`` are injectable for tests."""
    blank: dict[str, str] = {}
    warnings: list[str] = []
    cores = load = steal = None
    try:
        first = read_cpu_times(proc)
        cores = first.cores or None
        sleep(window_s)
        second = read_cpu_times(proc)
        total = second.total - first.total
        if total > 0:
            steal = (second.steal - first.steal) / total
        else:
            blank["steal"] = f"no CPU time passed in {proc}/stat over {window_s:.2f} s"
    except (OSError, ValueError) as exc:
        blank["steal"] = blank["cores"] = f"{proc}/stat: {type(exc).__name__}: {exc}"
    try:
        load = read_load1(proc)
    except (OSError, ValueError, IndexError) as exc:
        blank["load1"] = f"{proc}/loadavg: {type(exc).__name__}: {exc}"
    on_cpu = device is None or device.kind == "cpu"  # None: this host's CPU
    if on_cpu and load is not None and cores and load > cores:
        warnings.append(f"the host is busy: 1-minute load {load:.2f} on {cores} CPUs (other work is queued "
                        "for every CPU), so what is timed will wait for it")
    if on_cpu and steal is not None and steal > STEAL_LIMIT:
        warnings.append(f"the hypervisor is taking {steal:.1%} of the CPU time (steal, limit {STEAL_LIMIT:.0%}): "
                        "other guests share these cores")
    gpu_others = None
    if device is not None and not on_cpu:
        procs, why = gpu_check(device)
        if procs is None:
            blank["gpu_other_processes"] = why
        else:
            gpu_others = sorted(int(p["pid"]) for p in procs)
            if gpu_others:
                warnings.append(f"{len(gpu_others)} other process(es) on {device.torch_device} (pid "
                                f"{', '.join(map(str, gpu_others))}): they share its SMs and memory")
    check = QuietCheck(cores=cores, load1=load, steal=steal, window_s=window_s, gpu_others=gpu_others,
                       warnings=warnings, blank=blank)
    if require_quiet and not check.quiet:
        raise HostBusyError("--require-quiet: the host is not quiet: " + "; ".join(warnings) + ". Fix: "
                            + REQUIRE_QUIET_FIX)
    return check
