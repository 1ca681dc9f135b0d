"""Manifest dtype names <-> torch dtypes."""

from __future__ import annotations

import torch

TORCH_DTYPES: dict[str, torch.dtype] = {
    "bool": torch.bool,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
}
NAMES: dict[torch.dtype, str] = {v: k for k, v in TORCH_DTYPES.items()}


def to_torch(name: str) -> torch.dtype:
    try:
        return TORCH_DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(TORCH_DTYPES)}") from None


def name_of(dtype: torch.dtype) -> str:
    try:
        return NAMES[dtype]
    except KeyError:
        raise ValueError(f"dtype {dtype} is not one the manifest can name") from None


def is_float8(name: str) -> bool:
    return name.startswith("float8")
