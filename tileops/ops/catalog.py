"""The run-time catalog: every op's checked entry and evaluators, read from the generated modules.

A run never reads the manifest's YAML (§4.4.5). ``tileops codegen`` copies each
clean entry (signature, workload rows, the roofline field as written) and its
evaluators into a generated module, with a SHA-256 of every manifest file it
read; this module imports those generated modules and hands the entries out.

The search path is the shipped manifest (``tileops/ops/_roofline_gen.py``,
generated from the repo's ``manifest/``, or ``tileops/_data/manifest`` when
installed) followed by every directory in ``TILEOPS_MANIFEST_PATH``
(``os.pathsep``-separated), each with its own ``_roofline_gen.py`` written by
``tileops codegen --manifest DIR`` and optionally an ``ops.py`` holding its Op
classes (see :mod:`tileops.ops.registry`). This is how tests add a crashing or
hanging op without touching the shipped manifest.

A generated module checks its sources when it is imported: if a manifest file
changed, appeared or vanished since codegen, it stops with a ManifestError
naming the files and saying to run ``tileops codegen``. Nothing here imports
yaml, pydantic or the manifest tooling.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any
from collections.abc import Callable

from tileops.errors import ManifestError
from tileops.ops.spec import Emitted, OpEntry
from tileops.paths import data_dir

ENV_PATH = "TILEOPS_MANIFEST_PATH"
GENERATED_NAME = "_roofline_gen.py"
SHIPPED_MODULE = "tileops.ops._roofline_gen"
#: The one module a ``func`` formula may name (§2.2): ``tileops.ops.formulas.<name>``.
FORMULAS_MODULE = "tileops.ops.formulas"


# --- where the manifest lives -------------------------------------------------------------------


def shipped_manifest_dir() -> Path:
    return data_dir("manifest")


def extra_manifest_dirs() -> list[Path]:
    """The directories of ``TILEOPS_MANIFEST_PATH``, in order (read from the environment each time)."""
    raw = os.environ.get(ENV_PATH, "")
    return [Path(p) for p in raw.split(os.pathsep) if p.strip()]


def manifest_dirs() -> list[Path]:
    return [shipped_manifest_dir(), *extra_manifest_dirs()]


def manifest_files(directory: Path) -> list[Path]:
    """The manifest files of one directory, in the order codegen and the analysis read them."""
    return sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_digests(directory: Path) -> dict[str, str]:
    """``{file name: sha256}`` of every manifest file in ``directory``: what a generated module records."""
    return {f.name: file_digest(f) for f in manifest_files(directory)}


# --- the staleness check a generated module runs when imported -----------------------------------


def _codegen_command(directory: Path | None) -> str:
    return "tileops codegen" if directory is None else f"tileops codegen --manifest {directory}"


def verify_sources(generated_file: str, sources: dict[str, str], shipped: bool) -> None:
    """Stop with a ManifestError when the manifest files differ from those the module was generated from.

    Called at the top of every generated module, so a stale module never
    pairs old evaluators with edited rows or signatures.
    """
    directory = shipped_manifest_dir() if shipped else Path(generated_file).resolve().parent
    try:
        current = source_digests(directory)
    except OSError as exc:
        raise ManifestError(f"{generated_file}: cannot read the manifest it was generated from "
                            f"({directory}): {exc.strerror or exc}") from None
    changed = sorted(n for n in sources if n in current and current[n] != sources[n])
    added = sorted(set(current) - set(sources))
    removed = sorted(set(sources) - set(current))
    if not (changed or added or removed):
        return
    parts = [f"{what}: {', '.join(str(directory / n) for n in names)}"
             for what, names in (("changed", changed), ("new", added), ("missing", removed)) if names]
    raise ManifestError(f"{generated_file} is stale: the manifest changed since it was generated "
                        f"({'; '.join(parts)}); run `{_codegen_command(None if shipped else directory)}`")


# --- func formulas ---------------------------------------------------------------------------------


def formula_problem(module: ModuleType, name: str) -> str | None:
    """Why ``module.name`` is not a ``func`` formula (a plain public function defined there), or None."""
    if not name.isidentifier() or name.startswith("_"):
        return f"{name!r} is not a public function name"
    obj = vars(module).get(name)
    if obj is None:
        return f"{module.__name__} defines no {name!r}"
    if not inspect.isfunction(obj):
        return f"{module.__name__}.{name} is a {type(obj).__name__}, not a function"
    if obj.__module__ != module.__name__:
        return f"{module.__name__}.{name} is imported from {obj.__module__}, not defined in {module.__name__}"
    return None


def formula(name: str) -> Callable[..., Any]:
    """The ``func`` formula ``tileops.ops.formulas.<name>``; generated modules call this when imported,
    so a bad path fails when the op classes are created, not at first pricing."""
    module = importlib.import_module(FORMULAS_MODULE)
    problem = formula_problem(module, name)
    if problem is not None:
        raise ManifestError(f"roofline func {FORMULAS_MODULE}.{name}: {problem}; define it in "
                            f"tileops/ops/formulas.py as `def {name}(call)`, or fix the manifest "
                            "and run `tileops codegen` (`tileops validate` lists every such defect)")
    return vars(module)[name]


# --- loading the generated modules -----------------------------------------------------------------

_CACHE: dict[tuple[str, ...], dict[str, Emitted]] = {}


def import_file(path: Path, modname: str) -> ModuleType:
    """Import a Python file of an extra manifest directory under ``modname`` (once per process)."""
    if modname in sys.modules:
        return sys.modules[modname]
    spec = importlib.util.spec_from_file_location(modname, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[modname]
        raise
    return mod


def extra_module_name(directory: Path, stem: str) -> str:
    """A unique module name for a file of an extra manifest directory."""
    tag = hashlib.sha1(str(directory.resolve()).encode()).hexdigest()[:10]
    return f"tileops_ext_{tag}_{stem}"


def _generated_module(directory: Path | None) -> ModuleType:
    where = Path(__file__).with_name(GENERATED_NAME) if directory is None else directory / GENERATED_NAME
    try:
        if directory is None:
            return importlib.import_module(SHIPPED_MODULE)
        return import_file(where, extra_module_name(directory, "roofline_gen"))
    except ManifestError:
        raise
    except Exception as exc:  # a hand-edited or truncated module: say how to get a good one back
        raise ManifestError(f"{where} does not import ({type(exc).__name__}: {exc}); "
                            f"run `{_codegen_command(directory)}`") from exc


def _entries_of(module: ModuleType, directory: Path) -> dict[str, Emitted]:
    out = {}
    for name, em in module.ENTRIES.items():
        entry = dataclasses.replace(em.entry, file=str(directory / em.entry.file))
        out[name] = dataclasses.replace(em, entry=entry)
    return out


def load_emitted() -> dict[str, Emitted]:
    """Every entry's evaluators, by op name: the shipped module's, then each extra directory's.

    Cached per search path. Raises ManifestError for a stale or missing
    generated module, a missing directory, or an op declared twice.
    """
    dirs = extra_manifest_dirs()
    key = tuple(str(d) for d in dirs)
    if key in _CACHE:
        return _CACHE[key]
    found: dict[str, Emitted] = dict(_entries_of(_generated_module(None), shipped_manifest_dir()))
    for d in dirs:
        if not d.is_dir():
            raise ManifestError(f"{ENV_PATH} names {d}, which is not a directory")
        if not (d / GENERATED_NAME).exists():
            if manifest_files(d):
                raise ManifestError(f"{d} holds manifest files but no {GENERATED_NAME}; "
                                    f"run `{_codegen_command(d)}`")
            continue
        for name, em in _entries_of(_generated_module(d), d).items():
            if name in found:
                raise ManifestError(f"op {name!r} is declared in both {found[name].entry.file} and "
                                    f"{em.entry.file}; give each op one entry")
            found[name] = em
    _CACHE[key] = found
    return found


def emitted_for(name: str) -> Emitted:
    """The generated evaluators of entry ``name`` (an Op class binds these when it is created)."""
    try:
        return load_emitted()[name]
    except KeyError:
        raise ManifestError(
            f"op class {name!r} has no generated evaluator: add its manifest entry and run `tileops codegen`"
        ) from None


def load_entries() -> dict[str, OpEntry]:
    """Every checked entry on the search path, by op name, as the generated modules carry it."""
    return {name: em.entry for name, em in load_emitted().items()}


def get_entry(name: str) -> OpEntry:
    """One entry; a ManifestError that lists the known names when there is none."""
    entries = load_entries()
    try:
        return entries[name]
    except KeyError:
        raise ManifestError(f"no op named {name!r} in the manifest; known: {', '.join(sorted(entries))}") from None
