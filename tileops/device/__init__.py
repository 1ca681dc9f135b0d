"""What device this is, read once: its identity, its CPU, its clocks, the processes on it, and NVML.

One module per job: ``identity`` (:class:`DeviceInfo`, the host's name),
``describe`` (``--device`` parsed and the device described, once per run),
``cpu`` (/proc/cpuinfo and the CPU's sysfs), ``clocks`` (clocks now), ``processes``
(other processes on a GPU, PID namespaces) and ``nvml`` (the process's one NVML
session: the only module that imports ``pynvml``). The names below are the
package's public ones, so ``from tileops.device import describe_device`` is how
the other layers ask. Standard library only until a GPU is described (torch),
so the bench stays import-light (spec §5.2).
"""

from tileops.device.clocks import read_clocks
from tileops.device.cpu import (
    ARM_PARTS,
    CpuInfo,
    cpu_busy_fraction,
    cpu_llc_bytes,
    cpu_max_mhz,
    parse_cpuinfo,
    read_cpuinfo,
    usable_cpus,
)
from tileops.device.describe import DeviceError, cuda_available, default_device, describe_device, parse_device
from tileops.device.identity import HOSTNAME_ENV, DeviceInfo, host_name
from tileops.device.nvml import NvmlError, NvmlGpu, NvmlSession
from tileops.device.processes import (
    PROBE_BYTES,
    ProcessCheck,
    gpu_processes,
    namespace_pids,
    other_gpu_processes,
    own_gpu_pids,
    own_pids_in,
)

__all__ = [
    "ARM_PARTS", "HOSTNAME_ENV", "PROBE_BYTES", "CpuInfo", "DeviceError", "DeviceInfo", "NvmlError", "NvmlGpu",
    "NvmlSession",
    "ProcessCheck", "cpu_busy_fraction", "cpu_llc_bytes", "cpu_max_mhz", "cuda_available", "default_device",
    "describe_device", "gpu_processes", "host_name", "namespace_pids", "other_gpu_processes", "own_gpu_pids",
    "own_pids_in", "parse_cpuinfo", "parse_device", "read_clocks", "read_cpuinfo", "usable_cpus",
]
