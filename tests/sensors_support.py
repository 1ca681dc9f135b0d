"""Fakes for what the sensors read and cannot find here (tests/test_sensors.py, tests/test_gap_energy.py): a /proc
tree that a test advances, a powercap sysfs tree, a clock, and a pynvml module by nvidia-ml-py's names."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tileops.bench.gpusensors import GPU_IDLE


class FakeProc:
    """/proc/stat (two CPUs), /proc/loadavg and /proc/self/{stat,status}, rewritten at will."""

    def __init__(self, root: Path, cores: int = 2) -> None:
        self.root = root
        (root / "self").mkdir(parents=True)
        self.cores = cores
        self.cols = {"user": 1000, "nice": 0, "system": 200, "idle": 5000, "iowait": 10, "irq": 0, "softirq": 5,
                     "steal": 0}
        self.own = 100  # utime + stime of this process
        self.load = 0.2
        self.write()
        (root / "self" / "status").write_text("Name:\tpython\nNSpid:\t4242\t7\n")

    def write(self) -> None:
        c = self.cols
        agg = " ".join(str(c[k]) for k in ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"))
        lines = [f"cpu  {agg} 0 0"] + [f"cpu{i} 1 0 1 1 0 0 0 0 0 0" for i in range(self.cores)]
        (self.root / "stat").write_text("\n".join(lines) + "\nintr 1 2 3\nctxt 99\n")
        (self.root / "loadavg").write_text(f"{self.load:.2f} 0.50 0.40 2/300 12345\n")
        utime, stime = self.own - 30, 30
        (self.root / "self" / "stat").write_text(
            f"4242 (py thon (x)) R 1 4242 4242 0 -1 4194304 100 0 0 0 {utime} {stime} 0 0 20 0 3 0 1 1 1\n")

    def advance(self, *, total: int, steal: int = 0, others: int = 0, own: int = 0, load: float | None = None
                ) -> None:
        """``total`` ticks pass over all CPUs: ``steal`` stolen, ``own`` used by this process, ``others`` by the
        rest; the remainder idle."""
        self.cols["steal"] += steal
        self.cols["user"] += own + others
        self.cols["idle"] += total - steal - own - others
        self.own += own
        if load is not None:
            self.load = load
        self.write()


def fake_rapl(sys_root: Path, domains: dict[str, tuple[str, int, int]]) -> None:
    """``domains``: dir name -> (name, energy_uj, max_energy_range_uj)."""
    for d, (name, energy, span) in domains.items():
        p = sys_root / "class" / "powercap" / d
        p.mkdir(parents=True, exist_ok=True)
        (p / "name").write_text(name + "\n")
        (p / "energy_uj").write_text(f"{energy}\n")
        (p / "max_energy_range_uj").write_text(f"{span}\n")


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class FakeNvml:
    """The pynvml functions the sensors call, by their nvidia-ml-py names; readings advance with each call."""

    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0
    NVML_PROCESSOR_CLK_SAMPLES = 5
    NVML_PERF_POLICY_POWER = 0
    NVML_PERF_POLICY_THERMAL = 1

    def __init__(self, *, reasons: list[int] | None = None, clocks: list[int] | None = None,
                 energy_mj: list[int] | None = None, violations: dict[int, list[int]] | None = None,
                 processes: list[int] | None = None, samples: list[list[tuple[int, int]]] | None = None,
                 old_driver: bool = False, power_mw: int = 350_000, limit_mw: int = 700_000) -> None:
        self.reasons = reasons or [GPU_IDLE]
        self.clocks = clocks or [1980]
        self.energy = energy_mj or [1_000_000, 1_500_000]
        self.violations = violations or {0: [0, 0], 1: [0, 0]}
        self.procs = processes if processes is not None else []
        self.samples = samples
        self.power_mw, self.limit_mw = power_mw, limit_mw
        self.calls: dict[str, int] = {}
        if old_driver:  # before driver 535 only the Throttle name exists
            self.nvmlDeviceGetCurrentClocksThrottleReasons = self._reasons
        else:
            self.nvmlDeviceGetCurrentClocksEventReasons = self._reasons

    def _next(self, name: str, seq: list) -> Any:
        i = self.calls.get(name, 0)
        self.calls[name] = i + 1
        return seq[min(i, len(seq) - 1)]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid != "GPU-1":
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return "handle"

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return "handle"

    def _reasons(self, h: str) -> int:
        return self._next("reasons", self.reasons)

    def nvmlDeviceGetClockInfo(self, h: str, kind: int) -> int:
        assert kind == 1
        return self._next("clock", self.clocks)

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        return self.power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: str) -> int:
        return self.limit_mw

    def nvmlDeviceGetTemperature(self, h: str, sensor: int) -> int:
        assert sensor == 0
        return self._next("temp", [61, 64, 66])

    def nvmlDeviceGetTotalEnergyConsumption(self, h: str) -> int:
        return self._next("energy", self.energy)

    def nvmlDeviceGetViolationStatus(self, h: str, policy: int) -> Any:
        return SimpleNamespace(referenceTime=0, violationTime=self._next(f"viol{policy}", self.violations[policy]))

    def nvmlDeviceGetSamples(self, h: str, kind: int, since: int) -> tuple[int, list]:
        assert kind == 5
        if self.samples is None:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        batch = self._next("samples", self.samples)
        return 1, [SimpleNamespace(timeStamp=ts, sampleValue=SimpleNamespace(uiVal=v)) for ts, v in batch if ts > since]

    def nvmlDeviceGetComputeRunningProcesses(self, h: str) -> list:
        return [SimpleNamespace(pid=p, usedGpuMemory=1 << 20) for p in self.procs]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: str) -> list:
        return []
