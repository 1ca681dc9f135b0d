"""A CPU's theoretical fp32 peak, by the primer's arithmetic, as an upper bound.

peak = cores × GHz × FMA units × SIMD lanes × 2 (an FMA is two FLOPs).

Each factor says where it came from (``tileops.profiles.PeakBasis``):

- cores: physical cores from /proc/cpuinfo, capped at the CPUs this process may use;
- lanes: the widest vector the flags offer (AVX-512 16 fp32 lanes, AVX2 8, NEON 4);
- FMA units per core: in no flag, so from :data:`FMA_TABLE`, one row per
  microarchitecture with its source; the calibration's achieved FMA rate decides
  when the table and the measurement disagree (``tileops.ledger.peak.decide_peak``: a measured
  rate above the table's peak means the table is wrong for this machine);
- GHz: the highest of the clock the machine states (a value the user gives,
  cpufreq's maximum, the model name's ``@ 2.90GHz``, the ``cpu MHz`` line, in
  that order) and the clock measured under FMA load (``tileops.calibrate.clock``).
  The stated clock is often the nominal one and turbo runs the cores faster, so
  a peak on it alone is an estimate the physics check does not judge against.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tileops.device import CpuInfo
from tileops.ledger.peak import PeakUnknown
from tileops.profiles import PeakBasis

_INTEL_ORM = "Intel 64 and IA-32 Architectures Optimization Reference Manual (order no. 248966)"
_UOPS = "uops.info: VFMADD231PS throughput"


@dataclass(frozen=True)
class FmaRow:
    """One microarchitecture's FMA units per core, at the ISA's full vector width, with the source."""

    uarch: str
    units: int
    source: str
    #: The counts parts matching this row have (some have fewer units than the row says); a calibration's
    #: achieved rate only ever raises the count (a rate below the table's peak may be a slow kernel, and a
    #: peak must stay a bound), so the lower ones are for the reader.
    candidates: tuple[int, ...] = ()

    def describe(self) -> str:
        return f"{self.uarch}: {self.units} FMA unit{'s' if self.units > 1 else ''} per core ({self.source})"


# Intel family 6 model numbers (the "model" line of /proc/cpuinfo).
_INTEL_XEON_AVX512 = {0x55: "Skylake-SP / Cascade Lake", 0x6A: "Ice Lake-SP", 0x6C: "Ice Lake-D",
                      0x8F: "Sapphire Rapids", 0xCF: "Emerald Rapids", 0xAD: "Granite Rapids",
                      0xAE: "Granite Rapids-D"}
_INTEL_CLIENT_AVX512 = {0x7D: "Ice Lake", 0x7E: "Ice Lake", 0x8C: "Tiger Lake", 0x8D: "Tiger Lake",
                        0xA7: "Rocket Lake"}

#: FMA units per core, by microarchitecture. The rows :func:`fma_row` picks from, each citing its source.
FMA_TABLE: dict[str, FmaRow] = {
    "intel-xeon-avx512": FmaRow(
        "Intel Xeon Scalable (AVX-512)", 2,
        f"{_INTEL_ORM}, Skylake Server microarchitecture: two 512-bit FMA units (ports 0+1 fused, and port 5) on "
        "Platinum and Gold 6xxx; Bronze, Silver and Gold 5xxx of the first two generations have one, which halves "
        "the peak", candidates=(1, 2)),
    "intel-client-avx512": FmaRow(
        "Intel Ice Lake / Tiger Lake / Rocket Lake client (AVX-512)", 1,
        f"{_INTEL_ORM}, Ice Lake client microarchitecture: one 512-bit FMA (ports 0+1 fused), no port-5 FMA",
        candidates=(1, 2)),
    "intel-avx2": FmaRow(
        "Intel Haswell and later cores (AVX2)", 2,
        f"{_INTEL_ORM}, Haswell microarchitecture: two 256-bit FMA units (ports 0 and 1); {_UOPS} 0.5 cycles "
        "(ymm) from Haswell to Raptor Lake"),
    "amd-zen1": FmaRow(
        "AMD Zen / Zen+ (family 17h, models 00h-2Fh)", 1,
        "Software Optimization Guide for AMD Family 17h Processors (pub. 55723): four 128-bit FP pipes, FMA on "
        "FP0 and FP1, a 256-bit FMA split into two: one 256-bit FMA per cycle", candidates=(1, 2)),
    "amd-zen2-3": FmaRow(
        "AMD Zen 2 / Zen 3 (family 17h models 30h+, family 19h)", 2,
        "Software Optimization Guide for AMD Family 17h Models 30h and Greater Processors, and for AMD EPYC 7003 "
        f"Processors: 256-bit FP datapath, two FMA pipes (FP0, FP1); {_UOPS} 0.5 cycles (ymm)"),
    "amd-zen4-avx512": FmaRow(
        "AMD Zen 4 (family 19h, AVX-512)", 1,
        "Software Optimization Guide for the AMD Zen4 Microarchitecture: 512-bit operations execute as two 256-bit "
        f"halves on the two 256-bit FMA pipes, one 512-bit FMA per cycle; {_UOPS} 1 cycle (zmm)"),
    "amd-zen5-avx512": FmaRow(
        "AMD Zen 5 (family 1Ah, AVX-512)", 2,
        "Software Optimization Guide for the AMD Zen5 Microarchitecture: two 512-bit FMA pipes on desktop and "
        "server parts; mobile parts keep a 256-bit datapath, which halves the peak", candidates=(1, 2)),
    "arm-neoverse-n1": FmaRow("Arm Neoverse N1", 2, "Arm Neoverse N1 Software Optimization Guide: two 128-bit "
                                                    "FP/ASIMD pipes (V0, V1), both FMA-capable"),
    "arm-neoverse-n2": FmaRow("Arm Neoverse N2", 2, "Arm Neoverse N2 Software Optimization Guide: two 128-bit "
                                                    "FP/ASIMD/SVE2 pipes, both FMA-capable"),
    "arm-neoverse-n3": FmaRow("Arm Neoverse N3", 2, "Arm Neoverse N3 Software Optimization Guide: two 128-bit "
                                                    "FP/ASIMD/SVE2 pipes, both FMA-capable"),
    "arm-neoverse-v1": FmaRow("Arm Neoverse V1", 4, "Arm Neoverse V1 Software Optimization Guide: four 128-bit "
                                                    "FP/ASIMD pipes (two 256-bit SVE), all FMA-capable"),
    "arm-neoverse-v2": FmaRow("Arm Neoverse V2", 4, "Arm Neoverse V2 Software Optimization Guide: four 128-bit "
                                                    "FP/ASIMD/SVE2 pipes, all FMA-capable"),
    "arm-neoverse-v3": FmaRow("Arm Neoverse V3", 4, "Arm Neoverse V3 Software Optimization Guide: four 128-bit "
                                                    "FP/ASIMD/SVE2 pipes, all FMA-capable"),
}
_ARM_PART_ROWS = {"0xd0c": "arm-neoverse-n1", "0xd49": "arm-neoverse-n2", "0xd8e": "arm-neoverse-n3",
                  "0xd40": "arm-neoverse-v1", "0xd4f": "arm-neoverse-v2", "0xd84": "arm-neoverse-v3"}


def simd_isa(info: CpuInfo) -> tuple[str, int]:
    """(ISA name, fp32 lanes) of the widest vector the CPU's flags offer."""
    f = info.flags
    if info.arch == "aarch64":
        return ("SVE (128-bit assumed)" if "sve" in f else "NEON/ASIMD"), 4
    if "avx512f" in f:
        return "AVX-512", 16
    if "avx2" in f and "fma" in f:
        return "AVX2+FMA", 8
    if "avx" in f:
        return "AVX (no FMA)", 8
    if "sse2" in f:
        return "SSE2", 4
    return "scalar", 1


def fma_row(info: CpuInfo, isa: str) -> FmaRow:
    """The table row for this CPU at ``isa``; a generic assumption, said so, where no row names it."""
    if info.arch == "aarch64":
        key = _ARM_PART_ROWS.get(info.arm_part or "")
        if key:
            return FMA_TABLE[key]
        return FmaRow(f"Arm part {info.arm_part or '?'}", 2, "no table row for this part: two 128-bit FMA "
                                                             "pipes assumed (most Arm server cores)", (2, 4))
    key = _x86_row(info, isa)
    if key is not None:
        return FMA_TABLE[key]
    if isa == "AVX-512":
        return FmaRow("AVX-512 core not in the table", 2, "no table row: two 512-bit FMA units assumed", (1, 2))
    if isa == "AVX2+FMA":
        return FmaRow("AVX2 core not in the table", 2, "no table row: two 256-bit FMA units assumed (Haswell and "
                                                       "later, Zen 2 and later)", (1, 2))
    return FmaRow(f"{isa} core", 1, "no FMA instruction: one add and one multiply pipe, counted as one "
                                    "FMA-equivalent")


def _x86_row(info: CpuInfo, isa: str) -> str | None:
    """The FMA table's row of an Intel or AMD core at ``isa`` by its family and model; None where none names it."""
    fam, model = info.family or 0, info.model_id
    vendor = info.vendor or ""
    if vendor.startswith("GenuineIntel") and fam == 6:
        if isa == "AVX-512":
            return "intel-client-avx512" if model in _INTEL_CLIENT_AVX512 else "intel-xeon-avx512"
        return "intel-avx2" if isa == "AVX2+FMA" else None
    if not vendor.startswith(("AuthenticAMD", "HygonGenuine")):
        return None
    if isa == "AVX-512":
        return "amd-zen5-avx512" if fam >= 0x1A else "amd-zen4-avx512" if fam == 0x19 else None
    if isa == "AVX2+FMA" and fam == 0x17 and model is not None and model < 0x30:
        return "amd-zen1"
    if isa == "AVX2+FMA" and fam in (0x17, 0x18, 0x19, 0x1A):
        return "amd-zen2-3"
    return None


def cpu_clock_ghz(info: CpuInfo, *, ghz: float | None = None, max_mhz: float | None = None) -> tuple[float, str]:
    """(GHz, where it came from) as the machine states it. PeakUnknown when nothing gives a clock."""
    if ghz:
        return float(ghz), "given by the user (--cpu-ghz)"
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
             usable: int | None = None) -> PeakBasis:
    """The fp32 peak on the stated clock, before any measurement; ``usable`` caps the cores at the CPUs this
    process may use. The clock measured under load raises it (:func:`decide_peak`)."""
    isa, lanes = simd_isa(info)
    row = fma_row(info, isa)
    clock, clock_src = cpu_clock_ghz(info, ghz=ghz, max_mhz=max_mhz)
    cores = info.physical_cores
    if usable is not None and usable < cores:
        cores = usable
        clock_src += f"; cores limited to the {usable} CPUs this process may use"
    return PeakBasis(cores=cores, lanes=lanes, isa=isa, fma_units=row.units, fma_table=row.describe(),
                     fma_table_units=row.units, fma_candidates=list(row.candidates), ghz=clock,
                     ghz_source="user" if ghz else "stated", stated_ghz=clock, stated_source=clock_src,
                     stated_by_user=bool(ghz), not_measured="not measured yet (a calibration measures it)")
