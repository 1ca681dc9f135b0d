"""``tileops bench`` composed: check inputs, measure, price once, then every output from that pricing.

The order is what a user sees happen::

    0. a resumed run restores everything it was started with from run.json (a flag that differs is refused)
    1. check every input: the profile, the sinks, the device (described once), the rows; look at the host
       (load, steal, other processes on the GPU: a warning, or with --require-quiet a refusal, exit 5, before
       anything is written); then the run directory (locked from here to the end; a bad --profile, --push or
       --out fails here, before any row); run.json records the look at the host (``quiet``)
    2. calibrate the device first when the store holds no calibration of it, or one older than
       --calibration-max-age (quick on a GPU, full on a CPU; tileops.pipeline.calibrate)
    3. the sweep (tileops.bench): one record per row, appended as each finishes
    4. price the records once (tileops.roofline) and decide the run's health there
    5. from that one pricing: the table, roofline.json, the plot, run.json's health, the metrics sinks

Nothing is read back from disk between steps and no profile is chosen twice.
The run's options are one :class:`~tileops.records.RunOptions`, kept in
run.json; the sweep and the outputs read their views of it. Ctrl-C and SIGTERM
stop the run between writes (run.json: ``interrupted``, exit 130 or 143); a
file that cannot be written (a full disk) stops it too (run.json: ``failed``
with the reason, exit 2). Either way every finished record is kept, and
``tileops bench --resume DIR`` finishes the run.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Mapping

from tileops import exitcodes, interrupts
from tileops.bench import sweep
from tileops.bench.select import Selection
from tileops.ceilings.runtime import check_device
from tileops.device import DeviceInfo, describe_device
from tileops.errors import TileOpsError
from tileops.pipeline.calibrate import DEFAULT_MAX_AGE, check_bench_store, ensure_calibrated
from tileops.defaults import METRICS_DETAIL as DEFAULT_DETAIL
from tileops.defaults import PUSH_ATTEMPTS, PUSH_BACKOFF_S, PUSH_TIMEOUT_S
from tileops.pipeline.export import Sinks
from tileops.pipeline.hostnotes import energy_reasons, not_yet_said, said_path
from tileops.pipeline.listing import Listed, list_plan
from tileops.pipeline.outcome import exit_code
from tileops.pipeline.progress import RowProgress
from tileops.profiles import Profile, ProfileChooser
from tileops.records import (OUTPUT_ONLY_FIELDS, SELECTION_FIELDS, Record, RunInfo, RunOptions, read_run_info,
                             utcnow)
from tileops.report.printer import Kind, Printer, make_printer
from tileops.report.summary import ITEM
from tileops.roofline import Health, Priced, health, price_all

if TYPE_CHECKING:  # the export package (prometheus_client) loads only when a run is exported
    from tileops.export.sinks import Published


# --------------------------------------------------------------------------- the request, new or resumed


@dataclass(frozen=True)
class BenchRequest:
    """One ``tileops bench``: the run's options, and where the run is (a new directory, or one to resume)."""

    options: RunOptions = field(default_factory=RunOptions)
    out: Path | None = None  # a new run's directory; None: results/<run id>
    resume: Path | None = None  # the stopped run this request finishes
    argv: list[str] = field(default_factory=list)  # the command that started the run (not a resume)
    #: a resumed run's output-only flags given with another value than the run's, each as said to the user
    changed: list[str] = field(default_factory=list)

    @property
    def selection(self) -> Selection:
        """The sweep's view: which rows."""
        return Selection.of(self.options)

    @property
    def sinks(self) -> Sinks:
        """The metrics' view: where they go and how (the exporter's defaults where none was given)."""
        o = self.options
        return Sinks(push_url=o.push_url, textfile_dir=Path(o.textfile_dir) if o.textfile_dir else None, job=o.job,
                     instance=o.instance,
                     push_attempts=PUSH_ATTEMPTS if o.push_attempts is None else o.push_attempts,
                     push_backoff_s=PUSH_BACKOFF_S if o.push_backoff_s is None else o.push_backoff_s,
                     push_timeout_s=PUSH_TIMEOUT_S if o.push_timeout_s is None else o.push_timeout_s,
                     detail=o.metrics_detail or DEFAULT_DETAIL)

    @property
    def calibration_max_age(self) -> dt.timedelta:
        s = self.options.calibration_max_age_s
        return DEFAULT_MAX_AGE if s is None else dt.timedelta(seconds=s)


#: RunOptions fields that hold a path: stored absolute, so a run resumes from any working directory.
_PATHS = ("textfile_dir", "compile_cache")


def _stored_path(value: str | Path | None, *, only_files: bool = False) -> str | None:
    """A path as run.json keeps it: absolute, so a run resumes from any directory (a profile *name* stays)."""
    if value is None:
        return None
    p = Path(value)
    if only_files and not (p.suffix in (".yaml", ".yml") or p.is_file()):
        return str(value)
    return str(p.expanduser().absolute())


def _stored(key: str, value: Any) -> Any:
    """A given option's value as run.json keeps it."""
    if key == "profile":
        return _stored_path(value, only_files=True)
    if key in _PATHS:
        return _stored_path(value)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return value


_FIELDS = frozenset(f.name for f in dataclasses.fields(RunOptions))


def new_request(given: Mapping[str, Any], *, out: Path | None = None, argv: list[str] | None = None) -> BenchRequest:
    """A new run's request from the options given (RunOptions field names; None or absent: the default)."""
    unknown = set(given) - _FIELDS
    if unknown:
        raise TypeError(f"unknown bench option name(s) {sorted(unknown)}")
    options = RunOptions(**{k: _stored(k, v) for k, v in given.items() if v is not None})
    return BenchRequest(options, out=out, argv=list(argv or []))


def resume_request(run_dir: Path, given: Mapping[str, Any], *, flags: Mapping[str, str] | None = None,
                   out: Path | None = None, argv: list[str] | None = None) -> BenchRequest:
    """The request that finishes the run in ``run_dir``: everything it was started with, from run.json.

    A measurement option (``records.MEASUREMENT_FIELDS``) given again with the run's own value is accepted; one
    that differs is refused (TileOpsError, exit 2) naming its flag (``flags``: field -> the flag a person writes)
    and the run's value: a resumed run that measured other rows, or the same rows another way, would mix two
    runs. An output-only option (``records.OUTPUT_ONLY_FIELDS``: the plot, the metrics' sinks and detail) takes
    the value given: what is done with the priced rows is no part of their measurement. A run file from before
    an option was stored resumes with its default; one from before the selection was part of the options takes
    the selection from its ``selection``. A CPU run started
    without ``--threads`` keeps the thread count it resolved to (``RunInfo.threads``), so ``--threads`` given on
    the resume is held to that count, and a host that now gives the process fewer CPUs refuses to resume.
    """
    info = read_run_info(run_dir) if Path(run_dir).is_dir() else None
    if info is None:
        raise TileOpsError(f"{run_dir}: no run.json, so nothing to resume; start a new run with --out")
    options = _saved_options(run_dir, info)
    resolved_device = info.selection.get("device")
    if options.threads is None and info.threads is not None:  # the count it resolved to, not today's default
        options.threads = info.threads

    def flag(key: str) -> str:
        return (flags or {}).get(key) or "--" + key.replace("_", "-")

    differing = _differing(given, options, resolved_device)
    differ = [f"{flag(key)} (the run: {_show(key, saved)})" for key, saved in differing
              if key not in OUTPUT_ONLY_FIELDS]
    changed = []
    for key, saved in differing:
        if key in OUTPUT_ONLY_FIELDS:
            setattr(options, key, _stored(key, given[key]))
            said = "--plot/--no-plot" if key == "plot" else flag(key)
            changed.append(f"{said}: {_show(key, getattr(options, key))} (the run: {_show(key, saved)})")
    if out is not None and Path(out).absolute() != Path(run_dir).absolute():
        differ.append(f"--out (the run is {run_dir})")
    if differ:
        raise TileOpsError(f"--resume {run_dir} finishes the run with the selection and measurement options it "
                           f"was started with; these flags differ: {'; '.join(differ)}. Drop them, or start a new "
                           "run with --out NEW_DIR (output-only flags may change: "
                           f"{', '.join(flag(k) for k in OUTPUT_ONLY_FIELDS)})")
    if resolved_device:  # the device the run measured, not whatever "auto" finds today
        options.device = resolved_device
    return BenchRequest(options, resume=Path(run_dir), argv=list(argv or []), changed=changed)


def _saved_options(run_dir: Path, info: RunInfo) -> RunOptions:
    """The options a run was started with; its selection from ``selection`` where run.json is older than the
    selection's place among the options."""
    saved_sel = {k: v for k, v in info.selection.items() if k != "device"}
    bad = sorted(set(saved_sel) - set(SELECTION_FIELDS))
    if bad:
        raise TileOpsError(f"{run_dir}/run.json: selection holds unknown key(s) {bad}; it was not written by this "
                           "version of tileops: start a new run with --out")
    options = dataclasses.replace(info.options)
    for key, value in saved_sel.items():
        if not getattr(options, key):
            setattr(options, key, value)
    return options


def _differing(given: Mapping[str, Any], options: RunOptions, resolved_device: str | None
               ) -> list[tuple[str, Any]]:
    """(field, the run's value) of every option given again with another value than the run's."""
    differ = []
    for key, value in given.items():
        if value is None:
            continue
        if key not in _FIELDS:
            raise TypeError(f"unknown bench option name {key!r}")
        saved = getattr(options, key)
        if key == "device":
            same = value in (saved, resolved_device)
        elif key in SELECTION_FIELDS and key != "all_rows":
            same = sorted(value) == sorted(saved)
        else:
            same = _stored(key, value) == saved
        if not same:
            differ.append((key, saved))
    return differ


def _show(key: str, value: Any) -> str:
    if key == "plot":
        return "plots" if value else "no plot"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ", ".join(map(str, value)) if value else "not given"
    return "not given" if value is None else str(value)


# --------------------------------------------------------------------------- the run


@dataclass
class BenchResult:
    """How a run ended: its run file (status, counts, health), and what the metrics sinks did."""

    run_dir: Path | None
    info: RunInfo | None
    health: Health | None = None
    published: Published | None = None
    unwritable: bool = False  # its own files could not be written (a full disk): run.json says why

    @property
    def exit_code(self) -> int:
        info, h, p = self.info, self.health, self.published
        stopped = None
        if info is not None and info.status == "interrupted":
            stopped = info.exit_code or exitcodes.INTERRUPTED
        return exit_code(stopped=stopped, unwritable=self.unwritable or (info is not None and info.status == "failed"),
                         breached=h is not None and not h.ok, failed=info.rows_error if info is not None else 0,
                         sinks_unwritable=p is not None and p.textfile_error is not None,
                         push_failed=p is not None and bool(p.failed_pushes))


def bench(given: Mapping[str, Any], *, resume: Path | None = None, out: Path | None = None,
          flags: Mapping[str, str] | None = None, argv: list[str] | None = None, output_format: str = "auto",
          list_only: bool = False) -> BenchResult | Listed:
    """``tileops bench`` whole, so the command only parses: the request (a new run from ``given``, or the run in
    ``resume`` finished, a flag that differs from its own refused before anything is shown), the printer
    ``output_format`` names, then the ``--list`` plan or the run itself."""
    if resume is not None:
        req = resume_request(resume, given, flags=flags, out=out, argv=argv)
    else:
        req = new_request(given, out=out, argv=argv)
    printer = make_printer(output_format)
    if list_only:
        return list_plan(req, printer, check_request(req))
    return run_bench(req, printer)


@dataclass(frozen=True)
class CheckedRequest:
    """A request whose every input was checked, nothing written: the profile chooser, the device (described
    once), and the sweep's rule and rows."""

    chooser: ProfileChooser
    device: DeviceInfo
    sweep: sweep.Checked


def check_request(req: BenchRequest) -> CheckedRequest:
    """Every input the run checks before its first row, in the run's order: the profile, the metrics sinks, the
    device, then the sweep's (``sweep.check_inputs``: the timer, the stopping rule, the selection, the run
    directory). The run and ``--list`` both call it, so a bad input is the same sentence and exit 2 in both;
    only the look at the host is the run's (the host's load when a plan is printed says nothing of it when
    the rows run)."""
    from tileops.ledger import profile_chooser

    o = req.options
    chooser = profile_chooser(o.profile)
    req.sinks.check()
    device = describe_device(o.device)
    check_bench_store(device, chooser, o.calibrate, req.calibration_max_age)  # before the run directory exists
    return CheckedRequest(chooser, device, sweep.check_inputs(o, device, out=req.out, resume=req.resume))


def run_bench(req: BenchRequest, printer: Printer | None = None) -> BenchResult:
    """Run ``tileops bench``; its result says how it ended (``exit_code``: tileops.exitcodes).

    Everything is told to ``printer`` (default: the console on a terminal, a plain log elsewhere): the run's
    results (its header, the SOL table and health, the files written) apart from the rest (per-row progress,
    notes, warnings, errors), so ``tileops bench > table.txt`` keeps the table apart and a log keeps the
    errors on stderr.
    """
    printer = printer if printer is not None else make_printer()
    with interrupts.handled():
        # validated before the first row; each device is priced on its own calibration where the store has one
        checked = check_request(req)
        chooser = checked.chooser
        prep = sweep.prepare(req.options, checked.device, out=req.out, resume=req.resume, argv=req.argv,
                             checked=checked.sweep)  # locked from here
        try:
            return _run(prep, chooser, req, printer)
        except KeyboardInterrupt as exc:  # outside the sweep: calibrating first, or pricing after
            info = prep.info
            info.status, info.exit_code = "interrupted", interrupts.exit_code(exc)
            info.reason = f"stopped by {interrupts.signal_name(exc)}"
            info.finished_at = info.finished_at or utcnow()
            return _stopped(prep, printer)
        except sweep.RunWriteError as exc:
            printer.say(str(exc), kind="error")
            return BenchResult(prep.run_dir, prep.info, unwritable=True)
        except OSError as exc:  # an output after the sweep (roofline.json, the plot, a calibrated profile)
            where = f"{exc.filename}: " if exc.filename else ""
            info = prep.info
            info.status = "failed"
            info.reason = f"cannot write {where}{sweep.describe_oserror(exc)}"
            info.finished_at = info.finished_at or utcnow()
            return _failed(prep, printer)
        except Exception as exc:  # reported by the CLI (TileOpsError: exit 2); run.json must not say "running"
            _mark_failed(prep, str(exc) if isinstance(exc, TileOpsError) else f"{type(exc).__name__}: {exc}")
            raise
        finally:
            prep.close()


def _mark_failed(prep: sweep.PreparedSweep, reason: str) -> None:
    info = prep.info
    if info.status != "running":
        return
    info.status, info.reason = "failed", reason
    info.exit_code = BenchResult(prep.run_dir, info).exit_code
    info.finished_at = utcnow()
    try:
        prep.save(info)
    except sweep.RunWriteError:
        pass  # the error being raised says what went wrong


def _stopped(prep: sweep.PreparedSweep, printer: Printer) -> BenchResult:
    try:
        prep.save(prep.info)
    except sweep.RunWriteError as exc:
        printer.say(str(exc), kind="error")
    printer.say([("interrupted", "yellow"), (f" ({prep.info.reason}): the records written are kept in "
                 f"{prep.records_path}; finish with `tileops bench --resume {prep.run_dir}`", "")], kind="warning",
                bare=True)
    return BenchResult(prep.run_dir, prep.info)


def _failed(prep: sweep.PreparedSweep, printer: Printer) -> BenchResult:
    result = BenchResult(prep.run_dir, prep.info)
    prep.info.exit_code = result.exit_code
    try:
        prep.save(prep.info)
    except sweep.RunWriteError as exc:
        printer.say(str(exc), kind="error")
        return result
    printer.say(f"{prep.info.reason}. The records already written in {prep.records_path} are whole and kept; "
                "run.json says failed. Free space (or fix the permissions), then finish the run with "
                f"`tileops bench --resume {prep.run_dir}`", kind="error")
    return result


@dataclass(frozen=True)
class _Priced:
    """What the run is priced on, settled before its rows: the profile, and the notes its summary owes."""

    profile: Profile | None
    quick_note: str | None
    facts: Any  # tileops.ceilings.runtime's DeviceFacts: the GPU's own facts against its profile


def _run(prep: sweep.PreparedSweep, chooser: ProfileChooser, req: BenchRequest, printer: Printer) -> BenchResult:
    device = prep.device
    threads = prep.threads
    printer.say([("tileops bench", "bold"), (f" run {prep.info.run_id} on {device.name} ({device.torch_device}"
                 + (f", {threads} thread{'s' if threads != 1 else ''}" if threads else "")
                 + f") -> {prep.run_dir}", "")],
                result=True, run_id=prep.info.run_id, run_dir=str(prep.run_dir), threads=threads)
    note = threads_note(threads)
    if note:
        printer.say(note, kind="note")
    for notice in prep.notices:
        printer.say(notice, kind="note")
    if req.changed:
        printer.say(f"output-only flags changed on --resume (run.json now keeps them): {'; '.join(req.changed)}",
                    kind="note")
    for warning in prep.info.quiet.get("warnings", []):
        printer.say(f"{warning}. Rows measured now record the contention they meet and may read unstable; "
                    "--require-quiet refuses to run instead (run.json: quiet)", kind="warning")
    printer.say(_backends_line(prep))
    basis = _before_rows(prep, chooser, req, printer)
    if prep.done:
        printer.say(f"resuming: {prep.done} row(s) already recorded OK, {len(prep.todo)} to run"
                    + (f"; the second pass visits {len(prep.owed)} of them again (the run stopped before its "
                       "second pass ended)" if prep.owed else ""), result=True)

    with printer.rows(len(prep.todo)) as events:
        swept = sweep.run(prep, RowProgress(events))
    info = swept.info
    for kind, line in noise_lines(info.host_noise):
        printer.say(line, kind=kind)
    if swept.failure:
        return _failed(prep, printer)
    if swept.interrupted is not None:
        printer.say([("interrupted", "yellow"), (f" ({info.reason}): {len(swept.records)} row(s) recorded in "
                     f"{swept.records_path}; finish with `tileops bench --resume {swept.run_dir}`", "")],
                    kind="warning", bare=True)
        return BenchResult(swept.run_dir, info)
    return _after_rows(prep, swept, chooser, req, basis, printer)


def _before_rows(prep: sweep.PreparedSweep, chooser: ProfileChooser, req: BenchRequest,
                 printer: Printer) -> _Priced:
    """Calibrate the device where it must be, then settle the profile the rows are priced on and check the
    device against it, saying what the run's figures will rest on."""
    device = prep.device
    with printer.steps("calibrating", keep=False) as progress:
        calibrated = ensure_calibrated(device, chooser, req.options.calibrate, req.calibration_max_age,
                                       printer.say, progress,
                                       warn=lambda text: printer.say(text, kind="warning", bare=True))
    profile = chooser(device.name, device.key)
    quick_note = calibrated.quick_note() if calibrated is not None and profile is not None else None
    if profile is None:
        printer.say([(f"warning: no profile matches {device.name!r}", "yellow"),
                     (": SOL will be left blank (never guessed). Run `tileops calibrate` on this device, or pass "
                      "--profile.", "")], kind="warning", bare=True)
    prep.kind_of = row_kind(profile)
    prior_warning = prep.load_noise_prior(noise_prior_path(device))
    if prior_warning:
        printer.say(prior_warning, kind="warning")
    facts = check_device(device, profile)  # the GPU's own facts against its profile (a CPU: not checked)
    for warning in facts.warnings():
        printer.say(warning, kind="warning")
    return _Priced(profile, quick_note, facts)


def _after_rows(prep: sweep.PreparedSweep, swept: sweep.Sweep, chooser: ProfileChooser, req: BenchRequest,
                basis: _Priced, printer: Printer) -> BenchResult:
    """Price the records once; from that pricing the table, roofline.json, the plot, the health in run.json
    and the metrics sinks."""
    info = swept.info
    priced = price_all(swept.records, chooser)
    h = health(priced)
    _report(priced, h, prep.device, basis.profile, swept.run_dir, req.options.plot, printer)
    if basis.quick_note is not None:  # the summary says what the SOL figures rest on: never a rough one unsaid
        printer.say(basis.quick_note, kind="note", result=True)
    if basis.facts.note is not None:
        printer.say(basis.facts.note, kind="note", result=True)
    for why in not_yet_said(said_path(prep.device), energy_reasons(priced)):  # the summary only counts them
        printer.say(f"energy: {why} (said once on this host; each row's energy_blank keeps it)", kind="note",
                    result=True)
    result = BenchResult(swept.run_dir, info, h)
    info.health = h.as_dict()  # ok, state (held / partial / not-judged / breached) and each ceiling's check
    info.health["device_facts"] = basis.facts.as_dict()
    info.exit_code = result.exit_code
    prep.save(info)  # the run's final state, before any network work
    if req.options.plot:  # the page to open in a browser, from the same pricing and the run.json just saved
        _html_report(swept.run_dir, priced, basis.profile, info, printer)

    if req.sinks.wanted:
        result.published = _export(swept, priced, chooser, req.sinks)
        if result.exit_code != info.exit_code:
            info.exit_code = result.exit_code
            prep.save(info)
    if info.rows_error:
        printer.say([(f"error: {info.rows_error} row(s) failed", "red"),
                     (f" (error records in {swept.records_path})", "")], kind="error", bare=True)
    return result


def threads_note(threads: int | None) -> str | None:
    """What a CPU run on fewer threads than the CPUs it may use should know; None on all of them (or a GPU)."""
    from tileops.bench.worker import default_threads

    cpus = default_threads()
    if threads is None or threads >= cpus:
        return None
    return (f"CPU rows run on {threads} of the {cpus} CPUs this process may use (--threads {threads}): the "
            "ceilings are the whole CPU's, so a compute-bound row's SOL reads lower by about that share")


def row_kind(profile: Profile | None) -> Callable[[Record], str]:
    """Which rows are pooled together for their between-visit noise: the ceiling ``profile`` prices each row's
    bound on (``memory`` or ``compute``), or without a profile or a price, its arithmetic intensity
    (``revisit.kind_by_intensity``)."""
    from tileops.bench.revisit import kind_by_intensity
    from tileops.roofline import price

    def kind(rec: Record) -> str:
        bound = price(rec, profile).bound if profile is not None else None
        return bound or kind_by_intensity(rec)

    return kind


def noise_prior_path(device: DeviceInfo) -> Path:
    """Where this device's stored noise prior lives: beside its calibration, in the profile store."""
    from tileops.profiles.store import store_dir

    return store_dir() / "noise" / f"{device.key}.json"


def noise_lines(noise: dict[str, Any]) -> list[tuple[Kind, str]]:
    """What the second pass measured (run.json's ``host_noise``), a few (kind, line); none without a second
    pass."""
    if not noise:
        return []
    lines: list[tuple[Kind, str]] = []
    between = noise.get("between_visits") or {}
    parts = [f"{ITEM}{kind}-bound rows ±{e['sigma'] * 100:.1f} % ({e['source']})" for kind, e in between.items()
             if kind in noise.get("rows_by_kind", between)]
    shifts = {k: v for k, v in (noise.get("second_pass_shift") or {}).items() if k in noise.get("rows_by_kind", {})}
    shift = (f"{ITEM}the second pass ran " + ", ".join(f"{math.expm1(v) * 100:+.1f} % on {k}-bound rows"
                                                    for k, v in shifts.items())
             + " overall: the host's shift, taken out of each row's difference and kept apart" if shifts
             else f"{ITEM}the second pass's shift: not measured (too few rows)")
    lines.append(("message", "\n".join(["between visits (one sd of a visit, each in its own process; run.json: "
                                        "host_noise):", *parts, shift])))
    reruns = {k: v for k, v in (noise.get("reruns") or {}).items() if k in noise.get("rows_by_kind", {})}
    if reruns:
        said = []
        for k, v in reruns.items():
            read = f"x{v['factor']:.2f} over {v['runs']} rerun(s)" if "factor" in v else "none yet"
            said.append(f"{k}-bound rows {read}" + ("" if v.get("used") else
                        f" (too few to calibrate: a run-level ±{v['default']['sigma'] * 100:.0f} % stands in)"))
        lines.append(("message", "this host's reruns of the same code against what the visits say: "
                      + "; ".join(said)))
    for note in noise.get("notes") or []:
        lines.append(("note", note))
    kept = noise.get("kept_first") or []
    if kept:
        lines.append(("note", f"{len(kept)} row(s) keep their first visit alone, their second visit having failed "
                      "or been timed otherwise (run.json: host_noise.kept_first)"))
    if noise.get("why"):
        lines.append(("note", noise["why"]))
    return lines


def _backends_line(prep: sweep.PreparedSweep) -> str:
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
            plot: bool, printer: Printer) -> None:
    """The SOL table, roofline.json and the plot, all from one pricing."""
    from tileops.fsutil import write_atomic
    from tileops.report.tables import render_text

    printer.results(priced, health=h, title=f"SOL efficiency — {device.name}"
                    + (f" (profile {profile.name})" if profile else ""))
    write_atomic(run_dir / "roofline.json", render_text(priced, "json", health=h))
    if plot and profile is not None:
        from tileops.report.plot import write_plot  # matplotlib only when a plot is drawn

        paths = write_plot(priced, profile, run_dir)
        printer.say("roofline plot: " + ", ".join(str(p) for p in paths), result=True,
                    paths=[str(p) for p in paths])


def _html_report(run_dir: Path, priced: list[Priced], profile: Profile | None, info: RunInfo,
                 printer: Printer) -> None:
    """report.html, linked from the summary as the plot is: the run as a person reads it in a browser."""
    from tileops.pipeline.report import write_run_report
    from tileops.records import to_data

    path = write_run_report(run_dir, priced, [profile] if profile is not None else [], to_data(info))
    printer.say(f"report: {path} (open it in a browser)", result=True, path=str(path))


def _export(swept: sweep.Sweep, priced: list[Priced], chooser: ProfileChooser, sinks: Sinks) -> Published:
    """Metrics of the run just priced, to the textfile directory and/or the Pushgateway."""
    from tileops.export.calibration import device_calibrations
    from tileops.export.snapshot import build_snapshots
    from tileops.records import read_audit

    snapshots = build_snapshots(swept.run_dir, swept.info, priced, chooser, read_audit(swept.run_dir),
                                device_calibrations())
    return sinks.publish(snapshots)
