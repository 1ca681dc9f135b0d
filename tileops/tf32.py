"""The TF32 switch for fp32 matmuls, through the API the installed torch prefers.

torch 2.9 introduced ``torch.backends.cuda.matmul.fp32_precision`` (``"ieee"``,
``"tf32"``, or ``"none"``: inherit from ``torch.backends.cudnn.fp32_precision``,
the CUDA-wide setting, then from ``torch.backends.fp32_precision``) beside the
legacy ``torch.backends.cuda.matmul.allow_tf32``. Once the new API has been set,
reading the legacy flag raises ("mix of the legacy and new APIs"), so a process
must speak one of them: on a torch that has the new API this module reads and
writes only that one; on an older torch only ``allow_tf32``.
"""

from __future__ import annotations

from contextlib import contextmanager
from collections.abc import Iterator

import torch


def new_api() -> bool:
    """Whether this torch has the ``fp32_precision`` API (torch >= 2.9)."""
    return hasattr(torch._C, "_get_fp32_precision_getter")


def tf32_matmul_enabled() -> bool:
    """Whether fp32 matmuls on CUDA may run on TF32 tensor cores now."""
    if new_api():
        for level in (torch.backends.cuda.matmul, torch.backends.cudnn, torch.backends):
            precision = level.fp32_precision
            if precision != "none":
                return precision == "tf32"
        return False  # nothing set anywhere: IEEE fp32, torch's default for matmuls
    return bool(torch.backends.cuda.matmul.allow_tf32)


@contextmanager
def tf32_matmul(enabled: bool) -> Iterator[None]:
    """Allow (or forbid) TF32 for fp32 CUDA matmuls inside the block; the previous setting is restored."""
    if new_api():
        prev = torch.backends.cuda.matmul.fp32_precision
        torch.backends.cuda.matmul.fp32_precision = "tf32" if enabled else "ieee"
        try:
            yield
        finally:
            torch.backends.cuda.matmul.fp32_precision = prev
    else:  # pragma: no cover - torch < 2.9
        prev_flag = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = enabled
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev_flag
