"""A GPU's own facts, as its driver reports them, and the facts recorded for the SKUs profiles ship for.

The facts a ceiling is derived from: SM count and compute capability (the CUDA
driver's device properties), the maximum SM and memory clocks and the memory bus
width (NVML). On a device they are read (:func:`read_facts`); where none is at
hand they come from :data:`RECORDED`, what was published for each SKU a shipped
profile names, each figure with where it was published. A fact nobody reported
stays None and whatever needs it is not derived (said so, never guessed).

One fact is no driver's: Hopper runs tensor-core work at a lower boost clock than
its SMs' maximum, and only the product documentation states it
(``tileops.ceilings.arch``). It is recorded per SKU, and a device borrows it from
the recorded SKU of its own name only when its reported maximum SM clock is the
recorded one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tileops.device import DeviceInfo, cuda_available, describe_device
from tileops.device import nvml as device_nvml
from tileops.device.nvml import NvmlError, NvmlGpu, NvmlSession

#: Each fact, as a sentence names it.
FACT_LABELS = {"capability": "compute capability", "sm_count": "SM count", "max_sm_mhz": "max SM clock",
               "max_mem_mhz": "max memory clock", "bus_width_bits": "memory bus width",
               "tensor_max_mhz": "tensor-core clock"}


@dataclass(frozen=True)
class DeviceFacts:
    """The facts of one GPU (or SKU); ``refs`` says where each came from, ``missing`` why one is absent."""

    name: str  # what the driver reports, what profiles match
    capability: tuple[int, int] | None = None
    sm_count: int | None = None
    max_sm_mhz: float | None = None
    max_mem_mhz: float | None = None
    bus_width_bits: int | None = None
    tensor_max_mhz: float | None = None  # published per product (Hopper); None where the SMs' maximum applies
    origin: str = "recorded"  # "recorded" (published figures) or where they were read ("NVML on cuda:0")
    refs: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """``NVIDIA H200 (recorded): compute capability 9.0, 132 SMs, max SM clock 1980 MHz, ...``."""
        parts = []
        if self.capability:
            parts.append(f"compute capability {self.capability[0]}.{self.capability[1]}")
        for value, text in ((self.sm_count, "{:g} SMs"), (self.max_sm_mhz, "max SM clock {:g} MHz"),
                            (self.tensor_max_mhz, "tensor-core clock {:g} MHz"),
                            (self.max_mem_mhz, "max memory clock {:g} MHz"), (self.bus_width_bits, "{:g}-bit bus")):
            if value is not None:
                parts.append(text.format(value))
        unknown = [label for f, label in FACT_LABELS.items() if f in self.missing]
        return (f"{self.name} ({self.origin}): " + ", ".join(parts)
                + (f"; unknown: {', '.join(unknown)}" if unknown else ""))

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "origin": self.origin,
                "capability": f"{self.capability[0]}.{self.capability[1]}" if self.capability else None,
                "sm_count": self.sm_count, "max_sm_mhz": self.max_sm_mhz, "max_mem_mhz": self.max_mem_mhz,
                "bus_width_bits": self.bus_width_bits, "tensor_max_mhz": self.tensor_max_mhz,
                "refs": dict(self.refs), "missing": dict(self.missing)}


# --------------------------------------------------------------------------- recorded, per SKU

_AWS = ("AWS EC2 User Guide, 'Optimize GPU settings' (docs.aws.amazon.com/AWSEC2/latest/UserGuide/optimize_gpu.html): "
        "`nvidia-smi -ac MEM,SM` at the maximum clocks, {}")
_A100_WP = "NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs, 5120-bit HBM2/HBM2e interface"
_H100_WP = "NVIDIA H100 Tensor Core GPU Architecture whitepaper / H100 datasheet: {} SMs, 5120-bit memory interface"
_TC = "NVIDIA H100 Tensor Core GPU Architecture whitepaper, table 3 (max boost clock for Tensor Core work)"
_AMPERE = (8, 0)
_HOPPER = (9, 0)
_ADA = (8, 9)


def _sku(name: str, capability: tuple[int, int], sm_count: int, max_sm_mhz: float | None, max_mem_mhz: float,
         bus_width_bits: int, refs: dict[str, str], tensor_max_mhz: float | None = None,
         missing: dict[str, str] | None = None) -> DeviceFacts:
    return DeviceFacts(name, capability, sm_count, max_sm_mhz, max_mem_mhz, bus_width_bits, tensor_max_mhz,
                       "recorded", refs, missing or {})


#: The published facts of each SKU a shipped profile names, keyed by the name its driver reports.
RECORDED: dict[str, DeviceFacts] = {f.name: f for f in (
    _sku("NVIDIA A100-SXM4-40GB", _AMPERE, 108, 1410, 1215, 5120, {
        "sm_count": _A100_WP + "; deviceQuery on an A100-SXM4-40GB: '(108) Multiprocessors', 'GPU Max Clock rate: "
                               "1410 MHz', 'Memory Clock rate: 1215 Mhz', 'Memory Bus Width: 5120-bit' (Paderborn "
                               "PC2 documentation, 'NVIDIA A100 40GB with NVLINK')",
        "max_sm_mhz": _AWS.format("P4d (A100 40GB): 1215,1410"), "max_mem_mhz": _AWS.format("P4d: 1215,1410"),
        "bus_width_bits": _A100_WP}),
    _sku("NVIDIA A100-SXM4-80GB", _AMPERE, 108, 1410, 1593, 5120, {
        "sm_count": _A100_WP + "; numSms 108 in a PyTorch profiler trace of an 'NVIDIA A100-SXM4-80GB' "
                               "(facebookresearch/HolisticTraceAnalysis test data, ../shared/fixtures/kineto)",
        "max_sm_mhz": _AWS.format("P4de (A100 80GB): 1593,1410"), "max_mem_mhz": _AWS.format("P4de: 1593,1410"),
        "bus_width_bits": _A100_WP}),
    _sku("NVIDIA A100 80GB PCIe", _AMPERE, 108, 1410, 1512, 5120, {
        "sm_count": _A100_WP, "max_sm_mhz": "NVIDIA A100 80GB PCIe product brief PB-10577-001: boost clock 1410 MHz",
        "max_mem_mhz": "NVIDIA A100 80GB PCIe product brief PB-10577-001: memory clock 1512 MHz",
        "bus_width_bits": _A100_WP}),
    _sku("NVIDIA H100 80GB HBM3", _HOPPER, 132, 1980, 2619, 5120, {
        "sm_count": _H100_WP.format(132) + " (H100 SXM5)", "max_sm_mhz": _AWS.format("P5 (H100 SXM): 2619,1980"),
        "max_mem_mhz": _AWS.format("P5: 2619,1980"), "bus_width_bits": _H100_WP.format(132),
        "tensor_max_mhz": _TC + ": 1830 MHz (H100 SXM5)"}, tensor_max_mhz=1830),
    _sku("NVIDIA H100 PCIe", _HOPPER, 114, 1755, 1593, 5120, {
        "sm_count": _H100_WP.format(114) + " (H100 PCIe)",
        "max_sm_mhz": "NVIDIA H100 PCIe product brief PB-11133-001: max boost clock 1755 MHz",
        "max_mem_mhz": "memory clock 1593 MHz (third-party: TechPowerUp GPU database and cputronic.com, "
                       "'NVIDIA H100 PCIe'; NVIDIA's documents state 2.0 TB/s only)",
        "bus_width_bits": _H100_WP.format(114), "tensor_max_mhz": _TC + ": 1620 MHz (H100 PCIe)"},
         tensor_max_mhz=1620),
    _sku("NVIDIA H200", _HOPPER, 132, 1980, 3201, 6144, {
        "sm_count": "NVIDIA H200 datasheet: the H200 SXM states the H100 SXM's compute figures, i.e. the same "
                    "132-SM GH100 configuration (" + _H100_WP.format(132) + ")",
        "max_sm_mhz": _AWS.format("P5e/P5en (H200): 3201,1980") + "; `nvidia-smi -q -d CLOCK` on a P5e: Max Clocks "
                                                                  "Graphics 1980 MHz, Memory 3201 MHz "
                                                                  "(awslabs/amazon-eks-ami pull request 1985)",
        "max_mem_mhz": _AWS.format("P5e/P5en: 3201,1980") + "; tile-ai/TileOPs calibrated its H200 'with clocks "
                                                            "locked at 1980/3201 MHz' (commit 0511a7d1)",
        "bus_width_bits": "six HBM3e stacks of 1024 bits (geektopia.es, 2023-11-13, 'seis controladores de memoria "
                          "de 1024 bits'; NVIDIA's datasheet states 141 GB and 4.8 TB/s only)",
        "tensor_max_mhz": _TC + ": 1830 MHz for the SXM5 GH100, whose compute figures the H200 datasheet repeats"},
         tensor_max_mhz=1830),
    _sku("NVIDIA L40S", _ADA, 142, 2520, 9001, 384, {
        "sm_count": "NVIDIA L40S datasheet: 18,176 CUDA cores = 142 SMs x 128", "max_sm_mhz":
            _AWS.format("G6e (L40S): 9001,2520"), "max_mem_mhz": _AWS.format("G6e: 9001,2520"),
        "bus_width_bits": "NVIDIA L40S product brief: 48 GB GDDR6, 384-bit memory interface"}),
    _sku("NVIDIA L4", _ADA, 58, 2040, 6251, 192, {
        "sm_count": "NVIDIA L4 datasheet: 7,424 CUDA cores = 58 SMs x 128",
        "max_sm_mhz": _AWS.format("G6 (L4): 6251,2040"), "max_mem_mhz": _AWS.format("G6: 6251,2040"),
        "bus_width_bits": "NVIDIA L4 product brief: 24 GB GDDR6, 192-bit memory interface"}),
    _sku("NVIDIA GeForce RTX 4090", _ADA, 128, None, 10501, 384, {
        "sm_count": "NVIDIA/nvbench pull request 207, device listing of an RTX 4090: 'Number of SMs: 128'",
        "max_mem_mhz": "NVIDIA/nvbench pull request 207: 'Global Memory Bus Peak: 1008 GB/sec (384-bit DDR "
                       "@10501MHz)'",
        "bus_width_bits": "NVIDIA/nvbench pull request 207 (384-bit)"},
         missing={"max_sm_mhz": "NVML's maximum SM clock of an RTX 4090 is not recorded: its rated 2520 MHz boost "
                                "is no maximum (nvbench pull request 207 measured 2655 MHz, 105 % of it, and a "
                                "power-cap sweep in noonghunna/club-3090 issue 697 ran at 2820 MHz); check on the "
                                "card itself with `tileops profile check`"}),
)}


def recorded_for(names: list[str]) -> DeviceFacts | None:
    """The recorded facts of the first of ``names`` (a profile's match list) that has any."""
    for name in names:
        for key, facts in RECORDED.items():
            if key.lower() == name.strip().lower():
                return facts
    return None


# --------------------------------------------------------------------------- read from the device


@dataclass(frozen=True)
class FactsReading:
    """The facts read on this device, or None and why none could be read (a CPU, no NVML)."""

    facts: DeviceFacts | None
    why_not: str = ""


def read_facts(info: DeviceInfo, nvml: NvmlSession | None = None, props: Any | None = None) -> FactsReading:
    """This GPU's facts: SM count and capability from ``info`` (the CUDA driver's properties), maximum
    clocks and bus width from NVML (``nvml``: a session; default: the process's, if NVML starts).

    ``props`` (the device's ``torch.cuda`` properties; default: read them) stands in for NVML's bus
    width where NVML lacks the call. A fact that cannot be read is None, its reason in ``missing``.
    """
    if info.kind != "cuda":
        return FactsReading(None, f"{info.name} is a CPU: its ceilings come from its own clock and units "
                                  "(docs/profiles.md, 'CPU profiles'), not from a GPU's facts")
    gpu, why_nvml = _gpu(info, nvml)
    refs: dict[str, str] = {}
    missing: dict[str, str] = {}
    where = f"NVML on {info.torch_device}"

    def nvml_read(fact: str, call: str, read: Callable[[NvmlGpu], Any]) -> Any:
        if gpu is None:
            missing[fact] = why_nvml
            return None
        try:
            value = read(gpu)
        except NvmlError as exc:  # an NVML without the call, or a device that does not report it
            missing[fact] = str(exc)
            return None
        refs[fact] = f"{where}: {call}"
        return value

    max_sm = nvml_read("max_sm_mhz", "nvmlDeviceGetMaxClockInfo", NvmlGpu.max_sm_mhz)
    max_mem = nvml_read("max_mem_mhz", "nvmlDeviceGetMaxClockInfo", NvmlGpu.max_mem_mhz)
    bus = nvml_read("bus_width_bits", "nvmlDeviceGetMemoryBusWidth", NvmlGpu.bus_width_bits)
    if bus is None:
        bus = _prop(props if props is not None else _torch_props(info), "memory_bus_width")
        if bus:
            refs["bus_width_bits"] = f"CUDA device properties of {info.torch_device}: memory_bus_width"
            missing.pop("bus_width_bits", None)
    for fact, value, where_from in (("sm_count", info.sm_count, "multi_processor_count"),
                                    ("capability", info.capability, "major.minor")):
        if value is None:
            missing[fact] = f"the CUDA driver's properties of {info.torch_device} do not give {where_from}"
        else:
            refs[fact] = f"CUDA device properties of {info.torch_device}: {where_from}"
    facts = DeviceFacts(info.name, info.capability, info.sm_count,
                        _positive(max_sm), _positive(max_mem), int(bus) if _positive(bus) else None,
                        origin=where, refs=refs, missing=missing)
    return FactsReading(with_published_tensor_clock(facts))


def host_facts() -> FactsReading:
    """This host's GPU's facts (``cuda:0``), or why there are none: a host without a GPU has none to read."""
    if not cuda_available():
        return FactsReading(None, "this host has no GPU visible to CUDA")
    return read_facts(describe_device("auto"))  # pragma: no cover - needs a GPU


def with_published_tensor_clock(facts: DeviceFacts) -> DeviceFacts:
    """``facts`` with the tensor-core clock its SKU's documentation states, where the recorded SKU of the same
    name has one and the same maximum SM clock (a device clocked otherwise gets none: nothing is guessed)."""
    if facts.tensor_max_mhz is not None:
        return facts
    sku = recorded_for([facts.name])
    if sku is None or sku.tensor_max_mhz is None:
        return facts
    if facts.max_sm_mhz is None or sku.max_sm_mhz is None or abs(facts.max_sm_mhz - sku.max_sm_mhz) > 0.5:
        return replace(facts, missing={**facts.missing, "tensor_max_mhz": (
            f"the tensor-core clock is published for {sku.name} at a maximum SM clock of {sku.max_sm_mhz:g} MHz, and "
            f"this device reports {facts.max_sm_mhz if facts.max_sm_mhz is not None else 'none'}")})
    return replace(facts, tensor_max_mhz=sku.tensor_max_mhz,
                   refs={**facts.refs, "tensor_max_mhz": sku.refs.get("tensor_max_mhz", "recorded")})


def _gpu(info: DeviceInfo, session: NvmlSession | None) -> tuple[NvmlGpu | None, str]:
    """The device in NVML (by uuid, else index), or None and why not: no NVML, or NVML does not know it."""
    if session is None:
        session, error = device_nvml.session_status()
        if session is None:
            return None, str(error)
    try:
        return session.find_gpu(info.uuid, info.index), ""
    except NvmlError:
        return None, f"NVML does not know {info.torch_device} (uuid {info.uuid or 'unknown'})"


def _torch_props(info: DeviceInfo) -> Any | None:  # pragma: no cover - needs a GPU
    try:
        import torch

        return torch.cuda.get_device_properties(info.index or 0)
    except Exception:
        return None


def _prop(props: Any | None, name: str) -> Any | None:
    return getattr(props, name, None) if props is not None else None


def _positive(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if v > 0 else None
