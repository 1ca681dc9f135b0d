"""Embedding lookup: traffic decided by the ids' values (§4.7)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tileops.ops.base import Op


class Embedding(Op):
    name = "embedding"

    def compute(self, ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return F.embedding(ids, weight)

    def roofline_data_terms(self) -> dict[str, Any]:
        call = self._require_call()
        if call.is_meta:
            return {}
        ids = call.values("ids")
        return {"distinct_rows": int(torch.unique(ids).numel()), "tokens": int(ids.numel())}
