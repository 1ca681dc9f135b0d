#!/usr/bin/env python3
"""Calibration ceilings against independent references, side by side in one process (issue 18).

CPU: the four calibration mixes (copy, triad, read, write) as ``tileops calibrate``
measures them (``streaming.c``: streaming stores, OpenMP) and as torch's own
kernels measure them (the mechanism before issue 18, still the fallback without
a compiler), against a STREAM in C (McCalpin's four kernels Copy, Scale, Add,
Triad over doubles, OpenMP ``parallel for``, best of N passes, STREAM byte
counting), compiled with the host's compiler and loaded with ctypes into this
process. Same bytes per array, same thread count; the three are interleaved
round by round, in a rotating order, so drift on a shared host hits all alike.
Ratios: copy/Copy, triad/Triad; read and write against STREAM's best kernel;
the envelope (best mix) against STREAM's best kernel: the goal is >= 0.95.

GPU (``--device cuda``): the calibration's copy mix beside a plain
device-to-device copy (``Tensor.copy_``, i.e. cudaMemcpy D2D, of large buffers,
timed as a sustained loop of copies), and its bf16 roof beside the fastest
``torch.mm`` of a small size sweep. Goal on an H200: both ratios >= 0.97. A
measurement that fails prints its reason instead of a number.

    python benchmarks/calibrate_triad.py [--device cpu|cuda] [--quick] [--rounds N] [--threads N] [--passes N]
                                        [--array-mib N]
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import torch
from rich.console import Console
from rich.table import Table

from tileops.calibrate import measure
from tileops.ledger import STREAM_WORDS
from tileops.calibrate.streaming import find_compiler, load_kernels
from tileops.device import describe_device

ENVELOPE_GOAL = 0.95
GPU_GOAL = 0.97

#: McCalpin's STREAM kernels (stream.c v5.10), as a library: static arrays of a size fixed at compile time
#: (-DSTREAM_ARRAY_SIZE, as stream.c does; the constant bounds are what let the compiler turn Copy into a
#: memcpy, whose large-size path streams), OpenMP `parallel for`, first touch in parallel, best of `reps`
#: passes after a warm-up pass, STREAM byte counting.
STREAM_C = r"""
#include <omp.h>
#define N STREAM_ARRAY_SIZE
static double a[N], b[N], c[N];
void stream_setup(int threads) {
    omp_set_num_threads(threads);
    #pragma omp parallel for
    for (long j = 0; j < N; j++) { a[j] = 1.0; b[j] = 2.0; c[j] = 0.0; }
}
/* kernel 0 Copy c=a, 1 Scale b=s*c, 2 Add c=a+b, 3 Triad a=b+s*c; best seconds of `reps` passes */
double stream_best(int kernel, int reps) {
    const double scalar = 3.0;
    double best = 1e300;
    for (int k = 0; k <= reps; k++) {
        double t = omp_get_wtime();
        switch (kernel) {
        case 0:
            #pragma omp parallel for
            for (long j = 0; j < N; j++) c[j] = a[j];
            break;
        case 1:
            #pragma omp parallel for
            for (long j = 0; j < N; j++) b[j] = scalar * c[j];
            break;
        case 2:
            #pragma omp parallel for
            for (long j = 0; j < N; j++) c[j] = a[j] + b[j];
            break;
        default:
            #pragma omp parallel for
            for (long j = 0; j < N; j++) a[j] = b[j] + scalar * c[j];
        }
        t = omp_get_wtime() - t;
        if (k > 0 && t < best) best = t;
    }
    return best;
}
"""
STREAM_KERNELS = {"Copy": (0, 2), "Scale": (1, 2), "Add": (2, 3), "Triad": (3, 3)}  # name: (code, words)
STREAM_FLAGS = ("-O3", "-march=native", "-fopenmp")
PAIRED = {"copy": "Copy", "triad": "Triad"}  # read and write have no STREAM kernel: compared with the best


def build_stream(workdir: Path, elements: int) -> tuple[ctypes.CDLL | None, str]:
    cc, why = find_compiler()
    if cc is None:
        return None, why
    src, lib = workdir / "stream.c", workdir / "stream.so"
    src.write_text(STREAM_C)
    flags = (*STREAM_FLAGS, f"-DSTREAM_ARRAY_SIZE={elements}")
    proc = subprocess.run([cc, *flags, "-shared", "-fPIC", str(src), "-o", str(lib)], capture_output=True, text=True)
    if proc.returncode != 0:
        return None, f"{cc} could not build the STREAM reference: {proc.stderr.strip()[-300:]}"
    dll = ctypes.CDLL(str(lib))
    dll.stream_setup.argtypes = [ctypes.c_int]
    dll.stream_best.argtypes = [ctypes.c_int, ctypes.c_int]
    dll.stream_best.restype = ctypes.c_double
    return dll, f"{Path(cc).name} {' '.join(STREAM_FLAGS)}"


def _best(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {k: max(r[k] for r in rounds) for k in rounds[0]}


def _bandwidth_table(title: str, seen: dict[str, list[dict[str, float]]], cols: list[str]) -> Table:
    """Each mix's best bandwidth per side and its ratio to STREAM's paired kernel (its best where none pairs),
    then the envelope over the mixes against STREAM's best."""
    stream = _best(seen["stream"])
    stream_top = max(stream.values())
    stream_best_name = max(stream, key=stream.__getitem__)
    t = Table(title=title)
    t.add_column("mix")
    t.add_column("reference")
    for c in cols:
        label = "tileops calibrate (streaming.c)" if c == "streaming" else "torch kernels (before; fallback)"
        t.add_column(f"{label} GB/s", justify="right")
        t.add_column("ratio", justify="right")
    t.add_column("STREAM GB/s", justify="right")
    best = {c: _best(seen[c]) for c in cols}
    for mix in measure.MIXES:
        ref_name = PAIRED.get(mix, stream_best_name)
        ref_bw = stream[ref_name]
        cells = [mix, ref_name if mix in PAIRED else f"{ref_name} (STREAM's best)"]
        for c in cols:
            cells += [f"{best[c][mix] / 1e9:.2f}", f"{best[c][mix] / ref_bw:.3f}"]
        t.add_row(*cells, f"{ref_bw / 1e9:.2f}")
    cells = ["envelope (best mix)", f"{stream_best_name} (STREAM's best)"]
    for c in cols:
        top = max(best[c].values())
        cells += [f"{top / 1e9:.2f}", f"{top / stream_top:.3f}"]
    t.add_row(*cells, f"{stream_top / 1e9:.2f}", style="bold")
    return t


def cpu(args: argparse.Namespace, console: Console) -> int:
    info = describe_device("cpu")
    sizes = measure.cpu_sizes(info.l2_bytes, info.memory_bytes, args.quick)
    if args.passes:
        sizes = dataclasses.replace(sizes, mix_reps=args.passes)
    if args.array_mib:
        sizes = dataclasses.replace(sizes, array_bytes=args.array_mib << 20)
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)  # torch's mixes too
    kernels, why_not = load_kernels()
    with tempfile.TemporaryDirectory() as tmp:
        n = sizes.array_bytes // 8
        ref, how = build_stream(Path(tmp), n)
        if ref is None:
            console.print(f"the STREAM reference cannot be built here ({how}); nothing to compare against")
            return 0
        ref.stream_setup(threads)
        cpu_dev = torch.device("cpu")
        sides: dict[str, Callable[[], dict[str, float]]] = {
            "stream": lambda: {k: w * 8 * n / ref.stream_best(code, sizes.mix_reps)
                               for k, (code, w) in STREAM_KERNELS.items()},
            "torch": lambda: {m: x.bytes_per_s for m, x in measure.torch_mixes(cpu_dev, sizes).items()},
        }
        if kernels is not None:
            sides["streaming"] = lambda: {m: x.bytes_per_s
                                          for m, x in measure.streaming_mixes(kernels, sizes, threads).items()}
        seen: dict[str, list[dict[str, float]]] = {k: [] for k in sides}
        order = list(sides)
        for r in range(args.rounds):  # rotate the order too: no side always runs right after another
            for side in order[r % len(order):] + order[:r % len(order)]:
                seen[side].append(sides[side]())

    cols = ["streaming"] if kernels is not None else []
    cols.append("torch")
    t = _bandwidth_table(f"CPU bandwidth, {info.name}, {threads} threads, {sizes.array_bytes >> 20} MiB per array, "
                         f"best of {args.rounds} interleaved rounds x {sizes.mix_reps} passes (STREAM counting)",
                         seen, cols)
    stream = _best(seen["stream"])
    stream_top = max(stream.values())
    best = {c: _best(seen[c]) for c in cols}
    console.print(t)
    console.print("STREAM (" + how + "): " + ", ".join(f"{k} {v / 1e9:.2f}" for k, v in stream.items()) + " GB/s")
    for c in cols:  # the same ratio round by round: how much the shared host moved it
        per = [max(s.values()) / max(x.values()) for s, x in zip(seen[c], seen["stream"])]
        console.print(f"envelope / STREAM's best per round, {c}: " + ", ".join(f"{p:.3f}" for p in per)
                      + f" (median {statistics.median(per):.3f})")
    if kernels is None:
        console.print(f"[yellow]streaming.c unavailable ({why_not}): the calibration falls back to torch's "
                      "kernels, shown above[/]")
        return 0
    ratio = max(best["streaming"].values()) / stream_top
    verdict = "met" if ratio >= ENVELOPE_GOAL else "MISSED"
    console.print(f"goal: envelope >= {ENVELOPE_GOAL:.2f} x STREAM's best kernel: {ratio:.3f} ({verdict}); "
                  f"streaming stores: {kernels.stores}; words per element counted: "
                  + ", ".join(f"{m} {w}" for m, w in STREAM_WORDS.items()))
    return 0


# --------------------------------------------------------------------------- GPU (not measured on the dev VM)


def _sustained(fn: Callable[[], object], calls: int, reps: int = 3) -> float:  # pragma: no cover - needs a GPU
    """Best seconds per call of ``calls`` back-to-back calls between two CUDA events."""
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(calls):
            fn()
        e.record()
        e.synchronize()
        best = min(best, s.elapsed_time(e) / 1e3 / calls)
    return best


def _d2d_copy(dev: torch.device, mem: int, calibration_bytes: int) -> tuple[float, str]:  # pragma: no cover
    """Fastest plain device-to-device copy (Tensor.copy_ = cudaMemcpy D2D) over a few large buffers,
    the calibration's size among them."""
    best, where = 0.0, ""
    for nbytes in sorted({256 << 20, calibration_bytes, 2 << 30}):
        if 2 * nbytes > mem // 4 and nbytes != calibration_bytes:
            continue
        src = torch.ones(nbytes // 4, device=dev)
        dst = torch.empty_like(src)
        bw = 2 * nbytes / _sustained(lambda d=dst, s=src: d.copy_(s), calls=20)
        if bw > best:
            best, where = bw, f"{nbytes >> 20} MiB buffers"
        del src, dst
        torch.cuda.empty_cache()
    if best <= 0:
        raise RuntimeError("no copy was timed")
    return best, where


def _mm_sweep(dev: torch.device) -> tuple[float, str]:  # pragma: no cover - needs a GPU
    """Fastest bf16 ``torch.mm`` over a small sweep of square sizes."""
    best, where = 0.0, ""
    for n in (2048, 4096, 6144, 8192, 12288, 16384):
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        rate = 2.0 * n**3 / _sustained(lambda x=a, y=b: torch.mm(x, y), calls=max(3, int(2e13 / n**3)))
        if rate > best:
            best, where = rate, f"{n}^3"
        del a, b
        torch.cuda.empty_cache()
    if best <= 0:
        raise RuntimeError("no matmul was timed")
    return best, where


def _try(fn: Callable[[], tuple[float, str]]) -> tuple[float | None, str]:  # pragma: no cover - needs a GPU
    try:
        return fn()
    except Exception as exc:  # fail closed: a reason, never a number
        return None, f"not measured: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def gpu(args: argparse.Namespace, console: Console) -> int:  # pragma: no cover - needs a GPU
    info = describe_device("cuda:0")
    dev = torch.device(info.torch_device)
    sizes = measure.gpu_sizes(info.l2_bytes, info.memory_bytes, args.quick)
    mem = info.memory_bytes or torch.cuda.get_device_properties(dev).total_memory
    copies, refs = [], []
    for _ in range(args.rounds):  # interleaved: calibration, then reference, each round
        copies.append(_try(lambda: (measure.torch_mixes(dev, sizes)["copy"].bytes_per_s, "calibration copy mix")))
        torch.cuda.empty_cache()
        refs.append(_try(lambda: _d2d_copy(dev, mem, sizes.array_bytes)))

    def bf16_roof() -> tuple[float, str]:
        r = measure.gpu_gemm("tensor_core.bf16", dev, sizes)
        return r.flops_per_s, r.method

    bf16 = _try(bf16_roof)
    mm = _try(lambda: _mm_sweep(dev))

    def best(xs: list[tuple[float | None, str]]) -> tuple[float | None, str]:
        got = [x for x in xs if x[0] is not None]
        return max(got, key=lambda x: x[0]) if got else xs[0]  # type: ignore[arg-type,return-value]

    t = Table(title=f"GPU ceilings, {info.name}, best of {args.rounds} rounds (goal: ratio >= {GPU_GOAL})")
    for col in ("what", "tileops calibrate", "reference", "ratio", "goal"):
        t.add_column(col)
    for what, (ours, how), (ref, ref_how), unit, scale in (
            ("copy mix vs plain D2D copy", best(copies), best(refs), "TB/s", 1e12),
            ("bf16 roof vs fastest torch.mm", bf16, mm, "TFLOP/s", 1e12)):
        if ours is None or ref is None:
            t.add_row(what, how if ours is None else f"{ours / scale:.1f} {unit}",
                      ref_how if ref is None else f"{ref / scale:.1f} {unit}", "-", "not measured")
            continue
        ratio = ours / ref
        t.add_row(what, f"{ours / scale:.3f} {unit} ({how})", f"{ref / scale:.3f} {unit} ({ref_how})",
                  f"{ratio:.3f}", "met" if ratio >= GPU_GOAL else "MISSED")
    console.print(t)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--quick", action="store_true", help="small arrays and few passes (seconds; rough figures)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds; each figure is the best of them")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads for every side (default: torch's, as the calibration uses)")
    p.add_argument("--passes", type=int, default=0,
                   help="CPU timed passes per mix and round (default: the calibration's)")
    p.add_argument("--array-mib", type=int, default=0,
                   help="CPU MiB per array for every side (default: the calibration's, 4x the last-level cache)")
    args = p.parse_args()
    console = Console(width=160)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            console.print("no CUDA device: nothing to compare")
            return 0
        return gpu(args, console)
    return cpu(args, console)


if __name__ == "__main__":
    sys.exit(main())
