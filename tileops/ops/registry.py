"""Manifest names -> Op classes.

The shipped ops live in ``tileops.ops.<family>`` modules; an extra manifest
directory on ``TILEOPS_MANIFEST_PATH`` may carry an ``ops.py`` beside its YAML
and its generated ``_roofline_gen.py`` (see :mod:`tileops.ops.catalog`, which
serves the entries and evaluators).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from tileops.errors import ManifestError
from tileops.ops.catalog import import_file, extra_manifest_dirs, extra_module_name

if TYPE_CHECKING:
    from tileops.ops.base import Op

#: The modules that define the shipped ops, one per family.
FAMILY_MODULES = (
    "tileops.ops.elementwise",
    "tileops.ops.reduction",
    "tileops.ops.norm",
    "tileops.ops.gemm",
    "tileops.ops.attention",
    "tileops.ops.position",
    "tileops.ops.embedding",
    "tileops.ops.moe",
)

_CLASSES: dict[str, type[Op]] = {}
_LOADED: set[str] = set()  # "shipped" and each extra directory whose ops.py was imported


def register(cls: type[Op]) -> None:
    if cls.name in _CLASSES and _CLASSES[cls.name] is not cls:
        raise ManifestError(f"two classes claim manifest entry {cls.name!r}: {_CLASSES[cls.name]} and {cls}")
    _CLASSES[cls.name] = cls


def load_all() -> dict[str, type[Op]]:
    """Import every op module (shipped families, then each extra directory's ops.py)."""
    if "shipped" not in _LOADED:
        for m in FAMILY_MODULES:
            importlib.import_module(m)
        _LOADED.add("shipped")
    for d in extra_manifest_dirs():
        ops_py = d / "ops.py"
        if str(d) not in _LOADED and ops_py.exists():
            import_file(ops_py, extra_module_name(d, "ops"))
        _LOADED.add(str(d))
    return dict(_CLASSES)


def op_class(name: str) -> type[Op]:
    classes = load_all()
    try:
        return classes[name]
    except KeyError:
        raise ManifestError(f"no op class named {name!r}; known: {', '.join(sorted(classes))}") from None
