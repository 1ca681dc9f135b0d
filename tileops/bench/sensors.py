"""What the machine did while a row ran: contention, clocks, power and energy, as one snapshot per row.

Why a row needs them. A time says how well it is known only with its interval;
it says *why* it may not be the device's own with what surrounded it. On a CPU
a neighbour's job or a hypervisor taking the cores (steal) stretches samples by
whole scheduler slices (issue 26 saw 8 ms waits on a 0.15 ms op); on a GPU
another process shares the SMs, and a power or thermal cap lowers the SM clock
15–20 % with no error anywhere (issue 28). A row measured under either is
marked (``contended``, ``throttled``, ``power_capped``, ``thermal``) so the
roofline can call it unstable instead of slow, and price it against the ceiling
its power state matches. Energy over the row gives joules per call.

How each is read, and why so:

* CPU, from ``/proc`` (deltas between ``start()`` and ``stop()``): steal is the
  ``steal`` column of the ``cpu`` line of ``/proc/stat`` over all its columns;
  other processes' share is the busy columns (user, nice, system, irq, softirq)
  minus this process's own ``utime + stime`` (``/proc/self/stat``, the same
  clock ticks), over all columns: it needs no list of processes and cannot
  mistake the row's own threads for a neighbour. The load average
  (``/proc/loadavg``) is a minute's smoothing, so it describes the host around
  the row rather than the row; it counts the row's own threads, which are
  subtracted before it is compared with the cores.
* CPU energy from powercap RAPL (``/sys/class/powercap/intel-rapl:N``, the
  ``package-*`` domains only, since ``psys`` contains them and the sub-domains
  are parts of them): ``energy_uj`` wraps at ``max_energy_range_uj``. It is
  readable by root only since Linux 5.10 (CVE-2020-8694), and absent in most
  VMs: then blank, with which of the two it is.
* GPU, through NVML (``tileops.device.nvml()``; names checked against
  nvidia-ml-py 13.615.71's ``pynvml.py``). Counters are read at both ends, so
  nothing polls during the row for them: the total energy
  (``nvmlDeviceGetTotalEnergyConsumption``, mJ since the driver loaded) and the
  power and thermal violation times (``nvmlDeviceGetViolationStatus`` with
  ``NVML_PERF_POLICY_POWER``/``THERMAL``, ns spent held below the requested
  clocks). The SM clock's minimum and maximum come from the driver's own sample
  buffer (``nvmlDeviceGetSamples(NVML_PROCESSOR_CLK_SAMPLES, since)``, the
  samples after the newest one seen at ``start()``), plus readings at both
  ends. Clock-event reasons are instantaneous (``nvmlDeviceGetCurrentClocksEventReasons``; an
  older NVML has only ``...ThrottleReasons``, which pynvml.py marks "will be removed in CUDA
  14.0"), so a light thread ORs them
  together with the clock, power and temperature every ``poll_s`` (0.1 s):
  each poll is a handful of NVML calls, during which ctypes releases the GIL,
  so the timing thread loses microseconds a tenth of a second, and a CPU row
  starts no thread at all.

Every field that cannot be read is None, with its reason in ``blank`` (the
field's name -> why), so a record says "not measured, because" and nothing is
guessed (§1.2). The roots (``proc``, ``sys``) and the NVML module are
parameters: the tests run on fake trees and a fake ``pynvml``. Standard library
only (spec §5.2).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable, Collection

from tileops.device import DeviceInfo, namespace_pids
from tileops.records.contract import CpuConditions, GpuConditions, RowConditions

PROC = Path("/proc")
SYS = Path("/sys")

#: A row is contended on a CPU when the hypervisor stole more than this share of the CPU time ...
STEAL_LIMIT = 0.03
#: ... or other processes used more than this share of all CPU time while it ran ...
OTHERS_LIMIT = 0.10
#: ... or the load average, less the row's own threads, exceeds the CPUs.

# Clock-event reason bits (nvidia-ml-py 13.615.71, pynvml.py: nvmlClocksEventReason*; the deprecated
# nvmlClocksThrottleReason* have the same values and add BoardLimit and Reliability).
GPU_IDLE = 0x1
APPLICATIONS_CLOCKS = 0x2
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SYNC_BOOST = 0x10
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
DISPLAY_CLOCKS = 0x100
BOARD_LIMIT = 0x200
RELIABILITY = 0x400
REASON_NAMES = {GPU_IDLE: "gpu_idle", APPLICATIONS_CLOCKS: "applications_clocks", SW_POWER_CAP: "sw_power_cap",
                HW_SLOWDOWN: "hw_slowdown", SYNC_BOOST: "sync_boost", SW_THERMAL: "sw_thermal_slowdown",
                HW_THERMAL: "hw_thermal_slowdown", HW_POWER_BRAKE: "hw_power_brake_slowdown",
                DISPLAY_CLOCKS: "display_clocks", BOARD_LIMIT: "board_limit", RELIABILITY: "reliability"}
#: Reasons that do not lower a busy GPU's clocks below what was asked: idle, or clocks a person set.
BENIGN = GPU_IDLE | APPLICATIONS_CLOCKS
POWER_REASONS = SW_POWER_CAP | HW_POWER_BRAKE | BOARD_LIMIT
THERMAL_REASONS = SW_THERMAL | HW_THERMAL

# pynvml constants, used where the module given lacks them (a fake, or an old nvidia-ml-py).
NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0
NVML_PROCESSOR_CLK_SAMPLES = 5
NVML_PERF_POLICY_POWER = 0
NVML_PERF_POLICY_THERMAL = 1


# -- the snapshot -----------------------------------------------------------------------------------------


# CpuConditions, GpuConditions and RowConditions are the records contract's (a record carries them).


# -- the CPU's readers (pure over a root) --------------------------------------------------------------


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


# -- the GPU's readers ---------------------------------------------------------------------------------------


def _const(lib: Any, name: str, default: int) -> int:
    v = getattr(lib, name, default)
    return v if isinstance(v, int) else default


def reason_names(mask: int) -> list[str]:
    """The names of the bits set in a clock-event mask (unknown bits as hex)."""
    names = [n for bit, n in REASON_NAMES.items() if mask & bit]
    rest = mask & ~sum(REASON_NAMES)
    return names + ([hex(rest)] if rest else [])


class _Nvml:
    """Guarded reads of one GPU through a pynvml module (real or fake); each returns None on failure."""

    def __init__(self, lib: Any, handle: Any) -> None:
        self.lib, self.h = lib, handle

    def _call(self, name: str, *args: Any) -> Any:
        fn = getattr(self.lib, name, None)
        if fn is None:
            return None
        try:
            return fn(self.h, *args)
        except Exception:
            return None

    def sm_mhz(self) -> float | None:
        v = self._call("nvmlDeviceGetClockInfo", _const(self.lib, "NVML_CLOCK_SM", NVML_CLOCK_SM))
        return float(v) if isinstance(v, (int, float)) else None

    def reasons(self) -> int | None:
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            v = self._call(name)
            if isinstance(v, int):
                return v
        return None

    def power_w(self) -> float | None:
        v = self._call("nvmlDeviceGetPowerUsage")
        return v / 1000.0 if isinstance(v, (int, float)) else None

    def power_limit_w(self) -> float | None:
        v = self._call("nvmlDeviceGetEnforcedPowerLimit")
        return v / 1000.0 if isinstance(v, (int, float)) else None

    def temperature_c(self) -> float | None:
        v = self._call("nvmlDeviceGetTemperature", _const(self.lib, "NVML_TEMPERATURE_GPU", NVML_TEMPERATURE_GPU))
        return float(v) if isinstance(v, (int, float)) else None

    def energy_mj(self) -> int | None:
        v = self._call("nvmlDeviceGetTotalEnergyConsumption")
        return v if isinstance(v, int) else None

    def violation_ns(self, policy: str, default: int) -> int | None:
        v = self._call("nvmlDeviceGetViolationStatus", _const(self.lib, policy, default))
        t = getattr(v, "violationTime", None)
        return t if isinstance(t, int) else None

    def clock_samples(self, since: int) -> list[tuple[int, float]] | None:
        """The driver's buffered SM clock samples newer than ``since`` (µs), as (timestamp, MHz)."""
        v = self._call("nvmlDeviceGetSamples", _const(self.lib, "NVML_PROCESSOR_CLK_SAMPLES",
                                                      NVML_PROCESSOR_CLK_SAMPLES), since)
        if not isinstance(v, tuple) or len(v) != 2:
            return None
        out = []
        for s in v[1]:
            ts, val = getattr(s, "timeStamp", None), getattr(getattr(s, "sampleValue", None), "uiVal", None)
            if isinstance(ts, int) and isinstance(val, int) and ts > since:
                out.append((ts, float(val)))
        return out

    def processes(self) -> set[int] | None:
        seen: set[int] | None = None
        for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            v = self._call(name)
            if v is None:
                continue
            seen = (seen or set()) | {int(p.pid) for p in v}
        return seen


# -- the sensors --------------------------------------------------------------------------------------------


_FROM_DEVICE = object()


class RowSensors:
    """``start()`` before a row, ``stop()`` after: a :class:`RowConditions`. One instance serves many rows.

    ``device``: the run's :class:`~tileops.device.DeviceInfo` (its uuid, else its index, finds the GPU in
    NVML). ``threads``: the
    row's own busy threads (a CPU row: torch's), which the load average counts. ``nvml``: a pynvml module
    (default: ``tileops.device.nvml()``), None for none. ``own_pids``: this process as NVML lists it (default:
    its PIDs in every namespace /proc shows; inside a container NVML lists host PIDs, so the run passes what
    ``tileops.device.own_gpu_pids`` found); ``own_pids_unknown``: why they could not be told, and then other
    processes are blank with it rather than this process counted as another. ``poll_s``: the GPU thread's
    period, None for no thread.
    """

    def __init__(self, device: DeviceInfo, *, threads: int = 1, proc: Path = PROC, sys: Path = SYS,
                 nvml: Any = _FROM_DEVICE, own_pids: Collection[int] | None = None,
                 own_pids_unknown: str | None = None, poll_s: float | None = 0.1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kind: str = device.kind
        self.own_pids_unknown = own_pids_unknown
        self.threads = threads
        self.proc, self.sys = proc, sys
        self.clock = clock
        self.poll_s = poll_s
        self.own_pids = set(own_pids) if own_pids is not None else None
        self._gpu: _Nvml | None = None
        self._gpu_why = ""
        if self.kind == "cuda":
            self._open_gpu(device, nvml)
        self._started = False
        self._thread: threading.Thread | None = None

    def _open_gpu(self, device: DeviceInfo, nvml: Any) -> None:
        if nvml is _FROM_DEVICE:
            from tileops.device import nvml_status

            nvml, self._gpu_why = nvml_status()
        elif nvml is None:
            self._gpu_why = "no NVML given"
        if nvml is None:
            return
        handle = None
        for name, arg in (("nvmlDeviceGetHandleByUUID", device.uuid),
                          ("nvmlDeviceGetHandleByIndex", device.index or 0)):
            if arg is None or handle is not None:
                continue
            try:
                handle = getattr(nvml, name)(arg)
            except Exception as exc:
                self._gpu_why = f"NVML does not know {device.torch_device} ({_why(exc)})"
        if handle is not None:
            self._gpu = _Nvml(nvml, handle)
            self._gpu_why = ""

    # -- start / stop

    def start(self) -> None:
        """Read the counters and start the GPU's poll. A ``start()`` without ``stop()`` (a row that raised) is
        forgotten: its thread ends here."""
        if self._started:
            self._halt()
        self._t0 = self.clock()
        self._cpu0 = self._cpu_now()
        self._load0 = self._try(lambda: read_load1(self.proc))
        self._rapl0 = read_rapl(self.sys)
        self._polls: list[tuple[float | None, int | None, float | None, float | None]] = []
        self._stop_event = threading.Event()
        g = self._gpu
        if g is not None:
            self._energy0 = g.energy_mj()
            self._power_v0 = g.violation_ns("NVML_PERF_POLICY_POWER", NVML_PERF_POLICY_POWER)
            self._thermal_v0 = g.violation_ns("NVML_PERF_POLICY_THERMAL", NVML_PERF_POLICY_THERMAL)
            buffered = g.clock_samples(0)
            # the newest sample the driver holds now: the row's are the ones after it (an empty buffer: all)
            self._cursor = max((ts for ts, _ in buffered), default=0) if buffered is not None else None
            self._procs0 = g.processes()
            self.poll_once()
            if self.poll_s:
                self._thread = threading.Thread(target=self._poll_loop, name="tileops-sensors", daemon=True)
                self._thread.start()
        self._started = True

    def poll_once(self) -> None:
        """One reading of the GPU's clock, clock-event reasons, power and temperature (the thread's step)."""
        g = self._gpu
        if g is not None:
            self._polls.append((g.sm_mhz(), g.reasons(), g.power_w(), g.temperature_c()))

    def _poll_loop(self) -> None:
        assert self.poll_s
        while not self._stop_event.wait(self.poll_s):
            self.poll_once()

    def _halt(self) -> None:
        self._started = False
        if self._thread is not None:
            self._stop_event.set()
            self._thread.join()
            self._thread = None

    def stop(self) -> RowConditions:
        if not self._started:
            raise RuntimeError("RowSensors.stop() without start()")
        self._halt()
        gpu = self._gpu_conditions() if self.kind == "cuda" else None
        cpu = self._cpu_conditions()
        window = max(0.0, self.clock() - self._t0)
        reasons: list[str] = []
        if self.kind == "cpu":
            reasons += cpu_contention(cpu, self.threads)
        flags = {"throttled": False, "power_capped": False, "thermal": False}
        if gpu is not None:
            reasons += gpu_contention(gpu, window)
            flags = gpu_flags(gpu, window)
        return RowConditions(window_s=window, contended=bool(reasons), contention=reasons, cpu=cpu, gpu=gpu,
                             **flags)

    # -- CPU

    def _try(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except (OSError, ValueError, IndexError) as exc:
            return exc

    def _cpu_now(self) -> tuple[CpuTimes, int] | BaseException:
        try:
            return read_cpu_times(self.proc), read_own_ticks(self.proc)
        except (OSError, ValueError, IndexError) as exc:
            return exc

    def _cpu_conditions(self) -> CpuConditions:
        blank: dict[str, str] = {}
        now, then = self._cpu_now(), self._cpu0
        cores = steal = others = None
        if isinstance(then, BaseException):
            blank["steal"] = blank["others_busy"] = blank["cores"] = f"{self.proc}/stat: {_why(then)}"
        elif isinstance(now, BaseException):
            blank["steal"] = blank["others_busy"] = blank["cores"] = f"{self.proc}/stat: {_why(now)}"
        else:
            (t0, own0), (t1, own1) = then, now
            cores = t1.cores or None
            if cores is None:
                blank["cores"] = f"{self.proc}/stat lists no cpuN line"
            total = t1.total - t0.total
            if total <= 0:
                blank["steal"] = blank["others_busy"] = ("the row was shorter than the kernel's CPU accounting "
                                                         "tick: no time passed in /proc/stat")
            else:
                steal = (t1.steal - t0.steal) / total
                others = max(0, (t1.busy - t0.busy) - (own1 - own0)) / total
        load0 = self._load0
        load1 = self._try(lambda: read_load1(self.proc))
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

    # -- GPU

    def _gpu_conditions(self) -> GpuConditions:
        g = self._gpu
        if g is None:
            why = self._gpu_why or "NVML is unavailable"
            fields = ("other_processes", "sm_mhz_min", "sm_mhz_max", "clock_event_mask", "power_w", "power_limit_w",
                      "temperature_c_max", "energy_j", "power_capped_s", "thermal_capped_s")
            return GpuConditions(blank=dict.fromkeys(fields, why))
        self.poll_once()
        window = max(0.0, self.clock() - self._t0)
        blank: dict[str, str] = {}
        clocks = [p[0] for p in self._polls if p[0] is not None]
        if self._cursor is not None:
            clocks += [mhz for _, mhz in (g.clock_samples(self._cursor) or [])]
        if not clocks:
            blank["sm_mhz_min"] = blank["sm_mhz_max"] = "NVML reported no SM clock"
        masks = [p[1] for p in self._polls if p[1] is not None]
        mask = None
        if masks:
            mask = 0
            for m in masks:
                mask |= m
        else:
            blank["clock_event_mask"] = "NVML reported no clock-event reasons"
        temps = [p[3] for p in self._polls if p[3] is not None]
        if not temps:
            blank["temperature_c_max"] = "NVML reported no temperature"
        energy = None
        e1 = g.energy_mj()
        if self._energy0 is None or e1 is None:
            blank["energy_j"] = "NVML has no total energy counter for this GPU (Volta or newer has one)"
        elif e1 == self._energy0:
            blank["energy_j"] = (f"NVML's energy counter did not advance over the row's {window:.3f} s (it updates "
                                 "less often than that): measure energy over a longer window")
        else:
            energy = (e1 - self._energy0) * 1e-3
        powers = [p[2] for p in self._polls if p[2] is not None]
        # NVML's own draw (averaged by the driver over about a second on recent GPUs) over the polls; the energy
        # over the window only without it: a counter that ticks every ~0.1 s makes a short window's mean coarse
        power = sum(powers) / len(powers) if powers else (
            energy / window if energy is not None and window > 0 else None)
        if power is None:
            blank["power_w"] = "NVML reported neither energy nor power draw"
        limit = g.power_limit_w()
        if limit is None:
            blank["power_limit_w"] = "NVML reported no enforced power limit"
        capped: dict[str, float | None] = {}
        for key, name, default, v0 in (("power_capped_s", "NVML_PERF_POLICY_POWER", NVML_PERF_POLICY_POWER,
                                        self._power_v0),
                                       ("thermal_capped_s", "NVML_PERF_POLICY_THERMAL", NVML_PERF_POLICY_THERMAL,
                                        self._thermal_v0)):
            v1 = g.violation_ns(name, default)
            if v0 is None or v1 is None or v1 < v0:
                capped[key] = None
                blank[key] = "NVML reported no violation counter for this policy (nvmlDeviceGetViolationStatus)"
            else:
                capped[key] = (v1 - v0) * 1e-9
        procs1 = g.processes()
        others = None
        if self.own_pids_unknown:
            blank["other_processes"] = self.own_pids_unknown
        elif self._procs0 is None or procs1 is None:
            blank["other_processes"] = "NVML could not list the processes on the device"
        else:
            own = self.own_pids if self.own_pids is not None else namespace_pids(self.proc / "self" / "status")
            others = sorted((self._procs0 | procs1) - own)
        return GpuConditions(other_processes=others, sm_mhz_min=min(clocks) if clocks else None,
                             sm_mhz_max=max(clocks) if clocks else None, sm_mhz_readings=len(clocks),
                             clock_events=reason_names(mask) if mask else [], clock_event_mask=mask,
                             power_w=power, power_limit_w=limit, temperature_c_max=max(temps) if temps else None,
                             energy_j=energy, blank=blank, **capped)


def gpu_flags(gpu: GpuConditions, window_s: float) -> dict[str, bool]:
    """``throttled``, ``power_capped`` and ``thermal``: from the reasons seen, or the violation counters when the
    policy held the clocks down for more than ``CAPPED_SHARE`` of the row."""
    mask = gpu.clock_event_mask or 0
    power = bool(mask & POWER_REASONS) or _capped(gpu.power_capped_s, window_s)
    thermal = bool(mask & THERMAL_REASONS) or _capped(gpu.thermal_capped_s, window_s)
    return {"throttled": bool(mask & ~BENIGN) or power or thermal, "power_capped": power, "thermal": thermal}


#: A policy that held the clocks down for more than this share of a row marks it (a stray millisecond does not).
CAPPED_SHARE = 0.05


def _capped(seconds: float | None, window_s: float) -> bool:
    return bool(seconds) and window_s > 0 and seconds > CAPPED_SHARE * window_s  # type: ignore[operator]


def gpu_contention(gpu: GpuConditions, window_s: float) -> list[str]:
    """Why the device disturbed a GPU row: another process on it, or clocks held below what was asked."""
    out = []
    if gpu.other_processes:
        out.append(f"{len(gpu.other_processes)} other process(es) on the GPU (pid "
                   f"{', '.join(map(str, gpu.other_processes))})")
    mask = (gpu.clock_event_mask or 0) & ~BENIGN
    if mask:
        out.append("clock events: " + ", ".join(reason_names(mask)))
    for what, secs in (("power", gpu.power_capped_s), ("thermal", gpu.thermal_capped_s)):
        if _capped(secs, window_s) and not mask & (POWER_REASONS if what == "power" else THERMAL_REASONS):
            out.append(f"held below its clocks by the {what} policy for {secs * 1e3:.1f} ms of the row")  # type: ignore[operator]
    return out
