"""What one SM does per clock, per compute capability: the table a ceiling is derived from.

A datasheet figure is a product of facts: SMs x clock x operations per clock per
SM for compute, bus width x memory clock x transfers per clock for bandwidth.
The driver reports the first factors of each (``tileops.ceilings.facts``); this
table holds the last, one row per compute capability, every figure dense
(a 2:4 sparse figure is twice as large and no dense kernel reaches it) and with
the document it comes from, so a reader can check it without trusting us.

FLOPs count a fused multiply-add as two, as datasheets and the roofline formulas
do. A capability missing here derives no compute ceiling (blank, with the
reason), never a neighbour's figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: DRAM transfers per memory clock as NVML and ``cudaDeviceProp.memoryClockRate`` report the clock: two (double
#: data rate) for HBM2, HBM2e, HBM3, HBM3e, GDDR6 and GDDR6X alike, since the driver reports GDDR6/6X's clock at
#: half the per-pin data rate (an RTX 4090: 10501 MHz for 21 Gbps).
TRANSFERS_PER_CLOCK = 2
TRANSFERS_SOURCE = ("CUDA C++ Best Practices Guide, 'Theoretical Bandwidth Calculation' (memory clock x bus width / "
                    "8 x 2 for double data rate); nvbench prints the same product for an RTX 4090: '1008 GB/sec "
                    "(384-bit DDR @10501MHz)' (NVIDIA/nvbench pull request 207)")

_GUIDE = ("CUDA C++ Programming Guide, 'Arithmetic Instructions', throughput of native arithmetic instructions "
          "(results per clock per multiprocessor; an FMA result is 2 FLOP)")
_A100 = "NVIDIA A100 Tensor Core GPU Architecture whitepaper (dense Tensor Core FMA per clock per SM)"
_H100 = ("NVIDIA H100 Tensor Core GPU Architecture whitepaper (per SM, clock for clock, twice A100's dense MMA rate, "
         "FP8 twice FP16); torch.cuda._device_limits.GPULimits holds the same per-SM rates for sm_80 and sm_90")
_ADA = ("NVIDIA Ada GPU Architecture whitepaper, appendix tables (RTX 6000 Ada / L40-class and GeForce RTX 4090 "
        "dense Tensor TFLOPS over SMs x boost clock)")


@dataclass(frozen=True)
class Rate:
    """Dense operations per clock per SM for one roof, and the document that says so."""

    per_clock_per_sm: int
    source: str


@dataclass(frozen=True)
class Arch:
    """One compute capability's per-SM rates.

    ``tensor_clock`` says which clock the tensor-core rates run at: ``"sm"``, the maximum SM clock
    (Ampere, Ada: their datasheet tensor figures are SMs x max clock x rate), or ``"published"``, a
    lower tensor-core boost clock NVIDIA states per product and the driver does not report (Hopper:
    1830 MHz on an H100 SXM5 whose SMs reach 1980), so a tensor roof is derived only where that
    product's figure is recorded. ``geforce`` overrides rates where GeForce parts of the same
    capability run half-rate FP32-accumulate tensor math.
    """

    capability: tuple[int, int]
    name: str
    rates: dict[str, Rate]
    tensor_clock: str = "sm"
    tensor_clock_source: str = ""
    geforce: dict[str, Rate] = field(default_factory=dict)

    def rate(self, roof: str, device_name: str) -> Rate | None:
        """The rate of ``roof`` on a device of this capability named ``device_name`` (None: not in the table)."""
        if "geforce" in device_name.lower() and roof in self.geforce:
            return self.geforce[roof]
        return self.rates.get(roof)


def _rates(source: str, **per_roof: int) -> dict[str, Rate]:
    return {key.replace("__", "."): Rate(n, source) for key, n in per_roof.items()}


ARCHS: dict[tuple[int, int], Arch] = {a.capability: a for a in (
    Arch((8, 0), "Ampere (A100)", {
        **_rates(_GUIDE, cuda_core__fp32=128, cuda_core__fp64=64),
        **_rates(_A100, tensor_core__tf32=1024, tensor_core__bf16=2048, tensor_core__fp16=2048,
                 tensor_core__int8=4096),
    }),
    Arch((8, 9), "Ada Lovelace", {
        **_rates(_GUIDE, cuda_core__fp32=256, cuda_core__fp64=4),
        **_rates(_ADA, tensor_core__tf32=512, tensor_core__bf16=1024, tensor_core__fp16=1024,
                 tensor_core__fp8=2048, tensor_core__int8=2048),
    }, geforce=_rates(_ADA + "; GeForce: FP32-accumulate tensor math at half rate (RTX 4090: 165.2 TFLOPS FP16 "
                              "with FP32 accumulate vs 330.3 with FP16 accumulate)",
                      tensor_core__tf32=256, tensor_core__bf16=512, tensor_core__fp16=512, tensor_core__fp8=1024)),
    Arch((9, 0), "Hopper", {
        **_rates(_GUIDE, cuda_core__fp32=256, cuda_core__fp64=128),
        **_rates(_H100, tensor_core__tf32=2048, tensor_core__bf16=4096, tensor_core__fp16=4096,
                 tensor_core__fp8=8192, tensor_core__int8=8192),
    }, tensor_clock="published",
        tensor_clock_source=("NVIDIA H100 Tensor Core GPU Architecture whitepaper, table 3: the maximum boost clock "
                             "for Tensor Core work (1830 MHz H100 SXM5, 1620 MHz H100 PCIe), below the SMs' maximum "
                             "(1980, 1755 MHz); NVIDIA's forum answer 'How to calculate the Tensor Core FP16 "
                             "performance of H100?' (forums.developer.nvidia.com/t/244727) works it through")),
)}


def arch(capability: tuple[int, int] | None) -> Arch | None:
    """The table's row for a compute capability (None: not in the table, or not known)."""
    return None if capability is None else ARCHS.get(tuple(capability))  # type: ignore[arg-type]
