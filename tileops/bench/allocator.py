"""The worker's host allocator keeps freed memory for the next call, as a GPU's caching allocator does.

Why. An eager CPU op allocates its output on every call, and glibc's malloc
decides per process, from its own history, whether that memory comes back from
the heap (free: it is already mapped) or fresh from the kernel (every page
faulted in on first touch). Its mmap threshold moves with the sizes freed so
far, and its heap top is given back to the kernel when it grows past the trim
threshold, so two processes running the same row, or one process after
rebuilding the inputs, can land on either side. Measured on this project's
2-core VM, rms_norm float32 256x1024 (1 MiB out): 480 minor page faults per
call and 1.2-1.9 ms in some processes, none and 0.4-0.6 ms in others, the same
inputs giving the same side for the life of the allocation (docs/timing.md,
"The host allocator"). It is a likely cause of the rows whose medians moved
2-4x from one bench process to the next in issue 26's reproducibility benchmark,
far outside the intervals their own blocks had measured: no block of a row can
see a choice made once.

The page faults are the allocator's cost, not the op's: a GPU's caching
allocator never pays them in a timed call, and PyTorch's CPU tuning advice is a
caching allocator (jemalloc, tcmalloc) for the same reason. So each worker
fixes glibc's two thresholds before it imports torch (``mallopt``): the mmap
threshold at its largest (32 MiB: blocks below it come from the heap and are
reused) and the trim threshold at 2 GiB (the heap is not given back between
calls). Every process then makes the same choice, and a row's time is its
kernel's. A call whose output is larger than 32 MiB still maps fresh pages,
in every process alike. Where there is no glibc (musl, macOS) nothing is
changed and run.json says why.
"""

from __future__ import annotations

import ctypes
from typing import Any

#: glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: The largest mmap threshold glibc accepts on a 64-bit host (HEAP_MAX_SIZE / 2): blocks below it are reused.
MMAP_THRESHOLD = 32 * 2**20
#: Freed heap is kept up to this much before glibc gives it back (mallopt takes an int).
TRIM_THRESHOLD = 2**31 - 1

POLICY = (f"glibc mallopt: mmap threshold {MMAP_THRESHOLD // 2**20} MiB, trim threshold 2 GiB "
          "(freed host memory is reused, not faulted in again on each call)")


def _glibc() -> Any | None:
    """The process's C library when it is glibc (it has ``gnu_get_libc_version`` and ``mallopt``), else None."""
    try:
        libc = ctypes.CDLL(None)
        version = libc.gnu_get_libc_version
        libc.mallopt  # noqa: B018  # an AttributeError when absent
    except (OSError, AttributeError):
        return None
    version.restype = ctypes.c_char_p
    return libc


def describe() -> dict[str, Any]:
    """What a worker started here applies (run.json's ``host_allocator``), without applying it in this process."""
    libc = _glibc()
    if libc is None:
        return {"policy": None, "applied": False,
                "why": "the C library is not glibc: its allocator's default is left as it is"}
    return {"policy": POLICY, "applied": True, "glibc": libc.gnu_get_libc_version().decode()}


def keep_freed_memory() -> dict[str, Any]:
    """Fix glibc's thresholds in this process (a worker, before it imports torch); what was done, as
    :func:`describe` says it. A threshold glibc refuses leaves ``applied`` False with the reason."""
    libc = _glibc()
    if libc is None:
        return describe()
    refused = [name for name, param, value in (("mmap threshold", M_MMAP_THRESHOLD, MMAP_THRESHOLD),
                                                ("trim threshold", M_TRIM_THRESHOLD, TRIM_THRESHOLD))
               if libc.mallopt(param, value) != 1]
    out = describe()
    if refused:
        out.update(applied=False, why=f"glibc refused the {' and the '.join(refused)}")
    return out
