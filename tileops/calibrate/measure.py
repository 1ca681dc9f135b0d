"""The microbenchmarks: bandwidth mixes, compute roofs and the latency floor.

They run through torch, except a CPU's bandwidth mixes, which run through a
small C kernel with streaming stores where a compiler exists (``streaming``).
Every measurement is best-of-N (the ceiling is what the device can do, and
noise only ever slows a run down). CPU time is the wall time of a synchronous
call; GPU time comes from CUDA events around each repetition, or from the
profiler's kernel activity for the latency floor. GPU-only code is guarded and
imported lazily (see ``gpu_fma``).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from collections.abc import Callable

import torch

from tileops.ledger import STREAM_WORDS, MixMeasurement, RoofMeasurement
from tileops.calibrate.streaming import StreamingKernels, load_kernels
from tileops.calibrate.timing import best_time, rep_times, spread
from tileops.profiles import MIXES
from tileops.tf32 import tf32_matmul

F32 = 4  # bytes per fp32 element


@dataclass(frozen=True)
class Sizes:
    """Problem sizes for one calibration; ``quick`` ones exist so tests finish in seconds."""

    array_bytes: int
    mix_reps: int
    fma_sizes: tuple[int, ...]  # CPU: cache-resident GEMM sizes; GPU: unused
    fma_target_s: float  # per timed repetition of a short kernel loop
    big_matmul: int
    matmul_reps: int
    latency_calls: int
    gemm_sizes: tuple[int, ...] = ()  # GPU: the square GEMM sizes a tensor-core roof is the best of


def cpu_sizes(llc_bytes: int | None, mem_bytes: int | None, quick: bool) -> Sizes:
    """Arrays 4x the last-level cache (STREAM's rule), at least 64 MiB, at most 1/16 of memory each."""
    llc = llc_bytes or 32 << 20
    arr = max(2 * llc, 16 << 20) if quick else max(4 * llc, 64 << 20)
    if mem_bytes:
        arr = min(arr, mem_bytes // 16)
    if quick:
        return Sizes(arr, 3, (256,), 0.02, 768, 2, 300)
    return Sizes(arr, 8, (192, 256, 384), 0.15, 3072, 3, 2000)


def gpu_sizes(l2_bytes: int | None, mem_bytes: int | None, quick: bool) -> Sizes:
    """Arrays of 1 GiB (many times any L2), at most 1/8 of device memory each. Tensor-core roofs are the
    best of a few GEMM sizes: which size cuBLAS runs fastest differs by device and clock (power) state."""
    arr = (256 << 20) if quick else (1 << 30)
    arr = max(arr, 8 * (l2_bytes or 0))
    if mem_bytes:
        arr = min(arr, mem_bytes // 8)
    gemms: tuple[int, ...] = (4096,) if quick else (4096, 8192, 16384)
    if mem_bytes:  # three fp32 operands within a quarter of the device
        gemms = tuple(n for n in gemms if 12 * n * n <= mem_bytes // 4) or (2048,)
    return Sizes(arr, 5 if quick else 20, (), 0.002 if quick else 0.01, 4096 if quick else 8192, 3 if quick else 10,
                 50 if quick else 200, gemms)


# --------------------------------------------------------------------------- timing


def _repeat(fn: Callable[[], object], k: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(k):
            fn()
    return run


def _calls_for(fn: Callable[[], object], device: torch.device, target_s: float) -> int:
    """How many back-to-back calls of ``fn`` fill ``target_s`` (so per-call overhead amortises)."""
    once = best_time(fn, device, reps=2)
    return max(1, int(target_s / max(once, 1e-7)))


# --------------------------------------------------------------------------- bandwidth


def _arrays(device: torch.device, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    def array() -> torch.Tensor:
        return torch.empty(n, dtype=torch.float32, device=device)

    return array(), array(), array()


def _record(mix: str, n: int, times: list[float], kernel: str) -> MixMeasurement:
    moved = STREAM_WORDS[mix] * n * F32
    t = min(times)
    return MixMeasurement(bytes_per_s=moved / t, bytes=moved, array_bytes=n * F32, best_s=t, reps=len(times),
                          kernel=kernel, spread=spread(times))


def torch_mixes(device: torch.device, sizes: Sizes,
                step: Callable[[str], None] = lambda _: None) -> dict[str, MixMeasurement]:
    """The mixes through torch's own kernels (the GPU's, and a CPU's without a C compiler)."""
    n = sizes.array_bytes // F32
    a, b, c = _arrays(device, n)
    a.fill_(0.0)  # first touch: page faults stay out of the timed loop
    b.fill_(1.0)
    c.fill_(2.0)
    kernels: dict[str, tuple[str, Callable[[], object]]] = {
        "copy": ("a.copy_(b)", lambda: a.copy_(b)),
        "triad": ("torch.add(b, c, alpha=3, out=a)", lambda: torch.add(b, c, alpha=3.0, out=a)),
        "read": ("torch.sum(b)", lambda: torch.sum(b)),
        "write": ("a.fill_(7)", lambda: a.fill_(7.0)),
    }
    out: dict[str, MixMeasurement] = {}
    for mix, (desc, fn) in kernels.items():
        step(f"bandwidth: {mix}")
        out[mix] = _record(mix, n, rep_times(fn, device, reps=sizes.mix_reps), desc)
    return out


def streaming_mixes(kernels: StreamingKernels, sizes: Sizes, threads: int | None = None,
                    step: Callable[[str], None] = lambda _: None) -> dict[str, MixMeasurement]:
    """The CPU mixes through ``streaming.c`` (non-temporal stores, OpenMP on torch's thread count)."""
    threads = threads or torch.get_num_threads()
    n = sizes.array_bytes // F32
    a, b, c = _arrays(torch.device("cpu"), n)
    for t, v in ((a, 0.0), (b, 1.0), (c, 2.0)):
        kernels.touch(t, v, threads)  # first touch by the thread that streams each page later
    out: dict[str, MixMeasurement] = {}
    for mix in MIXES:
        step(f"bandwidth: {mix}")
        times, _ = kernels.passes(mix, a, b, c, reps=sizes.mix_reps, threads=threads)
        out[mix] = _record(mix, n, times, kernels.describe(mix, threads))
    return out


def measure_mixes(device: torch.device, sizes: Sizes,
                  step: Callable[[str], None] = lambda _: None) -> tuple[dict[str, MixMeasurement], list[str]]:
    """copy a=b, triad a=b+s*c, read sum(b), write a=x over fp32 arrays of ``sizes.array_bytes`` each.

    Bytes are counted as STREAM counts them (``STREAM_WORDS``): no write-allocate. On a CPU the mixes
    run through ``streaming.c``, whose non-temporal stores move exactly those bytes; where it cannot be
    built they run through torch, and the returned notes say why and what that costs.
    """
    if device.type != "cpu":
        return torch_mixes(device, sizes, step), []
    kernels, why = load_kernels()
    if kernels is not None:
        return streaming_mixes(kernels, sizes, step=step), []
    note = (f"memory mixes measured with torch's kernels, not streaming.c: {why}. torch's CPU stores go through "
            "the cache (each output line is read first), so copy, triad and write reach less than the hardware "
            "streams and the envelope, and every CPU reading priced on it, is low; install a C compiler with "
            "OpenMP (e.g. apt-get install gcc) or set CC, and calibrate again")
    return torch_mixes(device, sizes, step), [note]


# --------------------------------------------------------------------------- compute roofs


def _gemm_rate(fn: Callable[[], object], flops: float, device: torch.device, reps: int, warmup: int,
               method: str) -> RoofMeasurement:
    times = rep_times(fn, device, reps=reps, warmup=warmup)
    t = min(times)
    return RoofMeasurement(flops_per_s=flops / t, flops=flops, best_s=t, reps=reps, method=method,
                           spread=spread(times))


def cpu_fma_path(sizes: Sizes) -> RoofMeasurement:
    """cpu.fp32: the FMA-saturated path. torch's most FMA-dense code is the BLAS GEMM micro-kernel
    (register-blocked FMA chains); with each thread's operands resident in its cache it runs with no
    memory stalls. A batch of 2 small GEMMs per thread (``bmm``) gives every thread independent work
    with no barrier between GEMMs. Best over a few sizes, each repeated to fill a timed repetition."""
    cpu = torch.device("cpu")
    batch = 2 * torch.get_num_threads()
    best: RoofMeasurement | None = None
    for n in sizes.fma_sizes:
        x, y = torch.randn(batch, n, n), torch.randn(batch, n, n)
        z = torch.empty(batch, n, n)
        def one(x: torch.Tensor = x, y: torch.Tensor = y, z: torch.Tensor = z) -> object:
            return torch.bmm(x, y, out=z)

        k = _calls_for(one, cpu, sizes.fma_target_s)
        r = _gemm_rate(_repeat(one, k), 2.0 * batch * n**3 * k, cpu, reps=5, warmup=1,
                       method=f"cache-resident fp32 GEMMs, bmm {batch}x{n}x{n}x{n} x{k} calls "
                              "(BLAS FMA micro-kernel), best of 5")
        if best is None or r.flops_per_s > best.flops_per_s:
            best = r
    assert best is not None
    return best


def cpu_big_matmul(sizes: Sizes) -> RoofMeasurement:
    """cpu.fp32_matmul: one large fp32 matmul, operands well beyond the last-level cache."""
    n = sizes.big_matmul
    x, y = torch.randn(n, n), torch.randn(n, n)
    z = torch.empty(n, n)
    return _gemm_rate(lambda: torch.mm(x, y, out=z), 2.0 * n**3, torch.device("cpu"), reps=sizes.matmul_reps,
                      warmup=1, method=f"fp32 matmul {n}x{n}x{n}, best of {sizes.matmul_reps}")


def gpu_gemm(key: str, device: torch.device, sizes: Sizes) -> RoofMeasurement:  # pragma: no cover - needs a GPU
    """A tensor-core roof ``key`` (tf32, bf16, fp16, fp8, int8): the fastest of square GEMMs of ``gemm_sizes``."""
    best: RoofMeasurement | None = None
    for n in sizes.gemm_sizes or (sizes.big_matmul,):
        r = _gpu_gemm_at(key, device, n, sizes.matmul_reps)
        torch.cuda.empty_cache()
        if best is None or r.flops_per_s > best.flops_per_s:
            best = r
    assert best is not None
    swept = ", ".join(str(n) for n in sizes.gemm_sizes)
    return best.model_copy(update={"method": f"{best.method}; the fastest of sizes {swept}"}) if swept else best


def _gpu_gemm_at(key: str, device: torch.device, n: int, reps: int) -> RoofMeasurement:  # pragma: no cover
    flops = 2.0 * n**3
    gen = torch.Generator(device=device).manual_seed(0)
    if key in ("tensor_core.bf16", "tensor_core.fp16"):
        dt = torch.bfloat16 if key.endswith("bf16") else torch.float16
        a = torch.randn(n, n, device=device, dtype=dt, generator=gen)
        b = torch.randn(n, n, device=device, dtype=dt, generator=gen)
        return _gemm_rate(lambda: torch.mm(a, b), flops, device, reps, 3, f"{dt} GEMM {n}^3 (torch.mm), random data")
    if key == "tensor_core.tf32":
        a = torch.randn(n, n, device=device, generator=gen)
        b = torch.randn(n, n, device=device, generator=gen)
        with tf32_matmul(True):
            return _gemm_rate(lambda: torch.mm(a, b), flops, device, reps, 3,
                              f"fp32 GEMM {n}^3 with TF32 allowed (torch.mm), random data")
    if key == "tensor_core.fp8":
        if torch.cuda.get_device_capability(device) < (8, 9) or not hasattr(torch, "_scaled_mm"):
            raise RuntimeError("fp8 GEMM needs compute capability 8.9+ and torch._scaled_mm")
        a = torch.randn(n, n, device=device, generator=gen).to(torch.float8_e4m3fn)
        bt = torch.randn(n, n, device=device, generator=gen).to(torch.float8_e4m3fn)  # (N, K) row-major
        one = torch.tensor(1.0, device=device)
        def fn() -> object:
            return torch._scaled_mm(a, bt.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                    use_fast_accum=True)

        return _gemm_rate(fn, flops, device, reps, 3, f"fp8 e4m3 GEMM {n}^3 (torch._scaled_mm, fast accum)")
    if key == "tensor_core.int8":
        if not hasattr(torch, "_int_mm"):
            raise RuntimeError("int8 GEMM needs torch._int_mm")
        a = torch.randint(-128, 127, (n, n), device=device, dtype=torch.int8, generator=gen)
        bt = torch.randint(-128, 127, (n, n), device=device, dtype=torch.int8, generator=gen)
        return _gemm_rate(lambda: torch._int_mm(a, bt.t()), flops, device, reps, 3,
                          f"int8 GEMM {n}^3 (torch._int_mm), int32 accumulate")
    raise KeyError(key)


def gpu_fp32(device: torch.device, sizes: Sizes) -> RoofMeasurement:  # pragma: no cover - needs a GPU
    """cuda_core.fp32: a Triton FMA-chain kernel; without Triton, an SGEMM with TF32 off (a lower bound)."""
    why = "no Triton"
    try:
        from tileops.calibrate.gpu_fma import fma_kernel_rate

        rate, flops, t, method = fma_kernel_rate(device, sizes.fma_target_s)
        return RoofMeasurement(flops_per_s=rate, flops=flops, best_s=t, reps=5, method=method)
    except ImportError:
        pass
    except Exception as exc:  # a Triton failure falls back too, and says why
        why = f"Triton kernel failed: {type(exc).__name__}"
    n = sizes.big_matmul
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    with tf32_matmul(False):
        return _gemm_rate(lambda: torch.mm(a, b), 2.0 * n**3, device, sizes.matmul_reps, 3,
                          f"fp32 SGEMM {n}^3 with TF32 off ({why}: a lower bound of the FMA rate)")


# --------------------------------------------------------------------------- latency floor


def cpu_latency_floor(sizes: Sizes) -> tuple[float, str]:
    """Median wall time of one trivial torch call (a one-element add): the floor a CPU timing can reach."""
    x = torch.zeros(1)
    y = torch.empty(1)
    for _ in range(50):
        torch.add(x, 1.0, out=y)
    samples = []
    for _ in range(sizes.latency_calls):
        t0 = time.perf_counter()
        torch.add(x, 1.0, out=y)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), f"median wall time of {sizes.latency_calls} one-element torch.add calls"


def gpu_latency_floor(device: torch.device, sizes: Sizes) -> tuple[float, str]:  # pragma: no cover - needs a GPU
    """Median device time of a trivial kernel (one-element add), from the profiler's kernel activity (CUPTI)."""
    import json
    import os
    import tempfile

    x = torch.zeros(1, device=device)
    for _ in range(20):
        x.add_(1.0)
    torch.cuda.synchronize(device)
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(sizes.latency_calls):
                x.add_(1.0)
            torch.cuda.synchronize(device)
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        try:
            prof.export_chrome_trace(path)
            with open(path, encoding="utf-8") as fh:
                trace = json.load(fh)
        finally:
            os.unlink(path)
        durs = [e["dur"] for e in trace.get("traceEvents", []) if e.get("cat") == "kernel" and e.get("dur")]
        if durs:
            return statistics.median(durs) / 1e6, (f"median kernel duration (CUPTI, torch.profiler) of "
                                                   f"{len(durs)} one-element add kernels")
    except Exception:
        pass
    samples = []
    for _ in range(sizes.latency_calls):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        x.add_(1.0)
        e.record()
        e.synchronize()
        samples.append(s.elapsed_time(e) / 1e3)
    return statistics.median(samples), "median CUDA-event time of a one-element add (profiler unavailable)"
