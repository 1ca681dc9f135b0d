"""A device's clocks now: what a calibration and a record keep beside a measurement.

A time means little without the clock it ran at: a GPU under a power or
thermal cap runs 15–20 % slower with no error anywhere, and a CPU's ``cpu MHz``
moves with its governor. These are readings, not facts: read them at the time
they describe (``tileops.ceilings`` reads the device's maxima, which are facts).
"""

from __future__ import annotations

from typing import Any

from tileops.device import nvml
from tileops.device.cpu import cpu_clocks
from tileops.device.identity import DeviceInfo


def read_clocks(device: DeviceInfo) -> dict[str, Any] | None:
    """Clocks now: SM/memory MHz, temperature, power and throttle reasons via NVML on a GPU;
    the mean ``cpu MHz`` on a CPU. None when nothing can be read."""
    if device.kind == "cpu":
        return cpu_clocks()
    return gpu_clocks(device.index or 0, device.uuid)  # pragma: no cover - needs a GPU


def gpu_uuid(index: int) -> str | None:  # pragma: no cover - needs a GPU
    """The uuid the CUDA driver gives ``cuda:<index>`` (``GPU-...``), or None."""
    try:
        import torch

        u = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        return None if u is None else "GPU-" + str(u)
    except Exception:
        return None


def gpu_clocks(index: int, uuid: str | None) -> dict[str, Any] | None:
    """The GPU's clocks, temperature, power and clock-event reasons now (NVML), or None without NVML or the GPU."""
    try:
        gpu = nvml.session().gpu_by_uuid(uuid or gpu_uuid(index) or "")
    except nvml.NvmlError:
        return None
    sm, mem = gpu.session.const("NVML_CLOCK_SM", nvml.NVML_CLOCK_SM), gpu.session.const("NVML_CLOCK_MEM",
                                                                                         nvml.NVML_CLOCK_MEM)
    reads = {  # NVML's own integers where it gives them, as a record has always kept them
        "sm_mhz": gpu.read("nvmlDeviceGetClockInfo", sm),
        "mem_mhz": gpu.read("nvmlDeviceGetClockInfo", mem),
        "sm_max_mhz": gpu.read("nvmlDeviceGetMaxClockInfo", sm),
        "mem_max_mhz": gpu.read("nvmlDeviceGetMaxClockInfo", mem),
        "temperature_c": gpu.read("nvmlDeviceGetTemperature",
                                  gpu.session.const("NVML_TEMPERATURE_GPU", nvml.NVML_TEMPERATURE_GPU)),
        "power_w": gpu.power_w(),
        "power_limit_w": gpu.power_limit_w(),
        "throttle_reasons": gpu.read("nvmlDeviceGetCurrentClocksThrottleReasons"),
        "gpu_util_pct": gpu.utilization_pct(),
    }
    out = {key: value for key, value in reads.items() if value is not None}
    return out or None
