#!/usr/bin/env python3
"""What the GPU machine's Python lacks, computed: the wheels scripts/device-check carries there.

The H200 machine has no package index; a package it lacks travels as a wheel. Which ones is not a
list kept by hand: it is ``pyproject.toml``'s run-time dependencies minus the machine's package
list (``tests/data/device/h200-image-packages.txt``), closed over the requirements of what is
carried (pydantic brings pydantic-core, ...), read from the installed distributions' metadata and
evaluated for the machine (CPython 3.12 on x86-64 Linux). The walk stops at a package the machine
has: its version there must satisfy what the carried ones ask of it, which the ``check`` command
verifies on the machine itself (device-check's setup step).

    python3 scripts/device_packages.py carried     # name==version per line (this environment's versions)
    python3 scripts/device_packages.py needs       # what carried packages ask of the machine's own
    python3 scripts/device_packages.py download DIR    # pip download of the carried wheels into DIR
    python3 scripts/device_packages.py wheels DIR      # make device-wheels: the project's wheel and every
                                                       # carried one for the machine, resolved by pip (sizes printed)
    python3 scripts/device_packages.py check       # on the machine: what tileops needs is met (the image's
                                                   # other pins are reported, one line each, not fatal)

Standard library plus ``packaging`` (on the machine's list; pip's own dependency here).
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None  # type: ignore[assignment]

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
DEVICE_LIST = ROOT / "tests" / "data" / "device" / "h200-image-packages.txt"
#: The machine's interpreter, for the markers of a requirement (``sys_platform == 'win32'`` and the like).
DEVICE_ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
              "platform_python_implementation": "CPython", "sys_platform": "linux", "platform_system": "Linux",
              "platform_machine": "x86_64", "os_name": "posix", "extra": ""}
#: pip download's target for the machine: binary wheels for CPython 3.12 on the manylinux tags it accepts.
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
#: What the device tool carries at most (the working tree and its carried paths together).
WHEELS_LIMIT_BYTES = 64 * 2**20
#: The folder device-check installs from, and `make device-wheels` writes (DEVICE_WHEELS names another).
WHEELS_DIR = Path(os.environ.get("DEVICE_WHEELS") or ROOT / ".whl")


def device_packages(path: Path = DEVICE_LIST) -> dict[str, str | None]:
    """The machine's packages by canonical name, with the version where its list gives one."""
    out: dict[str, str | None] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name.strip()):
            raise ValueError(f"{path}: {line!r} is not a package name")
        out[canonicalize_name(name)] = version.strip() or None
    return out


def runtime_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[Requirement]:
    """``[project] dependencies`` of pyproject.toml: what every command needs (extras are optional)."""
    text = pyproject.read_text(encoding="utf-8")
    if tomllib is not None:
        deps = tomllib.loads(text)["project"]["dependencies"]
    else:  # the array of strings, read plainly
        block = re.search(r"^dependencies\s*=\s*\[(.*?)^\]", text, re.S | re.M)
        deps = re.findall(r'^\s*"([^"]+)"', block.group(1), re.M) if block else []
    return [Requirement(d) for d in deps]


def _applies(req: Requirement) -> bool:
    return req.marker is None or req.marker.evaluate({**default_environment(), **DEVICE_ENV})


@dataclass(frozen=True)
class Carried:
    """A package to carry: its name, the version installed here (the one downloaded), and who needs it."""

    name: str
    version: str
    needed_by: tuple[str, ...]


@dataclass(frozen=True)
class Need:
    """A requirement a carried package places on one of the machine's own packages."""

    name: str
    specifier: str
    needed_by: tuple[str, ...]


#: Where a carried package's version and requirements come from: (requirement, who needs it) -> (version,
#: Requires-Dist lines).
MetadataSource = Callable[[Requirement, str], tuple[str, list[str]]]


def _wheel_metadata(wheel: Path) -> tuple[str, list[str]]:
    """(version, Requires-Dist) read from a wheel's METADATA: no install, no import."""
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
        text = z.read(name).decode("utf-8")
    head = text.split("\n\n", 1)[0]
    fields = re.findall(r"^([A-Za-z-]+): (.*)$", head, re.M)
    return (next(v for k, v in fields if k == "Version"), [v for k, v in fields if k == "Requires-Dist"])


def wheel_for(name: str, folder: Path) -> Path | None:
    """The wheel of ``name`` in ``folder`` (wheel file names spell the name with underscores)."""
    for wheel in sorted(folder.glob("*.whl")):
        if canonicalize_name(wheel.name.split("-", 1)[0]) == name:
            return wheel
    return None


def installed_or_wheel_metadata(wheels: Path = WHEELS_DIR) -> MetadataSource:
    """The distribution installed here, else its wheel in ``wheels``: the listing needs neither installed."""
    def source(req: Requirement, who: str) -> tuple[str, list[str]]:
        name = canonicalize_name(req.name)
        try:
            dist = md.distribution(name)
            return dist.version, list(dist.requires or ())
        except md.PackageNotFoundError:
            wheel = wheel_for(name, wheels)
            if wheel is None:
                raise LookupError(f"{name} (needed by {who}) is neither installed here nor in {wheels}/, so its "
                                  "version and requirements are unknown: run `make device-wheels` (or "
                                  "`make install`) first") from None
            return _wheel_metadata(wheel)
    return source


def pip_download_metadata(dest: Path, python: str = sys.executable, python_version: str = "3.12") -> MetadataSource:
    """pip downloads the machine's wheel of each requirement into ``dest`` and its METADATA answers: the
    version installed here where there is one (the one the tests ran), else the newest pip picks."""
    def source(req: Requirement, who: str) -> tuple[str, list[str]]:
        name = canonicalize_name(req.name)
        try:
            spec = f"{name}=={md.version(name)}"
        except md.PackageNotFoundError:
            spec = f"{name}{req.specifier}"
        with tempfile.TemporaryDirectory() as tmp:
            cmd = _pip_download(python, tmp, python_version) + [spec]
            res = subprocess.run(cmd, capture_output=True, text=True)
            wheel = wheel_for(name, Path(tmp))
            if res.returncode != 0 or wheel is None:
                raise LookupError(f"pip found no CPython {python_version} manylinux x86-64 wheel of {spec} "
                                  f"(needed by {who}):\n"
                                  f"$ {' '.join(cmd)}\n{res.stdout[-1500:]}{res.stderr[-1500:]}")
            dest.mkdir(parents=True, exist_ok=True)
            target = dest / wheel.name
            target.write_bytes(wheel.read_bytes())
        return _wheel_metadata(target)
    return source


def carried_set(device: dict[str, str | None] | None = None,
                requirements: list[Requirement] | None = None,
                metadata: MetadataSource | None = None) -> tuple[list[Carried], list[Need]]:
    """The packages to carry (sorted by name) and what they ask of the machine's own packages.

    A run-time dependency the machine lacks is carried, and so is every requirement of a carried package
    that the machine lacks, transitively; each one's version and requirements come from ``metadata``
    (default: installed here, else its wheel in .whl/; neither is an error naming ``make device-wheels``).
    """
    device = device_packages() if device is None else device
    metadata = installed_or_wheel_metadata() if metadata is None else metadata
    todo = [(r, "pyproject.toml") for r in (runtime_requirements() if requirements is None else requirements)]
    carried: dict[str, tuple[str, list[str]]] = {}
    needs: dict[tuple[str, str], list[str]] = {}
    while todo:
        req, who = todo.pop()
        if not _applies(req):
            continue
        name = canonicalize_name(req.name)
        if name in device:
            if str(req.specifier):
                needs.setdefault((name, str(req.specifier)), []).append(who)
            continue
        if name in carried:
            carried[name][1].append(who)
            continue
        version, requires = metadata(req, who)
        carried[name] = (version, [who])
        todo += [(Requirement(r), name) for r in requires]
    return ([Carried(n, v, tuple(sorted(set(w)))) for n, (v, w) in sorted(carried.items())],
            [Need(n, s, tuple(sorted(set(w)))) for (n, s), w in sorted(needs.items())])


def _pip_download(python: str, out_dir: str, python_version: str = "3.12") -> list[str]:
    cmd = [python, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", python_version, "--implementation", "cp"]
    for tag in PLATFORMS:
        cmd += ["--platform", tag]
    return cmd + ["-d", out_dir]


def download_command(out_dir: str, python: str = sys.executable) -> list[str]:
    """The pip download of every carried wheel, pinned, for the machine's interpreter."""
    carried, _ = carried_set()
    return _pip_download(python, out_dir) + [f"{c.name}=={c.version}" for c in carried]


def build_device_wheels(out_dir: Path, python: str = sys.executable, limit: int = WHEELS_LIMIT_BYTES,
                        python_version: str = "3.12") -> list[tuple[str, int]]:
    """``make device-wheels``: ``out_dir`` emptied of wheels, then the project's own wheel and every carried
    one for the machine (pip resolves each from the index: nothing needs to be installed here; another
    ``python_version`` builds the same set for another interpreter, as the tests do for theirs). Returns
    (file, bytes) sorted by name; raises ValueError with every size when the set is over ``limit``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.whl"):
        old.unlink()
    carried_set(metadata=pip_download_metadata(out_dir, python, python_version))
    res = subprocess.run([python, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out_dir), str(ROOT)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"pip wheel of {ROOT} failed:\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    sizes = sorted((w.name, w.stat().st_size) for w in out_dir.glob("*.whl"))
    total = sum(n for _, n in sizes)
    if total > limit:
        listing = "\n".join(f"  {n / 2**20:7.2f} MiB  {f}" for f, n in sizes)
        raise ValueError(f"{out_dir}: the wheels come to {total / 2**20:.2f} MiB, over the device tool's "
                         f"{limit / 2**20:.0f} MiB for carried paths:\n{listing}\nfix: drop a run-time dependency "
                         "the machine lacks from pyproject.toml, or find a smaller wheel of it")
    return sizes


@dataclass(frozen=True)
class Dist:
    """An installed distribution as the check sees it: its version and its ``Requires-Dist`` lines."""

    version: str
    requires: tuple[str, ...]


def installed_distribution(name: str) -> Dist | None:
    """This interpreter's distribution ``name`` (None when not installed): the check's default view."""
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        return None
    return Dist(dist.version, tuple(dist.requires or ()))


@dataclass
class RequirementCheck:
    """The setup step's verdict. ``unmet`` is fatal: what tileops itself needs (pyproject.toml's run-time
    dependencies, and every package the carried wheels need, present and, among the carried, at the version
    asked). ``image_pins`` is reported only: a version one package asks of an image package that tileops does
    not pin (torch's ``setuptools<82``, ``cuda-toolkit==13.0.2``; pydantic's ``typing-extensions>=4.16.0``) --
    the image ships these unmet and works, and the steps that import the packages show whether it does."""

    unmet: list[str]
    image_pins: list[str]


def _judge(req: Requirement, who: str, dist: Dist | None, image: set[str], check: RequirementCheck) -> None:
    name = canonicalize_name(req.name)
    ours = who == "pyproject.toml" or who not in image  # tileops' own requirement, or a carried wheel's
    if dist is None:
        problem = f"{name} (needed by {who}) is not installed"
        if ours:
            check.unmet.append(problem + ": carry its wheel (`make device-wheels` writes .whl/, which device-check "
                               "installs; scripts/device_packages.py carried lists them)")
        else:
            check.image_pins.append(problem + " (the image's own requirement; tileops does not need it)")
    elif req.specifier and not req.specifier.contains(dist.version, prereleases=True):
        problem = f"{name} {dist.version} is installed, {who} asks {name}{req.specifier}"
        if who == "pyproject.toml" or (who not in image and name not in image):  # ours, or between carried wheels
            check.unmet.append(problem + f": carry a {name} wheel that satisfies it")
        else:
            check.image_pins.append(problem + " (a pin on the image's own packages; tileops does not need it)")


def check_requirements(lookup: Callable[[str], Dist | None] = installed_distribution,
                       image: set[str] | None = None,
                       requirements: list[Requirement] | None = None) -> RequirementCheck:
    """On the machine, after the carried wheels are on the path: tileops' run-time requirements, transitively,
    against what is installed (``lookup``), split into what tileops needs (fatal) and the image's other pins
    (reported). ``image`` is the machine's package names (its list), which tells a carried package from the
    image's own."""
    image = set(device_packages()) if image is None else image
    check = RequirementCheck([], [])
    seen: set[str] = set()
    todo = [(r, "pyproject.toml") for r in (runtime_requirements() if requirements is None else requirements)]
    while todo:
        req, who = todo.pop()
        if not _applies(req):
            continue
        name = canonicalize_name(req.name)
        dist = lookup(name)
        _judge(req, who, dist, image, check)
        if dist is not None and name not in seen:
            seen.add(name)
            todo += [(Requirement(r), name) for r in dist.requires if "extra ==" not in r]
    return check


def _report(check: RequirementCheck) -> int:
    """Print the verdict, one line a finding; exit 1 only for what tileops needs."""
    for pin in check.image_pins:
        print(f"device_packages: not required: {pin}")
    for problem in check.unmet:
        print(f"device_packages: UNMET: {problem}")
    if check.unmet:
        return 1
    print("device_packages: every run-time requirement of tileops is met"
          + (f" ({len(check.image_pins)} of the image's own pins not met: reported above, not required)"
             if check.image_pins else ""))
    return 0


def _print_wheels(out_dir: Path, python_version: str) -> int:
    try:
        sizes = build_device_wheels(out_dir, python_version=python_version)
    except (LookupError, ValueError, RuntimeError) as exc:
        print(f"device_packages wheels: {exc}", file=sys.stderr)
        return 1
    for name, size in sizes:
        print(f"  {size / 2**20:7.2f} MiB  {name}")
    print(f"device_packages: {len(sizes)} wheel(s), {sum(n for _, n in sizes) / 2**20:.2f} MiB in {out_dir} "
          f"(limit {WHEELS_LIMIT_BYTES / 2**20:.0f} MiB)")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("carried", help="the wheels to carry, name==version")
    sub.add_parser("needs", help="what the carried packages ask of the machine's own")
    dl = sub.add_parser("download", help="pip download the carried wheels")
    dl.add_argument("dir")
    wh = sub.add_parser("wheels", help="make device-wheels: the project's wheel and the carried ones into DIR")
    wh.add_argument("dir", nargs="?", default=str(WHEELS_DIR))
    wh.add_argument("--python-version", default="3.12", help="the interpreter the wheels are for (the machine's: 3.12)")
    sub.add_parser("check", help="on the machine: every run-time requirement is met (exit 1 when not)")
    args = ap.parse_args(argv)
    try:
        return _run(args)
    except LookupError as exc:
        print(f"device_packages {args.cmd}: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    if args.cmd == "carried":
        for c in carried_set()[0]:
            print(f"{c.name}=={c.version}  # for {', '.join(c.needed_by)}")
    elif args.cmd == "needs":
        for n in carried_set()[1]:
            print(f"{n.name}{n.specifier}  # asked by {', '.join(n.needed_by)}")
    elif args.cmd == "download":
        cmd = download_command(args.dir)
        print("$ " + " ".join(cmd), flush=True)
        return subprocess.run(cmd).returncode
    elif args.cmd == "wheels":
        return _print_wheels(Path(args.dir), args.python_version)
    else:
        return _report(check_requirements())
    return 0


if __name__ == "__main__":
    sys.exit(main())
