"""Workload isolation: rows run in a worker subprocess, one at a time.

A crash (segfault, abort, ``os._exit``), a CUDA error that poisons the
context, or a row that outlives its timeout kills only the worker: the parent
turns it into an error record and starts a fresh worker for the next row.

A compiled backend's row has two limits: its compile (the first, checked call,
which the worker reports as done before timing) may take up to
``compile_timeout_s``, and its timing then gets the row timeout of its own, so
a slow compile is never charged to the measurement, nor a slow measurement
hidden behind a compile allowance. The worker's environment can carry the
compile caches' folders (``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``),
set before it compiles anything.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing.connection import Connection
from typing import Any

from tileops.bench.allocator import keep_freed_memory
from tileops.bench.execute import Task, run_visit
from tileops.bench.race import RaceTask, run_race
from tileops.errors import TileOpsError
from tileops.records import ErrorInfo, ErrorKind, Record, utcnow

_CTX = mp.get_context("spawn")  # a fresh interpreter: no inherited CUDA context, no forked locks
#: How long a new worker may take to import torch before its row is recorded as a crash.
STARTUP_TIMEOUT_S = 300.0


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this worker when its parent dies (``kill -9`` of the bench): an orphan
    would otherwise finish its row (or hang in it) with nobody to read the result."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's kill() on interrupt still applies
        pass
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


def _worker_main(conn: Connection, cache_bytes: int | None, threads: int | None, parent_pid: int,
                 env: dict[str, str] | None = None) -> None:
    import signal

    _die_with_parent(parent_pid)
    keep_freed_memory()  # before the first row: every worker's allocator makes the same choice
    os.environ.update(env or {})  # before anything compiles: inductor and triton read their cache folders lazily
    # Ctrl-C and SIGTERM (a terminal's process group, `kill -TERM -PGID`) are the parent's to handle:
    # it writes what finished and kills this worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    import torch

    if threads:
        torch.set_num_threads(threads)
    conn.send(("ready", None))  # the imports are done: from here a row's time is the row's own
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        try:
            if isinstance(task, RaceTask):
                conn.send(("ok", run_race(task, cache_bytes, notify=lambda what, backend: conn.send((what, backend)))))
                continue
            conn.send(("ok", run_visit(task, cache_bytes, on_prepared=lambda: conn.send(("prepared", None)))))
        except BaseException as exc:  # a bug outside the per-row guard: report, keep serving
            conn.send(("fail", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}"))


@dataclass(frozen=True)
class RowResult:
    """What the worker gave back for one row: always a record, and whether the worker was lost."""

    record: Record
    restarted: bool  # the worker died or was killed and will be replaced
    blocks: list[list[float]] = field(default_factory=list)  # the visit's blocks of samples (none for an error)


class Worker:
    """One worker process; ``run`` returns a record whatever happens to the row."""

    def __init__(self, cache_bytes: int | None = None, threads: int | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.cache_bytes = cache_bytes
        self.threads = threads
        self.env = dict(env or {})  # set in the worker's environment before its first row
        self.proc: Any = None
        self.conn: Connection | None = None

    def _start(self) -> str | None:
        """Start a worker and wait until it has imported torch; why it could not start, or None.

        A cold start (torch's import on a loaded host) can take many seconds: it is
        not charged to the first row's timeout.
        """
        parent, child = _CTX.Pipe()
        self.proc = _CTX.Process(target=_worker_main, daemon=True,
                                 args=(child, self.cache_bytes, self.threads, os.getpid(), self.env))
        self.proc.start()
        child.close()
        self.conn = parent
        try:
            if parent.poll(STARTUP_TIMEOUT_S) and parent.recv()[0] == "ready":
                return None
            why = f"the worker process did not start within {STARTUP_TIMEOUT_S:g} s"
        except EOFError:
            self.proc.join(5)
            why = f"the worker process died while starting (exit code {self.proc.exitcode})"
        self.kill()
        return why

    def run(self, task: Task, family: str, timeout_s: float, compile_timeout_s: float | None = None) -> RowResult:
        """Run one row; ``family`` names it in an error record the worker could not write itself.

        ``timeout_s`` bounds the row; for a compiled backend (not ``torch``) with ``compile_timeout_s``,
        that bounds its first call instead, and the timing after it gets ``timeout_s`` of its own.
        """
        if self.proc is None or not self.proc.is_alive():
            started = utcnow()
            why = self._start()
            if why is not None:
                return RowResult(_error(task, family, started, "crash", why), True)
        assert self.conn is not None
        started = utcnow()
        compiling = task.backend != "torch" and compile_timeout_s is not None
        limit = compile_timeout_s if compiling and compile_timeout_s is not None else timeout_s
        deadline = time.monotonic() + limit
        self.conn.send(task)
        while self.conn.poll(max(0.0, deadline - time.monotonic())):
            try:
                status, payload = self.conn.recv()
            except EOFError:
                return RowResult(self._died(task, family, started), True)
            if status == "prepared":  # compiled (or eager's checked call done): the timing's own limit starts
                if compiling:
                    compiling, limit = False, timeout_s
                    deadline = time.monotonic() + timeout_s
                continue
            if status == "ok":
                record, blocks = payload
                return RowResult(record, False, blocks)
            return RowResult(_error(task, family, started, "exception", payload), False)
        if not self.proc.is_alive():
            return RowResult(self._died(task, family, started), True)
        self.kill()
        what = (f"the {task.backend} backend's first call (compilation included) did not finish within {limit:g} s "
                "(--compile-timeout)" if compiling else f"row did not finish within {limit:g} s")
        return RowResult(_error(task, family, started, "timeout", f"{what}; the worker was killed"), True)

    def race(self, race: RaceTask, family: str, timeout_s: float, compile_timeout_s: float | None = None
             ) -> tuple[list[RowResult], list[Task]]:
        """Race a row's backends interleaved (``tileops.bench.race``): each backend's result, and the backends
        left to time one by one. Each backend's first call has its own limit, as in :meth:`run` (the compile
        allowance for a compiled one, ``timeout_s`` for eager); the alternating blocks then get ``timeout_s``
        per backend. A worker that dies or overruns while one backend prepares costs that backend its row
        (crash, timeout); one that dies or overruns in the blocks cannot say whose block it was: every backend
        is then left to time alone, where the failure falls on the one that causes it."""
        if self.proc is None or not self.proc.is_alive():
            started = utcnow()
            why = self._start()
            if why is not None:
                return [RowResult(_error(t, family, started, "crash", why), True) for t in race.tasks], []
        assert self.conn is not None
        by_backend = {t.backend: t for t in race.tasks}
        started, current = utcnow(), None  # the backend preparing; None once the blocks alternate
        limit = timeout_s
        deadline = time.monotonic() + limit
        self.conn.send(race)
        while self.conn.poll(max(0.0, deadline - time.monotonic())):
            try:
                status, payload = self.conn.recv()
            except EOFError:
                break
            if status == "preparing":
                started, current = utcnow(), by_backend[payload]
                compiled = current.backend != "torch" and compile_timeout_s is not None
                limit = compile_timeout_s if compiled and compile_timeout_s is not None else timeout_s
            elif status == "timing":
                current, limit = None, timeout_s * len(race.tasks)
            elif status == "ok":
                return [RowResult(rec, False, blocks) for rec, blocks in payload], []
            elif status == "fail":
                return [], list(race.tasks)
            if status in ("preparing", "timing"):
                deadline = time.monotonic() + limit
        alive = self.proc.is_alive()
        self.kill()
        if current is None:
            return [], list(race.tasks)
        flag = " (--compile-timeout)" if current.backend != "torch" else ""
        what = (f"did not finish the {current.backend} backend's first call within {limit:g} s{flag}" if alive
                else "died")
        rest = [t for t in race.tasks if t.backend != current.backend]
        return [RowResult(_error(current, family, started, "crash" if not alive else "timeout",
                                 f"racing its backends, the worker {what}; the worker was killed, the other "
                                 "backends are timed one by one"), True)], rest

    def _died(self, task: Task, family: str, started: datetime) -> Record:
        self.proc.join(5)
        code = self.proc.exitcode
        self.proc = None
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return _error(task, family, started, "crash", f"the worker process died ({how}) while running this row")

    def kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self.proc = None

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive() and self.conn is not None:
            try:
                self.conn.send(None)
                self.proc.join(5)
            except (BrokenPipeError, OSError):
                pass
        self.kill()


def _error(task: Task, family: str, started: datetime, kind: ErrorKind, message: str) -> Record:
    return Record(run_id=task.env.run_id, op=task.op, family=family, label=task.label, dtype=task.case_name,
                  backend=task.backend, status="error", error=ErrorInfo(kind=kind, message=message),
                  env=task.env, started_at=started, finished_at=utcnow())


def default_threads() -> int:
    """All cores the process may use (its CPU affinity): torch's own default for its intra-op threads, and the
    bench's for a CPU row (the CPU timer runs the op with every core)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def cpu_threads(asked: int | None, device_kind: str, *, source: str = "--threads") -> int | None:
    """The intra-op threads a run's CPU rows run on: ``asked`` (``--threads N``; ``source`` names where it came
    from), else every CPU this process may use (:func:`default_threads`); None on a GPU, whose rows are timed on
    the device. TileOpsError for a count this process cannot have, or for ``--threads`` on a GPU, where it would
    change only the host's threads around the launches, not the time measured."""
    if device_kind != "cpu":
        if asked is not None:
            raise TileOpsError(f"{source} {asked}: --threads sets a CPU row's intra-op threads; a GPU row is timed "
                               "on the device, where it would change only the host's threads around the launches. "
                               "Leave --threads out, or give --device cpu")
        return None
    available = default_threads()
    if asked is None:
        return available
    if not 1 <= asked <= available:
        fix = (f"give --threads from 1 to {available}" if source == "--threads" else
               f"the run keeps its count: resume where {asked} CPUs are free, or start a new run with --out")
        raise TileOpsError(f"{source} {asked}: this process may use {available} CPU(s) (its CPU affinity); {fix}")
    return asked
