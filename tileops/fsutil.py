"""Safe file I/O: the one seam every write goes through, atomic writes, and reads that refuse what is not a
regular file.

An atomic write means a reader (Prometheus' textfile collector, a resumed bench,
a profile loader) sees the old file or the new one, never a half-written mix. A
checked read means a FIFO or a device left where a results file or a profile
belongs is refused with its name instead of hanging, or filling memory.

Every write of the appliance (records, run.json, the lock, the profile store,
audit files, textfiles, plots) calls the primitives below (:func:`open_write`,
:func:`write_all`, :func:`pwrite`, :func:`truncate`, :func:`fsync`,
:func:`replace`, :func:`fsync_dir`, :func:`unlink`) rather than ``os``
directly, so that a test can make any one of them fail: ``TILEOPS_FAULT`` (a
testing hook, docs/reliability.md "Every write failure point") makes the N-th
call fail with an errno, as a full disk or a failing drive would, and
:func:`seam_calls` says how many calls a clean run made, so a sweep knows where
to stop. Unarmed, the seam costs one counter increment per call.
"""

from __future__ import annotations

import errno as _errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

# --------------------------------------------------------------------------- the write seam and its fault hook

#: The testing hook: ``N:ERRNO`` fails the N-th seam call of this process with ERRNO (a name: ENOSPC, EIO,
#: EACCES, ...); ``N:ERRNO:PRIMITIVE`` the N-th call of that primitive only (open, write, truncate, fsync,
#: replace, dirsync, unlink).
FAULT_ENV = "TILEOPS_FAULT"
#: With a file named here, each seam call of the process appends ``<n> <primitive> <path>`` to it (not
#: through the seam): how a sweep learns what a clean subprocess run wrote.
TRACE_ENV = "TILEOPS_FAULT_TRACE"
PRIMITIVES = ("open", "write", "truncate", "fsync", "replace", "dirsync", "unlink")


class _Fault:
    """The hook's state in this process: the calls counted so far, and the one to fail (if armed)."""

    def __init__(self) -> None:
        self.calls = 0
        self.by_primitive: dict[str, int] = {}
        self.at: int | None = None
        self.errno = _errno.EIO
        self.primitive: str | None = None
        self.met: tuple[str, str] | None = None
        self.trace: list[tuple[str, str]] | None = None
        self.trace_file: str | None = None
        self.bad_spec: str | None = None  # why TILEOPS_FAULT could not be read


_FAULT = _Fault()


def _parse_fault(spec: str) -> tuple[int, int, str | None]:
    parts = spec.split(":")
    bad = OSError(_errno.EINVAL, f"{FAULT_ENV}={spec!r} is not N:ERRNO or N:ERRNO:PRIMITIVE (N >= 1, ERRNO a "
                                 f"name such as ENOSPC, PRIMITIVE one of {', '.join(PRIMITIVES)}); fix or unset it")
    if len(parts) not in (2, 3) or not parts[0].isdigit() or int(parts[0]) < 1:
        raise bad
    code = getattr(_errno, parts[1].upper(), None)
    if not isinstance(code, int) or (len(parts) == 3 and parts[2] not in PRIMITIVES):
        raise bad
    return int(parts[0]), code, parts[2] if len(parts) == 3 else None


def arm_fault(n: int | None, err: int = _errno.EIO, primitive: str | None = None, *,
              trace: bool = False) -> None:
    """Fail this process's ``n``-th seam call from now on (of ``primitive`` only, when given) with ``err``;
    ``n`` None only counts (and, with ``trace``, keeps each call's primitive and path). Resets the count."""
    if primitive is not None and primitive not in PRIMITIVES:
        raise ValueError(f"unknown seam primitive {primitive!r}; one of {', '.join(PRIMITIVES)}")
    _FAULT.calls, _FAULT.by_primitive, _FAULT.met, _FAULT.bad_spec = 0, {}, None, None
    _FAULT.at, _FAULT.errno, _FAULT.primitive = n, err, primitive
    _FAULT.trace = [] if trace else None


def disarm_fault() -> None:
    """No fault from now on (the count goes on)."""
    _FAULT.at = None


def seam_calls() -> int:
    """How many seam calls this process made since the hook was last armed (or since it started)."""
    return _FAULT.calls


def fault_met() -> tuple[str, str] | None:
    """The (primitive, path) the armed fault failed, or None when the run never reached it."""
    return _FAULT.met


def seam_trace() -> list[tuple[str, str]]:
    """Each seam call's (primitive, path) since :func:`arm_fault` with ``trace``."""
    return list(_FAULT.trace or [])


def _arm_from_environment() -> None:
    spec = os.environ.get(FAULT_ENV)
    _FAULT.trace_file = os.environ.get(TRACE_ENV) or None
    if spec:
        try:
            _FAULT.at, _FAULT.errno, _FAULT.primitive = _parse_fault(spec)
        except OSError as exc:  # every write then fails with it: a sweep that meant a fault never passes clean
            _FAULT.bad_spec = exc.strerror


_arm_from_environment()


def _seam(primitive: str, path: Path | str) -> None:
    """Count one seam call; raise the armed fault when this is the one."""
    f = _FAULT
    f.calls += 1
    if f.trace is not None:
        f.trace.append((primitive, str(path)))
    if f.trace_file is not None:
        _append_trace(f.trace_file, f"{f.calls} {primitive} {path}\n")
    if f.bad_spec is not None:
        raise OSError(_errno.EINVAL, f.bad_spec, str(path))
    if f.at is None:
        return
    if f.primitive is None:
        n = f.calls
    else:
        if primitive != f.primitive:
            return
        n = f.by_primitive[primitive] = f.by_primitive.get(primitive, 0) + 1
    if n == f.at:
        f.met = (primitive, str(path))
        raise OSError(f.errno, os.strerror(f.errno), str(path))


def _append_trace(trace: str, line: str) -> None:
    fd = os.open(trace, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8", "replace"))
    finally:
        os.close(fd)


def open_write(path: Path | str, flags: int = os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode: int = 0o644) -> int:
    """``os.open`` for writing (``flags`` must hold O_WRONLY or O_RDWR): a descriptor the caller closes."""
    _seam("open", path)
    return os.open(path, flags | getattr(os, "O_CLOEXEC", 0), mode)


def write_all(fd: int, data: bytes | memoryview, path: Path | str) -> None:
    """Write every byte of ``data``: a short write (a nearly full disk) goes on until the kernel says why it
    cannot; OSError then (EIO when it wrote nothing without saying why)."""
    _seam("write", path)
    rest = memoryview(data)
    while rest:
        written = os.write(fd, rest)
        if written <= 0:
            raise OSError(_errno.EIO, f"wrote nothing of the last {len(rest)} bytes", str(path))
        rest = rest[written:]


def pwrite(fd: int, data: bytes, offset: int, path: Path | str) -> None:
    """Write all of ``data`` at ``offset`` (OSError, ENOSPC, when the disk takes less)."""
    _seam("write", path)
    if os.pwrite(fd, data, offset) != len(data):
        raise OSError(_errno.ENOSPC, "short write", str(path))


def truncate(fd: int, size: int, path: Path | str) -> None:
    """Cut (or extend) the open file to ``size`` bytes."""
    _seam("truncate", path)
    os.ftruncate(fd, size)


def fsync(fd: int, path: Path | str) -> None:
    """Make what was written to ``fd`` durable."""
    _seam("fsync", path)
    os.fsync(fd)


def replace(src: Path | str, dst: Path | str) -> None:
    """Rename ``src`` over ``dst`` in one step (same file system)."""
    _seam("replace", dst)
    os.replace(src, dst)


def unlink(path: Path | str) -> None:
    """Remove ``path`` (gone already is fine)."""
    _seam("unlink", path)
    Path(path).unlink(missing_ok=True)


def fsync_dir(directory: Path | str) -> None:
    """Make a rename or a new file in ``directory`` durable; OSError when it cannot be opened or synced."""
    _seam("dirsync", directory)
    dfd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(dfd)
    except OSError as exc:
        if exc.errno not in (_errno.EINVAL, _errno.ENOTSUP):  # a file system that cannot sync a directory
            raise
    finally:
        os.close(dfd)


def write_atomic(path: Path | str, data: bytes | str) -> None:
    """Write ``data`` to a temp file beside ``path``, fsync it, rename it over ``path``, fsync the directory.

    Any failure before the rename leaves the old file (or none) and no temp file, and raises the OSError. A
    failure of the directory's fsync comes after the rename: the new file is in place (a crash could still
    lose the rename), and the OSError is raised, so a caller that needs durability hears of it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = _temp_name(path)
    try:
        fd = open_write(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.fchmod(fd, 0o644)  # readable by a collector running as another user, whatever the umask
            write_all(fd, raw, tmp)
            fsync(fd, tmp)
        finally:
            os.close(fd)
        replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _about(exc, path) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:
        fsync_dir(path.parent)
    except OSError as exc:
        raise _about(exc, path) from None


def _about(exc: OSError, path: Path) -> OSError:
    """The same error (its errno, its subclass) naming the file the caller wrote, not a temp file or a folder."""
    return OSError(exc.errno, exc.strerror or str(exc), str(path)) if exc.errno else exc


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")


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
