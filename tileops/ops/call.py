"""The checked call: everything a roofline formula may read about one completed call (§2.2).

A formula reads this and nothing else: indices (dims, parameters, lets),
dtypes, presence, shapes and bytes of each tensor, the metadata tensors whose
values decide traffic (§4.7), and for a composite the checked calls of its
stages. It never reads the op.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from tileops.errors import OpNotAvailableError


class TensorFacts:
    """What the manifest's tensor primitives (``bytes(t)``, ``present(t)``, ``bits(t)``) ask of a call.

    Shared by the checked call and by anything that stands for one without its
    tensors (the audit's record of the call its child measured), so the primitives
    read both the same way. Subclasses hold ``op``, ``dtypes``, ``params``,
    ``nbytes_by_tensor`` and ``present_inputs``.
    """

    op: str
    dtypes: dict[str, str]
    params: dict[str, Any]
    nbytes_by_tensor: dict[str, int]
    present_inputs: Any  # a set or tuple of the optional inputs that are bound

    def nbytes(self, name: str) -> int:
        """Bytes of tensor ``name``; 0 when an optional tensor is absent."""
        return self.nbytes_by_tensor.get(name, 0)

    def is_present(self, name: str) -> bool:
        return name in self.present_inputs

    def dtype_of(self, name: str) -> str:
        """dtype of a tensor, or the value of a dtype parameter."""
        if name in self.dtypes:
            return self.dtypes[name]
        if name in self.params:
            return str(self.params[name])
        raise KeyError(f"{self.op}: {name!r} is neither a bound tensor nor a dtype parameter")


@dataclass
class CheckedCall(TensorFacts):
    op: str
    indices: dict[str, Any]  # dims (int), variadic dims (tuple), parameters, lets
    params: dict[str, Any]
    dtypes: dict[str, str]  # tensor -> dtype name, bound tensors only
    shapes: dict[str, tuple[int, ...]]  # bound tensors only
    nbytes_by_tensor: dict[str, int]  # bound tensors only
    present_inputs: frozenset[str]  # optional inputs that are bound
    metadata: dict[str, torch.Tensor] = field(default_factory=dict)  # value-deciding inputs
    stages: dict[str, list[CheckedCall]] = field(default_factory=dict)
    device: str = "cpu"

    def values(self, name: str) -> torch.Tensor:
        """The values of a metadata tensor. Raises OpNotAvailableError on a meta call."""
        t = self.metadata.get(name)
        if t is None:
            raise KeyError(f"{self.op}: {name!r} is not a metadata input of this call")
        if t.device.type == "meta":
            raise OpNotAvailableError(
                f"{self.op}: the roofline reads the values of {name!r}, which a call on meta tensors does not hold; "
                "call the op on real tensors")
        return t

    @property
    def is_meta(self) -> bool:
        return self.device == "meta"
