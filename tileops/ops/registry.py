"""Manifest names -> Op classes, and manifest names -> generated evaluators.

The shipped ops live in ``tileops.ops.<family>`` modules; an extra manifest
directory on ``TILEOPS_MANIFEST_PATH`` may carry an ``ops.py`` and its own
generated ``_roofline_gen.py`` (see :mod:`tileops.manifest.load`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from tileops.errors import ManifestError
from tileops.manifest.spec import Emitted

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

_CLASSES: dict[str, type["Op"]] = {}
_EMITTED: dict[str, Emitted] = {}
_LOADED: set[str] = set()


def _load_path(path: Path, modname: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(modname, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    return mod


def _load_emitted() -> None:
    if "emitted" in _LOADED:
        return
    _LOADED.add("emitted")
    from tileops.ops import _roofline_gen

    _EMITTED.update(_roofline_gen.ENTRIES)
    from tileops.manifest.load import extra_manifest_dirs

    for d in extra_manifest_dirs():
        gen = d / "_roofline_gen.py"
        if gen.exists():
            tag = hashlib.sha1(str(d.resolve()).encode()).hexdigest()[:10]
            _EMITTED.update(_load_path(gen, f"tileops_ext_{tag}_roofline_gen").ENTRIES)


def emitted_for(name: str) -> Emitted:
    """The generated evaluator of manifest entry ``name`` (imported when its class is created)."""
    _load_emitted()
    try:
        return _EMITTED[name]
    except KeyError:
        raise ManifestError(
            f"op class {name!r} has no generated evaluator: add its manifest entry and run `tileops codegen`"
        ) from None


def register(cls: type["Op"]) -> None:
    if cls.name in _CLASSES and _CLASSES[cls.name] is not cls:
        raise ManifestError(f"two classes claim manifest entry {cls.name!r}: {_CLASSES[cls.name]} and {cls}")
    _CLASSES[cls.name] = cls


def load_all() -> dict[str, type["Op"]]:
    """Import every op module (shipped families, then extra directories' ops.py)."""
    if "classes" not in _LOADED:
        _LOADED.add("classes")
        for m in FAMILY_MODULES:
            try:
                importlib.import_module(m)
            except ModuleNotFoundError as exc:
                if exc.name != m:  # a real import failure inside the module
                    raise
        from tileops.manifest.load import extra_manifest_dirs

        for d in extra_manifest_dirs():
            ops_py = d / "ops.py"
            if ops_py.exists():
                tag = hashlib.sha1(str(d.resolve()).encode()).hexdigest()[:10]
                _load_path(ops_py, f"tileops_ext_{tag}_ops")
    return dict(_CLASSES)


def op_class(name: str) -> type["Op"]:
    classes = load_all()
    try:
        return classes[name]
    except KeyError:
        raise ManifestError(f"no op named {name!r}; known: {', '.join(sorted(classes))}") from None
