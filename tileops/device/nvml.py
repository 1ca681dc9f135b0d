"""The one NVML session of this process, and the calls the project makes through it.

NVML is optional (the ``pynvml`` module of ``nvidia-ml-py``, the ``gpu`` extra): a
CPU-only host or a container without the NVIDIA runtime must still run. So the
bindings are imported only here and only when a GPU asks, NVML is started once
per process (:func:`session`) and shut down at exit, and every failure of the
bindings, of ``nvmlInit`` or of a call is one :class:`NvmlError` whose message
says which call failed and with NVML's own words. Nothing else in the package
imports ``pynvml``: the describer, the sensors, the ceilings' facts and the fleet
all ask a :class:`NvmlSession` for a :class:`NvmlGpu` and read it.

A session wraps a module (``lib``) rather than importing one, so the tests hand a
fake of nvidia-ml-py's names to :class:`NvmlSession` and every reader above runs
on it unchanged. Standard library only (the bench imports this, spec §5.2).
"""

from __future__ import annotations

import atexit
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tileops.errors import TileOpsError

# pynvml constants, used where the module given lacks them (a fake, or an old nvidia-ml-py).
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0
NVML_PROCESSOR_CLK_SAMPLES = 5
NVML_PERF_POLICY_POWER = 0
NVML_PERF_POLICY_THERMAL = 1


class NvmlError(TileOpsError):
    """NVML cannot answer: the bindings are missing (``bindings_missing``), NVML did not start, or a call failed.

    ``cause`` is the underlying error in NVML's own words (``Driver Not Loaded``), for a caller that
    words its own advice around it (the fleet does)."""

    def __init__(self, message: str, *, cause: str = "", bindings_missing: bool = False) -> None:
        super().__init__(message)
        self.cause = cause or message
        self.bindings_missing = bindings_missing


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class NvmlSession:
    """NVML, started: the system's calls and the GPUs by uuid or index. ``lib`` is the ``pynvml`` module
    (or a fake of its names)."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib

    def call(self, name: str, *args: Any) -> Any:
        """``lib.<name>(*args)``; any failure (the call missing from these bindings included) as NvmlError."""
        try:
            return getattr(self._lib, name)(*args)
        except Exception as exc:
            raise NvmlError(f"NVML {name} failed ({_why(exc)})", cause=str(exc)) from exc

    def const(self, name: str, default: int) -> int:
        """An NVML constant by its pynvml name; ``default`` where the module lacks it."""
        value = getattr(self._lib, name, default)
        return value if isinstance(value, int) else default

    def driver_version(self) -> str:
        return _text(self.call("nvmlSystemGetDriverVersion"))

    def device_count(self) -> int:
        return int(self.call("nvmlDeviceGetCount"))

    def gpu_by_index(self, index: int) -> NvmlGpu:
        return NvmlGpu(self, self.call("nvmlDeviceGetHandleByIndex", index))

    def gpu_by_uuid(self, uuid: str) -> NvmlGpu:
        return NvmlGpu(self, self.call("nvmlDeviceGetHandleByUUID", uuid))

    def find_gpu(self, uuid: str | None, index: int | None) -> NvmlGpu:
        """The GPU by its uuid, else by its index (a uuid NVML does not know, as under MIG, falls back).
        NvmlError with the last answer when neither finds it."""
        error = NvmlError("neither a uuid nor an index to find the GPU by")
        if uuid is not None:
            try:
                return self.gpu_by_uuid(uuid)
            except NvmlError as exc:
                error = exc
        if index is not None:
            try:
                return self.gpu_by_index(index)
            except NvmlError as exc:
                error = exc
        raise error


@dataclass(frozen=True)
class NvmlProcess:
    """One process NVML lists on a GPU: its (host) PID and the GPU memory it holds, where NVML says."""

    pid: int
    used_bytes: int | None


class NvmlGpu:
    """One GPU of a session. :meth:`call` raises NvmlError; the readers that end in a unit return None
    where NVML does not answer, since a sensor or a description goes on without one reading."""

    def __init__(self, session: NvmlSession, handle: Any) -> None:
        self.session, self.handle = session, handle

    def call(self, name: str, *args: Any) -> Any:
        return self.session.call(name, self.handle, *args)

    def read(self, name: str, *args: Any) -> Any | None:
        try:
            return self.call(name, *args)
        except NvmlError:
            return None

    def _number(self, name: str, *args: Any, per: float = 1.0) -> float | None:
        v = self.read(name, *args)
        return v / per if isinstance(v, (int, float)) else None

    # -- identity

    def name(self) -> str:
        return _text(self.call("nvmlDeviceGetName"))

    def uuid(self) -> str:
        return _text(self.call("nvmlDeviceGetUUID"))

    # -- clocks, power, temperature (now)

    def sm_mhz(self) -> float | None:
        return self._number("nvmlDeviceGetClockInfo", self.session.const("NVML_CLOCK_SM", NVML_CLOCK_SM))

    def max_sm_mhz(self) -> Any:
        """The maximum SM clock (raises NvmlError: the ceilings say which call failed)."""
        return self.call("nvmlDeviceGetMaxClockInfo", self.session.const("NVML_CLOCK_SM", NVML_CLOCK_SM))

    def max_mem_mhz(self) -> Any:
        return self.call("nvmlDeviceGetMaxClockInfo", self.session.const("NVML_CLOCK_MEM", NVML_CLOCK_MEM))

    def bus_width_bits(self) -> Any:
        return self.call("nvmlDeviceGetMemoryBusWidth")

    def temperature_c(self) -> float | None:
        return self._number("nvmlDeviceGetTemperature",
                            self.session.const("NVML_TEMPERATURE_GPU", NVML_TEMPERATURE_GPU))

    def power_w(self) -> float | None:
        return self._number("nvmlDeviceGetPowerUsage", per=1000.0)  # NVML says mW

    def power_limit_w(self) -> float | None:
        return self._number("nvmlDeviceGetEnforcedPowerLimit", per=1000.0)

    def utilization_pct(self) -> int | None:
        v = getattr(self.read("nvmlDeviceGetUtilizationRates"), "gpu", None)
        return v if isinstance(v, int) else None

    def clock_event_mask(self) -> int | None:
        """The clock-event reasons now. ``...ClocksEventReasons`` since driver 535; before it only
        ``...ClocksThrottleReasons``, which pynvml.py marks "will be removed in CUDA 14.0"."""
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            v = self.read(name)
            if isinstance(v, int):
                return v
        return None

    # -- counters and the driver's sample buffer

    def energy_mj(self) -> int | None:
        """The total energy since the driver loaded (mJ; Volta or newer)."""
        v = self.read("nvmlDeviceGetTotalEnergyConsumption")
        return v if isinstance(v, int) else None

    def violation_ns(self, policy: str, default: int) -> int | None:
        """How long the ``policy`` (``NVML_PERF_POLICY_POWER``/``THERMAL``) held the clocks down (ns)."""
        t = getattr(self.read("nvmlDeviceGetViolationStatus", self.session.const(policy, default)),
                    "violationTime", None)
        return t if isinstance(t, int) else None

    def clock_samples(self, since: int) -> list[tuple[int, float]] | None:
        """The driver's buffered SM clock samples newer than ``since`` (µs), as (timestamp, MHz)."""
        v = self.read("nvmlDeviceGetSamples",
                      self.session.const("NVML_PROCESSOR_CLK_SAMPLES", NVML_PROCESSOR_CLK_SAMPLES), since)
        if not isinstance(v, tuple) or len(v) != 2:
            return None
        out = []
        for s in v[1]:
            ts, val = getattr(s, "timeStamp", None), getattr(getattr(s, "sampleValue", None), "uiVal", None)
            if isinstance(ts, int) and isinstance(val, int) and ts > since:
                out.append((ts, float(val)))
        return out

    def processes(self) -> list[NvmlProcess] | None:
        """Compute and graphics processes on the GPU; None when NVML could list neither."""
        seen: list[NvmlProcess] | None = None
        for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            listed = self.read(name)
            if listed is None:
                continue
            seen = seen or []
            for p in listed:
                used = getattr(p, "usedGpuMemory", None)  # NVML's "not available" is a huge value
                seen.append(NvmlProcess(int(p.pid), int(used) if isinstance(used, int) and used < 2**63 else None))
        return seen


# --------------------------------------------------------------------------- the process's session


@lru_cache(maxsize=1)
def session_status() -> tuple[NvmlSession | None, NvmlError | None]:
    """(the session, None), or (None, why not); NVML is started on the first call only, and shut down at exit."""
    try:
        import pynvml
    except Exception as exc:
        return None, NvmlError("nvidia-ml-py is not installed (pip install nvidia-ml-py; the image's `gpu` extra "
                               "has it)", cause=str(exc), bindings_missing=True)
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return None, NvmlError(f"NVML could not start ({_why(exc)}); the driver's libnvidia-ml is missing or does "
                               "not match it (in a container: run it with the NVIDIA runtime)", cause=str(exc))
    atexit.register(_shutdown, pynvml)
    return NvmlSession(pynvml), None


def _shutdown(lib: Any) -> None:
    try:
        lib.nvmlShutdown()
    except Exception:  # at exit: a driver already gone has nothing left to release
        pass


def session() -> NvmlSession:
    """This process's NVML session; NvmlError saying why there is none."""
    nvml, error = session_status()
    if nvml is None:
        assert error is not None
        raise error
    return nvml


def why_unavailable() -> str:
    """Why this process has no NVML ("" when it has one)."""
    return str(session_status()[1] or "")
