"""Triton kernels, one readable kernel per pattern, shared by a family.

Each module holds a pattern (``elementwise``: flat and broadcast elementwise, gated
activations, casts; ``rowwise``: norms and softmax over rows; ``rope``; ``embedding``) and exposes
:class:`Kernel` objects that ops name as ``"module:name"`` in ``Op.triton_kernel``. A Kernel
says which dtypes and shapes it supports; a call outside them raises
BackendUnavailableError with the reason (the bench asks first, through ``Op.unsupported``).

This module does not import triton; the kernel modules do, when an op first runs on Triton.
The kernels read contiguous tensors (what the bench builds) and compute in fp32.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from collections.abc import Callable

from tileops.errors import BackendUnavailableError
from tileops.ops.backends import INTERPRETER_NOT_TIMED, interpreting

if TYPE_CHECKING:
    import torch

FLOATS = frozenset({"float16", "bfloat16", "float32"})
#: tensors a kernel indexes with 32-bit offsets stay under this many elements
MAX_NUMEL = 2**31 - 1

#: limits(op name, dtypes, input shapes, params) -> why not, or None
Limits = Callable[[str, Mapping[str, str], Mapping[str, tuple[int, ...]], Mapping[str, Any]], "str | None"]


class KernelOp(Protocol):
    """What a kernel reads of the op it runs (an ``tileops.ops.base.Op``): its name, for the messages, and
    its bound parameters. Named here so that this package need not import the ops that import it."""

    @property
    def name(self) -> str: ...

    @property
    def params(self) -> Mapping[str, Any]: ...


def no_limits(op: str, dtypes: Mapping[str, str], shapes: Mapping[str, tuple[int, ...]],
              params: Mapping[str, Any]) -> str | None:
    return None


@dataclass(frozen=True)
class Kernel:
    """A Triton implementation of an op: ``run(op, **inputs)`` returns what ``op.compute`` would.

    ``dtypes`` is every dtype a tensor of the call (inputs and outputs) may have; ``limits``
    states the shape limits from the input shapes and params. Both are checked again on every
    call, so a call outside them fails with the reason rather than computing something else.
    """

    run: Callable[..., Any]
    dtypes: frozenset[str]
    limits: Limits = field(default=no_limits)

    def unsupported(self, op: str, dtypes: Mapping[str, str], shapes: Mapping[str, tuple[int, ...]],
                    params: Mapping[str, Any]) -> str | None:
        """Why this kernel cannot run a call of these dtypes (every tensor's) and input shapes, or None."""
        bad = sorted({f"{t}={d}" for t, d in dtypes.items() if d not in self.dtypes})
        if bad:
            return f"the Triton kernel for {op} supports {' | '.join(sorted(self.dtypes))}, not {', '.join(bad)}"
        big = [t for t, s in shapes.items() if math.prod(s) > MAX_NUMEL]
        if big:
            return f"the Triton kernel for {op} indexes with 32-bit offsets: {', '.join(big)} has over 2^31 elements"
        return self.limits(op, dtypes, shapes, params)

    def __call__(self, op: KernelOp, **inputs: torch.Tensor | None) -> Any:
        present = {k: v for k, v in inputs.items() if v is not None}
        if not interpreting() and any(v.device.type == "cpu" for v in present.values()):
            raise BackendUnavailableError(f"{op.name}: {INTERPRETER_NOT_TIMED}")
        for k, v in present.items():
            if not v.is_contiguous():
                raise BackendUnavailableError(
                    f"{op.name}: the Triton kernel reads contiguous tensors; input {k!r} has shape "
                    f"{list(v.shape)} and strides {list(v.stride())} (pass x.contiguous())")
        from tileops.dtypes import name_of

        dtypes = {k: name_of(v.dtype) for k, v in present.items()}
        why = self.unsupported(op.name, dtypes, {k: tuple(v.shape) for k, v in present.items()}, op.params)
        if why:
            raise BackendUnavailableError(f"{op.name}: {why}")
        return self.run(op, **inputs)


def load(ref: str) -> Kernel:
    """The Kernel named ``"module:name"`` (a module of this package)."""
    module, _, name = ref.partition(":")
    kernel = getattr(importlib.import_module(f"{__name__}.{module}"), name, None)
    if not isinstance(kernel, Kernel):
        raise LookupError(f"no Triton kernel {ref!r}: expected a Kernel named {name!r} in {__name__}.{module}")
    return kernel


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


#: Elements one program handles. 4096 on a GPU (untuned: not yet timed on one). Triton's
#: interpreter pays milliseconds per program per operation whatever the tile holds, so it
#: gets tiles 16x wider; tests set GPU_TILES to run the GPU tiling (ragged tails, many
#: programs per row) through the interpreter on small shapes.
TILE_GPU = 4096
TILE_INTERPRETER = 65536
GPU_TILES = False


def tile_elems() -> int:
    return TILE_INTERPRETER if interpreting() and not GPU_TILES else TILE_GPU


def num_warps(elems: int) -> int:
    """Warps for a program of ``elems`` elements: about 16 per thread, 1 to 16 warps."""
    return max(1, min(16, elems // 512))
