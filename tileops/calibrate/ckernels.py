"""Building the calibration's C kernels with the host's compiler, and loading them with ctypes.

Two kernels need what torch cannot give: ``streaming.c`` (stores that skip the
write-allocate read) and ``clock.c`` (a dependent add chain the compiler must
not fold). Both are compiled at first use in a process (``$CC``, else ``cc``,
``gcc``, ``clang`` on PATH; ``-O2 -march=native -fopenmp``, then without
``-march=native``) into a temporary folder and loaded with ctypes; where that
folder is mounted noexec (a container's tmpfs /tmp) a library is loaded from an
in-memory file instead. Where no compiler or OpenMP exists (a slim image),
:class:`KernelsUnavailable` says why, and each caller says what it does instead.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

#: Flag sets tried in order: the host's full vector width first, then the baseline ISA (still SSE2 on x86-64).
FLAG_SETS = (("-O2", "-march=native", "-fopenmp"), ("-O2", "-fopenmp"))


class KernelsUnavailable(RuntimeError):
    """A C kernel cannot be built or loaded here; the message says why and what to do."""


def find_compiler(env: dict[str, str] | None = None) -> tuple[str | None, str]:
    """(compiler path, why-not): ``$CC`` when set, else the first of cc, gcc, clang on PATH."""
    env = dict(os.environ) if env is None else env
    path = env.get("PATH", "")
    given = env.get("CC", "").strip()
    if given:
        exe = shutil.which(given.split()[0], path=path)
        return (exe, "") if exe else (None, f"CC={given!r} is not an executable on PATH")
    for name in ("cc", "gcc", "clang"):
        exe = shutil.which(name, path=path)
        if exe:
            return exe, ""
    return None, "no C compiler (cc, gcc or clang) on PATH and CC is not set"


def _load(so: Path) -> ctypes.CDLL:
    """dlopen ``so``; from an in-memory copy when its folder is mounted noexec (a container's tmpfs /tmp)."""
    try:
        return ctypes.CDLL(str(so))
    except OSError as first:
        if not hasattr(os, "memfd_create"):
            raise
        try:
            return load_from_memory(so)
        except OSError:
            raise first from None


def load_from_memory(so: Path) -> ctypes.CDLL:
    """dlopen a copy of ``so`` held in an anonymous memory file, to which no mount option applies."""
    fd = os.memfd_create("tileops-kernel")
    try:
        os.write(fd, so.read_bytes())
        return ctypes.CDLL(f"/proc/self/fd/{fd}")
    except OSError:
        os.close(fd)
        raise
    # The descriptor stays open: dlopen knows a library by its path, and a closed descriptor's number,
    # reused by a later load, would hand back this library instead of the new one.


def compile_library(compiler: str, source: Path) -> tuple[ctypes.CDLL, tuple[str, ...]]:
    """Compile ``source`` with ``compiler`` (the first flag set that works) and load it: (library, flags).
    KernelsUnavailable names the source, each flag set's error, or the load failure."""
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tileops-kernel-") as tmp:
        so = Path(tmp) / (source.stem + ".so")
        for flags in FLAG_SETS:
            cmd = [compiler, *flags, "-shared", "-fPIC", str(source), "-o", str(so)]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            except (OSError, subprocess.SubprocessError) as exc:
                errors.append(f"{' '.join(flags)}: {exc}")
                continue
            if proc.returncode == 0:
                break
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
            errors.append(f"{' '.join(flags)}: {last[0]}")
        else:
            raise KernelsUnavailable(f"{Path(compiler).name} could not build {source.name} with OpenMP "
                                     f"({'; '.join(errors)})")
        try:
            lib = _load(so)
        except OSError as exc:
            raise KernelsUnavailable(f"the built {source.name} could not be loaded ({exc})") from None
    return lib, flags
