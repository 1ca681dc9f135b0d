"""What the device did to a GPU row: other processes, clocks held down, power, temperature and energy.

On a GPU another process shares the SMs, and a power or thermal cap lowers the
SM clock 15–20 % with no error anywhere (issue 28). Read through the process's
NVML session (``tileops.device.nvml``; names checked against nvidia-ml-py
13.615.71's ``pynvml.py``). Counters are read at both ends, so nothing polls
during the row for them: the total energy (``nvmlDeviceGetTotalEnergyConsumption``,
mJ since the driver loaded) and the power and thermal violation times
(``nvmlDeviceGetViolationStatus`` with ``NVML_PERF_POLICY_POWER``/``THERMAL``,
ns spent held below the requested clocks). The SM clock's minimum and maximum
come from the driver's own sample buffer (``nvmlDeviceGetSamples(NVML_PROCESSOR_CLK_SAMPLES,
since)``, the samples after the newest one seen at the start), plus readings at
both ends. Clock-event reasons are instantaneous, so the sensors' light thread
ORs them together with the clock, power and temperature at every poll
(:meth:`GpuWindow.poll`). Standard library only (spec §5.2).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from tileops.device import namespace_pids
from tileops.device.nvml import NVML_PERF_POLICY_POWER, NVML_PERF_POLICY_THERMAL, NvmlGpu
from tileops.records.contract import GpuConditions

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


def reason_names(mask: int) -> list[str]:
    """The names of the bits set in a clock-event mask (unknown bits as hex)."""
    names = [n for bit, n in REASON_NAMES.items() if mask & bit]
    rest = mask & ~sum(REASON_NAMES)
    return names + ([hex(rest)] if rest else [])


#: One poll of the GPU: SM MHz, the clock-event mask, power (W), temperature (°C); None where NVML gave none.
Poll = tuple[float | None, int | None, float | None, float | None]

#: Every field of :class:`GpuConditions` a GPU without NVML leaves blank.
GPU_FIELDS = ("other_processes", "sm_mhz_min", "sm_mhz_max", "clock_event_mask", "power_w", "power_limit_w",
              "temperature_c_max", "energy_j", "power_capped_s", "thermal_capped_s")


def unread_gpu(why: str) -> GpuConditions:
    """A GPU row's conditions where NVML could not be read: every field blank with ``why``."""
    return GpuConditions(blank=dict.fromkeys(GPU_FIELDS, why))


class GpuWindow:
    """One GPU's counters at a row's start, its polls during the row, and :meth:`conditions` at the end.

    ``own_pids``: this process as NVML lists it (None: its PIDs in every namespace ``proc`` shows);
    ``own_pids_unknown``: why they could not be told, and then other processes are blank with it."""

    def __init__(self, gpu: NvmlGpu, own_pids: Collection[int] | None, own_pids_unknown: str | None,
                 proc: Path) -> None:
        self.gpu, self.proc = gpu, proc
        self.own_pids = set(own_pids) if own_pids is not None else None
        self.own_pids_unknown = own_pids_unknown
        self.polls: list[Poll] = []
        self._energy0 = gpu.energy_mj()
        self._power_v0 = gpu.violation_ns("NVML_PERF_POLICY_POWER", NVML_PERF_POLICY_POWER)
        self._thermal_v0 = gpu.violation_ns("NVML_PERF_POLICY_THERMAL", NVML_PERF_POLICY_THERMAL)
        buffered = gpu.clock_samples(0)
        # the newest sample the driver holds now: the row's are the ones after it (an empty buffer: all)
        self._cursor = max((ts for ts, _ in buffered), default=0) if buffered is not None else None
        self._procs0 = self._pids()
        self.poll()

    def _pids(self) -> set[int] | None:
        listed = self.gpu.processes()
        return None if listed is None else {p.pid for p in listed}

    def poll(self) -> None:
        """One reading of the clock, clock-event reasons, power and temperature (the sensors' thread's step)."""
        g = self.gpu
        self.polls.append((g.sm_mhz(), g.clock_event_mask(), g.power_w(), g.temperature_c()))

    def conditions(self, window_s: float) -> GpuConditions:
        """The row's conditions over ``window_s`` seconds (after a last :meth:`poll`)."""
        blank: dict[str, str] = {}
        clocks = self._clocks(blank)
        mask = self._mask(blank)
        temps = [p[3] for p in self.polls if p[3] is not None]
        if not temps:
            blank["temperature_c_max"] = "NVML reported no temperature"
        energy = self._energy(window_s, blank)
        power = self._power(energy, window_s, blank)
        limit = self.gpu.power_limit_w()
        if limit is None:
            blank["power_limit_w"] = "NVML reported no enforced power limit"
        return GpuConditions(other_processes=self._others(blank), sm_mhz_min=min(clocks) if clocks else None,
                             sm_mhz_max=max(clocks) if clocks else None, sm_mhz_readings=len(clocks),
                             clock_events=reason_names(mask) if mask else [], clock_event_mask=mask,
                             power_w=power, power_limit_w=limit, temperature_c_max=max(temps) if temps else None,
                             energy_j=energy, blank=blank, **self._capped_times(blank))

    def _clocks(self, blank: dict[str, str]) -> list[float]:
        clocks = [p[0] for p in self.polls if p[0] is not None]
        if self._cursor is not None:
            clocks += [mhz for _, mhz in (self.gpu.clock_samples(self._cursor) or [])]
        if not clocks:
            blank["sm_mhz_min"] = blank["sm_mhz_max"] = "NVML reported no SM clock"
        return clocks

    def _mask(self, blank: dict[str, str]) -> int | None:
        masks = [p[1] for p in self.polls if p[1] is not None]
        if not masks:
            blank["clock_event_mask"] = "NVML reported no clock-event reasons"
            return None
        mask = 0
        for m in masks:
            mask |= m
        return mask

    def _energy(self, window_s: float, blank: dict[str, str]) -> float | None:
        e1 = self.gpu.energy_mj()
        if self._energy0 is None or e1 is None:
            blank["energy_j"] = "NVML has no total energy counter for this GPU (Volta or newer has one)"
        elif e1 == self._energy0:
            blank["energy_j"] = (f"NVML's energy counter did not advance over the row's {window_s:.3f} s (it "
                                 "updates less often than that): measure energy over a longer window")
        else:
            return (e1 - self._energy0) * 1e-3
        return None

    def _power(self, energy: float | None, window_s: float, blank: dict[str, str]) -> float | None:
        powers = [p[2] for p in self.polls if p[2] is not None]
        # NVML's own draw (averaged by the driver over about a second on recent GPUs) over the polls; the energy
        # over the window only without it: a counter that ticks every ~0.1 s makes a short window's mean coarse
        power = sum(powers) / len(powers) if powers else (
            energy / window_s if energy is not None and window_s > 0 else None)
        if power is None:
            blank["power_w"] = "NVML reported neither energy nor power draw"
        return power

    def _capped_times(self, blank: dict[str, str]) -> dict[str, float | None]:
        capped: dict[str, float | None] = {}
        for key, name, default, v0 in (("power_capped_s", "NVML_PERF_POLICY_POWER", NVML_PERF_POLICY_POWER,
                                        self._power_v0),
                                       ("thermal_capped_s", "NVML_PERF_POLICY_THERMAL", NVML_PERF_POLICY_THERMAL,
                                        self._thermal_v0)):
            v1 = self.gpu.violation_ns(name, default)
            if v0 is None or v1 is None or v1 < v0:
                capped[key] = None
                blank[key] = "NVML reported no violation counter for this policy (nvmlDeviceGetViolationStatus)"
            else:
                capped[key] = (v1 - v0) * 1e-9
        return capped

    def _others(self, blank: dict[str, str]) -> list[int] | None:
        procs1 = self._pids()
        if self.own_pids_unknown:
            blank["other_processes"] = self.own_pids_unknown
        elif self._procs0 is None or procs1 is None:
            blank["other_processes"] = "NVML could not list the processes on the device"
        else:
            own = self.own_pids if self.own_pids is not None else namespace_pids(self.proc / "self" / "status")
            return sorted((self._procs0 | procs1) - own)
        return None


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
