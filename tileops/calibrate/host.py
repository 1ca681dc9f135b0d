"""What a calibration sees of its host, looked at as the bench looks at a run: before, during each step, and over
the whole measurement (``tileops.ledger.HostCheck``).

Why. A calibration's figures are ceilings: a neighbour's job competing for the cores or the memory bus makes
every one of them low, and every row later priced on them reads too well (issue 37: an envelope of 37 GB/s
measured under load where 51.6 GB/s was stored). The bench marks such a row unstable; a calibration must be
refused or marked (``tileops.ledger.judge``), so it must look first. Three looks, each with the bench's rules:

- **before** the first step: ``tileops.bench.quiet.check_quiet``, the bench's look before its first row (the
  load average over the CPUs, steal over half a second; on a GPU, other processes on the device);
- **each step** (on a CPU): the share of this calibration's own CPUs (its affinity) that other processes took,
  from ``/proc/stat``'s per-CPU lines less this process's own ticks (and its reaped children's), above the
  bench's ``OTHERS_LIMIT``; and steal above ``STEAL_LIMIT``. Its own CPUs, not the host's: a calibration
  pinned to one core beside a busy process on that core loses half its time, which a host-wide share over 64
  cores would call 2 %. A step shorter than ``MIN_TICKS`` clock ticks over those CPUs is too short to tell
  (``None``, not a guess);
- **the whole measurement**: the bench's own sensors (``tileops.bench.sensors.RowSensors``), whose
  contention reasons a row's record would carry (host-wide shares, the load at its end; on a GPU other
  processes and throttling).

The kernels a CPU calibration compiles (``streaming.c``, ``clock.c``) are built before the first look, so the
compiler is never taken for a neighbour. The root (``proc``) is a parameter: the tests read fake trees too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from pathlib import Path

from tileops.bench.cpusensors import OTHERS_LIMIT, PROC, STEAL_LIMIT
from tileops.bench.quiet import QuietCheck, check_quiet
from tileops.device import DeviceInfo
from tileops.ledger import HostCheck
from tileops.records import RowConditions

#: The fewest clock ticks (summed over the watched CPUs) a step's share is told from: at the usual 100 ticks a
#: second, half a CPU-second, so one tick of accounting error moves the share by at most 2 %.
MIN_TICKS = 50

Ticks = tuple[int, int, int, int]  # (total, busy, steal) over the watched CPUs, and this process's own ticks


def read_ticks(cpus: Collection[int], proc: Path = PROC) -> Ticks:
    """The ``cpuN`` lines of /proc/stat summed over ``cpus``, and this process's user + system ticks with its
    reaped children's (``/proc/self/stat`` fields 14-17: a compiler it ran is its own work, not a neighbour's).
    OSError or ValueError when they cannot be read."""
    total = busy = steal = 0
    want = {f"cpu{c}" for c in cpus}
    for line in (proc / "stat").read_text().splitlines():
        name, _, rest = line.partition(" ")
        if name not in want:
            continue
        cols = [int(x) for x in rest.split()] + [0] * 8
        user, nice, system, idle, iowait, irq, softirq, st = cols[:8]
        total += user + nice + system + idle + iowait + irq + softirq + st
        busy += user + nice + system + irq + softirq
        steal += st
    text = (proc / "self" / "stat").read_text()
    fields = text[text.rindex(")") + 2:].split()
    own = sum(int(f) for f in fields[11:15])
    return total, busy, steal, own


def _shares(then: Ticks, now: Ticks) -> tuple[float | None, float | None]:
    """Other processes' share and steal's share of the watched CPUs' ticks between two readings; None for a
    window shorter than ``MIN_TICKS`` (too short to tell)."""
    total = now[0] - then[0]
    if total < MIN_TICKS:
        return None, None
    return max(0, (now[1] - then[1]) - (now[3] - then[3])) / total, (now[2] - then[2]) / total


def _cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


class HostWatch:
    """The looks of one calibration: :meth:`look_before`, :meth:`step` as each step starts, :meth:`finish`."""

    def __init__(self, info: DeviceInfo, *, proc: Path = PROC, cpus: Collection[int] | None = None,
                 quiet: Callable[..., QuietCheck] = check_quiet) -> None:
        self.info, self.proc, self.quiet = info, proc, quiet
        self.cpus = sorted(cpus) if cpus is not None else _cpus()
        self.before: dict[str, object] | None = None
        self.before_reasons: list[str] = []
        self.steps: dict[str, float | None] = {}
        self.steal: dict[str, float] = {}
        self.blank: dict[str, str] = {}
        self._open: tuple[str, Ticks] | None = None
        self._first: Ticks | None = None  # at the first step: the whole measurement's window on these CPUs
        self.whole: float | None = None  # other processes' share of these CPUs over every step

    def look_before(self) -> list[str]:
        """The bench's look before its first row; returns what could not be checked, as warnings."""
        q = self.quiet(self.info, proc=self.proc)
        self.before = q.as_dict()
        self.before_reasons = [f"before the first step: {w}" for w in q.warnings]
        self.blank.update({f"before.{k}": why for k, why in q.blank.items()})
        why = q.blank.get("gpu_other_processes")
        return [f"could not check that {self.info.torch_device} is idle: {why}"] if why else []

    def step(self, what: str) -> None:
        """A step starts (the previous one ends): on a CPU, its window over this calibration's CPUs opens."""
        self._close()
        if self.info.kind != "cpu":
            return
        try:
            self._open = (what, read_ticks(self.cpus, self.proc))
        except (OSError, ValueError, IndexError) as exc:
            self.blank[f"step {what}"] = f"{self.proc}/stat: {type(exc).__name__}: {exc}"
            return
        if self._first is None:
            self._first = self._open[1]

    def _close(self) -> None:
        if self._open is None:
            return
        what, then = self._open
        self._open = None
        try:
            now = read_ticks(self.cpus, self.proc)
        except (OSError, ValueError, IndexError) as exc:
            self.blank[f"step {what}"] = f"{self.proc}/stat: {type(exc).__name__}: {exc}"
            return
        self.steps[what], steal = _shares(then, now)
        if steal is not None:
            self.steal[what] = steal
        if self._first is not None:
            self.whole, _ = _shares(self._first, now)

    def finish(self, conditions: RowConditions | None) -> HostCheck:
        """What was seen, every reason named with when it was seen."""
        self._close()
        reasons = list(self.before_reasons)
        busy = {w: s for w, s in self.steps.items() if s is not None and s > OTHERS_LIMIT}
        host_cores = conditions.cpu.cores if conditions is not None and conditions.cpu is not None else None
        if (self.whole is not None and self.whole > OTHERS_LIMIT and not busy
                and (host_cores is None or host_cores > len(self.cpus))):  # on every CPU: the bench's share says it
            reasons.append(f"other processes used {self.whole:.0%} of this calibration's {len(self.cpus)} CPU(s) "
                           f"over its steps (limit {OTHERS_LIMIT:.0%})")
        if busy:
            told = sum(s is not None for s in self.steps.values())
            reasons.append(f"other processes used up to {max(busy.values()):.0%} of this calibration's "
                           f"{len(self.cpus)} CPU(s) (limit {OTHERS_LIMIT:.0%}) during {len(busy)} of its {told} "
                           f"steps ({', '.join(busy)})")
        stolen = {w: s for w, s in self.steal.items() if s > STEAL_LIMIT}
        if stolen:
            reasons.append(f"the hypervisor took up to {max(stolen.values()):.1%} of its CPUs' time (steal, limit "
                           f"{STEAL_LIMIT:.0%}) during {', '.join(stolen)}")
        if conditions is not None and conditions.contended:
            reasons += [f"over the whole calibration: {r}" for r in conditions.contention]
        return HostCheck(contended=bool(reasons), reasons=reasons, cpus=self.cpus, before=self.before,
                         steps=self.steps, others_busy=self.whole, blank=self.blank)
