"""A CPU's theoretical fp32 peak, by the primer's arithmetic.

peak = cores × GHz × FMA units × SIMD lanes × 2 (an FMA is two FLOPs).

Cores and the SIMD width come from /proc/cpuinfo (flags); the number of FMA
units per core is not in any flag, so it follows the vendor's public core
descriptions per ISA level and is stated as an estimate. The clock is the
highest one this machine admits to, in order: a value the user gives,
cpufreq's maximum, the ``@ 2.90GHz`` in the model name, the ``cpu MHz`` line
(the current clock, which in a VM is usually the nominal one). Turbo can lift
a measurement above this estimate, which the profile schema allows up to
1.5×.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tileops.device import CpuInfo

#: FMA pipes per core (128-bit each) for the Arm parts whose FP pipes we know, by CPU part.
_ARM_FMA_UNITS = {"0xd0c": 2, "0xd49": 2, "0xd40": 4, "0xd4f": 4, "0xd8e": 2, "0xd84": 4}


class PeakUnknown(ValueError):
    """The clock could not be found; the message says how to give it."""


@dataclass(frozen=True)
class PeakEstimate:
    cores: int
    ghz: float
    ghz_source: str
    fma_units: int
    lanes: int  # fp32 lanes per vector
    isa: str
    note: str

    @property
    def flops(self) -> float:
        """cores × GHz × FMA units × lanes × 2, in FLOP/s."""
        return self.cores * self.ghz * 1e9 * self.fma_units * self.lanes * 2

    def explain(self) -> str:
        return (f"{self.cores} cores x {self.ghz:g} GHz ({self.ghz_source}) x {self.fma_units} FMA units x "
                f"{self.lanes} fp32 lanes ({self.isa}) x 2 = {self.flops / 1e9:.1f} GFLOP/s; {self.note}")


def simd_units(info: CpuInfo) -> tuple[str, int, int, str]:
    """(ISA name, fp32 lanes, FMA units per core, note) from the CPU's flags."""
    f = info.flags
    if info.arch == "aarch64":
        units = _ARM_FMA_UNITS.get(info.arm_part or "", 2)
        isa = "SVE (128-bit assumed)" if "sve" in f else "NEON/ASIMD"
        return isa, 4, units, (f"{units} 128-bit FMA pipes per core "
                               f"({'known part' if info.arm_part in _ARM_FMA_UNITS else 'assumed'})")
    amd = (info.vendor or "").startswith("AuthenticAMD")
    if "avx512f" in f:
        if amd and (info.family or 0) < 26:
            return "AVX-512", 16, 1, "Zen 4 runs 512-bit FMAs on two 256-bit pipes: one 512-bit FMA per cycle"
        return "AVX-512", 16, 2, ("two 512-bit FMA units assumed; Xeon Bronze/Silver and some Gold 5xxx parts "
                                  "have one, which halves this peak")
    if "avx2" in f and "fma" in f:
        return "AVX2+FMA", 8, 2, "two 256-bit FMA units per core (Haswell and later, Zen)"
    if "avx" in f:
        return "AVX (no FMA)", 8, 1, "no FMA: one add and one multiply pipe, counted as one FMA-equivalent"
    if "sse2" in f:
        return "SSE2", 4, 1, "no FMA: one add and one multiply pipe, counted as one FMA-equivalent"
    return "scalar", 1, 1, "no SIMD flags found: scalar estimate"


def cpu_clock_ghz(info: CpuInfo, *, ghz: float | None = None, max_mhz: float | None = None) -> tuple[float, str]:
    """(GHz, where it came from). PeakUnknown when nothing gives a clock."""
    if ghz:
        return float(ghz), "given by the user"
    if max_mhz:
        return max_mhz / 1000.0, "cpufreq maximum"
    m = re.search(r"@\s*([\d.]+)\s*GHz", info.model, re.I)
    if m:
        return float(m.group(1)), "model name"
    if info.mhz:
        return round(info.mhz / 1000.0, 3), "cpu MHz line of /proc/cpuinfo"
    raise PeakUnknown(f"no clock for {info.model!r}: /proc/cpuinfo and cpufreq give none; "
                      "pass --cpu-ghz GHZ (the all-core clock) to `tileops calibrate`")


def cpu_peak(info: CpuInfo, *, ghz: float | None = None, max_mhz: float | None = None,
             usable: int | None = None) -> PeakEstimate:
    """The fp32 peak estimate for ``info``; ``usable`` caps the cores at the CPUs this process may use."""
    isa, lanes, units, note = simd_units(info)
    clock, clock_src = cpu_clock_ghz(info, ghz=ghz, max_mhz=max_mhz)
    cores = info.physical_cores
    if usable is not None and usable < cores:
        cores = usable
        note += f"; limited to the {usable} CPUs this process may use"
    return PeakEstimate(cores=cores, ghz=clock, ghz_source=clock_src, fma_units=units, lanes=lanes, isa=isa,
                        note=note)
