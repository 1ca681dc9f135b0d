"""Shared by the reliability tests: a small tmpfs to fill or mount read-only.

Mounting needs root (CI runs as root): without permission a test skips
locally and fails under ``CI=true``.
"""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


@contextmanager
def tmpfs(path: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted at ``path`` with ``options`` (``size=1m``, ``ro,size=64k``), unmounted after."""
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        msg = f"cannot mount a tmpfs ({r.stderr.strip() or r.returncode}): the full-disk cases need root"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(directory: Path) -> Path:
    """Write zeros into ``directory/filler`` until the file system is full; returns the filler."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler
