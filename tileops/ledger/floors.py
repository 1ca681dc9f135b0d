"""Per-SKU acceptance floors: the least a new node's calibration must reach before it takes work.

DCGM's diagnostic keeps a floor per SKU (``diag-skus.yaml``); these are TileOps' own, kept beside the
profiles as ``profiles/floors/<sku>.yaml`` (shipped) and ``<store>/floors/<sku>.yaml`` (a site's own,
overriding a shipped file of the same SKU). Every floor says where it came from, because a floor without a
source is a guess that rejects good nodes or admits bad ones:

- ``source: published``: fractions of the datasheet that someone published for this SKU (each with its
  ``ref``), less ``margin``; the datasheet figure is the SKU's profile's ``theoretical``.
- ``source: history``: the device's own previous calibrations (same mode, quick or full), the median of
  each ceiling less ``margin``; fewer than ``min_history`` of them is no floor yet, said as such.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tileops.profiles import ProfileError, shipped_dir, store_dir
from tileops.yamlfile import YamlError, read_yaml, refuse_duplicates

#: A floors file is a page of YAML.
FLOORS_MAX_BYTES = 2**16
_FIX = "see docs/profiles.md, 'Node intake floors', for the fields and an example"


class PublishedFraction(BaseModel):
    """One ceiling's published fraction of the datasheet figure, and where it was published."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    fraction: float = Field(gt=0, le=1.5)
    ref: str = Field(min_length=1)


class SkuFloors(BaseModel):
    """One SKU's floors file: which devices it holds, from what source, and with which margin (and why)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    sku: str = Field(min_length=1, description="the profile name (published) or a label (history)")
    device_kind: Literal["cuda", "cpu"]
    source: Literal["published", "history"]
    margin: float = Field(ge=0, lt=1, description="a floor is the source's figure times (1 - margin)")
    margin_why: str = Field(min_length=1)
    #: published: ceiling key (``memory.<mix>`` or a roof such as ``tensor_core.bf16``) -> its fraction
    ceilings: dict[str, PublishedFraction] = Field(default_factory=dict)
    #: history: previous calibrations of the same mode needed before a median is a floor
    min_history: int = Field(3, ge=1)

    @model_validator(mode="after")
    def _source_has_its_fields(self) -> SkuFloors:
        if self.source == "published" and not self.ceilings:
            raise ValueError("source: published needs ceilings: {<ceiling>: {fraction, ref}}")
        if self.source == "history" and self.ceilings:
            raise ValueError("source: history computes its floors from the device's own results: drop ceilings")
        return self


def floors_dirs(store: Path | None = None) -> list[Path]:
    """Where floors files are read, the site's own first: ``<store>/floors`` then the shipped ``floors``."""
    return [(store or store_dir()) / "floors", shipped_dir() / "floors"]


def read_floors(path: Path) -> SkuFloors:
    """One floors file; ProfileError naming the file, the field and the fix when it is not one."""
    try:
        data = refuse_duplicates(read_yaml(path, FLOORS_MAX_BYTES, whole=True), path)
    except YamlError as exc:
        raise ProfileError(f"not a floors file: {exc}", file=path, fix=_FIX) from None
    try:
        return SkuFloors.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise ProfileError(f"{path}: field {where}: {err['msg']}", file=path, field=where, fix=_FIX) from None


def load_floors(store: Path | None = None) -> list[SkuFloors]:
    """Every floors file, one per SKU: a site's file in the store wins over the shipped one of the same SKU."""
    seen: dict[str, SkuFloors] = {}
    for directory in floors_dirs(store):
        for path in sorted(directory.glob("*.yaml")) if directory.is_dir() else []:
            floors = read_floors(path)
            seen.setdefault(floors.sku.lower(), floors)
    return list(seen.values())
