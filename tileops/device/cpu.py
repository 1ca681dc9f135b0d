"""What CPU this is: /proc/cpuinfo parsed, its last-level cache, its clocks, how many CPUs this process may use.

The CPU's model is what a CPU profile matches (§1.2), so it is exactly the
``model name`` line of ``/proc/cpuinfo`` (whitespace collapsed), or on Arm the
part the ``CPU part`` line names. Every reader degrades to None (or a minimal
CpuInfo) where the file it reads is absent, as in many VMs and containers.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

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


def mem_total_bytes() -> int | None:
    """The host's memory (``MemTotal`` of /proc/meminfo), or None."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_clocks() -> dict[str, Any] | None:
    """The mean ``cpu MHz`` over the CPUs now (the current clock, not a maximum), or None."""
    try:
        mhz = [float(m) for m in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", CPUINFO.read_text(), re.M)]
    except OSError:
        mhz = []
    return {"cpu_mhz": round(sum(mhz) / len(mhz), 1)} if mhz else None


def cpu_busy_fraction() -> float | None:
    """The 1-minute load average over the usable CPUs: a CPU calibration on a busy host measures less."""
    try:
        return os.getloadavg()[0] / usable_cpus()
    except (AttributeError, OSError):
        return None
