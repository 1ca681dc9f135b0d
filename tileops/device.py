"""What device this is: name, uuid, driver, clocks, CPU model.

The device name is what a profile matches (§1.2), so it must be exactly what
the driver reports: ``torch.cuda.get_device_name`` on a GPU, the ``model name``
line of ``/proc/cpuinfo`` on a CPU (whitespace collapsed). Everything NVML
gives (uuid, driver, clocks, other processes) is optional: the ``pynvml``
module of ``nvidia-ml-py`` is imported only when present and every call is
guarded, so a CPU-only host or a container without NVML still describes
itself.
"""

from __future__ import annotations

import os
import platform
import re
import socket
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, NamedTuple
from collections.abc import Callable

from tileops.records import device_key

CPUINFO = Path("/proc/cpuinfo")
CPU_SYSFS = Path("/sys/devices/system/cpu")

#: Arm CPU part numbers (``CPU part`` in /proc/cpuinfo, implementer 0x41) seen in servers.
ARM_PARTS = {
    "0xd08": "Cortex-A72", "0xd0b": "Cortex-A76", "0xd0c": "Neoverse-N1", "0xd40": "Neoverse-V1",
    "0xd49": "Neoverse-N2", "0xd4f": "Neoverse-V2", "0xd8e": "Neoverse-N3", "0xd84": "Neoverse-V3",
}


@dataclass(frozen=True)
class CpuInfo:
    """The parts of /proc/cpuinfo the CPU profile needs."""

    model: str
    vendor: str | None
    family: int | None
    flags: frozenset[str]
    logical_cpus: int
    physical_cores: int
    sockets: int
    mhz: float | None  # the "cpu MHz" line: the current clock, not a maximum
    arch: str  # "x86_64" or "aarch64"
    arm_part: str | None = None
    model_id: int | None = None  # the "model" line (x86): with the family, which microarchitecture this is


def _int(s: str | None) -> int | None:
    if s is None:
        return None
    try:
        return int(s, 0)
    except ValueError:
        return None


def parse_cpuinfo(text: str) -> CpuInfo:
    """Parse /proc/cpuinfo text (x86 or Arm layout) into a CpuInfo."""
    blocks = [b for b in re.split(r"\n\s*\n", text.strip()) if b.strip()]
    procs: list[dict[str, str]] = []
    common: dict[str, str] = {}
    for b in blocks:
        d: dict[str, str] = {}
        for line in b.splitlines():
            if ":" in line:
                k, _, v = line.partition(":")
                d[k.strip().lower()] = v.strip()
        if "processor" in d:
            procs.append(d)
        else:  # Arm kernels put "Hardware", "Revision", ... in a trailing block
            common.update(d)
    if not procs:
        procs = [common]
    first = {**common, **procs[0]}
    flags_line = first.get("flags") or first.get("features") or ""
    flags = frozenset(flags_line.split())
    arch = "aarch64" if ("features" in first and "flags" not in first) or "cpu implementer" in first else "x86_64"
    part = first.get("cpu part")
    if "model name" in first and arch == "x86_64":
        model = " ".join(first["model name"].split())
    elif arch == "aarch64":
        impl = first.get("cpu implementer", "?")
        model = f"ARM {ARM_PARTS[part]}" if impl == "0x41" and part in ARM_PARTS else (
            " ".join(first["model name"].split()) if "model name" in first
            else f"aarch64 implementer {impl} part {part or '?'}")
    else:
        model = platform.processor() or "unknown CPU"
    cores = {(p.get("physical id", "0"), p.get("core id")) for p in procs if p.get("core id") is not None}
    sockets = len({p.get("physical id", "0") for p in procs}) or 1
    mhz = first.get("cpu mhz")
    return CpuInfo(
        model=model, vendor=first.get("vendor_id"), family=_int(first.get("cpu family")), flags=flags,
        logical_cpus=len(procs), physical_cores=len(cores) if cores else len(procs), sockets=sockets,
        mhz=float(mhz) if mhz else None, arch=arch, arm_part=part,
        model_id=_int(first.get("model")) if arch == "x86_64" else None)


@lru_cache(maxsize=1)
def read_cpuinfo() -> CpuInfo:
    """This machine's CpuInfo (from /proc/cpuinfo; a minimal one where that file does not exist)."""
    try:
        return parse_cpuinfo(CPUINFO.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        n = os.cpu_count() or 1
        return CpuInfo(model=platform.processor() or platform.machine() or "unknown CPU", vendor=None, family=None,
                       flags=frozenset(), logical_cpus=n, physical_cores=n, sockets=1, mhz=None,
                       arch=platform.machine())


def usable_cpus() -> int:
    """CPUs this process may run on (affinity), which bounds the cores a calibration can use."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _size_bytes(s: str) -> int | None:
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", s, re.I)
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]


def cpu_llc_bytes() -> int | None:
    """The last-level cache of cpu0 from sysfs (the highest level listed), or None."""
    best: tuple[int, int] | None = None
    for idx in sorted((CPU_SYSFS / "cpu0" / "cache").glob("index*")):
        try:
            level = int((idx / "level").read_text())
            kind = (idx / "type").read_text().strip()
            size = _size_bytes((idx / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and size and (best is None or level > best[0]):
            best = (level, size)
    return best[1] if best else None


def cpu_max_mhz() -> float | None:
    """The maximum clock cpufreq reports (``cpuinfo_max_freq``), or None (often absent in VMs)."""
    try:
        return int((CPU_SYSFS / "cpu0" / "cpufreq" / "cpuinfo_max_freq").read_text()) / 1000.0
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- NVML (optional)


@lru_cache(maxsize=1)
def nvml_status() -> tuple[Any | None, str]:
    """(the initialised ``pynvml`` module, "") or (None, why not: the package missing, or NVML not starting)."""
    try:
        import pynvml
    except Exception:
        return None, "nvidia-ml-py is not installed (pip install nvidia-ml-py; the image's `gpu` extra has it)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return None, (f"NVML could not start ({type(exc).__name__}: {exc}); the driver's libnvidia-ml is missing "
                      "or does not match it (in a container: run it with the NVIDIA runtime)")
    return pynvml, ""


def nvml() -> Any | None:
    """The initialised ``pynvml`` module, or None when it is missing or NVML cannot start."""
    return nvml_status()[0]


def _nvml_handle(uuid: str | None) -> Any | None:
    lib = nvml()
    if lib is None or not uuid:
        return None
    try:
        return lib.nvmlDeviceGetHandleByUUID(uuid)
    except Exception:
        return None


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


# --------------------------------------------------------------------------- describing a device


@dataclass(frozen=True)
class DeviceInfo:
    """One device as the bench, the calibration, the audit and the records see it: the one identity passed
    around, described once per run (:func:`describe_device`), so nothing parses ``--device`` again.

    :attr:`key` names it in the store and the metrics, :attr:`torch_device` is what torch is given.
    """

    kind: Literal["cpu", "cuda"]
    name: str  # what profiles match: the driver's GPU name, or the CPU model
    index: int | None = None
    uuid: str | None = None
    driver: str | None = None
    cuda: str | None = None
    cpu_model: str | None = None
    threads: int | None = None
    l2_bytes: int | None = None  # L2 on a GPU, last-level cache on a CPU
    memory_bytes: int | None = None
    sm_count: int | None = None
    capability: tuple[int, int] | None = None
    clocks: dict[str, Any] | None = None
    hostname: str = field(default_factory=lambda: host_name())

    @property
    def torch_device(self) -> str:
        """The torch device string: ``cpu`` or ``cuda:N``."""
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index or 0}"

    @property
    def key(self) -> str:
        """The device's stable key: its GPU (or MIG) uuid, or ``cpu-<hostname>`` (``tileops.records.device_key``)."""
        return device_key(self.uuid, self.hostname)

    def machine_fields(self) -> dict[str, Any]:
        """The fields of ``tileops.records.Machine`` this device decides (records and calibrations share them)."""
        return {"device_kind": self.kind, "device_name": self.name, "device_uuid": self.uuid,
                "device_index": self.index, "driver": self.driver, "cuda": self.cuda,
                "cpu_model": self.cpu_model, "threads": self.threads, "l2_bytes": self.l2_bytes,
                "hostname": self.hostname}


#: Environment variables naming the host a measurement ran on, before the kernel's hostname:
#: inside a Kubernetes pod the hostname is the pod's (new every run), while the chart passes the
#: node's name as NODE_NAME, which is also what dcgm-exporter labels its series with.
HOSTNAME_ENV = ("TILEOPS_HOSTNAME", "NODE_NAME")


def host_name() -> str:
    """The host's stable name: ``$TILEOPS_HOSTNAME``, ``$NODE_NAME`` (a Kubernetes node), else the hostname."""
    for var in HOSTNAME_ENV:
        value = os.environ.get(var, "").strip()
        if value:
            return value
    return socket.gethostname()


def cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def default_device() -> str:
    """``cuda:0`` when a GPU is visible, else ``cpu``."""
    return "cuda:0" if cuda_available() else "cpu"


def parse_device(device: str) -> tuple[Literal["cpu", "cuda"], int | None]:
    """``auto`` | ``cpu`` | ``cuda`` | ``cuda:N`` -> (kind, index). ValueError naming the accepted forms."""
    d = (device or "auto").strip().lower()
    if d == "auto":
        d = default_device()
    if d == "cpu":
        return "cpu", None
    m = re.fullmatch(r"cuda(?::(\d+))?", d)
    if not m:
        raise ValueError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N")
    return "cuda", int(m.group(1) or 0)


def describe_device(device: str = "auto") -> DeviceInfo:
    """Describe ``device`` (``auto``, ``cpu``, ``cuda:N``). Raises ValueError for a GPU that is not there."""
    kind, index = parse_device(device)
    cpu = read_cpuinfo()
    if kind == "cpu":
        import torch

        return DeviceInfo(kind="cpu", name=cpu.model, cpu_model=cpu.model, threads=torch.get_num_threads(),
                          l2_bytes=cpu_llc_bytes(), memory_bytes=_mem_total(), clocks=_cpu_clocks())
    return _describe_cuda(index or 0, cpu)


def _mem_total() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _describe_cuda(index: int, cpu: CpuInfo) -> DeviceInfo:  # pragma: no cover - needs a GPU
    import torch

    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        raise ValueError(f"cuda:{index} is not visible ({n} CUDA device(s)); use --device cpu or a smaller index")
    props = torch.cuda.get_device_properties(index)
    raw_uuid = getattr(props, "uuid", None)
    uuid = None if raw_uuid is None else str(raw_uuid)
    if uuid and not uuid.startswith(("GPU-", "MIG-")):
        uuid = "GPU-" + uuid
    lib = nvml()
    driver = None
    if lib is not None:
        try:
            driver = _s(lib.nvmlSystemGetDriverVersion())
        except Exception:
            driver = None
    return DeviceInfo(
        kind="cuda", name=torch.cuda.get_device_name(index), index=index, uuid=uuid, driver=driver,
        cuda=torch.version.cuda, cpu_model=cpu.model, threads=torch.get_num_threads(),
        l2_bytes=int(getattr(props, "L2_cache_size", 0) or 0) or None, memory_bytes=int(props.total_memory),
        sm_count=int(props.multi_processor_count), capability=(props.major, props.minor),
        clocks=_gpu_clocks(index, uuid))


def read_clocks(device: DeviceInfo) -> dict[str, Any] | None:
    """Clocks now: SM/memory MHz, temperature, power and throttle reasons via NVML on a GPU;
    the mean ``cpu MHz`` on a CPU. None when nothing can be read."""
    if device.kind == "cpu":
        return _cpu_clocks()
    return _gpu_clocks(device.index or 0, device.uuid)  # pragma: no cover - needs a GPU


def _cpu_clocks() -> dict[str, Any] | None:
    try:
        mhz = [float(m) for m in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", CPUINFO.read_text(), re.M)]
    except OSError:
        mhz = []
    return {"cpu_mhz": round(sum(mhz) / len(mhz), 1)} if mhz else None


def _gpu_uuid(index: int) -> str | None:  # pragma: no cover - needs a GPU
    try:
        import torch

        u = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        return None if u is None else "GPU-" + str(u)
    except Exception:
        return None


def _gpu_clocks(index: int, uuid: str | None) -> dict[str, Any] | None:  # pragma: no cover - needs a GPU
    lib = nvml()
    h = _nvml_handle(uuid or _gpu_uuid(index))
    if lib is None or h is None:
        return None
    out: dict[str, Any] = {}
    reads = {
        "sm_mhz": lambda: lib.nvmlDeviceGetClockInfo(h, lib.NVML_CLOCK_SM),
        "mem_mhz": lambda: lib.nvmlDeviceGetClockInfo(h, lib.NVML_CLOCK_MEM),
        "sm_max_mhz": lambda: lib.nvmlDeviceGetMaxClockInfo(h, lib.NVML_CLOCK_SM),
        "mem_max_mhz": lambda: lib.nvmlDeviceGetMaxClockInfo(h, lib.NVML_CLOCK_MEM),
        "temperature_c": lambda: lib.nvmlDeviceGetTemperature(h, lib.NVML_TEMPERATURE_GPU),
        "power_w": lambda: lib.nvmlDeviceGetPowerUsage(h) / 1000.0,
        "power_limit_w": lambda: lib.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
        "throttle_reasons": lambda: int(lib.nvmlDeviceGetCurrentClocksThrottleReasons(h)),
        "gpu_util_pct": lambda: lib.nvmlDeviceGetUtilizationRates(h).gpu,
    }
    for key, fn in reads.items():
        try:
            out[key] = fn()
        except Exception:
            continue
    return out or None


class ProcessCheck(NamedTuple):
    """Other processes on a GPU (``others``), or None with ``why`` NVML could not tell."""

    others: list[dict[str, Any]] | None
    why: str = ""


def other_gpu_processes(device: DeviceInfo) -> ProcessCheck:
    """Other processes on this GPU (NVML), excluding this one; or None and the reason it cannot tell.

    A calibration needs an idle device: another process's kernels would steal
    bandwidth and make the ceilings look lower than they are. Inside a container
    NVML reports host PIDs, which ``os.getpid()`` never matches, and ``NSpid`` in
    ``/proc/self/status`` lists only the namespaces of the container's own procfs.
    So when neither finds this process but it holds a CUDA context, it finds itself
    by what only it can do: it allocates ``PROBE_BYTES`` and the one process whose
    NVML memory grows by that much is this one (:func:`own_pids_in`). When that
    does not single one out, the answer is None, never a guess: counting this
    process as another would call every device busy, missing another would call
    a busy one idle.
    """
    if device.kind == "cpu":
        return ProcessCheck([])
    found = _gpu_listing(device)  # pragma: no cover - needs a GPU
    if isinstance(found, str):  # pragma: no cover - needs a GPU
        return ProcessCheck(None, found)
    listed, mine = found  # pragma: no cover - needs a GPU
    return ProcessCheck([{"pid": pid, "used_memory_bytes": used} for pid, used in listed.items() if pid not in mine])


def own_gpu_pids(device: DeviceInfo) -> tuple[set[int] | None, str]:
    """This process's PIDs as NVML lists them on ``device`` (one probe, as :func:`other_gpu_processes` makes),
    or None and why they cannot be told: a bench worker asks once and its row sensors then tell the other
    processes on the device from itself inside a container too."""
    if device.kind == "cpu":
        return set(), ""
    found = _gpu_listing(device)  # pragma: no cover - needs a GPU
    return (None, found) if isinstance(found, str) else (found[1], "")  # pragma: no cover - needs a GPU


def _gpu_listing(device: DeviceInfo) -> tuple[dict[int, int | None], set[int]] | str:  # pragma: no cover - GPU
    """NVML's {pid: used memory} on the device and which of them are this process; or why not."""
    index, name = device.index, device.torch_device
    lib, why = nvml_status()
    if lib is None:
        return why
    uuid = _gpu_uuid(index or 0)
    h = _nvml_handle(uuid)
    if h is None:
        return f"NVML does not know {name} (uuid {uuid or 'unknown'})"
    listed = _nvml_processes(lib, h)
    if listed is None:
        return f"NVML could not list the processes on {name}"
    mine = own_pids_in(listed, namespace_pids(), _holds_context(index or 0),
                       lambda: _probe_listing(lib, h, index or 0))
    if mine is None:
        return (f"NVML lists {len(listed)} process(es) on {name} by host PID, and none is this process's PID (inside "
                f"a container PIDs differ), nor did a {PROBE_BYTES // 2**20} MiB allocation single this process "
                "out; run the container with --pid=host, or check with nvidia-smi on the host that nothing else runs")
    return listed, mine


def gpu_processes(device: DeviceInfo) -> list[dict[str, Any]] | None:
    """Other processes on this GPU, excluding this one; None when NVML cannot tell
    (:func:`other_gpu_processes` says why)."""
    return other_gpu_processes(device).others


#: What this process allocates to find itself in NVML's process list (a container's PIDs are not the host's).
PROBE_BYTES = 64 * 2**20


def namespace_pids(status: Path = Path("/proc/self/status")) -> set[int]:
    """This process's PID in every PID namespace its procfs shows (``NSpid``), and ``os.getpid()``."""
    pids = {os.getpid()}
    try:
        for line in status.read_text().splitlines():
            if line.startswith("NSpid:"):
                pids.update(int(x) for x in line.split()[1:])
    except (OSError, ValueError):
        pass
    return pids


def own_pids_in(listed: dict[int, int | None], own: set[int], holds_context: bool,
                probe: Callable[[], dict[int, int | None] | None]) -> set[int] | None:
    """Which of NVML's PIDs are this process; None when that cannot be told.

    ``listed`` is NVML's {pid: used GPU memory}; ``own`` this process's PIDs in the
    namespaces it can see; ``probe`` re-lists NVML while this process holds an
    extra ``PROBE_BYTES``. A PID NVML shares with us settles it; a process without
    a CUDA context is not listed at all. Otherwise the listed process whose memory
    grew by at least half the probe (or that appeared with it) is this one.
    """
    hit = own & listed.keys()
    if hit:
        return hit
    if not holds_context:
        return set()
    after = probe()
    if after is None:
        return None
    grew = set()
    for pid, used in after.items():
        before = listed.get(pid)
        if used is not None and (pid not in listed or (before is not None and used - before >= PROBE_BYTES // 2)):
            grew.add(pid)
    return grew if len(grew) == 1 else None


def _nvml_processes(lib: Any, handle: Any) -> dict[int, int | None] | None:  # pragma: no cover - needs a GPU
    seen: dict[int, int | None] = {}
    ok = False
    for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        try:
            for p in getattr(lib, getter)(handle):
                used = getattr(p, "usedGpuMemory", None)
                seen[int(p.pid)] = int(used) if isinstance(used, int) and used < 2**63 else None
            ok = True
        except Exception:
            continue
    return seen if ok else None


def _holds_context(index: int) -> bool:  # pragma: no cover - needs a GPU
    try:
        import torch

        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


def _probe_listing(lib: Any, handle: Any, index: int) -> dict[int, int | None] | None:  # pragma: no cover - GPU
    """NVML's list while this process holds ``PROBE_BYTES`` more, freshly allocated from the driver."""
    try:
        import torch

        torch.cuda.empty_cache()  # so the probe is a new cudaMalloc, not a cached block
        block = torch.empty(PROBE_BYTES, dtype=torch.uint8, device=f"cuda:{index}")
        try:
            torch.cuda.synchronize(index)
            return _nvml_processes(lib, handle)
        finally:
            del block
            torch.cuda.empty_cache()
    except Exception:
        return None


def cpu_busy_fraction() -> float | None:
    """The 1-minute load average over the usable CPUs: a CPU calibration on a busy host measures less."""
    try:
        return os.getloadavg()[0] / usable_cpus()
    except (AttributeError, OSError):
        return None
