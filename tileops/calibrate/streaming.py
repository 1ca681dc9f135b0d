"""The CPU bandwidth mixes through streaming stores: ``streaming.c``, built with the host's compiler.

torch's CPU kernels store through the cache (write-allocate: each output line
is read before it is written), so its copy moves three words per element where
STREAM counts two, and the envelope came out at 0.75-0.80 of STREAM's best
kernel on the development VM. ``streaming.c`` writes outputs with
non-temporal stores, so the STREAM-counted bytes are the bytes the hardware
moves and the mixes reach what STREAM reaches (docs/profiles.md says why this
and not another mechanism).

It is built and loaded by ``ckernels`` (the host's compiler, ctypes); where no
compiler or OpenMP exists (a slim image), ``load_kernels`` returns the reason
and the calibration measures with torch's kernels, saying so.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from tileops.calibrate.ckernels import (FLAG_SETS, KernelsUnavailable, compile_library, find_compiler,
                                        load_from_memory)

__all__ = ["FLAG_SETS", "KernelsUnavailable", "MIX_CODES", "SOURCE", "StreamingKernels", "build",
           "find_compiler", "load_from_memory", "load_kernels"]

SOURCE = Path(__file__).with_name("streaming.c")
MIX_CODES = {"copy": 0, "triad": 1, "read": 2, "write": 3}
TRIAD_SCALAR = 3.0


@dataclass(frozen=True)
class StreamingKernels:
    """The loaded library and how it was built (recorded in each mix's ``kernel`` text)."""

    lib: ctypes.CDLL
    compiler: str
    flags: tuple[str, ...]
    stores: str

    def touch(self, a: torch.Tensor, value: float, threads: int) -> None:
        """First touch of ``a`` with streaming stores, page by page on the thread that streams it later."""
        _check(a)
        self.lib.tileops_touch(a.data_ptr(), a.numel(), value, threads)

    def run(self, mix: str, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, *, reps: int, threads: int,
            scalar: float = TRIAD_SCALAR) -> tuple[float, float]:
        """(best seconds of ``reps`` passes after one untimed pass, the read mix's sum) over float32 arrays.

        copy: a = b; triad: a = b + scalar*c; read: sum(b); write: a = scalar.
        """
        times, total = self.passes(mix, a, b, c, reps=reps, threads=threads, scalar=scalar)
        return min(times), total

    def passes(self, mix: str, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, *, reps: int, threads: int,
               scalar: float = TRIAD_SCALAR) -> tuple[list[float], float]:
        """(seconds of each of ``reps`` timed passes, the read mix's sum): as :meth:`run`, every pass kept (their
        spread is the measurement's own noise)."""
        for t in (a, b, c):
            _check(t)
        if not a.numel() == b.numel() == c.numel():
            raise ValueError("the three arrays must have the same length")
        if reps < 1:
            raise ValueError("reps must be at least 1")
        total = ctypes.c_double(0.0)
        times = (ctypes.c_double * reps)()
        self.lib.tileops_mix(MIX_CODES[mix], a.data_ptr(), b.data_ptr(), c.data_ptr(), a.numel(), scalar, reps,
                             threads, ctypes.byref(total), times)
        return list(times), total.value

    def describe(self, mix: str, threads: int) -> str:
        """``a[i] = b[i] [streaming.c: <stores>, <n> OpenMP threads, <compiler and flags>]``: the bracket
        is the same for every mix of a run, so a summary can print it once."""
        what = {"copy": "a[i] = b[i]", "triad": f"a[i] = b[i] + {TRIAD_SCALAR:g}*c[i]", "read": "sum of b[i]",
                "write": f"a[i] = {TRIAD_SCALAR:g}"}[mix]
        return f"{what} [streaming.c: {self.stores}, {threads} OpenMP threads, {self.compiler} {' '.join(self.flags)}]"


def _check(t: torch.Tensor) -> None:
    if t.dtype != torch.float32 or t.device.type != "cpu" or not t.is_contiguous():
        raise ValueError("streaming kernels take contiguous float32 CPU tensors")


def build(compiler: str) -> StreamingKernels:
    """Compile ``streaming.c`` with ``compiler`` and load it. KernelsUnavailable says why not."""
    lib, flags = compile_library(compiler, SOURCE)
    lib.tileops_stores.restype = ctypes.c_char_p
    lib.tileops_touch.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_float, ctypes.c_int]
    lib.tileops_touch.restype = None
    lib.tileops_mix.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long,
                                ctypes.c_float, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_double),
                                ctypes.POINTER(ctypes.c_double)]
    lib.tileops_mix.restype = ctypes.c_double
    return StreamingKernels(lib=lib, compiler=Path(compiler).name, flags=flags,
                            stores=lib.tileops_stores().decode())


@functools.cache
def _cached(compiler: str) -> StreamingKernels:
    return build(compiler)


def load_kernels() -> tuple[StreamingKernels | None, str]:
    """(kernels, why-not): built once per process and compiler."""
    compiler, why = find_compiler()
    if compiler is None:
        return None, why
    try:
        return _cached(compiler), ""
    except KernelsUnavailable as exc:
        return None, str(exc)
