"""The theoretical side of a calibration: which ceilings a measurement is a fraction of.

A GPU's come from its datasheet profile (shipped, or the store's). A CPU's are
built here: the fp32 peak by the primer's arithmetic (an estimate, said so, on
the stated clock until a calibration measures the clock under load),
and the nominal DRAM bandwidth from the user, an earlier user-given profile,
or DMI/SMBIOS, in that order; when none gives it the profile says it is
unknown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from collections.abc import Callable, Iterable

from tileops.calibrate.cpupeak import cpu_peak
from tileops.ledger import peak_provenance
from tileops.calibrate.dram import DramNominal, bandwidth_from_env, read_dmi
from tileops.device import CpuInfo, cpu_max_mhz, read_cpuinfo, usable_cpus
from tileops.profiles import MemoryRoof, Profile, Provenance, Roof, load_profiles, select_profile

#: How a CPU profile prices the roof keys ops declare (§1.4). On a CPU there are
#: no CUDA or tensor cores: elementwise/reduction FLOPs (cuda_core.fp32) run on
#: the FMA units at the vector path's rate, and contractions declared for tensor
#: cores (tf32, bf16, fp16) run as BLAS matmuls on those same FMA units, whose
#: achievable rate the large-matmul roof measures. fp8/int8/fp64 have no CPU roof:
#: such rows price blank (roof absent), never at a guess.
CPU_ROOF_ALIASES = {
    "cuda_core.fp32": "cpu.fp32",
    "tensor_core.tf32": "cpu.fp32_matmul",
    "tensor_core.bf16": "cpu.fp32_matmul",
    "tensor_core.fp16": "cpu.fp32_matmul",
}
_KEEP = ("user", "datasheet")  # theoretical sources a recalibration must not overwrite with an estimate


@dataclass(frozen=True)
class TheoryOptions:
    """What the user told ``tileops calibrate`` about the ceilings."""

    memory_bandwidth: float | None = None  # nominal bytes/s (--dram-bandwidth / --dram-bandwidth-file)
    memory_bandwidth_ref: str | None = None
    cpu_ghz: float | None = None

    @classmethod
    def from_env(cls) -> TheoryOptions:
        """What the environment states (``$TILEOPS_DRAM_BANDWIDTH``): the default of a calibration nobody
        passed options to, such as the bench's automatic one. ValueError when the variable is malformed."""
        got = bandwidth_from_env()
        return cls(memory_bandwidth=got[0], memory_bandwidth_ref=got[1]) if got else cls()


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "device"


def cpu_profile_name(model: str) -> str:
    return "cpu-" + slug(model)


def _memory(existing: Profile | None, opts: TheoryOptions,
            dmi: Callable[[], tuple[DramNominal | None, str]]) -> tuple[MemoryRoof | None, list[str]]:
    if opts.memory_bandwidth:
        return MemoryRoof(theoretical=opts.memory_bandwidth, theoretical_source=Provenance(
            source="user", ref=opts.memory_bandwidth_ref or "--dram-bandwidth")), []
    if existing and existing.memory and existing.memory.theoretical and \
            existing.memory.theoretical_source.source in _KEEP:
        return MemoryRoof(theoretical=existing.memory.theoretical,
                          theoretical_source=existing.memory.theoretical_source), []
    nominal, why = dmi()
    if nominal is not None:
        return MemoryRoof(theoretical=nominal.bytes_per_s, theoretical_source=Provenance(
            source="estimate", ref="DMI/SMBIOS (dmidecode -t memory)", note=nominal.detail)), []
    return MemoryRoof(theoretical=None, theoretical_source=Provenance(
        source="unknown", note=f"{why}; none given with --dram-bandwidth")), [
        f"nominal DRAM bandwidth unknown: {why}. The profile keeps measured bytes/s only; give the nominal with "
        "--dram-bandwidth (e.g. 76.8GB/s) or --dram-bandwidth-file"]


def cpu_base_profile(info: CpuInfo, existing: Profile | None = None, opts: TheoryOptions = TheoryOptions(), *,
                     max_mhz: float | None = None, usable: int | None = None,
                     dmi: Callable[[], tuple[DramNominal | None, str]] = read_dmi) -> tuple[Profile, list[str]]:
    """A CPU profile holding theoretical figures only, its peak on the stated clock (a calibration raises it
    to the clock measured under load: ``tileops.ledger.build_profile``). PeakUnknown when no clock
    is known."""
    notes: list[str] = []
    keep = existing.compute.get("cpu.fp32") if existing else None
    if keep is not None and keep.theoretical_source.source in _KEEP and not opts.cpu_ghz:
        theo, src = keep.theoretical, keep.theoretical_source
        peak = None
    else:
        peak = cpu_peak(info, ghz=opts.cpu_ghz, max_mhz=max_mhz, usable=usable)
        theo, src = peak.peak_flops, peak_provenance(peak)
    memory, mem_notes = _memory(existing, opts, dmi)
    notes += mem_notes
    profile = Profile(
        name=existing.name if existing else cpu_profile_name(info.model), kind="cpu",
        match=existing.match if existing else [info.model],
        memory=memory,
        compute={"cpu.fp32": Roof(theoretical=theo, theoretical_source=src, peak=peak),
                 "cpu.fp32_matmul": Roof(theoretical=theo, theoretical_source=src, peak=peak)},
        roof_aliases=dict(CPU_ROOF_ALIASES),
        notes=("CPU profile: cpu.fp32 is the FMA-saturated path (cache-resident GEMM micro-kernels), "
               "cpu.fp32_matmul a large matmul; both share the primer's peak estimate. GPU roof keys are "
               "aliased: those FLOPs run on the same FMA units."),
    )
    return profile, notes


def gpu_base_profile(name: str, existing: Profile | None) -> tuple[Profile, list[str]]:
    """The datasheet profile matching ``name``, or a bare one that can store bandwidth only."""
    if existing is not None:
        return existing, []
    return Profile(name=slug(name), kind="gpu", match=[name], memory=None,
                   notes=f"no datasheet profile matched {name!r}; add its theoretical figures (docs/profiles.md)"), [
        f"no profile matches {name!r}: only bandwidth (as measured bytes/s) and the latency floor can be stored; "
        "add a profile with the datasheet figures (docs/profiles.md) and calibrate again to price compute roofs"]


def base_profile(kind: str, name: str, opts: TheoryOptions = TheoryOptions(),
                 profiles: Iterable[Profile] | None = None) -> tuple[Profile, list[str]]:
    """The theoretical profile a calibration of device ``name`` (kind ``cpu``/``cuda``) is priced against."""
    pool = list(load_profiles() if profiles is None else profiles)
    existing = select_profile(name, pool)
    if kind == "cpu":
        return cpu_base_profile(read_cpuinfo(), existing, opts, max_mhz=cpu_max_mhz(), usable=usable_cpus())
    base, notes = gpu_base_profile(name, existing)
    if opts.memory_bandwidth:
        base = base.model_copy(update={"memory": MemoryRoof(
            theoretical=opts.memory_bandwidth,
            theoretical_source=Provenance(source="user", ref=opts.memory_bandwidth_ref or "--dram-bandwidth"))})
    return base, notes
