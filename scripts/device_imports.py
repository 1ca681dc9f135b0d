#!/usr/bin/env python3
"""A device-check step's imports, loaded without a GPU: its dry run fails where its real run would.

A GPU step's command (``tileops calibrate``, ``bench``, ``benchmarks/backends.py``, ...) imports its
modules lazily, so ``--help`` starts even where pydantic is missing, while the real run would stop at
its first import. This loads what the real run loads, in the interpreter and with the path the real
run has (device-check's, the carried wheels' site folder included): the step's entry (a module, or a
script whose ``__main__`` block is not run) and every module of the ``tileops`` package (a superset of
what any one command reaches). A module that is missing fails the step, named with the module that
imports it and the fix, unless an optional extra of pyproject.toml provides it (msgspec, nvtx, ...:
every command works without them). Then every run-time requirement this interpreter does not meet is
named, with whether the carried wheels' folder has its wheel.

    python3 scripts/device_imports.py STEP ENTRY...    # ENTRY: tileops.commands.bench | benchmarks/backends.py
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import runpy
import sys
from pathlib import Path

from packaging.utils import canonicalize_name

sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_packages import ROOT, WHEELS_DIR, check_requirements, runtime_requirements, wheel_for

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None  # type: ignore[assignment]


def optional_distributions() -> set[str]:
    """The canonical names of every package only pyproject.toml's optional extras ask for."""
    if tomllib is None:
        return {"msgspec", "nvtx", "ncu-report", "nvidia-ml-py", "triton"}
    from packaging.requirements import Requirement

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    required = {canonicalize_name(r.name) for r in runtime_requirements()}
    return {canonicalize_name(Requirement(r).name) for reqs in extras.values() for r in reqs} - required


def _load(entry: str) -> None:
    if entry.endswith(".py"):
        runpy.run_path(str(ROOT / entry), run_name="device_imports")  # its imports, not its main()
    else:
        importlib.import_module(entry)


def missing_imports(entries: list[str]) -> dict[str, str]:
    """{missing top-level module: the module or script that imports it}, the optional ones left out."""
    import tileops

    optional = optional_distributions()
    names = entries + [m.name for m in pkgutil.walk_packages(tileops.__path__, "tileops.")
                       if not m.name.endswith("__main__")]
    missing: dict[str, str] = {}
    for name in names:
        try:
            _load(name)
        except ModuleNotFoundError as exc:
            top = (exc.name or "?").partition(".")[0]
            if canonicalize_name(top) in optional:
                print(f"device_imports: {name}: {top} absent (an optional extra: the command works without it)")
            else:
                missing.setdefault(top, name)
    return missing


def wheel_problems(wheels: Path) -> list[str]:
    """Every run-time requirement this interpreter does not meet, each with whether ``wheels`` has its wheel."""
    problems = []
    for problem in check_requirements().unmet:  # what tileops needs; the image's own pins are not its business
        name = problem.split(" ", 1)[0]
        wheel = wheel_for(name, wheels)
        where = f"its wheel {wheel.name} is in {wheels}/ but not on this path" if wheel else f"no wheel in {wheels}/"
        problems.append(f"{problem}; {where}")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) < 1:
        print(__doc__, file=sys.stderr)
        return 2
    step, entries = argv[0], argv[1:]
    wheels = Path(os.environ.get("DEVICE_WHEELS") or WHEELS_DIR)
    missing = missing_imports(entries)
    for module, importer in sorted(missing.items()):
        print(f"device_imports: {step}: {importer} imports {module}, which this interpreter cannot import: its "
              f"real run would stop there. Fix: `make device-wheels` (writes {wheels}/, which device-check "
              "installs and the device tool's call carries)", file=sys.stderr)
    if missing:
        for problem in wheel_problems(wheels):
            print(f"device_imports: {step}: {problem}", file=sys.stderr)
        return 1
    print(f"device_imports: {step}: every import of {' '.join(entries)} and of the tileops package loads")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
