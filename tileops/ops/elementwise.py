"""Elementwise ops. A new one is a manifest entry plus a class of two lines here."""

from __future__ import annotations

from typing import Callable, ClassVar

import torch

from tileops.ops.base import Op


class Unary(Op):
    """y = fn(x), elementwise."""

    fn: ClassVar[Callable[[torch.Tensor], torch.Tensor]]

    def compute(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return type(self).fn(x)


class Relu(Unary):
    name = "relu"
    fn = staticmethod(torch.relu)
