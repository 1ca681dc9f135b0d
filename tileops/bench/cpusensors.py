"""What the host did to a CPU row: steal, other processes, load, and the package energy (RAPL).

On a CPU a neighbour's job or a hypervisor taking the cores (steal) stretches
samples by whole scheduler slices (issue 26 saw 8 ms waits on a 0.15 ms op).
How each is read, and why so:

* From ``/proc`` (deltas between a row's start and end): steal is the
  ``steal`` column of the ``cpu`` line of ``/proc/stat`` over all its columns;
  other processes' share is the busy columns (user, nice, system, irq, softirq)
  minus this process's own ``utime + stime`` (``/proc/self/stat``, the same
  clock ticks), over all columns: it needs no list of processes and cannot
  mistake the row's own threads for a neighbour. The load average
  (``/proc/loadavg``) is a minute's smoothing, so it describes the host around
  the row rather than the row; it counts the row's own threads, which are
  subtracted before it is compared with the cores.
* Energy from powercap RAPL (``/sys/class/powercap/intel-rapl:N``, the
  ``package-*`` domains only, since ``psys`` contains them and the sub-domains
  are parts of them): ``energy_uj`` wraps at ``max_energy_range_uj``. It is
  readable by root only since Linux 5.10 (CVE-2020-8694), and absent in most
  VMs: then blank, with which of the two it is.

The roots (``proc``, ``sys``) are parameters: the tests run on fake trees.
Standard library only (spec §5.2).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tileops.records.contract import CpuConditions

PROC = Path("/proc")
SYS = Path("/sys")

#: A row is contended on a CPU when the hypervisor stole more than this share of the CPU time ...
STEAL_LIMIT = 0.03
#: ... or other processes used more than this share of all CPU time while it ran ...
OTHERS_LIMIT = 0.10
#: ... or the load average, less the row's own threads, exceeds the CPUs.


@dataclass(frozen=True)
class CpuTimes:
    """The ``cpu`` line of /proc/stat (clock ticks since boot) and how many CPUs it sums."""

    total: int
    busy: int
    steal: int
    cores: int


def read_cpu_times(proc: Path = PROC) -> CpuTimes:
    """Raises OSError or ValueError when /proc/stat cannot be read or parsed."""
    text = (proc / "stat").read_text()
    agg = re.search(r"^cpu\s+(.*)$", text, re.M)
    if agg is None:
        raise ValueError(f"{proc / 'stat'}: no aggregate 'cpu' line")
    cols = [int(x) for x in agg.group(1).split()]
    cols += [0] * (8 - len(cols))
    user, nice, system, idle, iowait, irq, softirq, steal = cols[:8]  # guest time is inside user already
    cores = len(re.findall(r"^cpu\d+\s", text, re.M))
    return CpuTimes(total=user + nice + system + idle + iowait + irq + softirq + steal,
                    busy=user + nice + system + irq + softirq, steal=steal, cores=cores)


def read_own_ticks(proc: Path = PROC) -> int:
    """This process's user + system clock ticks (/proc/self/stat fields 14 and 15, every thread)."""
    text = (proc / "self" / "stat").read_text()
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return int(fields[11]) + int(fields[12])


def read_load1(proc: Path = PROC) -> float:
    return float((proc / "loadavg").read_text().split()[0])


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class RaplReading:
    """Each package domain's (energy_uj, max_energy_range_uj); or None and why not."""

    domains: dict[str, tuple[int, int]] | None
    why: str = ""


def read_rapl(sys_root: Path = SYS) -> RaplReading:
    base = sys_root / "class" / "powercap"
    try:
        dirs = sorted(p for p in base.iterdir() if re.fullmatch(r"intel-rapl:\d+", p.name))
    except OSError:
        dirs = []
    if not dirs:
        return RaplReading(None, f"no RAPL energy counter ({base}/intel-rapl:* absent: a VM or container that "
                                 "hides it, or a CPU without the powercap driver)")
    out: dict[str, tuple[int, int]] = {}
    for d in dirs:
        try:
            name = (d / "name").read_text().strip()
        except OSError:
            name = "package"
        if not name.startswith("package"):
            continue  # psys holds the packages; reading both would count them twice
        try:
            out[d.name] = (int((d / "energy_uj").read_text()), int((d / "max_energy_range_uj").read_text()))
        except PermissionError:
            return RaplReading(None, f"{d / 'energy_uj'} is readable by root only (Linux 5.10+, CVE-2020-8694): run "
                                     "the bench as root, or grant read access to it")
        except (OSError, ValueError) as exc:
            return RaplReading(None, f"{d / 'energy_uj'}: {_why(exc)}")
    if not out:
        return RaplReading(None, f"no package domain under {base} (only {', '.join(d.name for d in dirs)})")
    return RaplReading(out)


def rapl_joules(start: RaplReading, end: RaplReading) -> tuple[float | None, str]:
    """Joules between two readings, each domain's wrap-around undone (one wrap at most between them)."""
    if start.domains is None or end.domains is None:
        return None, start.why or end.why
    if start.domains.keys() != end.domains.keys():
        return None, "the RAPL domains changed during the row"
    total = 0
    for key, (e0, span) in start.domains.items():
        e1 = end.domains[key][0]
        total += e1 - e0 if e1 >= e0 else e1 + span - e0
    return total * 1e-6, ""


def cpu_contention(cpu: CpuConditions, threads: int) -> list[str]:
    """Why the host disturbed a CPU row (empty: it did not, as far as the readings tell)."""
    out = []
    if cpu.steal is not None and cpu.steal > STEAL_LIMIT:
        out.append(f"steal {cpu.steal:.1%} of CPU time (limit {STEAL_LIMIT:.0%}): the hypervisor ran other guests")
    if cpu.others_busy is not None and cpu.others_busy > OTHERS_LIMIT:
        out.append(f"other processes used {cpu.others_busy:.0%} of the CPUs (limit {OTHERS_LIMIT:.0%})")
    load = cpu.load1_end
    if load is not None and cpu.cores and load - threads > cpu.cores:
        out.append(f"load {load:.2f} on {cpu.cores} CPUs besides this row's {threads} thread(s)")
    return out


def _attempt(fn: Callable[[], Any]) -> Any:
    """``fn()``, or the error that stopped it (a reading that failed is kept as its reason)."""
    try:
        return fn()
    except (OSError, ValueError, IndexError) as exc:
        return exc


class CpuWindow:
    """The CPU's counters at a row's start; :meth:`conditions` at its end, the deltas between them."""

    def __init__(self, proc: Path = PROC, sys: Path = SYS) -> None:
        self.proc, self.sys = proc, sys
        self._times0 = self._times_now()
        self._load0 = _attempt(lambda: read_load1(self.proc))
        self._rapl0 = read_rapl(self.sys)

    def _times_now(self) -> tuple[CpuTimes, int] | BaseException:
        try:
            return read_cpu_times(self.proc), read_own_ticks(self.proc)
        except (OSError, ValueError, IndexError) as exc:
            return exc

    def conditions(self) -> CpuConditions:
        blank: dict[str, str] = {}
        cores, steal, others = self._shares(blank)
        load0 = self._load0
        load1 = _attempt(lambda: read_load1(self.proc))
        for key, v in (("load1_start", load0), ("load1_end", load1)):
            if isinstance(v, BaseException):
                blank[key] = f"{self.proc}/loadavg: {_why(v)}"
        joules, why = rapl_joules(self._rapl0, read_rapl(self.sys))
        if joules is None:
            blank["energy_j"] = why
        return CpuConditions(cores=cores, steal=steal, others_busy=others,
                             load1_start=None if isinstance(load0, BaseException) else load0,
                             load1_end=None if isinstance(load1, BaseException) else load1,
                             energy_j=joules, blank=blank)

    def _shares(self, blank: dict[str, str]) -> tuple[int | None, float | None, float | None]:
        """(cores, steal, other processes' share) over the window; what cannot be told goes into ``blank``."""
        now, then = self._times_now(), self._times0
        failed = then if isinstance(then, BaseException) else now if isinstance(now, BaseException) else None
        if failed is not None:
            blank["steal"] = blank["others_busy"] = blank["cores"] = f"{self.proc}/stat: {_why(failed)}"
            return None, None, None
        assert not isinstance(then, BaseException) and not isinstance(now, BaseException)
        (t0, own0), (t1, own1) = then, now
        cores = t1.cores or None
        if cores is None:
            blank["cores"] = f"{self.proc}/stat lists no cpuN line"
        total = t1.total - t0.total
        if total <= 0:
            blank["steal"] = blank["others_busy"] = ("the row was shorter than the kernel's CPU accounting "
                                                     "tick: no time passed in /proc/stat")
            return cores, None, None
        return cores, (t1.steal - t0.steal) / total, max(0, (t1.busy - t0.busy) - (own1 - own0)) / total
