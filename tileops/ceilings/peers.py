"""A device's calibration held against what others measured on the same SKU.

A first calibration has nothing of its own to be compared with: the SKU median
needs a fleet and the device's history needs a past. What others published for
the same product is the one reference it has before it prices anything. Two
devices of one SKU differ by a few percent (the straggler alert's 5 %), and
another kernel or unlocked clocks add a few more; a calibration further than
:data:`PEER_BAND` from a published figure measured something else: a busy or
throttled device, a working set that fit in L2, a theoretical figure of another
SKU. It is flagged, not changed: the measurement may be right and the published
one wrong, and the warning names both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tileops.profiles import Profile
from tileops.roofline import si

#: Flag a calibration more than this far (relative) from what others measured on the same SKU.
PEER_BAND = 0.15

_TILEOPS = ("tile-ai/TileOPs, src/tileops/perf/profiles/h200.yaml (commit 52dbc08, 2026-08-22; calibrated per "
            "benchmarks/hardware/README.md)")


@dataclass(frozen=True)
class PeerFigure:
    """One published measurement: a fraction of a stated theoretical figure, on a named device."""

    device_name: str  # as the driver reports it: what profiles match
    ceiling: str  # "memory" or a roof key
    mix: str | None  # the memory mix (copy, triad, read, write); None for a compute roof
    fraction: float
    of_theoretical: float  # the theoretical figure the fraction is of, per second
    source: str
    method: str

    @property
    def rate(self) -> float:
        return self.fraction * self.of_theoretical

    @property
    def what(self) -> str:
        return f"{self.mix} bandwidth" if self.mix else self.ceiling


#: What others measured, per SKU. TileOPs' H200 profile also states 0.75 for tf32 and fp8, marked
#: "placeholder — not yet measured" in the file: not measurements, so not here.
PUBLISHED: tuple[PeerFigure, ...] = (
    PeerFigure("NVIDIA H200", "memory", "triad", 0.848, 4.8e12, _TILEOPS,
               "STREAM Triad a = b + s*c counted as 2 reads + 1 write, a float4 CUDA kernel timed with CUDA events, "
               "best over block sizes 128/256/512 on a 2 GB working set, clocks locked at 1980/3201 MHz "
               "(4070 GB/s of 4800)"),
    PeerFigure("NVIDIA H200", "tensor_core.bf16", None, 0.75, 989.5e12, _TILEOPS, "cuBLAS peak GEMM"),
    PeerFigure("NVIDIA H200", "tensor_core.fp16", None, 0.75, 989.5e12, _TILEOPS, "cuBLAS peak GEMM"),
)


def published_for(names: list[str]) -> list[PeerFigure]:
    """The published figures for a device named by any of ``names`` (a profile's match list, or one name)."""
    wanted = {n.strip().lower() for n in names}
    return [p for p in PUBLISHED if p.device_name.lower() in wanted]


@dataclass(frozen=True)
class PeerComparison:
    """One of this device's measurements against one published figure for its SKU."""

    peer: PeerFigure
    measured: float  # per second, as this device's calibration measured it

    @property
    def ratio(self) -> float:
        return self.measured / self.peer.rate

    @property
    def flagged(self) -> bool:
        return abs(self.ratio - 1) > PEER_BAND

    def describe(self, who: str) -> str:
        unit = "B/s" if self.peer.ceiling == "memory" else "FLOP/s"
        line = (f"{who} {self.peer.what}: measured {si(self.measured, unit)}, {self.ratio:.0%} of the "
                f"{si(self.peer.rate, unit)} ({self.peer.fraction:.1%} of {si(self.peer.of_theoretical, unit)}) "
                f"published for {self.peer.device_name} by {self.peer.source} ({self.peer.method})")
        if not self.flagged:
            return line
        side = "below" if self.ratio < 1 else "above"
        cause = ("a busy, throttled or power-capped device, or a kernel far from the hardware's best"
                 if self.ratio < 1 else "a working set that fit in cache, or a timer that missed work")
        return (f"{line}: more than {PEER_BAND:.0%} {side} what others measured on this SKU, so this calibration "
                f"measured something else ({cause}); check the device and calibrate again before trusting SOL "
                "figures priced on it")

    def as_dict(self) -> dict[str, Any]:
        return {"ceiling": self.peer.ceiling, "mix": self.peer.mix, "measured_per_s": self.measured,
                "published_per_s": self.peer.rate, "ratio": self.ratio, "flagged": self.flagged,
                "source": self.peer.source, "method": self.peer.method}


def compare(names: list[str], memory: dict[str, float], compute: dict[str, float]) -> list[PeerComparison]:
    """This device's measured rates (bytes/s per mix, FLOP/s per roof) against what others published for it."""
    out = []
    for peer in published_for(names):
        got = memory.get(peer.mix or "") if peer.ceiling == "memory" else compute.get(peer.ceiling)
        if got:
            out.append(PeerComparison(peer, got))
    return out


def measured_rates(profile: Profile) -> tuple[dict[str, float], dict[str, float]]:
    """A calibrated profile's measured rates: bytes/s per mix and FLOP/s per calibrated roof."""
    memory: dict[str, float] = {}
    mem = profile.memory
    if mem is not None:
        memory = dict(mem.measured) or ({m: f * mem.theoretical for m, f in mem.mixes.items()}
                                        if mem.theoretical is not None else {})
    compute = {k: r.effective for k, r in profile.compute.items() if r.effective is not None}
    return memory, compute


def compare_profile(profile: Profile) -> list[PeerComparison]:
    """A calibrated profile against the figures others published for the devices it names."""
    memory, compute = measured_rates(profile)
    return compare(profile.match, memory, compute)


def peer_warnings(device_name: str, memory: dict[str, float], compute: dict[str, float]) -> list[str]:
    """The calibration warnings: one per measurement far from what others measured on this SKU."""
    return [c.describe(device_name) for c in compare([device_name], memory, compute) if c.flagged]
