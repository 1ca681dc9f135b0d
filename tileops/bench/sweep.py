"""The sweep (M4): plan the rows, run each in the worker, append its record.

A run directory holds ``records.jsonl`` (one line per row, appended as each
row finishes), ``run.json`` (start, end, status, counts, and the selection and
options the run was started with) and ``run.lock`` (held while a runner works
in it: ``tileops.bench.rundir``). Ctrl-C or SIGTERM leaves a valid file and a
run marked ``interrupted``; a record or run file that cannot be written (a full
disk) ends the run ``failed``, with the reason in ``run.json``; ``--resume DIR``
sets aside a torn last line, skips rows already recorded OK and appends the rest.

This module measures and nothing else: pricing, tables, plots and metrics are
the composing layer's (``tileops.pipeline``), which reads the returned records
from memory. It reports progress through a :class:`SweepObserver` so that it
needs no terminal library.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol
from collections.abc import Callable, Mapping

from tileops import exitcodes
from tileops.bench.environment import new_run_id, run_environment
from tileops.bench.execute import Task
from tileops.bench.firstvisits import (FIRST_VISITS_FILE, SETTLED_PASS_FILE, append_first_visit, read_first_visits,
                                      remove_first_visits, remove_settled_pass, settled_pass, write_settled_pass)
from tileops.bench import allocator
from tileops.bench.quiet import check_quiet
from tileops.bench.rundir import RunLock, lock_run_dir
from tileops.bench.select import Planned, Selection, check_filters, plan, why_empty
from tileops.bench.interval import CPU_BLOCKS, GPU_BLOCKS, QUICK_BLOCKS, BlockRule
from tileops.bench.timers import check_timer
from tileops.bench.hostnoise import HostModel, HostPrior, prior_model, read_prior, write_prior
from tileops.bench.interval import visit_of
from tileops.bench.revisit import (KindOf, finish, first_visit_rule, kind_by_intensity, revisited, row_kind,
                                   same_timer, second_visit_rule, settle)
from tileops.bench.race import RaceTask
from tileops.bench.worker import RowResult, Worker, cpu_threads
from tileops.device import DeviceInfo
from tileops.errors import TileOpsError
from tileops.fsutil import unwritable_dir, unwritable_file
from tileops.interrupts import deferred, exit_code, signal_name
from tileops.ops.backends import cache_env
from tileops.ops.catalog import load_entries
from tileops.ops.registry import load_all
from tileops.defaults import BENCH_COMPILE_TIMEOUT_S, BENCH_ROW_TIMEOUT_S
from tileops.records import (OUTPUT_ONLY_FIELDS, RECORDS_FILE, RUN_FILE, Environment, Record, RunInfo, RunOptions,
                             append_record, iter_records, read_run_info, replace_records, set_aside_torn_tail, utcnow,
                             write_run_info)

Key = tuple[str, str, str, str]
#: a row's first visit, as the second pass takes it: its plan, its first-pass record, its blocks of samples
FirstVisit = tuple[Planned, Record, list[list[float]]]

DEFAULT_ROW_TIMEOUT_S = BENCH_ROW_TIMEOUT_S
DEFAULT_COMPILE_TIMEOUT_S = BENCH_COMPILE_TIMEOUT_S
#: The compile caches' folder, beside the run directories (``results/.compile-cache``), shared by the
#: runs written there: a nightly job loads yesterday's compiled code instead of compiling again.
COMPILE_CACHE_DIR = ".compile-cache"
#: Where ``--keep-traces`` leaves each CUPTI row's last profiled batch (a Chrome trace), in the run directory.
TRACES_DIR = "traces"
#: How a run directory that cannot be written is fixed, new or resumed (the same sentence from --list and the run).
NEW_RUN_DIR_FIX = "choose a writable --out"
RESUMED_RUN_DIR_FIX = "a resumed run appends to its directory: make it writable"
#: The files a resumed run appends to or rewrites: one this user may not write is refused before any work
#: (an atomic rewrite in a writable folder would replace it all the same: docs/reliability.md).
RESUMED_FILES = (RUN_FILE, RECORDS_FILE, FIRST_VISITS_FILE)


class RunWriteError(TileOpsError):
    """The run directory cannot be written (a full disk, a read-only mount, permissions):
    the message names the path, what the run file now says, and the fix."""


def describe_oserror(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


class SweepObserver(Protocol):
    """Progress of a sweep, for whoever shows it (a terminal, a log)."""

    def row_started(self, index: int, total: int, planned: Planned) -> None: ...

    def row_finished(self, index: int, total: int, planned: Planned, record: Record) -> None: ...

    def pass_started(self, number: int, total: int) -> None:
        """The second pass begins (``tileops.bench.revisit``); row indices count from 1 again. Optional."""


class _Silent:
    def row_started(self, index: int, total: int, planned: Planned) -> None:
        pass

    def pass_started(self, number: int, total: int) -> None:
        pass

    def row_finished(self, index: int, total: int, planned: Planned, record: Record) -> None:
        pass


@dataclass
class PreparedSweep:
    """Everything decided before the first row: a bad input fails here, not after hours of rows.

    It holds the run directory's lock until :meth:`close` (or the process ends).
    """

    device: DeviceInfo
    run_dir: Path
    info: RunInfo
    env: Environment
    planned: list[Planned]
    todo: list[Planned]
    done: int  # rows already recorded OK (a resumed run)
    rule: BlockRule
    row_timeout_s: float
    threads: int | None
    timer: str
    lock: RunLock
    notices: list[str] = field(default_factory=list)  # what opening the run directory repaired
    compile_timeout_s: float = DEFAULT_COMPILE_TIMEOUT_S
    compile_env: dict[str, str] = field(default_factory=dict)  # the compile caches' folders, for the worker
    trace_dir: str | None = None  # --keep-traces on a GPU: <run>/traces/, where each CUPTI row's trace goes
    #: this host's stored noise prior (``tileops.bench.hostnoise.HostPrior``): read before the first row, updated
    #: after the second pass; None: none kept (the documented defaults stand in for a host with none)
    noise_prior_path: Path | None = None
    noise_prior: HostPrior | None = None  # what it held (:meth:`load_noise_prior`)
    #: which rows are pooled together (``memory`` or ``compute``): the composing layer gives the bound its
    #: profile prices; by default the row's arithmetic intensity against a device kind's balance
    kind_of: KindOf = kind_by_intensity
    #: a resumed run stopped before its second pass ended: the rows recorded OK whose second visit is owed, each
    #: with its first-pass record and its first visit's blocks (:func:`owed_second_visits`)
    owed: dict[Key, FirstVisit] = field(default_factory=dict)

    @property
    def compile_cache(self) -> Path | None:
        """Where compiled code is kept (None when nothing is compiled)."""
        d = self.compile_env.get("TORCHINDUCTOR_CACHE_DIR")
        return Path(d).parent if d else None

    @property
    def records_path(self) -> Path:
        return self.run_dir / RECORDS_FILE

    def save(self, info: RunInfo) -> None:
        """Write run.json; see :func:`save_run_info`."""
        save_run_info(self.run_dir, info, self.lock)

    def close(self) -> None:
        """Release the run directory (the kernel does it anyway when the process ends)."""
        self.lock.release()

    def load_noise_prior(self, path: Path) -> str | None:
        """Read this host's stored noise prior from ``path`` (kept there after the run); a warning when the file
        cannot be used (the documented defaults then stand in), else None."""
        self.noise_prior_path = path
        self.noise_prior, warning = read_prior(path)
        return warning


@dataclass
class Sweep:
    """A finished, interrupted or failed sweep: the newest record of every row, in memory."""

    device: DeviceInfo
    run_dir: Path
    info: RunInfo
    records: list[Record]
    interrupted: KeyboardInterrupt | None = None  # the signal that stopped it (KeyboardInterrupt or Terminated)
    failure: str | None = None  # why it failed: a record could not be written

    @property
    def records_path(self) -> Path:
        return self.run_dir / RECORDS_FILE


def save_run_info(run_dir: Path, info: RunInfo, lock: RunLock) -> None:
    """Write run.json, or fail saying exactly what it now holds.

    When the write fails (a full disk), the lock's disk reserve is released and
    the run file is written once more, as ``failed`` with the reason: a run whose
    state cannot be recorded has failed, and must never be left saying
    ``running``. RunWriteError either way, naming the file and the fix.
    """
    path = Path(run_dir) / RUN_FILE
    try:
        write_run_info(run_dir, info)
        return
    except OSError as exc:
        reason = f"cannot write {path}: {describe_oserror(exc)}"
    if info.status != "failed" or not info.reason:  # else the failure being recorded (a record) is the news
        info.status, info.reason = "failed", reason
    info.exit_code, info.finished_at = exitcodes.USAGE, info.finished_at or utcnow()
    said = f"{path} could not be updated either ({reason})"
    if lock.release_reserve():
        try:
            write_run_info(run_dir, info)
            said = f"{path} says failed (written from the disk space the run had reserved)"
        except OSError:
            pass
    raise RunWriteError(f"{info.reason}; {said}. The records already written are whole and kept. Free space "
                        f"(or fix the permissions) on {run_dir}, then finish the run with "
                        f"`tileops bench --resume {run_dir}`")


#: The stopping rule's knobs a run may set (RunOptions field -> the bench flag that sets it).
RULE_FLAGS = {"target_precision": "--target-precision", "min_time_s": "--min-time", "max_time_s": "--max-time",
              "min_samples": "--min-samples"}


def stopping_rule(device: DeviceInfo, options: RunOptions) -> BlockRule:
    """The row's stopping rule: the device's preset (``--quick``'s loose one), with the knobs the run set.

    TileOpsError naming the flags when the knobs given cannot work together (a minimum time above the cap)."""
    rule = QUICK_BLOCKS if options.quick else (CPU_BLOCKS if device.kind == "cpu" else GPU_BLOCKS)
    given = {k: getattr(options, k) for k in RULE_FLAGS if getattr(options, k) is not None}
    if not given:
        return rule
    if "max_time_s" in given and "min_time_s" not in given:  # the preset's minimum gives way to a lower cap
        given["min_time_s"] = min(rule.min_time_s, given["max_time_s"])
    if "min_time_s" in given and "max_time_s" not in given:  # ... and its cap to a longer minimum
        given["max_time_s"] = max(rule.max_time_s, given["min_time_s"])
    if "max_time_s" in given and given["min_time_s"] > given["max_time_s"]:
        raise TileOpsError(f"--min-time {given['min_time_s']:g} is above --max-time {given['max_time_s']:g}: a row "
                           "stops at its cap; give a --min-time at most --max-time")
    if "min_samples" in given and given["min_samples"] > rule.max_samples:
        raise TileOpsError(f"--min-samples {given['min_samples']} is above the rule's sample cap "
                           f"({rule.max_samples}); give at most {rule.max_samples}")
    return replace(rule, **given)


def _unwritable(path: Path, exc: OSError, fix: str) -> RunWriteError:
    return RunWriteError(f"{path}: cannot write ({describe_oserror(exc)}); {fix}")


def _open_resumed(run_dir: Path) -> tuple[RunLock, RunInfo, dict[Key, Record], list[str]]:
    """Lock a run directory to resume, set aside a torn tail, read what is done: each row's newest record, where
    it is OK (all under the lock)."""
    if not run_dir.is_dir() or not (run_dir / RUN_FILE).exists():
        raise TileOpsError(f"{run_dir}: no run.json, so nothing to resume; start a new run with --out")
    try:
        lock = lock_run_dir(run_dir)
    except OSError as exc:
        raise _unwritable(run_dir, exc, RESUMED_RUN_DIR_FIX) from None
    try:
        info = read_run_info(run_dir)
        if info is None:
            raise TileOpsError(f"{run_dir}: no run.json, so nothing to resume; start a new run with --out")
        records = run_dir / RECORDS_FILE
        notices: list[str] = []
        # read first: a file that is not the contract is refused before its torn tail is moved (nothing changed)
        latest = {r.key: r for r in iter_records(records, fast_json=False)} if records.exists() else {}  # §5.2
        try:
            aside = set_aside_torn_tail(records) if records.exists() else None
        except OSError as exc:
            raise _unwritable(records, exc, "free space or fix the permissions, then resume again") from None
        if aside is not None:
            notices.append(f"{records} ended in a torn line (a write cut short when the run stopped); "
                           f"moved it aside to {aside.name} before appending")
        done = {k: r for k, r in latest.items() if r.status == "ok"}
    except BaseException:
        lock.release()
        raise
    info.status, info.finished_at, info.exit_code, info.reason = "running", None, None, None
    return lock, info, done, notices


def holds_a_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run a new one must not write over: records, or a run file. A records file
    left empty with no run file is a start killed before its run.json (``_open_new`` creates the records
    first): nothing to resume, so a new run may take the directory, as ``--resume``'s refusal tells it to."""
    records = run_dir / RECORDS_FILE
    try:
        return records.exists() and (records.stat().st_size > 0 or (run_dir / RUN_FILE).exists())
    except OSError:
        return True


def _holds_a_run(run_dir: Path) -> TileOpsError:
    return TileOpsError(f"{run_dir} already holds a run; use --resume {run_dir} to finish it, or another --out")


def _open_new(run_dir: Path) -> RunLock:
    """Create and lock a new run directory: refused when it already holds a run (checked again under the lock:
    :func:`check_run_dir` looked before, without it)."""
    fix = NEW_RUN_DIR_FIX
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = lock_run_dir(run_dir)
    except OSError as exc:
        raise _unwritable(run_dir, exc, fix) from None
    try:
        if holds_a_run(run_dir):
            raise _holds_a_run(run_dir)
        try:
            (run_dir / RECORDS_FILE).touch()  # a run directory is always readable, even stopped before its first row
        except OSError as exc:
            raise _unwritable(run_dir / RECORDS_FILE, exc, fix) from None
    except BaseException:
        lock.release()
        raise
    return lock


@dataclass(frozen=True)
class Checked:
    """What checking a sweep's inputs settled, nothing written: the run and ``--list`` both start from it, so a
    bad input is one sentence and one exit code in both (``--list --profile nosuch`` exited 0)."""

    rule: BlockRule
    planned: list[Planned]
    notes: list[str]  # what planning said (a --shape's other sizes, an --op without the --backend asked)


def check_inputs(options: RunOptions, device: DeviceInfo, *, out: Path | None = None,
                 resume: Path | None = None) -> Checked:
    """Every input of the sweep checked before anything is written: the timer, the stopping rule's knobs, the
    thread count, the selection, the run directory (:func:`check_run_dir`). TileOpsError (exit 2) naming the
    first that is bad."""
    check_timer(options.timer, device.kind)  # --timer cupti without CUPTI
    rule = stopping_rule(device, options)  # knobs that cannot work together
    if resume is None:  # more CPUs than this host gives, or on a GPU (a resumed run: its own count, in prepare)
        cpu_threads(options.threads, device.kind)
    notes: list[str] = []
    planned = plan_rows(Selection.of(options), device, notes, strict=resume is None)
    check_run_dir(out, resume)
    return Checked(rule, planned, notes)


def check_run_dir(out: Path | None, resume: Path | None) -> None:
    """RunWriteError when the run directory could not be written (a file in the way, a read-only mount), or
    TileOpsError when a new run's ``out`` already holds a run; looked at without creating or locking anything
    (the run checks again under its lock)."""
    if resume is not None:
        run_dir, fix = Path(resume), RESUMED_RUN_DIR_FIX
    else:
        run_dir, fix = (Path(out) if out else Path("results")), NEW_RUN_DIR_FIX  # results/<run id> made in it
    why = unwritable_dir(run_dir)
    if why is None and resume is not None:  # files a resumed run appends to or rewrites, someone else's to change
        why = next(filter(None, (unwritable_file(run_dir / name) for name in RESUMED_FILES)), None)
    if why:
        raise RunWriteError(f"{run_dir}: cannot write ({why}); {fix}")
    if resume is None and out is not None and holds_a_run(run_dir):
        raise _holds_a_run(run_dir)


def prepare(options: RunOptions, device: DeviceInfo, *, out: Path | None = None, resume: Path | None = None,
            argv: list[str] | None = None, checked: Checked | None = None) -> PreparedSweep:
    """Plan the rows, lock and open the run directory (run.json says "running").

    The sweep's view of the run's ``options``: the selection, the timer, the stopping rule, the timeouts,
    the compile cache, the traces. ``device`` is the one the run measures, described once by the caller.
    ``out``: a new run's directory (default ``results/<run id>``); ``resume``: the stopped run to finish
    (its run file's options are the ones it keeps, its CPU rows' thread count too: ``RunInfo.threads``). Every
    input is checked here, before the first row: the timer, the thread count (``--threads``), the selection,
    the run directory (writable, not held by another runner, its run file and records readable): ``checked``
    where the caller checked them already (:func:`check_inputs`). Between the rows and the run directory, one
    look at the host (``tileops.bench.quiet``), which run.json records (a resumed run, its own): with
    ``options.require_quiet`` a busy host is HostBusyError (exit 5) and nothing is written.
    """
    checked = checked or check_inputs(options, device, out=out, resume=resume)
    rule, planned, notices = checked.rule, checked.planned, list(checked.notes)
    threads = None if resume else cpu_threads(options.threads, device.kind)  # a resumed run's own count is
    # checked against this host once its run file is read
    quiet = check_quiet(device, require_quiet=options.require_quiet)
    if resume is not None:
        run_dir = Path(resume)
        lock, info, done, repaired = _open_resumed(run_dir)
        notices += repaired
        try:  # the run's own count (given again, or kept in run.json), never whatever this host's default is today
            threads = cpu_threads(options.threads if options.threads is not None else info.threads, device.kind,
                                  source=f"{run_dir}/run.json: threads")
        except BaseException:
            lock.release()
            raise
        notices += _take_settled_pass(run_dir, info, done)
        owed, said = owed_second_visits(run_dir, info, planned, done, repair=True)
        notices += said
        if not owed:  # a settled pass's leftover (its removal, or run.json's write after it, failed): stale
            remove_first_visits(run_dir)
        for name in OUTPUT_ONLY_FIELDS:  # the only options a resumed run may change (resume_request checks)
            setattr(info.options, name, getattr(options, name))
    else:
        run_id = new_run_id()
        run_dir = Path(out) if out else Path("results") / run_id
        lock = _open_new(run_dir)
        info = RunInfo(run_id=run_id, started_at=utcnow(), argv=list(argv) if argv is not None else sys.argv[1:],
                       selection={**Selection.of(options).as_dict(), "device": device.torch_device},
                       options=options)
        done, owed = {}, {}
    info.quiet = quiet.as_dict()
    info.stopping_rule = asdict(rule)
    info.host_allocator = allocator.describe()
    info.threads = threads
    lock.reserve()
    todo = [p for p in planned if p.key not in done]
    compiles = any(p.backend != "torch" and not p.skip_reason for p in todo)
    compile_cache = Path(options.compile_cache) if options.compile_cache else None
    compile_env = compile_cache_env(compile_cache, run_dir) if compiles else {}
    info.rows_total = len(planned)
    trace_dir = None
    if info.options.keep_traces and device.kind == "cuda":
        trace_dir = str((run_dir / TRACES_DIR).absolute())
    try:
        if trace_dir:
            try:
                Path(trace_dir).mkdir(exist_ok=True)
            except OSError as exc:
                raise _unwritable(Path(trace_dir), exc, "--keep-traces writes into the run directory") from None
        save_run_info(run_dir, info, lock)
    except BaseException:
        lock.release()
        raise
    return PreparedSweep(
        device=device, run_dir=run_dir, info=info, env=run_environment(device, info.run_id, threads),
        planned=planned, todo=todo, done=len(planned) - len(todo), rule=rule,
        row_timeout_s=options.row_timeout_s or DEFAULT_ROW_TIMEOUT_S[device.kind], threads=threads,
        timer=options.timer, lock=lock, notices=notices,
        compile_timeout_s=options.compile_timeout_s or DEFAULT_COMPILE_TIMEOUT_S, compile_env=compile_env,
        trace_dir=trace_dir, owed=owed)


def _take_settled_pass(run_dir: Path, info: RunInfo, done: Mapping[Key, Record]) -> list[str]:
    """A run killed after its second pass rewrote the records, before run.json took the pass's figures: they are
    taken from the file kept for it (``firstvisits.SETTLED_PASS_FILE``), so nothing is owed and nothing lost.
    What the run should say of it; none when the pass was not in the records (it is owed again)."""
    if info.options.passes != 2 or info.host_noise:
        return []
    noise = settled_pass(run_dir, {k: len(r.timing.visits_s or ()) for k, r in done.items() if r.timing is not None})
    if noise is None:
        return []
    info.host_noise = {**noise, "prior": "unknown: the run stopped between its second pass's rewrite of the "
                       "records and run.json"}
    remove_first_visits(run_dir)
    return [f"the run stopped after its second pass had rewritten the records, before run.json said so: run.json "
            f"takes the pass's figures from {SETTLED_PASS_FILE}"]


def owed_second_visits(run_dir: Path, info: RunInfo, planned: list[Planned], done: Mapping[Key, Record], *,
                       repair: bool = False) -> tuple[dict[Key, FirstVisit], list[str]]:
    """The rows of a resumed run whose second visit is owed, each with its first-pass record and its first visit's
    blocks (``firstvisits``), and what the run should say of rows it cannot give one.

    Owed: the run visits rows twice and its second pass never settled (``host_noise`` is empty: it was stopped
    before or during the pass), and the row is an eager row recorded OK with one visit. A row whose first visit's
    samples were not kept (a line cut short by a crash, a run of an older tileops) keeps its first visit alone."""
    if info.options.passes != 2 or info.host_noise:
        return {}, []
    blocks = read_first_visits(Path(run_dir) / FIRST_VISITS_FILE, repair=repair)
    owed: dict[Key, FirstVisit] = {}
    missing = 0
    for p in planned:
        rec = done.get(p.key)
        if rec is None or not revisited(p, 2) or rec.timing is None or len(rec.timing.visits_s or ()) != 1:
            continue
        if p.key in blocks:
            owed[p.key] = (p, rec, blocks[p.key])
        else:
            missing += 1
    said = [f"{missing} row(s) recorded OK before this session keep their first visit alone: its samples were not "
            f"kept in {FIRST_VISITS_FILE} (a run of an older tileops, or a line a crash cut short)"] if missing else []
    return owed, said


def plan_rows(sel: Selection, device: DeviceInfo, notes: list[str] | None = None, *,
              strict: bool = True) -> list[Planned]:
    """The rows ``sel`` picks on ``device``; TileOpsError naming the filter that matches nothing (and its valid
    values), or the filters that match nothing together. Not ``strict`` (a resumed run's stored selection),
    a value that names nothing here any more (an op of a manifest directory no longer on the path) is passed
    over: the rows that remain are finished."""
    entries, classes = load_entries(), load_all()
    if strict:
        check_filters(entries, classes, sel)
    planned = plan(entries, classes, sel, device, notes)
    if not planned:
        raise TileOpsError(why_empty(entries, classes, sel, device))
    return planned


def compile_cache_env(given: Path | None, run_dir: Path) -> dict[str, str]:
    """The worker's compile-cache variables (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR): under ``given``
    (``--compile-cache``), else under ``COMPILE_CACHE_DIR`` beside the run directory. They replace whatever
    the environment says: inductor writes its default into the environment when it is first imported (the
    planning asks it for a C++ compiler), so an inherited value cannot be told from its own."""
    root = Path(given) if given is not None else Path(run_dir).absolute().parent / COMPILE_CACHE_DIR
    return cache_env(root.expanduser().absolute())


def race_groups(todo: list[Planned], race: str = "interleaved") -> list[list[Planned]]:
    """The rows to run, grouped: each row (op, label, dtype) that runs on several backends (``interleaved``) as one
    group, its backends raced in one worker (``tileops.bench.race``); every other row (a skipped backend, a row on
    one backend, any row of a ``sequential`` run) alone. The plan puts a row's backends side by side."""
    groups: list[list[Planned]] = []
    for p in todo:
        last = groups[-1] if groups else None
        if (race == "interleaved" and last is not None and not p.skip_reason and not last[-1].skip_reason
                and (last[-1].op, last[-1].row.label, last[-1].case_name) == (p.op, p.row.label, p.case_name)):
            last.append(p)
        else:
            groups.append([p])
    return groups


def _skipped(p: Planned, family: str, env: Environment) -> Record:
    now = utcnow()
    return Record(run_id=env.run_id, op=p.op, family=family, label=p.row.label, dtype=p.case_name,
                  backend=p.backend, params=dict(p.row.params), tags=list(p.row.tags), status="skipped",
                  skip_reason=p.skip_reason, env=env, started_at=now, finished_at=now)


def _second_pass(prep: PreparedSweep, first: dict[Key, FirstVisit],
                 visit: Callable[..., RowResult], observer: SweepObserver, prior: HostPrior | None) -> str | None:
    """Visit every eager row the first pass measured again (``visit`` runs in a fresh worker process), then
    replace the first pass's records by the finished ones in one rewrite (``tileops.bench.revisit``), store
    what this run measured in the host's prior; run.json's ``host_noise`` says what the components were. A
    second visit that fails leaves the row's first visit alone standing. A rewrite that fails (a full disk)
    leaves the first pass's file whole and returns why the run must stop: ``host_noise`` stays empty and the
    first visits stay kept, so ``--resume`` owes the pass again (``owed_second_visits``)."""
    again = [(p, rec) for p, rec, _ in first.values() if revisited(p, 2)]
    if not again:
        return None
    announce = getattr(observer, "pass_started", None)
    if announce is not None:
        announce(2, len(again))
    second_rule = second_visit_rule(prep.rule)
    second: dict[tuple[str, str, str, str], tuple[Record, list[list[float]]]] = {}
    kept_first: list[str] = []
    for j, (p, rec) in enumerate(again, 1):
        observer.row_started(j, len(again), p)
        res = visit(p, second_rule)
        if res.record.status == "ok" and same_timer(rec, res.record):
            second[p.key] = (res.record, res.blocks)
        else:  # a failed visit (a crash restarts the worker) or one timed otherwise: the first visit stands
            kept_first.append(" ".join(p.key))
        observer.row_finished(j, len(again), p, res.record)
    with deferred():
        updated, model = settle({k: (rec, blocks) for k, (_, rec, blocks) in first.items()}, second,
                                prep.device.kind, prior, prep.kind_of)
        info: dict[str, object] = {**model.as_dict(), "kept_first": kept_first}
        try:
            write_settled_pass(prep.run_dir, info, list(second))  # a kill before run.json says it: resumed from it
            replace_records(prep.records_path, updated)
        except OSError as exc:  # a full disk: the first pass's records stand, and the pass is owed
            return (f"cannot write the second pass's records to {prep.records_path}: {describe_oserror(exc)} "
                    "(the first pass's records stand)")
        except ValueError as exc:  # a first-pass line the reader refuses (a bug): said, not retried
            info["why"] = (f"the second pass's records could not replace the first's in {prep.records_path} "
                           f"({exc}): the first pass's stand")
        else:
            info["prior"] = _store_prior(prep, prior, model)
            remove_first_visits(prep.run_dir)  # settled: nothing is owed any more
        prep.info.host_noise = info
    return None


def _store_prior(prep: PreparedSweep, prior: HostPrior | None, model: HostModel) -> str:
    """Fold what this run measured into the host's stored prior; what happened, for run.json."""
    path = prep.noise_prior_path
    if path is None:
        return "not kept (no profile store for this run)"
    if not model.own and model.shift is None:
        return f"{path} unchanged: this run pooled too few rows"
    try:
        write_prior(path, (prior or HostPrior()).updated(model))
    except OSError as exc:
        return f"{path} not updated ({describe_oserror(exc)}): the next run uses what it held"
    return f"{path} updated"


def _append(records_path: Path, rec: Record, first: FirstVisit | None) -> str | None:
    """Append, for a row the second pass visits again, its first visit (what a resumed run pools,
    ``firstvisits``), then the row's record: a signal waits until both are written. The first visit goes first,
    so a record on disk always has its first visit kept: a write that fails leaves the row unrecorded (a resumed
    run runs it again, and its newer first visit wins), never recorded without the samples its second visit
    needs. Why the run must stop (a full disk), or None."""
    path = records_path
    try:
        with deferred():
            if first is not None:
                path = records_path.parent / FIRST_VISITS_FILE
                append_first_visit(path, first[1].key, first[2])
                path = records_path
            append_record(path, rec)
    except OSError as exc:
        return f"cannot write {'a record' if path == records_path else 'a first visit'} to {path}: " \
               f"{describe_oserror(exc)}"
    return None


def _first_pass(prep: PreparedSweep, observer: SweepObserver,
                measure: Callable[[list[Planned]], list[RowResult | None]], first: dict[Key, FirstVisit],
                one_visit: HostModel) -> str | None:
    """Measure every row still to do, group by group (``race_groups``), appending each record as it finishes and
    keeping each measured row's first visit in ``first``; why the run must stop (a record not written), or None."""
    entries = load_entries()
    passes, total, i = prep.info.options.passes, len(prep.todo), 0
    for group in race_groups(prep.todo, prep.info.options.race):
        for j, p in enumerate(group, i + 1):  # a race's rows all start together (each compile is in it)
            observer.row_started(j, total, p)
        for p, res in zip(group, measure(group)):
            i += 1
            rec = _skipped(p, entries[p.op].family, prep.env) if res is None else res.record
            if res is not None and rec.status == "ok" and res.blocks:
                rec = finish(rec, [visit_of(res.blocks)], row_kind(prep.kind_of, rec), one_visit)
                first[p.key] = (p, rec, res.blocks)
            failure = _append(prep.records_path, rec, first.get(p.key) if revisited(p, passes) else None)
            if failure is not None:
                return failure
            observer.row_finished(i, total, p, rec)
    return None


def run(prep: PreparedSweep, observer: SweepObserver | None = None) -> Sweep:
    """Run every row still to do, appending each record as it finishes.

    Ctrl-C or SIGTERM (``tileops.interrupts``) stops the sweep between writes:
    the row in flight is abandoned and its worker killed, every finished record
    is kept, and run.json says ``interrupted``. A record that cannot be written
    stops it too (the next rows could not be written either): run.json says
    ``failed`` with the reason, and the file holds whole records only.
    RunWriteError when run.json itself cannot be written.
    """
    from tileops.device import own_gpu_pids

    observer = observer or _Silent()
    entries = load_entries()
    # this process on the GPU as NVML lists it (a GPU calibration left it a CUDA context): the rows' sensors
    # must not count it as another process on the device
    parent, parent_why = own_gpu_pids(prep.device)
    workers = [Worker(cache_bytes=prep.device.l2_bytes, threads=prep.threads, env=prep.compile_env)]
    passes = prep.info.options.passes
    prior = prep.noise_prior
    one_visit = prior_model(prep.device.kind, prior)  # the first pass's records: the stored prior's interval

    def task_of(p: Planned, rule: BlockRule) -> Task:
        return Task(op=p.op, label=p.row.label, case=p.case, case_name=p.case_name, backend=p.backend,
                    device=prep.device, rule=rule, env=prep.env, timer=prep.timer, trace_dir=prep.trace_dir,
                    row=p.row, parent_pids=tuple(sorted(parent or ())), parent_pids_unknown=parent_why or None,
                    probe=prep.info.options.probe)

    def visit(p: Planned, rule: BlockRule) -> RowResult:
        return workers[-1].run(task_of(p, rule), entries[p.op].family, prep.row_timeout_s, prep.compile_timeout_s)

    def race(group: list[Planned]) -> list[RowResult]:
        """The group's backends raced interleaved (``tileops.bench.race``); those the race could not time (its
        worker lost in the blocks, or while another backend compiled) each visited alone."""
        tasks = [task_of(p, first_visit_rule(prep.rule, p, passes)) for p in group]
        got, alone = workers[-1].race(RaceTask(tuple(tasks)), entries[group[0].op].family, prep.row_timeout_s,
                                      prep.compile_timeout_s)
        by_backend = {r.record.backend: r for r in got}
        for t in alone:
            p = next(q for q in group if q.backend == t.backend)
            by_backend[t.backend] = visit(p, t.rule)
        return [by_backend[p.backend] for p in group]

    def measure(group: list[Planned]) -> list[RowResult | None]:
        """A group's results (``race_groups``): a race's, or one row's (None: skipped)."""
        if len(group) > 1:
            return list(race(group))
        p = group[0]
        return [None if p.skip_reason else visit(p, first_visit_rule(prep.rule, p, passes))]

    stopped: KeyboardInterrupt | None = None
    failure: str | None = None
    first: dict[Key, FirstVisit] = dict(prep.owed)  # a resumed run's earlier first visits, then this session's
    try:
        failure = _first_pass(prep, observer, measure, first, one_visit)
        if failure is None and passes == 2 and any(revisited(p, 2) for p, _, _ in first.values()):
            workers[-1].close()  # the second visits run in a process of their own: its part is measured
            workers.append(Worker(cache_bytes=prep.device.l2_bytes, threads=prep.threads, env=prep.compile_env))
            failure = _second_pass(prep, first, visit, observer, prior)
    except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM as tileops.interrupts.Terminated
        stopped = exc
        workers[-1].kill()  # the row in flight is abandoned: don't wait for it
    finally:
        workers[-1].close()
    with deferred():
        latest = {r.key: r for r in iter_records(prep.records_path, fast_json=False)}  # newest per row; §5.2
        info = prep.info
        info.rows_ok = sum(r.status == "ok" for r in latest.values())
        info.rows_error = sum(r.status == "error" for r in latest.values())
        info.rows_skipped = sum(r.status == "skipped" for r in latest.values())
        info.finished_at = utcnow()
        if failure is not None:
            info.status, info.reason, info.exit_code = "failed", failure, exitcodes.USAGE
        elif stopped is not None:
            info.status, info.exit_code = "interrupted", exit_code(stopped)
            info.reason = f"stopped by {signal_name(stopped)}"
        else:
            info.status = "completed"
        prep.save(info)
        remove_settled_pass(prep.run_dir)  # run.json holds the pass's figures now
    return Sweep(device=prep.device, run_dir=prep.run_dir, info=info, records=list(latest.values()),
                 interrupted=stopped, failure=failure)
