"""Safe file I/O: atomic writes, and reads that refuse what is not a regular file.

An atomic write means a reader (Prometheus' textfile collector, a resumed bench,
a profile loader) sees the old file or the new one, never a half-written mix. A
checked read means a FIFO or a device left where a results file or a profile
belongs is refused with its name instead of hanging, or filling memory.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO


def write_atomic(path: Path | str, data: bytes | str) -> None:
    """Write ``data`` to a temp file beside ``path``, fsync it, then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


# --------------------------------------------------------------------------- reading files we did not write


class FileRefused(OSError):
    """A path that is not a regular file (a FIFO blocks its reader, ``/dev/zero`` never ends), or one
    larger than the reader allows; the message names the path and what it is."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def check_regular(path: Path | str, st: os.stat_result, max_bytes: int | None = None) -> None:
    """FileRefused unless ``st`` (of ``path``) is a regular file of at most ``max_bytes``."""
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(f"{path}: {_kind(st.st_mode)}, not a regular file; tileops reads results, profiles and "
                          "manifests only from plain files (replace it with one, or remove it)")
    if max_bytes is not None and st.st_size > max_bytes:
        raise FileRefused(f"{path}: {st.st_size} bytes, above the {max_bytes}-byte limit for this file "
                          "(remove or split it, or raise the limit)")


def open_regular(path: Path | str, max_bytes: int | None = None) -> BinaryIO:
    """Open a regular file for reading, refusing anything else before a read can block or run forever.

    The path is checked before it is opened (opening a device can have effects)
    and the open file again (the path may have been swapped meanwhile). A FIFO is
    opened non-blocking, so even that check cannot hang.
    """
    check_regular(path, os.stat(path), max_bytes)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        check_regular(path, os.fstat(fd), max_bytes)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path | str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (FileRefused otherwise, even if it grew meanwhile)."""
    with open_regular(path, max_bytes) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise FileRefused(f"{path}: more than {max_bytes} bytes, above the limit for this file "
                          "(remove or split it, or raise the limit)")
    return data


def unwritable_dir(path: Path | str) -> str | None:
    """Why files cannot be created in directory ``path`` (made on demand), or None when they can.

    Checked before a long run starts, so that a typo'd or read-only output path
    fails at once rather than after hours of work. ``os.access`` answers for the
    read-only mount too, even to root.
    """
    p = Path(path)
    probe = p
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable" + (" (a read-only file system)" if _read_only_fs(probe) else "")
    return None


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


# --------------------------------------------------------------------------- before replacing a file we did not write


def unwritable_file(path: Path | str) -> str | None:
    """Why this process may not replace or append to the existing file ``path`` (None: it may, or there is none).

    A file its owner left without write permission for us is someone's word that it is not ours to change; yet
    an atomic write (a new file renamed over it) in a writable folder would replace it all the same. So a
    command asks here before it rewrites a store, and stops naming the file. ``os.access`` answers as the
    kernel would for this user (root may write anything: permission bits do not stop it).
    """
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{p} cannot be looked at ({exc.strerror or exc})"
    if not os.access(p, os.W_OK):
        ro = " (a read-only file system)" if _read_only_fs(p) else ""
        return (f"{p} is not writable by this user{ro} (mode {stat.S_IMODE(st.st_mode):04o}, owner uid "
                f"{st.st_uid}; this process runs as uid {os.geteuid()})")
    return unwritable_dir(p.parent)
