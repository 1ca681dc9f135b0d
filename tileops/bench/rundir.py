"""One runner per run directory: an exclusive ``flock`` held for the whole run.

Two runners in one directory (two ``--resume`` at once, or a new run racing
another onto the same ``--out``) would both run every remaining row and
interleave their records. The lock file ``run.lock`` is locked with
``fcntl.flock`` before anything in the directory is read or written, and stays
locked until the command ends; the kernel releases it when the process dies,
even by ``kill -9``, so a lock is never stale. The file holds the holder's pid,
host and start time, which the refused runner reports.

While the run goes, the lock file also carries a reserve of disk space
(spaces after the holder line): when the disk fills, the reserve is released
so the run file can still say ``failed`` and why.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
from pathlib import Path

from tileops import fsutil
from tileops.errors import TileOpsError
from tileops.records import utcnow

LOCK_FILE = "run.lock"
RESERVE_BYTES = 64 * 1024  # a few pages: room for run.json's final state on a full disk


class RunDirBusy(TileOpsError):
    """Another runner holds the run directory; the message names it."""


class RunLock:
    """The held lock of one run directory (released by :meth:`release`, or when the process ends)."""

    def __init__(self, path: Path, fd: int, holder: bytes) -> None:
        self.path = path
        self._fd: int | None = fd
        self._holder = holder
        self.reserved = False

    def reserve(self) -> None:
        """Write the disk-space reserve after the holder line (best effort: a full disk gets none)."""
        assert self._fd is not None
        try:
            fsutil.pwrite(self._fd, b" " * RESERVE_BYTES, len(self._holder), self.path)
            fsutil.fsync(self._fd, self.path)
            self.reserved = True
        except OSError:
            self._trim()

    def release_reserve(self) -> bool:
        """Give the reserve back to the filesystem (the disk is full); True when there was one."""
        had = self.reserved
        self._trim()
        return had

    def _trim(self) -> None:
        self.reserved = False
        if self._fd is not None:
            try:
                fsutil.truncate(self._fd, len(self._holder), self.path)
            except OSError:
                pass

    def release(self) -> None:
        """Trim the reserve and unlock. The file stays: unlinking a locked file lets a third runner
        lock a new file of the same name while a second still waits on the old one."""
        if self._fd is None:
            return
        self._trim()
        os.close(self._fd)  # closing the descriptor releases the flock
        self._fd = None


def _holder_line() -> bytes:
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": utcnow().isoformat(),
              "command": ["tileops", *sys.argv[1:]]}
    return (json.dumps(holder) + "\n").encode("utf-8")


def _describe_holder(raw: bytes) -> str:
    try:
        h = json.loads(raw.split(b"\n", 1)[0])
        return (f"pid {h['pid']} on host {h['host']}, since {h['started_at']}"
                + (f": {' '.join(h['command'])}" if h.get("command") else ""))
    except (ValueError, KeyError, TypeError):
        return "a runner that left no readable holder line"


def lock_run_dir(run_dir: Path) -> RunLock:
    """Take the run directory's lock without waiting; RunDirBusy naming the holder when another has it."""
    path = Path(run_dir) / LOCK_FILE
    fd = fsutil.open_write(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by the worker (O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raw = os.pread(fd, 4096, 0)
        os.close(fd)
        raise RunDirBusy(f"{run_dir} is in use by another tileops run ({_describe_holder(raw)}); wait for it to "
                         f"finish, or stop it and then `tileops bench --resume {run_dir}`") from None
    except BaseException:
        os.close(fd)
        raise
    holder = _holder_line()
    try:
        fsutil.truncate(fd, 0, path)
        fsutil.pwrite(fd, holder, 0, path)
    except OSError:  # a full disk: the lock holds without its description, and a refused runner says so
        holder = b""
        try:
            fsutil.truncate(fd, 0, path)
        except OSError:
            pass
    return RunLock(path, fd, holder)
