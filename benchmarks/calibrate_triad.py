#!/usr/bin/env python3
"""Calibration bandwidth against independent references, side by side in one process.

CPU: tileops' triad mix (torch, fp32) against a STREAM-style triad in C
(``a[j] = b[j] + s*c[j]`` over doubles, OpenMP, best of N, STREAM byte counting),
compiled with the host's C compiler and loaded with ctypes into this same
process, over arrays of the same size and with the same thread count.

GPU: tileops' copy mix (CUDA events, best of N) against a plain torch
device-to-device copy timed by ``torch.utils.benchmark`` (median).

The figure that matters is the ratio: near 1.0 means the calibration reaches
what a reference implementation reaches, so its ceiling is a real one.

    python benchmarks/calibrate_triad.py [--device cpu|cuda] [--quick] [--rounds N]
"""

from __future__ import annotations

import argparse
import ctypes
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from tileops.calibrate import measure
from tileops.device import describe_device

STREAM_C = r"""
#include <stdlib.h>
#include <omp.h>
/* STREAM-style triad: a[j] = b[j] + scalar*c[j]; best time of `reps`; STREAM counts 3 x 8 bytes per element. */
double stream_triad(long n, int reps, int threads) {
    omp_set_num_threads(threads);
    double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double)), *c = malloc(n * sizeof(double));
    if (!a || !b || !c) return -1.0;
    #pragma omp parallel for schedule(static)
    for (long j = 0; j < n; j++) { a[j] = 1.0; b[j] = 2.0; c[j] = 0.0; }  /* first touch, as STREAM does */
    const double scalar = 3.0;
    double best = 1e30;
    for (int k = 0; k < reps + 1; k++) {
        double t = omp_get_wtime();
        #pragma omp parallel for schedule(static)
        for (long j = 0; j < n; j++) a[j] = b[j] + scalar * c[j];
        t = omp_get_wtime() - t;
        if (k > 0 && t < best) best = t;  /* the first pass is a warm-up */
    }
    volatile double sink = a[n / 2]; (void)sink;
    free(a); free(b); free(c);
    return best;
}
"""


def build_reference(workdir: Path) -> ctypes.CDLL | None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    src, lib = workdir / "stream_triad.c", workdir / "stream_triad.so"
    src.write_text(STREAM_C)
    cmd = [cc, "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", str(src), "-o", str(lib)]
    if subprocess.run(cmd, capture_output=True).returncode != 0:
        return None
    dll = ctypes.CDLL(str(lib))
    dll.stream_triad.restype = ctypes.c_double
    dll.stream_triad.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_int]
    return dll


def cpu(args: argparse.Namespace, console: Console) -> int:
    info = describe_device("cpu")
    sizes = measure.cpu_sizes(info.l2_bytes, info.memory_bytes, args.quick)
    threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        ref = build_reference(Path(tmp))
        if ref is None:
            console.print("no C compiler with OpenMP here: the STREAM-style reference cannot be built; skipped")
            return 0
        rows = []
        for r in range(args.rounds):  # alternate the two so drift in the host hits both alike
            ours = measure.measure_mixes(torch.device("cpu"), sizes)["triad"].bytes_per_s
            n = sizes.array_bytes // 8
            t = ref.stream_triad(n, sizes.mix_reps, threads)
            rows.append((ours, 3 * 8 * n / t))
    best_ours, best_ref = max(o for o, _ in rows), max(x for _, x in rows)
    t = Table(title=f"CPU triad, {info.name}, {threads} threads, {sizes.array_bytes >> 20} MiB arrays, "
                    f"best of {args.rounds} rounds")
    for col in ("implementation", "GB/s", "ratio (tileops / reference)"):
        t.add_column(col)
    t.add_row("tileops triad mix (torch.add, fp32)", f"{best_ours / 1e9:.2f}", f"{best_ours / best_ref:.3f}")
    t.add_row("STREAM-style C triad (OpenMP, fp64)", f"{best_ref / 1e9:.2f}", "1.000")
    console.print(t)
    return 0


def gpu(args: argparse.Namespace, console: Console) -> int:  # pragma: no cover - needs a GPU
    from torch.utils import benchmark

    info = describe_device("cuda:0")
    dev = torch.device(info.device)
    sizes = measure.gpu_sizes(info.l2_bytes, info.memory_bytes, args.quick)
    rows = []
    for _ in range(args.rounds):
        ours = measure.measure_mixes(dev, sizes)["copy"].bytes_per_s
        src = torch.ones(sizes.array_bytes // 4, device=dev)
        dst = torch.empty_like(src)
        timer = benchmark.Timer(stmt="dst.copy_(src)", globals={"dst": dst, "src": src})
        m = timer.blocked_autorange(min_run_time=0.5)
        rows.append((ours, 2 * sizes.array_bytes / m.median))
        del src, dst
    best_ours, best_ref = max(o for o, _ in rows), max(x for _, x in rows)
    t = Table(title=f"GPU copy, {info.name}, {sizes.array_bytes >> 20} MiB buffers, best of {args.rounds} rounds")
    for col in ("implementation", "TB/s", "ratio (tileops / reference)"):
        t.add_column(col)
    t.add_row("tileops copy mix (CUDA events, best of N)", f"{best_ours / 1e12:.3f}", f"{best_ours / best_ref:.3f}")
    t.add_row("torch d2d copy (torch.utils.benchmark, median)", f"{best_ref / 1e12:.3f}", "1.000")
    console.print(t)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    console = Console(width=120)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            console.print("no CUDA device: nothing to compare")
            return 0
        return gpu(args, console)
    return cpu(args, console)


if __name__ == "__main__":
    sys.exit(main())
