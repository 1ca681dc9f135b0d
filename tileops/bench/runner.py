"""The sweep (M4): plan rows, run each in the worker, append records, then show the SOL answer.

A run directory holds ``records.jsonl`` (one line per row, appended as each
row finishes), ``run.json`` (start, end, status, exit code, health) and, after
pricing, ``roofline.json`` and the roofline plot. Ctrl-C leaves a valid file
and a run marked ``interrupted``; ``--resume DIR`` skips rows already recorded
OK and appends the rest.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from tileops.bench.environment import new_run_id, run_environment
from tileops.bench.execute import Task
from tileops.bench.records import (RECORDS_FILE, Record, RunInfo, append_record, iter_records, load_records,
                                   read_run_info, utcnow, write_run_info)
from tileops.bench.select import Planned, Selection, plan
from tileops.bench.stopping import CPU_RULE, GPU_RULE, QUICK_RULE, StoppingRule
from tileops.bench.timers import check_timer
from tileops.bench.worker import Worker, default_threads
from tileops.device import DeviceInfo, describe_device
from tileops.errors import TileOpsError

EXIT_OK, EXIT_FAILED_ROWS, EXIT_USAGE, EXIT_PHYSICS, EXIT_PUSH, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130


@dataclass
class BenchOptions:
    selection: Selection = field(default_factory=Selection)
    device: str = "auto"
    out: Path | None = None
    resume: Path | None = None
    row_timeout_s: float | None = None
    quick: bool = False
    timer: str = "auto"
    profile: str | None = None  # a profile name or file; default: the one matching the device
    calibrate: str = "auto"  # auto: calibrate a CPU that no profile matches; never
    plot: bool = True
    push_url: str | None = None
    textfile_dir: Path | None = None
    argv: list[str] = field(default_factory=list)


def stopping_rule(device: DeviceInfo, quick: bool) -> StoppingRule:
    if quick:
        return QUICK_RULE
    return CPU_RULE if device.kind == "cpu" else GPU_RULE


def _prepare_dir(opts: BenchOptions) -> tuple[Path, RunInfo, set[tuple[str, str, str, str]]]:
    if opts.resume is not None:
        run_dir = Path(opts.resume)
        info = read_run_info(run_dir)
        if info is None:
            raise TileOpsError(f"{run_dir}: no run.json, so nothing to resume; start a new run with --out")
        done = set()
        if (run_dir / RECORDS_FILE).exists():
            done = {r.key for r in iter_records(run_dir / RECORDS_FILE, strict=False) if r.status == "ok"}
        info.status, info.finished_at, info.exit_code = "running", None, None
        return run_dir, info, done
    run_id = new_run_id()
    run_dir = Path(opts.out) if opts.out else Path("results") / run_id
    if (run_dir / RECORDS_FILE).exists():
        raise TileOpsError(f"{run_dir} already holds a run; use --resume {run_dir} to finish it, or another --out")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RECORDS_FILE).touch()  # a run directory is always readable, even interrupted before its first row
    return run_dir, RunInfo(run_id=run_id, started_at=utcnow()), set()


def _skipped(p: Planned, entry_family: str, env: dict[str, Any]) -> Record:
    now = utcnow()
    return Record(run_id=env["run_id"], op=p.op, family=entry_family, label=p.row.label, dtype=p.case_name,
                  backend=p.backend, params=dict(p.row.params), tags=list(p.row.tags), status="skipped",
                  skip_reason=p.skip_reason, env=env, started_at=now, finished_at=now)


def run_bench(opts: BenchOptions, console: Console | None = None) -> int:
    console = console or Console()
    from tileops.manifest.load import load_entries
    from tileops.ops.registry import load_all

    try:
        device = describe_device(opts.device)
    except ValueError as exc:
        raise TileOpsError(str(exc)) from None
    check_timer(opts.timer, device.kind)  # --timer cupti without CUPTI: exit 2 before anything is written
    run_dir, info, done = _prepare_dir(opts)
    threads = default_threads() if device.kind == "cpu" else None
    env = run_environment(device, info.run_id, threads)
    entries, classes = load_entries(), load_all()
    planned = plan(entries, classes, opts.selection, device)
    if not planned:
        raise TileOpsError("no workload row matches the selection; list rows with `tileops ops NAME`")
    todo = [p for p in planned if p.key not in done]
    rule = stopping_rule(device, opts.quick)
    timeout = opts.row_timeout_s or (60.0 if device.kind == "cpu" else 180.0)
    info.argv = opts.argv or sys.argv[1:]
    info.selection = {**opts.selection.as_dict(), "device": device.device}
    info.rows_total = len(planned)
    write_run_info(run_dir, info)

    console.print(f"[bold]tileops bench[/] run {info.run_id} on {device.name} ({device.device}"
                  + (f", {threads} threads" if threads else "") + f") -> {run_dir}")
    if done:
        console.print(f"resuming: {len(done)} row(s) already recorded OK, {len(todo)} to run")
    records_path = run_dir / RECORDS_FILE
    worker = Worker(cache_bytes=device.l2_bytes, threads=threads)
    status = "completed"
    try:
        _sweep(todo, entries, env, rule, opts, device, worker, timeout, records_path, console)
    except KeyboardInterrupt:
        status = "interrupted"
    finally:
        worker.close()
    records = load_records([records_path]) if records_path.exists() else []
    latest = {r.key: r for r in records}  # a resumed run keeps the newest record per row
    info.rows_ok = sum(r.status == "ok" for r in latest.values())
    info.rows_error = sum(r.status == "error" for r in latest.values())
    info.rows_skipped = sum(r.status == "skipped" for r in latest.values())
    if status == "interrupted":
        info.status, info.finished_at, info.exit_code = "interrupted", utcnow(), EXIT_INTERRUPTED
        write_run_info(run_dir, info)
        console.print(f"[yellow]interrupted[/]: {len(latest)} row(s) recorded in {records_path}; "
                      f"finish with `tileops bench --resume {run_dir}`")
        return EXIT_INTERRUPTED
    rc, h = _report(list(latest.values()), device, opts, run_dir, console)
    info.health = {"ok": h.ok, "breaches": h.breaches, "by_verdict": h.by_verdict,
                   "blanks_by_reason": h.blanks_by_reason} if h is not None else {}
    info.status, info.finished_at = "completed", utcnow()
    if info.rows_error and rc == EXIT_OK:
        rc = EXIT_FAILED_ROWS
    info.exit_code = rc
    write_run_info(run_dir, info)
    if opts.push_url or opts.textfile_dir:
        from tileops.export.pipeline import export_run

        push_rc = export_run(run_dir, opts.push_url, opts.textfile_dir, profile=opts.profile)
        if push_rc and rc == EXIT_OK:
            rc = push_rc
            info.exit_code = rc
            write_run_info(run_dir, info)
    if info.rows_error:
        console.print(f"[red]{info.rows_error} row(s) failed[/] (error records in {records_path})")
    return rc


def _sweep(todo: list[Planned], entries: dict, env: dict, rule: StoppingRule, opts: BenchOptions,
           device: DeviceInfo, worker: Worker, timeout: float, records_path: Path, console: Console) -> None:
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console,
                        transient=False, disable=not console.is_terminal)
    with progress:
        bar = progress.add_task("benchmarking", total=len(todo))
        for i, p in enumerate(todo, 1):
            desc = f"{p.op} {p.row.label} {p.case_name}"
            progress.update(bar, description=desc)
            if p.skip_reason:
                rec = _skipped(p, entries[p.op].family, env)
            else:
                task = Task(op=p.op, label=p.row.label, case=p.case, case_name=p.case_name, backend=p.backend,
                            device=device.device, rule=rule, timer=opts.timer, env=env)
                rec = worker.run(task, timeout).record
            append_record(records_path, rec)
            progress.advance(bar)
            if not console.is_terminal:  # logs (docker, CI): one line per row
                console.print(f"[{i}/{len(todo)}] {desc}: {_row_line(rec)}", highlight=False)
            elif rec.status != "ok":
                progress.console.print(f"  {desc}: {_row_line(rec)}", highlight=False)


def _row_line(rec: Record) -> str:
    if rec.status == "ok" and rec.timing:
        return f"{rec.timing.median_s * 1e6:.1f} us (n={rec.timing.n}, noise {rec.timing.rel_noise:.1%})"
    if rec.status == "skipped":
        return f"skipped: {rec.skip_reason}"
    return f"ERROR ({rec.error.kind}): {rec.error.message.splitlines()[0][:160]}" if rec.error else "error"


def _report(records: list[Record], device: DeviceInfo, opts: BenchOptions, run_dir: Path, console: Console):
    """Price the run, print the SOL table, write roofline.json and the plot. Returns (exit code, health)."""
    from tileops.profiles import find_profile, load_profiles, select_profile
    from tileops.report import render, render_summary
    from tileops.roofline import price_all

    profile = find_profile(opts.profile) if opts.profile else select_profile(device.name, load_profiles())
    if profile is None and device.kind == "cpu" and opts.calibrate == "auto":
        profile = _calibrate_cpu(console)
    if profile is None:
        console.print(f"[yellow]no profile matches {device.name!r}[/]: SOL is left blank (never guessed). "
                      "Run `tileops calibrate` on this device, or pass --profile.")
    priced = price_all(records, profile)
    h = render_summary(priced, console, title=f"SOL efficiency — {device.name}"
                       + (f" (profile {profile.name})" if profile else ""))
    (run_dir / "roofline.json").write_text(render(priced, "json"), encoding="utf-8")
    if opts.plot and profile is not None:
        from tileops.report.plot import write_plot

        paths = write_plot(priced, profile, run_dir)
        console.print("roofline plot: " + ", ".join(str(p) for p in paths))
    return (EXIT_OK if h.ok else EXIT_PHYSICS), h


def _calibrate_cpu(console: Console):
    """A CPU no profile matches is calibrated once (stored in the profile store), so SOL is measured, not guessed."""
    from tileops.calibrate.run import calibrate_cpu
    from tileops.profiles import write_profile

    console.print("no profile matches this CPU: calibrating it once (bandwidth mixes, FMA and matmul peaks; "
                  "pass --calibrate never to skip)")
    profile = calibrate_cpu(quick=False)
    path = write_profile(profile)
    console.print(f"wrote CPU profile {path}")
    return profile
