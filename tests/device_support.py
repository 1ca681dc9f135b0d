"""A Python that can import only what the GPU machine would have: its packages and the carried wheels.

The sandbox is this test environment's interpreter with a ``sitecustomize`` (found first on
``PYTHONPATH``, so every child process — the bench's workers, the audit's child under ncu — gets it
too) that replaces the path finder of ``sys.meta_path`` with one that finds a top-level module only
when the standard library or an allowed distribution provides it. A package outside that set is
then exactly as absent as on the machine: ``import msgspec`` raises ModuleNotFoundError and
``importlib.util.find_spec("msgspec")`` is None. What the interpreter loaded before
``sitecustomize`` ran (a ``.pth`` file's imports) is reported, so nothing slips in that way either.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import sys
from pathlib import Path

from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from device_packages import carried_set, device_packages

SITECUSTOMIZE = '''\
import json, os, sys
from importlib.machinery import PathFinder

_ALLOWED = frozenset(json.load(open(os.environ["TILEOPS_SANDBOX_ALLOWED"], encoding="utf-8")))
# wheels-only mode: the carried packages' modules and distributions, found only outside this environment's own
# site folders (as on the machine, where only the carried wheels' site folder has them)
_WHEELS_ONLY = json.load(open(os.environ["TILEOPS_SANDBOX_WHEELS_ONLY"], encoding="utf-8")) \
    if os.environ.get("TILEOPS_SANDBOX_WHEELS_ONLY") else None
# the distributions the machine has (its packages, the carried ones, this project): another's metadata is as absent
# as its modules, so no entry point of a package the machine lacks is loaded (trio's hypothesis plugin, say)
_DISTS = frozenset(json.load(open(os.environ["TILEOPS_SANDBOX_DISTS"], encoding="utf-8")))


def _canonical(name):
    return "-".join(name.lower().replace("_", "-").replace(".", "-").split("-"))


def _outside_host(paths):
    host = set(_WHEELS_ONLY["host_site"])
    return [p for p in paths if os.path.realpath(p or os.getcwd()) not in host]


def _inside_repo(paths):
    # the repository's own folders, not this environment's site folders inside it (a checkout's .venv): a
    # package installed there is the host's, as absent on the machine as anywhere else
    repo = _WHEELS_ONLY["repo"] + os.sep
    return [p for p in _outside_host(paths) if (os.path.realpath(p or os.getcwd()) + os.sep).startswith(repo)]


class DeviceOnlyFinder:
    """PathFinder, for the top-level modules of the machine's packages and the carried ones only."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        top = name.partition(".")[0]
        if path is None and top not in _ALLOWED:  # wheels-only mode: the repository's own modules travel too
            return PathFinder.find_spec(name, _inside_repo(sys.path), target) if _WHEELS_ONLY else None
        if path is None and _WHEELS_ONLY and top in _WHEELS_ONLY["modules"]:
            return PathFinder.find_spec(name, _outside_host(sys.path), target)
        return PathFinder.find_spec(name, path, target)

    @classmethod
    def invalidate_caches(cls):
        PathFinder.invalidate_caches()

    @classmethod
    def find_distributions(cls, context=None):
        from importlib.metadata import DistributionFinder
        context = context or DistributionFinder.Context()
        host = set(_WHEELS_ONLY["host_site"]) if _WHEELS_ONLY else set()
        carried = set(_WHEELS_ONLY["distributions"]) if _WHEELS_ONLY else set()
        for dist in PathFinder.find_distributions(context):
            name = _canonical(dist.metadata["Name"] or "")
            if name not in _DISTS:
                continue
            where = os.path.realpath(str(getattr(dist, "_path", "")) + "/..")
            if name in carried and where in host:
                continue
            yield dist


sys.meta_path[:] = [DeviceOnlyFinder if f is PathFinder else f for f in sys.meta_path]
PRELOADED = sorted({m.partition(".")[0] for m in sys.modules} - _ALLOWED)
'''


def allowed_distributions() -> set[str]:
    """The machine's packages, the carried ones, and this project (canonical names)."""
    return set(device_packages()) | {c.name for c in carried_set()[0]} | {"tileops"}


def _standard_library() -> set[str]:
    """Every top-level module of the interpreter's own library: the documented names, and the files of its
    folders (``_sysconfigdata_*`` and other platform-named modules are not in ``sys.stdlib_module_names``)."""
    import sysconfig

    names = set(sys.stdlib_module_names) | set(sys.builtin_module_names)
    for key in ("stdlib", "platstdlib"):
        folder = Path(sysconfig.get_paths()[key])
        for d in (folder, folder / "lib-dynload"):
            if d.is_dir():
                names |= {f.name.split(".")[0] for f in d.iterdir() if f.name != "site-packages"}
    return names


def top_level_modules() -> tuple[set[str], set[str]]:
    """(allowed, blocked): the top-level module names installed here that an allowed distribution (or the
    standard library) provides, and those only other distributions provide."""
    allowed_dists = allowed_distributions()
    allowed = _standard_library() | {"tileops", "sitecustomize", "__main__"}
    blocked = set()
    for top, dists in md.packages_distributions().items():
        if any(canonicalize_name(d) in allowed_dists for d in dists):
            allowed.add(top)
        else:
            blocked.add(top)
    return allowed, blocked - allowed


def _wheels_only() -> dict[str, list[str]]:
    """The carried distributions, their top-level modules, and this environment's site folders."""
    import site
    import sysconfig

    carried = {c.name for c in carried_set()[0]}
    modules = sorted(top for top, dists in md.packages_distributions().items()
                     if any(canonicalize_name(d) in carried for d in dists))
    host = {os.path.realpath(p) for p in [*site.getsitepackages(), sysconfig.get_paths()["purelib"],
                                           sysconfig.get_paths()["platlib"]]}
    return {"distributions": sorted(carried), "modules": modules, "host_site": sorted(host),
            "repo": os.path.realpath(ROOT)}


def sandbox_env(where: Path, wheels_only: bool = False) -> dict[str, str]:
    """The environment of a sandboxed interpreter (its sitecustomize and allowed list written under ``where``).

    ``wheels_only``: the carried packages (pydantic, platformdirs, docker, ...) are importable, and their
    metadata readable, only from outside this environment's site folders: from the carried wheels that
    ``scripts/device-check`` installs, as on the machine; and the repository's own modules (scripts/,
    tests/: they travel with it) import from it."""
    allowed, _ = top_level_modules()
    where.mkdir(parents=True, exist_ok=True)
    (where / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    (where / "allowed.json").write_text(json.dumps(sorted(allowed)), encoding="utf-8")
    (where / "distributions.json").write_text(json.dumps(sorted(allowed_distributions())), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    env.update(PYTHONPATH=str(where), TILEOPS_SANDBOX_ALLOWED=str(where / "allowed.json"),
               TILEOPS_SANDBOX_DISTS=str(where / "distributions.json"), PYTHONNOUSERSITE="1")
    if wheels_only:
        (where / "wheels-only.json").write_text(json.dumps(_wheels_only()), encoding="utf-8")
        env["TILEOPS_SANDBOX_WHEELS_ONLY"] = str(where / "wheels-only.json")
    return env
