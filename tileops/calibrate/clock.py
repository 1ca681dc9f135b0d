"""The clock a CPU's cores reach under FMA load, measured (``clock.c``), for the theoretical peak.

A CPU's peak is an upper bound only if its clock is: the clock /proc/cpuinfo
states is the nominal one, and turbo runs the cores faster (issue 29;
docs/profiles.md has what the development VM showed), so a correct gemm
formula read above a peak built on it. ``clock.c`` times a chain of dependent integer adds (one per cycle) on every
thread the bench uses, with FMAs on the vector pipes beside it, and the peak
takes the highest of that and the stated clock (``cpupeak.decide_peak``).

Brief by design: one warm-up and a few timed rounds of a few milliseconds per
thread. Where the kernel cannot be built (no compiler), the architecture has no
chain, or the result is implausible, :func:`measure_clock` says why and the peak
stays an estimate, which the physics check does not judge against.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from pathlib import Path

from tileops.calibrate.ckernels import KernelsUnavailable, compile_library, find_compiler
from tileops.ledger import ClockMeasurement

SOURCE = Path(__file__).with_name("clock.c")
CHAIN = 64  # adds per block in clock.c
#: Blocks per round: 2^16 blocks of 64 adds, 4.2 M cycles, about 1.3 ms at 3.2 GHz, so a round fits well
#: inside one scheduler time slice even on a busy host.
BLOCKS = 1 << 16
ROUNDS = 25
#: No shipping core sustains this all-core; a chain measured faster ran more than one add per cycle (a core
#: that fuses or eliminates adds), so the figure is no clock and is refused.
MAX_PLAUSIBLE_GHZ = 7.0
MIN_PLAUSIBLE_GHZ = 0.2


@dataclass(frozen=True)
class ClockKernel:
    lib: ctypes.CDLL
    compiler: str
    flags: tuple[str, ...]
    chain: str  # the chain's instruction, "" where this architecture has none
    load: str  # the vector load beside it

    def run(self, threads: int, blocks: int = BLOCKS, rounds: int = ROUNDS) -> tuple[list[float], list[int], int]:
        """(GHz per thread, the chain's final value per thread, threads OpenMP gave)."""
        ghz = (ctypes.c_double * threads)()
        adds = (ctypes.c_uint64 * threads)()
        sink = (ctypes.c_double * threads)()
        ran = ctypes.c_int(0)
        rc = self.lib.tileops_clock(threads, blocks, rounds, ghz, adds, sink, ctypes.byref(ran))
        if rc != 0:
            raise KernelsUnavailable("clock.c has no add chain for this architecture (x86-64 and aarch64 only)")
        return list(ghz), list(adds), ran.value


def build(compiler: str) -> ClockKernel:
    """Compile ``clock.c`` with ``compiler`` and load it. KernelsUnavailable says why not."""
    lib, flags = compile_library(compiler, SOURCE)
    lib.tileops_clock_chain.restype = ctypes.c_char_p
    lib.tileops_clock_load.restype = ctypes.c_char_p
    lib.tileops_clock.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_int, ctypes.POINTER(ctypes.c_double),
                                  ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_double),
                                  ctypes.POINTER(ctypes.c_int)]
    lib.tileops_clock.restype = ctypes.c_int
    return ClockKernel(lib=lib, compiler=Path(compiler).name, flags=flags,
                       chain=lib.tileops_clock_chain().decode(), load=lib.tileops_clock_load().decode())


@functools.cache
def _cached(compiler: str) -> ClockKernel:
    return build(compiler)


def load_clock_kernel() -> tuple[ClockKernel | None, str]:
    """(kernel, why-not): built once per process and compiler."""
    compiler, why = find_compiler()
    if compiler is None:
        return None, why
    try:
        return _cached(compiler), ""
    except KernelsUnavailable as exc:
        return None, str(exc)


def judge(kernel: ClockKernel, threads: int, ghz: list[float], adds: list[int], ran: int, *, blocks: int,
          rounds: int) -> ClockMeasurement:
    """The measurement from one run's raw figures; ValueError (the reason) when they cannot be a clock."""
    if not kernel.chain:
        raise ValueError("clock.c has no add chain for this architecture (x86-64 and aarch64 only)")
    if ran != threads:
        raise ValueError(f"OpenMP ran {ran} of the {threads} threads asked for")
    expected = CHAIN * blocks * (rounds + 1)
    short = [i for i, a in enumerate(adds) if a != expected]
    if short:
        raise ValueError(f"the add chain of thread {short[0]} ended at {adds[short[0]]}, not {expected}: "
                         "the compiler changed the chain, so its time is no count of cycles")
    low = min(ghz)
    high = max(ghz)
    if high > MAX_PLAUSIBLE_GHZ:
        raise ValueError(f"a thread's chain ran at {high:.2f} G adds/s, faster than any core's clock "
                         f"({MAX_PLAUSIBLE_GHZ:g} GHz): this core runs dependent adds faster than one per cycle, "
                         "so the chain does not measure its clock")
    if low < MIN_PLAUSIBLE_GHZ:
        raise ValueError(f"a thread's chain ran at {low:.3g} G adds/s: that thread hardly ran (an overloaded "
                         "host); calibrate on an idle host")
    per_round_ms = CHAIN * blocks / high / 1e6
    return ClockMeasurement(
        ghz=round(high, 4), per_thread_ghz=[round(g, 4) for g in ghz], threads=threads, load=kernel.load,
        method=(f"dependent integer-add chain ({kernel.chain}) on each of {threads} OpenMP threads, "
                f"beside 48 independent {kernel.load} per 64 adds; each thread's best of {rounds} rounds of "
                f"{CHAIN * blocks / 1e6:.2g} M adds (about {per_round_ms:.2g} ms) after one warm-up, timed by "
                f"its own CPU time [clock.c, {kernel.compiler} {' '.join(kernel.flags)}]"))


def highest(samples: list[tuple[ClockMeasurement | None, str]], when: list[str]) -> tuple[ClockMeasurement | None, str]:
    """The highest of several measurements taken ``when`` (the clock moves with the host's turbo decisions, and a
    peak must hold for the fastest of them), its method naming every one; the first why-not when none worked."""
    got = [(m, w) for (m, _), w in zip(samples, when) if m is not None]
    if not got:
        return None, next((why for _, why in samples if why), "not measured")
    best = max(got, key=lambda mw: mw[0].ghz)[0]
    if len(got) == 1:
        return best, ""
    each = ", ".join(f"{m.ghz:.4g} GHz {w}" for m, w in got)
    method = f"the highest of {len(got)} measurements ({each}), each a {best.method}"
    return best.model_copy(update={"method": method}), ""


def measure_clock(threads: int, *, blocks: int = BLOCKS, rounds: int = ROUNDS) -> tuple[ClockMeasurement | None, str]:
    """(the clock the cores reach under FMA load, why-not): the highest per-thread rate of a dependent add chain
    run on ``threads`` threads at once. None and the reason where it cannot be measured or is implausible."""
    kernel, why = load_clock_kernel()
    if kernel is None:
        return None, why
    try:
        ghz, adds, ran = kernel.run(threads, blocks, rounds)
        return judge(kernel, threads, ghz, adds, ran, blocks=blocks, rounds=rounds), ""
    except (KernelsUnavailable, ValueError) as exc:
        return None, str(exc)
