"""Embedding lookup: traffic decided by the ids' values (§4.7)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tileops.dtypes import to_torch
from tileops.ops.spec import TensorSpec
from tileops.ops.base import Op


class Embedding(Op):
    name = "embedding"
    backends = ("torch", "compile", "triton")
    triton_kernel = "embedding:embedding"

    def make_input(self, t: TensorSpec, shape: tuple[int, ...], dtype: str, device: str,
                   generator: torch.Generator, indices: dict[str, Any]) -> torch.Tensor:
        if t.name == "ids":  # token ids drawn over the whole vocabulary, from the row's generator
            return torch.randint(0, indices["V"], shape, generator=generator, dtype=to_torch(dtype)).to(device)
        return super().make_input(t, shape, dtype, device, generator, indices)

    def compute(self, ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, weight)

    def roofline_data_terms(self) -> dict[str, Any]:
        call = self._require_call()
        if call.is_meta:
            return {}
        ids = call.values("ids")
        return {"distinct_rows": int(torch.unique(ids).numel()), "tokens": int(ids.numel())}
