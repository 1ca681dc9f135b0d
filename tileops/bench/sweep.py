"""The sweep (M4): plan the rows, run each in the worker, append its record.

A run directory holds ``records.jsonl`` (one line per row, appended as each
row finishes) and ``run.json`` (start, end, status, counts). Ctrl-C leaves a
valid file and a run marked ``interrupted``; ``--resume DIR`` skips rows
already recorded OK and appends the rest.

This module measures and nothing else: pricing, tables, plots and metrics are
the composing layer's (``tileops.pipeline``), which reads the returned records
from memory. It reports progress through a :class:`SweepObserver` so that it
needs no terminal library.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tileops.bench.environment import new_run_id, run_environment
from tileops.bench.execute import Task
from tileops.bench.select import Planned, Selection, plan
from tileops.bench.stopping import CPU_RULE, GPU_RULE, QUICK_RULE, StoppingRule
from tileops.bench.timers import check_timer
from tileops.bench.worker import Worker, default_threads
from tileops.device import DeviceInfo, describe_device
from tileops.errors import TileOpsError
from tileops.ops.catalog import load_entries
from tileops.ops.registry import load_all
from tileops.records import (RECORDS_FILE, Environment, Record, RunInfo, append_record, iter_records,
                             read_run_info, utcnow, write_run_info)

DEFAULT_ROW_TIMEOUT_S = {"cpu": 60.0, "cuda": 180.0}


@dataclass
class SweepOptions:
    """What to measure and where to write it (the bench command's measuring flags)."""

    selection: Selection = field(default_factory=Selection)
    device: str = "auto"
    out: Path | None = None
    resume: Path | None = None
    row_timeout_s: float | None = None
    quick: bool = False
    timer: str = "auto"
    argv: list[str] = field(default_factory=list)


class SweepObserver(Protocol):
    """Progress of a sweep, for whoever shows it (a terminal, a log)."""

    def row_started(self, index: int, total: int, planned: Planned) -> None: ...

    def row_finished(self, index: int, total: int, planned: Planned, record: Record) -> None: ...


class _Silent:
    def row_started(self, index: int, total: int, planned: Planned) -> None:
        pass

    def row_finished(self, index: int, total: int, planned: Planned, record: Record) -> None:
        pass


@dataclass
class PreparedSweep:
    """Everything decided before the first row: a bad input fails here, not after hours of rows."""

    device: DeviceInfo
    run_dir: Path
    info: RunInfo
    env: Environment
    planned: list[Planned]
    todo: list[Planned]
    done: int  # rows already recorded OK (a resumed run)
    rule: StoppingRule
    row_timeout_s: float
    threads: int | None
    timer: str

    @property
    def records_path(self) -> Path:
        return self.run_dir / RECORDS_FILE


@dataclass
class Sweep:
    """A finished (or interrupted) sweep: the newest record of every row, in memory."""

    device: DeviceInfo
    run_dir: Path
    info: RunInfo
    records: list[Record]
    interrupted: bool

    @property
    def records_path(self) -> Path:
        return self.run_dir / RECORDS_FILE


def stopping_rule(device: DeviceInfo, quick: bool) -> StoppingRule:
    if quick:
        return QUICK_RULE
    return CPU_RULE if device.kind == "cpu" else GPU_RULE


def _run_dir(opts: SweepOptions) -> tuple[Path, RunInfo, set[tuple[str, str, str, str]]]:
    if opts.resume is not None:
        run_dir = Path(opts.resume)
        info = read_run_info(run_dir)
        if info is None:
            raise TileOpsError(f"{run_dir}: no run.json, so nothing to resume; start a new run with --out")
        done = set()
        if (run_dir / RECORDS_FILE).exists():
            done = {r.key for r in iter_records(run_dir / RECORDS_FILE) if r.status == "ok"}
        info.status, info.finished_at, info.exit_code = "running", None, None
        return run_dir, info, done
    run_id = new_run_id()
    run_dir = Path(opts.out) if opts.out else Path("results") / run_id
    if (run_dir / RECORDS_FILE).exists():
        raise TileOpsError(f"{run_dir} already holds a run; use --resume {run_dir} to finish it, or another --out")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RECORDS_FILE).touch()  # a run directory is always readable, even interrupted before its first row
    return run_dir, RunInfo(run_id=run_id, started_at=utcnow()), set()


def prepare(opts: SweepOptions) -> PreparedSweep:
    """Describe the device, plan the rows and open the run directory (run.json says "running")."""
    try:
        device = describe_device(opts.device)
    except ValueError as exc:
        raise TileOpsError(str(exc)) from None
    check_timer(opts.timer, device.kind)  # --timer cupti without CUPTI: exit 2 before anything is written
    planned = plan(load_entries(), load_all(), opts.selection, device)
    if not planned:
        raise TileOpsError("no workload row matches the selection; list rows with `tileops ops NAME`")
    run_dir, info, done = _run_dir(opts)
    threads = default_threads() if device.kind == "cpu" else None
    todo = [p for p in planned if p.key not in done]
    info.argv = opts.argv or sys.argv[1:]
    info.selection = {**opts.selection.as_dict(), "device": device.device}
    info.rows_total = len(planned)
    write_run_info(run_dir, info)
    return PreparedSweep(
        device=device, run_dir=run_dir, info=info, env=run_environment(device, info.run_id, threads),
        planned=planned, todo=todo, done=len(planned) - len(todo), rule=stopping_rule(device, opts.quick),
        row_timeout_s=opts.row_timeout_s or DEFAULT_ROW_TIMEOUT_S[device.kind], threads=threads,
        timer=opts.timer)


def _skipped(p: Planned, family: str, env: Environment) -> Record:
    now = utcnow()
    return Record(run_id=env.run_id, op=p.op, family=family, label=p.row.label, dtype=p.case_name,
                  backend=p.backend, params=dict(p.row.params), tags=list(p.row.tags), status="skipped",
                  skip_reason=p.skip_reason, env=env, started_at=now, finished_at=now)


def run(prep: PreparedSweep, observer: SweepObserver | None = None) -> Sweep:
    """Run every row still to do, appending each record as it finishes; Ctrl-C stops between writes."""
    observer = observer or _Silent()
    entries = load_entries()
    worker = Worker(cache_bytes=prep.device.l2_bytes, threads=prep.threads)
    interrupted = False
    total = len(prep.todo)
    try:
        for i, p in enumerate(prep.todo, 1):
            observer.row_started(i, total, p)
            family = entries[p.op].family
            if p.skip_reason:
                rec = _skipped(p, family, prep.env)
            else:
                task = Task(op=p.op, label=p.row.label, case=p.case, case_name=p.case_name, backend=p.backend,
                            device=prep.device.device, rule=prep.rule, env=prep.env, timer=prep.timer)
                rec = worker.run(task, family, prep.row_timeout_s).record
            append_record(prep.records_path, rec)
            observer.row_finished(i, total, p, rec)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        worker.close()
    latest = {r.key: r for r in iter_records(prep.records_path)}  # a resumed run keeps the newest per row
    info = prep.info
    info.rows_ok = sum(r.status == "ok" for r in latest.values())
    info.rows_error = sum(r.status == "error" for r in latest.values())
    info.rows_skipped = sum(r.status == "skipped" for r in latest.values())
    info.status, info.finished_at = ("interrupted" if interrupted else "completed"), utcnow()
    write_run_info(prep.run_dir, info)
    return Sweep(device=prep.device, run_dir=prep.run_dir, info=info, records=list(latest.values()),
                 interrupted=interrupted)
