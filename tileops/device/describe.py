"""Describing a device once: ``--device`` parsed, and the :class:`DeviceInfo` a run is handed.

The device name is what a profile matches (§1.2), so it must be exactly what
the driver reports: ``torch.cuda.get_device_name`` on a GPU, the CPU's model
(``tileops.device.cpu``) on a CPU. Everything NVML gives (the driver, clocks)
is optional and read through the process's one NVML session, so a CPU-only
host or a container without NVML still describes itself.
"""

from __future__ import annotations

import re
from typing import Literal

from tileops.device import nvml
from tileops.device.clocks import gpu_clocks
from tileops.device.cpu import CpuInfo, cpu_clocks, cpu_llc_bytes, mem_total_bytes, read_cpuinfo
from tileops.device.identity import DeviceInfo
from tileops.errors import TileOpsError


class DeviceError(TileOpsError, ValueError):
    """A ``--device`` that names no device here: the command says so and stops (exit 2), before measuring."""


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
    """``auto`` | ``cpu`` | ``cuda`` | ``cuda:N`` -> (kind, index). DeviceError naming the accepted forms."""
    d = (device or "auto").strip().lower()
    if d == "auto":
        d = default_device()
    if d == "cpu":
        return "cpu", None
    m = re.fullmatch(r"cuda(?::(\d+))?", d)
    if not m:
        raise DeviceError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N")
    return "cuda", int(m.group(1) or 0)


def describe_device(device: str = "auto") -> DeviceInfo:
    """Describe ``device`` (``auto``, ``cpu``, ``cuda:N``: what ``--device`` says, parsed here and only here).
    Raises DeviceError (a ValueError, and a TileOpsError the command line reports) for a GPU that is not
    there."""
    kind, index = parse_device(device)
    cpu = read_cpuinfo()
    if kind == "cpu":
        import torch

        return DeviceInfo(kind="cpu", name=cpu.model, cpu_model=cpu.model, threads=torch.get_num_threads(),
                          l2_bytes=cpu_llc_bytes(), memory_bytes=mem_total_bytes(), clocks=cpu_clocks())
    return _describe_cuda(index or 0, cpu)


def _describe_cuda(index: int, cpu: CpuInfo) -> DeviceInfo:  # pragma: no cover - needs a GPU
    import torch

    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        raise DeviceError(f"cuda:{index} is not visible ({n} CUDA device(s)); use --device cpu or a smaller index")
    props = torch.cuda.get_device_properties(index)
    raw_uuid = getattr(props, "uuid", None)
    uuid = None if raw_uuid is None else str(raw_uuid)
    if uuid and not uuid.startswith(("GPU-", "MIG-")):
        uuid = "GPU-" + uuid
    try:
        driver: str | None = nvml.session().driver_version()
    except nvml.NvmlError:
        driver = None
    return DeviceInfo(
        kind="cuda", name=torch.cuda.get_device_name(index), index=index, uuid=uuid, driver=driver,
        cuda=torch.version.cuda, cpu_model=cpu.model, threads=torch.get_num_threads(),
        l2_bytes=int(getattr(props, "L2_cache_size", 0) or 0) or None, memory_bytes=int(props.total_memory),
        sm_count=int(props.multi_processor_count), capability=(props.major, props.minor),
        clocks=gpu_clocks(index, uuid))
