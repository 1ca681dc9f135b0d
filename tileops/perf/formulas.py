"""Func-mode roofline formulas (§2.2): ``f(call) -> (flops, bytes)`` over the checked call only.

A formula here reads the call (indices, dtypes, presence, shapes, bytes, the
metadata tensors' values, stages) and never the op (§4.7). It raises
OpNotAvailableError, through ``call.values``, on a meta call.
"""

from __future__ import annotations

import math

import torch

from tileops.ops.call import CheckedCall


def _distinct(t: torch.Tensor) -> int:
    return int(torch.unique(t).numel())


def embedding_read_bytes(call: CheckedCall) -> int:
    """Distinct table rows the ids name (each read once), plus the ids themselves."""
    ids = call.values("ids")
    row_bytes = call.indices["D"] * call.nbytes("weight") // max(1, math.prod(call.shapes["weight"]))
    return _distinct(ids) * row_bytes + call.nbytes("ids")


def embedding_roofline(call: CheckedCall) -> tuple[int, int]:
    """0 FLOPs (a gather); bytes = distinct rows read + ids read + output written."""
    return 0, embedding_read_bytes(call) + call.nbytes("out")
