"""``tileops bench`` composed: check inputs, measure, price once, then every output from that pricing.

The order is what a user sees happen::

    0. a resumed run restores its selection and options from run.json (a flag that differs is refused)
    1. check every input: the profile, the sinks, the device, the rows, the run directory (locked from
       here to the end; a bad --profile, --push or --out fails here, before any row)
    2. calibrate the device first when the store holds no calibration of it, or one older than
       --calibration-max-age (quick on a GPU, full on a CPU; tileops.pipeline.calibration)
    3. the sweep (tileops.bench): one record per row, appended as each finishes
    4. price the records once (tileops.roofline) and decide the run's health there
    5. from that one pricing: the table, roofline.json, the plot, run.json's health, the metrics sinks

Nothing is read back from disk between steps and no profile is chosen twice.
Ctrl-C and SIGTERM stop the run between writes (run.json: ``interrupted``,
exit 130 or 143); a file that cannot be written (a full disk) stops it too
(run.json: ``failed`` with the reason, exit 2). Either way every finished record
is kept, and ``tileops bench --resume DIR`` finishes the run.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from tileops import exitcodes, interrupts
from tileops.bench import sweep as bench
from tileops.bench.select import Selection
from tileops.calibrate.results import device_profile_reader
from tileops.device import DeviceInfo
from tileops.errors import TileOpsError
from tileops.pipeline.calibration import DEFAULT_MAX_AGE, ensure_calibrated
from tileops.pipeline.progress import CalibrationProgress, RowProgress
from tileops.profiles import Profile, ProfileChooser
from tileops.records import RunOptions, read_run_info, utcnow
from tileops.roofline import Health, Priced, health, price_all

if TYPE_CHECKING:  # the export package (prometheus_client) loads only when a run is exported
    from tileops.export.push import RetryPolicy


@dataclass
class OutputOptions:
    """What to do with the measured run: pricing, files, metrics sinks."""

    profile: str | None = None  # a profile name or file; default: the profile matching the device
    calibrate: str = "auto"  # tileops.pipeline.calibration.POLICIES: auto (quick on a GPU, full on a CPU), never
    calibration_max_age: dt.timedelta = DEFAULT_MAX_AGE
    plot: bool = True
    push_url: str | None = None
    textfile_dir: Path | None = None
    job: str | None = None
    instance: str | None = None
    push_policy: RetryPolicy | None = None
    metrics_detail: str = "lean"  # tileops.export.metrics.DETAILS


@dataclass
class BenchRequest:
    sweep: bench.SweepOptions = field(default_factory=bench.SweepOptions)
    output: OutputOptions = field(default_factory=OutputOptions)


# --------------------------------------------------------------------------- the request, new or resumed

#: The flags a run keeps in run.json, by the name the command passes them under, and how a person writes them.
SELECTION_FLAGS = {"ops": "--op", "families": "--family", "labels": "--label", "tags": "--tag",
                   "backends": "--backend", "dtypes": "--dtype", "all_rows": "--all-rows", "shapes": "--shape"}
OPTION_FLAGS = {"device": "--device", "quick": "--quick", "row_timeout_s": "--row-timeout", "timer": "--timer",
                "profile": "--profile", "calibrate": "--calibrate", "plot": "--no-plot", "push_url": "--push",
                "textfile_dir": "--textfile", "job": "--job", "instance": "--instance",
                "compile_cache": "--compile-cache", "compile_timeout_s": "--compile-timeout",
                "keep_traces": "--keep-traces"}


def _stored_path(value: str | Path | None, *, only_files: bool = False) -> str | None:
    """A path as run.json keeps it: absolute, so a run resumes from any directory (a profile *name* stays)."""
    if value is None:
        return None
    p = Path(value)
    if only_files and not (p.suffix in (".yaml", ".yml") or p.is_file()):
        return str(value)
    return str(p.expanduser().absolute())


def new_request(flags: dict[str, Any], *, out: Path | None = None, argv: list[str] | None = None,
                push_policy: RetryPolicy | None = None) -> BenchRequest:
    """A new run's request from the flags given (``SELECTION_FLAGS`` and ``OPTION_FLAGS`` names; absent
    ones take their defaults)."""
    unknown = set(flags) - set(SELECTION_FLAGS) - set(OPTION_FLAGS)
    if unknown:
        raise TypeError(f"unknown bench flag name(s) {sorted(unknown)}")
    sel = Selection(**{k: flags[k] for k in SELECTION_FLAGS if flags.get(k) is not None})
    opts = RunOptions(**{k: flags[k] for k in OPTION_FLAGS if flags.get(k) is not None})
    opts.profile = _stored_path(opts.profile, only_files=True)
    opts.textfile_dir = _stored_path(opts.textfile_dir)
    opts.compile_cache = _stored_path(opts.compile_cache)
    return _request(sel, opts, out=out, resume=None, argv=argv or [], push_policy=push_policy)


def resume_request(run_dir: Path, flags: dict[str, Any], *, out: Path | None = None,
                   argv: list[str] | None = None, push_policy: RetryPolicy | None = None) -> BenchRequest:
    """The request that finishes the run in ``run_dir``: its own selection and options from run.json.

    A flag given again with the run's own value is accepted; one that differs is
    refused (TileOpsError, exit 2): a resumed run that measured other rows, or
    the same rows another way, would mix two runs in one file. A run file from
    before the options were stored resumes with the defaults.
    """
    info = read_run_info(run_dir) if Path(run_dir).is_dir() else None
    if info is None:
        raise TileOpsError(f"{run_dir}: no run.json, so nothing to resume; start a new run with --out")
    saved_sel = {k: v for k, v in info.selection.items() if k != "device"}
    bad = sorted(set(saved_sel) - set(SELECTION_FLAGS))
    if bad:
        raise TileOpsError(f"{run_dir}/run.json: selection holds unknown key(s) {bad}; it was not written by this "
                           "version of tileops: start a new run with --out")
    saved: dict[str, Any] = {**{k: (False if k == "all_rows" else []) for k in SELECTION_FLAGS}, **saved_sel,
                             **dataclasses.asdict(info.options)}
    resolved_device = info.selection.get("device")
    differ = []
    for key, value in flags.items():
        if value is None:
            continue
        if key == "device":
            same = value in (saved["device"], resolved_device)
        elif key in SELECTION_FLAGS and key != "all_rows":
            same = sorted(value) == sorted(saved[key])
        elif key == "profile":
            same = _stored_path(value, only_files=True) == saved["profile"]
        elif key in ("textfile_dir", "compile_cache"):
            same = _stored_path(value) == saved[key]
        else:
            same = value == saved[key]
        if not same:
            flag = SELECTION_FLAGS.get(key) or OPTION_FLAGS[key]
            differ.append(f"{flag} (the run: {_show(key, saved[key])})")
    if out is not None and Path(out).absolute() != Path(run_dir).absolute():
        differ.append(f"--out (the run is {run_dir})")
    if differ:
        raise TileOpsError(f"--resume {run_dir} finishes the run with the selection and options it was started "
                           f"with; these flags differ: {'; '.join(differ)}. Drop them, or start a new run with "
                           "--out NEW_DIR")
    sel = Selection(**saved_sel)
    opts = dataclasses.replace(info.options)
    if resolved_device:  # the device the run measured, not whatever "auto" finds today
        opts.device = resolved_device
    return _request(sel, opts, out=None, resume=Path(run_dir), argv=argv or [], push_policy=push_policy)


def _show(key: str, value: Any) -> str:
    if key == "plot":
        return "plots" if value else "--no-plot"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ", ".join(map(str, value)) if value else "not given"
    return "not given" if value is None else str(value)


def _request(sel: Selection, opts: RunOptions, *, out: Path | None, resume: Path | None, argv: list[str],
             push_policy: RetryPolicy | None) -> BenchRequest:
    return BenchRequest(
        sweep=bench.SweepOptions(selection=sel, device=opts.device, out=out, resume=resume,
                                 row_timeout_s=opts.row_timeout_s, quick=opts.quick, timer=opts.timer, argv=argv,
                                 compile_cache=Path(opts.compile_cache) if opts.compile_cache else None,
                                 compile_timeout_s=opts.compile_timeout_s, run_options=opts),
        output=OutputOptions(profile=opts.profile, calibrate=opts.calibrate, plot=opts.plot, push_url=opts.push_url,
                             textfile_dir=Path(opts.textfile_dir) if opts.textfile_dir else None, job=opts.job,
                             instance=opts.instance, push_policy=push_policy))


# --------------------------------------------------------------------------- the run


def run_bench(req: BenchRequest, console: Console, err: Console | None = None) -> int:
    """Run ``tileops bench``; returns its exit code (tileops.exitcodes).

    ``console`` (stdout) gets the run's results: its header, the SOL table and health, the files written.
    ``err`` (default: a console on stderr) gets everything else: per-row progress, notes, warnings, errors,
    so ``tileops bench > table.txt`` keeps the table apart and a log keeps the errors on stderr.
    """
    err = err if err is not None else Console(stderr=True)
    with interrupts.handled():
        out = req.output
        # validated before the first row; each device is priced on its own calibration where the store has one
        chooser = ProfileChooser.resolve(out.profile, per_device=device_profile_reader())
        if out.push_url or out.textfile_dir:
            from tileops.export.sinks import check_sinks

            check_sinks(out.push_url, out.textfile_dir)
        prep = bench.prepare(req.sweep)  # the run directory is locked from here
        try:
            return _run(prep, chooser, out, console, err)
        except KeyboardInterrupt as exc:  # outside the sweep: calibrating first, or pricing after
            info = prep.info
            info.status, info.exit_code = "interrupted", interrupts.exit_code(exc)
            info.reason = f"stopped by {interrupts.signal_name(exc)}"
            info.finished_at = info.finished_at or utcnow()
            return _stopped(prep, err, info.exit_code)
        except bench.RunWriteError as exc:
            _say(err, f"[red]error[/]: {exc}")
            return exitcodes.USAGE
        except OSError as exc:  # an output after the sweep (roofline.json, the plot, a calibrated profile)
            where = f"{exc.filename}: " if exc.filename else ""
            info = prep.info
            info.status, info.exit_code = "failed", exitcodes.USAGE
            info.reason = f"cannot write {where}{bench.describe_oserror(exc)}"
            info.finished_at = info.finished_at or utcnow()
            return _failed(prep, err)
        except Exception as exc:  # reported by the CLI (TileOpsError: exit 2); run.json must not say "running"
            _mark_failed(prep, str(exc) if isinstance(exc, TileOpsError) else f"{type(exc).__name__}: {exc}")
            raise
        finally:
            prep.close()


def _mark_failed(prep: bench.PreparedSweep, reason: str) -> None:
    info = prep.info
    if info.status != "running":
        return
    info.status, info.reason, info.exit_code = "failed", reason, exitcodes.USAGE
    info.finished_at = utcnow()
    try:
        prep.save(info)
    except bench.RunWriteError:
        pass  # the error being raised says what went wrong


def _say(console: Console, text: str) -> None:
    """A message naming paths and commands: never wrapped mid-path, so it can be copied and grepped."""
    console.print(text, soft_wrap=True, highlight=False)


def _stopped(prep: bench.PreparedSweep, err: Console, rc: int) -> int:
    try:
        prep.save(prep.info)
    except bench.RunWriteError as exc:
        _say(err, f"[red]error[/]: {exc}")
    _say(err, f"[yellow]interrupted[/] ({prep.info.reason}): the records written are kept in "
                  f"{prep.records_path}; finish with `tileops bench --resume {prep.run_dir}`")
    return rc


def _failed(prep: bench.PreparedSweep, err: Console) -> int:
    try:
        prep.save(prep.info)
    except bench.RunWriteError as exc:
        _say(err, f"[red]error[/]: {exc}")
        return exitcodes.USAGE
    _say(err, f"[red]error[/]: {prep.info.reason}. The records already written in {prep.records_path} are "
                  f"whole and kept; run.json says failed. Free space (or fix the permissions), then finish the run "
                  f"with `tileops bench --resume {prep.run_dir}`")
    return exitcodes.USAGE


def _run(prep: bench.PreparedSweep, chooser: ProfileChooser, out: OutputOptions, console: Console,
         err: Console) -> int:
    device = prep.device
    console.print(f"[bold]tileops bench[/] run {prep.info.run_id} on {device.name} ({device.torch_device}"
                  + (f", {prep.threads} threads" if prep.threads else "") + f") -> {prep.run_dir}")
    for notice in prep.notices:
        _say(err, f"[yellow]note[/]: {notice}")
    _say(err, _backends_line(prep))
    with CalibrationProgress(err) as progress:
        calibrated = ensure_calibrated(device, chooser, out.calibrate, out.calibration_max_age,
                                       lambda text: _say(err, text), progress)
    profile = chooser(device.name, device.key)
    quick_note = calibrated.quick_note() if calibrated is not None and profile is not None else None
    if profile is None:
        _say(err, f"[yellow]warning: no profile matches {device.name!r}[/]: SOL will be left blank (never guessed). "
                  "Run `tileops calibrate` on this device, or pass --profile.")
    if prep.done:
        console.print(f"resuming: {prep.done} row(s) already recorded OK, {len(prep.todo)} to run")

    with RowProgress(err, len(prep.todo)) as progress:
        result = bench.run(prep, progress)
    info = result.info
    if result.failure:
        return _failed(prep, err)
    if result.interrupted is not None:
        _say(err, f"[yellow]interrupted[/] ({info.reason}): {len(result.records)} row(s) recorded in "
                      f"{result.records_path}; finish with `tileops bench --resume {result.run_dir}`")
        return info.exit_code or exitcodes.INTERRUPTED

    priced = price_all(result.records, chooser)
    h = health(priced)
    _report(priced, h, device, profile, result.run_dir, out, console)
    if quick_note is not None:  # the summary says what the SOL figures rest on: never a rough one unsaid
        _say(console, f"[yellow]note[/]: {quick_note}")
    rc = exitcodes.OK if h.ok else exitcodes.PHYSICS
    if info.rows_error and rc == exitcodes.OK:
        rc = exitcodes.FAILED
    info.health = h.as_dict()  # ok, state (held / partial / not-judged / breached) and each ceiling's check
    info.exit_code = rc
    prep.save(info)  # the run's final state, before any network work

    if out.push_url or out.textfile_dir:
        push_rc = _export(result, priced, chooser, out)
        if push_rc and rc == exitcodes.OK:
            rc = info.exit_code = push_rc
            prep.save(info)
    if info.rows_error:
        _say(err, f"[red]error: {info.rows_error} row(s) failed[/] (error records in {result.records_path})")
    return rc


def _backends_line(prep: bench.PreparedSweep) -> str:
    """Which backends run, why when by default, and where compiled code is kept."""
    from tileops.bench.select import DEFAULT_BACKENDS

    names = list(dict.fromkeys(p.backend for p in prep.planned))
    line = f"backends: {', '.join(names)}"
    if not prep.info.selection.get("backends"):
        default = ", ".join(DEFAULT_BACKENDS[prep.device.kind])
        line += (" (this device's default; --backend all adds torch.compile)" if prep.device.kind == "cpu"
                 else f" (this device's default: {default} where the op has them)")
    if prep.compile_cache is not None:
        line += f"; compile cache {prep.compile_cache}"
    if any(b != "torch" for b in names):
        line += "; compile time is reported apart, never in a row's time"
    return line


def _report(priced: list[Priced], h: Health, device: DeviceInfo, profile: Profile | None, run_dir: Path,
            out: OutputOptions, console: Console) -> None:
    """The SOL table, roofline.json and the plot, all from one pricing."""
    from tileops.fsutil import write_atomic
    from tileops.report import render, render_summary

    render_summary(priced, console, health=h, title=f"SOL efficiency — {device.name}"
                   + (f" (profile {profile.name})" if profile else ""))
    write_atomic(run_dir / "roofline.json", render(priced, "json", health=h))
    if out.plot and profile is not None:
        from tileops.report.plot import write_plot  # matplotlib only when a plot is drawn

        paths = write_plot(priced, profile, run_dir)
        console.print("roofline plot: " + ", ".join(str(p) for p in paths))


def _export(result: bench.Sweep, priced: list[Priced], chooser: ProfileChooser, out: OutputOptions) -> int:
    """Metrics of the run just priced, to the textfile directory and/or the Pushgateway."""
    from tileops.export.calibration import device_calibrations
    from tileops.export.push import DEFAULT_JOB, RetryPolicy
    from tileops.export.sinks import export_snapshots
    from tileops.export.snapshot import build_snapshots
    from tileops.records import read_audit

    snapshots = build_snapshots(result.run_dir, result.info, priced, chooser, read_audit(result.run_dir),
                                device_calibrations())
    return export_snapshots(snapshots, out.push_url, out.textfile_dir, job=out.job or DEFAULT_JOB,
                            instance=out.instance, policy=out.push_policy or RetryPolicy(), detail=out.metrics_detail)
