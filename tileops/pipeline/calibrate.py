"""Calibration composed: ``tileops calibrate``, and the bench's "calibrate this device first" step.

A calibration measures a device (``tileops.calibrate``: bandwidth mixes,
compute roofs, latency floor), keeps the raw result per device
(``<store>/devices/<key>.yaml``, with its history) and writes the device
model's profile to the store (spec §5.1: calibration is a per-device input).

Both workflows here make the same decisions in the same functions: whether a
device's stored result is fresh enough to stand in for a new one
(``tileops.ledger.stored_freshness``), and whether the model's
profile must be rebuilt from such a result, measuring nothing
(:func:`stale_profile`): when the store holds no profile of the model, or the
nominal memory bandwidth the environment states (``$TILEOPS_DRAM_BANDWIDTH``)
is one the CPU's profile lacks.

The bench (:func:`ensure_calibrated`) measures its device first whenever its
own result in the store is missing, unreadable or older than
``--calibration-max-age`` (default 7 days), whether or not a profile matches the
device: quick on a GPU, full on a CPU. The result then prices the device's
rows; a quick one is named in the run's summary, because its figures are
rough. ``--calibrate never`` skips all of this. The bench writes a model
profile only for a CPU: a GPU's datasheet profile is shipped, and its rows are
priced on its own result over those ceilings.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from collections.abc import Callable, Iterable

from tileops.defaults import CALIBRATION_MAX_AGE_DAYS
from tileops.device import DeviceInfo, describe_device
from tileops.errors import TileOpsError
from tileops.pipeline.outcome import exit_code

if TYPE_CHECKING:
    from tileops.report.printer import Printer

    from tileops.ledger import DeviceCalibration, Freshness, Judgement
    from tileops.pipeline.intake import IntakeOutcome
    from tileops.calibrate.theoretical import TheoryOptions
    from tileops.profiles import Profile, ProfileChooser

#: How old a device's calibration may be before the bench measures it again (the chart's default too).
DEFAULT_MAX_AGE = dt.timedelta(days=CALIBRATION_MAX_AGE_DAYS)
POLICIES = ("auto", "quick", "full", "never")


# --------------------------------------------------------------------------- one decision, two workflows


def stale_profile(kind: str, name: str, options: TheoryOptions, store: Path | None = None) -> str | None:
    """Why the store's profile of device model ``name`` must be rebuilt from a stored calibration result
    (measuring nothing), or None when it stands: the store holds no profile of the model (it was removed,
    or never written), or, on a CPU, the nominal memory bandwidth ``options`` state is one it lacks."""
    from tileops.profiles import load_profiles, select_profile

    model = select_profile(name, load_profiles(shipped=False, store=True, store_path=store))
    if model is None:
        return "no profile of this device model in the store"
    nominal = options.memory_bandwidth
    if kind == "cpu" and nominal is not None and (model.memory is None or model.memory.theoretical != nominal):
        return f"{options.memory_bandwidth_ref} states the nominal memory bandwidth its profile lacks"
    return None


def rebuilt_profile(runs: list[DeviceCalibration], options: TheoryOptions,
                    profiles: Iterable[Profile] | None = None) -> tuple[Profile, list[str]]:
    """The model's profile built from stored results of its devices (the median over them), on the
    theoretical ceilings ``options`` and the known ``profiles`` give; and the warnings about it."""
    from tileops.ledger import PeakUnknown
    from tileops.ledger import build_profile
    from tileops.calibrate.theoretical import base_profile

    first = runs[0]
    try:
        base, notes = base_profile(first.kind, first.name, options, profiles)
    except PeakUnknown as exc:
        raise TileOpsError(str(exc)) from None
    profile, warnings = build_profile(base, runs)
    return profile, [*notes, *warnings]


def theory_options(opts: CalibrateOptions | None = None) -> TheoryOptions:
    """The theoretical ceilings' inputs: the nominal bandwidth ``--dram-bandwidth`` or
    ``--dram-bandwidth-file`` gives (either wins over ``$TILEOPS_DRAM_BANDWIDTH``), else the environment's,
    and ``--cpu-ghz``. TileOpsError, before anything is measured, for a value that is not one."""
    from tileops.calibrate.dram import bandwidth_from_env, parse_bandwidth, read_bandwidth_file
    from tileops.calibrate.theoretical import TheoryOptions

    opts = opts or CalibrateOptions()
    bw = ref = None
    try:
        if opts.dram_bandwidth:
            bw, ref = parse_bandwidth(opts.dram_bandwidth), f"--dram-bandwidth {opts.dram_bandwidth}"
        elif opts.dram_bandwidth_file:
            bw, ref = read_bandwidth_file(opts.dram_bandwidth_file), f"file {opts.dram_bandwidth_file}"
        elif (env := bandwidth_from_env()) is not None:  # the image's or chart's nominal; a flag wins
            bw, ref = env
    except ValueError as exc:
        raise TileOpsError(str(exc)) from None
    if opts.cpu_ghz is not None and opts.cpu_ghz <= 0:
        raise TileOpsError("--cpu-ghz must be positive (the all-core clock in GHz, e.g. 3.5)")
    return TheoryOptions(memory_bandwidth=bw, memory_bandwidth_ref=ref, cpu_ghz=opts.cpu_ghz)


# --------------------------------------------------------------------------- the bench's step


@dataclass(frozen=True)
class Calibrated:
    """The device's own calibration as the bench left it: its key and stored result (None: none is used)."""

    key: str
    device: DeviceInfo
    result: DeviceCalibration | None = None

    def quick_note(self) -> str | None:
        """A sentence for the run's summary when the rows are priced on a quick (rough) calibration."""
        r = self.result
        if r is None or not r.quick:
            return None
        when = r.finished_at.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        return (f"priced on a quick calibration of {self.key} ({when}): small sizes and few repetitions, rough "
                f"figures; `tileops calibrate --device {self.device.torch_device}` measures the full one "
                "(docs/profiles.md)")


def ensure_calibrated(device: DeviceInfo, chooser: ProfileChooser, policy: str, max_age: dt.timedelta,
                      say: Callable[[str], None], progress: Callable[[str, int, int], None] | None = None,
                      warn: Callable[[str], None] | None = None) -> Calibrated | None:
    """Calibrate ``device`` first unless the store holds a calibration of it newer than ``max_age``.

    ``say`` hears what happens, ``warn`` (default: ``say``) what may leave the run's SOL blank or rough.

    ``policy``: ``auto`` (quick on a GPU, full on a CPU), ``quick``, ``full``, or
    ``never``. An explicit ``--profile`` (a fixed chooser) prices every row on
    that profile, so nothing is calibrated then (None). TileOpsError, before
    anything is read or written, for a device key that cannot name a file (a host
    name such as ``../../x``).
    """
    if policy == "never" or chooser.fixed is not None:
        return None
    from tileops.ledger import check_device_key, stored_freshness
    from tileops.profiles import write_profile

    warn = warn or say
    key = check_device_key(device.key, f"device {device.torch_device} on host {device.hostname!r}")
    options = theory_options()
    fresh = stored_freshness(key, max_age, quick=True)  # any calibration of this device will do
    model = chooser(device.name)
    if fresh.fresh and fresh.result is not None:
        why = stale_profile(device.kind, device.name, options) if device.kind == "cpu" else None
        if why is not None:  # the CPU model's profile is missing or lacks the stated nominal: rebuild, measure nothing
            profile, _ = rebuilt_profile([fresh.result], options, chooser.profiles)
            path = write_profile(profile)
            chooser.add(profile)
            say(f"calibration of {key}: {fresh.reason}; {why}: rebuilt the CPU profile {path} from it")
        else:
            say(f"calibration of {key}: {fresh.reason}")
        return Calibrated(key, device, fresh.result)
    if model is None and device.kind == "cuda":
        warn(f"no profile names {device.name!r}: a calibration measures fractions of the datasheet "
             "ceilings, and no profile states them for this GPU, so SOL stays blank; add a profile "
             "(docs/profiles.md) and run `tileops calibrate`")
        return Calibrated(key, device)
    quick = policy == "quick" or (policy == "auto" and device.kind == "cuda")
    _check_store(key)
    say(f"calibrating {device.torch_device} ({key}) first: {fresh.reason}; a {'quick' if quick else 'full'} "
        f"calibration ({'seconds' if quick else 'tens of seconds'}) so its rows are priced on what it reaches; "
        "--calibrate never skips it")
    from tileops.ledger import write_device_result
    from tileops.calibrate.run import calibrate_device

    try:
        outcome = calibrate_device(device, quick=quick, progress=progress, options=options,
                                   profiles=chooser.profiles)
    except ValueError as exc:
        raise TileOpsError(f"the calibration of {device.torch_device} failed: {exc}") from None
    run, profile = _marked_if_judged(outcome.run, outcome.profile, warn)
    written = [write_device_result(run)]
    if device.kind == "cpu" and stale_profile(device.kind, device.name, options) is not None:
        # a CPU whose model profile is missing, or lacks the stated nominal: its model profile is this calibration
        written.append(write_profile(profile))
        chooser.add(profile)
    chooser.forget()  # the device's own calibration prices it from now on
    for warning in outcome.warnings:
        warn(f"calibration warning: {warning}")
    say("wrote " + ", ".join(str(p) for p in written))
    return Calibrated(key, device, run)


def check_bench_store(device: DeviceInfo, chooser: ProfileChooser, policy: str, max_age: dt.timedelta) -> None:
    """Before the bench opens its run: when its calibration step would measure ``device`` and store the result
    (:func:`ensure_calibrated` decides the same way), the store must take it (:func:`_check_store`)."""
    if policy == "never" or chooser.fixed is not None:
        return
    from tileops.ledger import DEVICE_KEY, stored_freshness

    if not DEVICE_KEY.fullmatch(device.key or "") or stored_freshness(device.key, max_age, quick=True).fresh:
        return  # a key that cannot name a file is refused by the step itself; a fresh result is not replaced
    _check_store(device.key)


def _check_store(key: str) -> None:
    """The bench's calibration step stores its result over the device's current one: a current result this
    tileops cannot read, or a store this user may not write, stops the bench before anything is measured
    (exit 2), naming the file; the bench has no word of the person's to replace it."""
    from tileops.ledger import rewrite_problem

    problem = rewrite_problem(key)
    if problem is not None:
        raise TileOpsError(f"{problem}; or run the bench with --calibrate never (its rows then priced on the "
                           "model's profile)")


#: Who stored a marked calibration the bench measured: the run goes on, so it cannot refuse it.
BENCH_MARK = "the bench's calibration step, which cannot refuse its own run"


def _marked_if_judged(run: DeviceCalibration, profile: Profile, warn: Callable[[str], None]
                      ) -> tuple[DeviceCalibration, Profile]:
    """The bench's own calibration as it is stored: judged as ``tileops calibrate`` judges one
    (``tileops.ledger.judge``), and, measured contended or below the stored one beyond noise, stored marked (the
    bench cannot refuse its run; the rows priced on it say so, and the warning says it now)."""
    from tileops.ledger import judge_calibration, marked_note

    judgement = judge_calibration(run)
    if judgement.ok:
        return run, profile
    run = run.model_copy(update={"marked": judgement.mark(BENCH_MARK)})
    warn(f"calibration of {run.device_key} stored marked, and every row priced on it says so: "
         f"{'; '.join(judgement.reasons())}; `tileops calibrate` on an idle host replaces it")
    return run, profile.model_copy(update={"calibration_marked": marked_note([run])})


# --------------------------------------------------------------------------- tileops calibrate


@dataclass(frozen=True)
class CalibrateOptions:
    """``tileops calibrate``: which device(s), how, and where the profile and results go."""

    device: str = "auto"
    all_devices: bool = False
    quick: bool = False
    max_age: str | None = None  # measure only a device whose stored result is older (a duration: 12h, 7d)
    profile_dir: Path | None = None  # the store; None: $TILEOPS_PROFILE_DIR or the user data dir
    write_shipped: bool = False  # the model's profile into the shipped profiles/ folder
    write: bool = True
    # the theoretical ceilings' inputs a person gives (else what the environment states)
    dram_bandwidth: str | None = None  # the nominal memory bandwidth: 76.8GB/s, or bytes/s
    dram_bandwidth_file: Path | None = None  # a file stating it (dram_bandwidth: 76.8GB/s)
    cpu_ghz: float | None = None  # the all-core clock of a CPU's peak estimate
    format: str = "table"
    check: bool = False  # node intake: each device's result against its SKU's floors (tileops.pipeline.intake)
    textfile_dir: Path | None = None  # --check's metrics for node_exporter's textfile collector
    force: bool = False  # store a contended (or dropped) calibration marked instead of refusing it


@dataclass
class CalibrateResult:
    """What a calibration did: the profile written, the devices measured (or kept), and those that failed."""

    profile: Profile | None = None
    runs: list[DeviceCalibration] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: list[Freshness] = field(default_factory=list)
    intake: IntakeOutcome | None = None  # --check: each device against its SKU's floors
    #: device key -> why its calibration was refused (nothing of it stored; the stored calibration stands)
    refused: dict[str, Judgement] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        intake = self.intake
        return exit_code(failed=len(self.failed), below_floor=intake is not None and intake.below_floor,
                         busy=any(j.contended for j in self.refused.values()),
                         below_stored=any(j.drops for j in self.refused.values()),
                         no_floor=intake is not None and intake.no_floor)

    def as_json(self) -> str:
        return json.dumps({
            "profile": self.profile.model_dump(mode="json") if self.profile else None,
            "devices": [r.model_dump(mode="json") for r in self.runs],
            "warnings": self.warnings, "written": self.written, "failed": self.failed,
            "refused": [{"device": key, "reasons": j.reasons(), "exit_code": refusal_code(j)}
                        for key, j in self.refused.items()],
            "skipped": [{"device": f.key, "reason": f.reason} for f in self.skipped],
            **({"intake": self.intake.as_json()} if self.intake is not None else {})}, indent=2)


class _Calibration:
    """One ``tileops calibrate``: its options, the store it reads, the printer it talks to."""

    def __init__(self, opts: CalibrateOptions, theory: TheoryOptions, printer: Printer) -> None:
        from tileops.profiles import shipped_dir, store_dir

        self.opts, self.theory, self.printer = opts, theory, printer
        self.store = opts.profile_dir or store_dir()
        self.target = shipped_dir() if opts.write_shipped else self.store
        self.models: list[tuple[Profile, list[DeviceCalibration]]] = []  # --all-devices: each model's profile

    def write(self, profile: Profile, runs: list[DeviceCalibration]) -> list[str]:
        """The model's profile and the per-device results of ``runs`` (the newly measured ones)."""
        from tileops.ledger import write_device_result
        from tileops.profiles import write_profile

        if not self.opts.write:
            return []
        from tileops.profiles import profile_filename

        # every file, before the first is written
        self.check_targets([r.device_key for r in runs], [self.target / profile_filename(profile.name)])
        try:
            written = [str(write_profile(profile, self.target, keep_header=self.opts.write_shipped))]
            written += [str(write_device_result(r, self.store, force=self.opts.force)) for r in runs]
        except OSError as exc:  # a full disk after the measurement: say where, and how to keep the figures
            raise TileOpsError(f"cannot write the calibration to {exc.filename or self.target}: "
                               f"{exc.strerror or exc}; each stored file is whole, the one before or the new one; free "
                               "space or fix the permissions, then calibrate again") from None
        for w in written:
            self.printer.say(f"wrote {w}")
        return written

    def check_targets(self, keys: list[str], profiles: list[Path]) -> None:
        """ProfileError (exit 2) naming the first file a write would replace but may not: a device's result this
        tileops cannot read (unless --force) or this user may not write, or a profile file this user may not
        write. Asked before measuring (:meth:`preflight`), and again before the first file is written."""
        from tileops.fsutil import unwritable_file
        from tileops.ledger import rewrite_problem
        from tileops.profiles import ProfileError

        for key in keys:
            problem = rewrite_problem(key, self.store, force=self.opts.force)
            if problem is not None:
                raise problem
        for target in profiles:
            why = unwritable_file(target)
            if why is not None:
                raise ProfileError(f"cannot write the profile {target}: {why}; fix the permissions, or give a "
                                   "profile store of your own (--profile-dir); nothing was written", file=target,
                                   field="permissions", fix="fix the permissions, or give another --profile-dir")

    def preflight(self, info: DeviceInfo) -> None:
        """Before anything is measured, the files a calibration of ``info`` would write: its current result and
        the store's profile of its model (:meth:`check_targets`; a store profile that does not read stopped the
        calibration when the store was read). Unreadable history files are named, and left as they are."""
        from tileops.ledger import history_problems
        from tileops.profiles import load_profiles, select_profile

        if not self.opts.write:
            return
        model = select_profile(info.name, load_profiles(shipped=False, store_path=self.target))
        self.check_targets([info.key], [model.source_path] if model is not None and model.source_path else [])
        for exc in history_problems(info.key, self.store):
            self.printer.say(f"{exc}; left as it is (a calibration adds its result beside it, and the history "
                             "leaves it out)", kind="warning")

    def fresh(self, info: DeviceInfo, max_age: dt.timedelta) -> Freshness | None:
        """The device's stored result when it is newer than --max-age (said on stderr), else None (said too)."""
        from tileops.ledger import stored_freshness

        f = stored_freshness(info.key, max_age, store=self.store, quick=self.opts.quick)
        if f.fresh:
            self.printer.say(f"{f.key}: {f.reason}: skipped, nothing measured")
            return f
        self.printer.say(f"{f.key}: {f.reason}: calibrating")
        return None

    def kept(self, fresh: Freshness) -> CalibrateResult:
        """A --max-age skip of one device: nothing measured; the model's profile is rebuilt from the stored
        result only when it must be (:func:`stale_profile`)."""
        run = fresh.result
        assert run is not None
        result = CalibrateResult(runs=[run], skipped=[fresh])
        why = stale_profile(run.kind, run.name, self.theory, self.store) if self.opts.write else None
        if why is not None:
            result.profile, result.warnings = rebuilt_profile([run], self.theory)
            self.printer.say(f"{run.name}: {why}: rebuilt from the stored result")
            result.written = self.write(result.profile, [])
        return result

    def admit(self, run: DeviceCalibration, result: CalibrateResult) -> DeviceCalibration | None:
        """``run`` as it may be stored: itself when measured on a quiet host and no ceiling fell below the stored
        calibration's beyond noise (``tileops.ledger.judge``); else, with ``--force``, marked with why; else
        None: refused (``result.refused``), nothing of it stored, the stored calibration left as it was.
        ``--no-write`` stores nothing anyway: what a write would have met is a warning."""
        from tileops.ledger import judge_calibration

        judgement = judge_calibration(run, self.store)
        if judgement.ok:
            return run
        why = "; ".join(judgement.reasons())
        if not self.opts.write:
            result.warnings.append(f"{run.device_key}: a write would refuse this calibration ({why})")
            return run
        if self.opts.force:
            self.printer.say(f"{run.device_key}: stored marked (--force), and every row priced on it will say so: "
                             f"{why}", kind="warning")
            return run.model_copy(update={"marked": judgement.mark("tileops calibrate --force")})
        result.refused[run.device_key] = judgement
        return None

    def say_refused(self, result: CalibrateResult) -> None:
        """Each refused calibration: what happened to the store, each reason on a line of its own, the fix."""
        from tileops.ledger import devices_dir

        for key, j in result.refused.items():
            stands = ("its stored calibration stands" if (devices_dir(self.store) / f"{key}.yaml").is_file()
                      else "the store holds none of it")
            self.printer.say(f"tileops calibrate: the calibration of {key} is refused, nothing stored ({stands}; "
                             f"exit {refusal_code(j)}):", kind="error", bare=True)
            for reason in j.reasons():
                self.printer.say(f"  {reason}", kind="error", bare=True)
            self.printer.say(f"  fix: {REFUSAL_FIX}", kind="error", bare=True)

    def one(self, info: DeviceInfo) -> CalibrateResult:
        from tileops.ledger import PeakUnknown, marked_note
        from tileops.calibrate.run import calibrate_device
        try:
            with self.printer.steps(self.opts.device, keep=True) as bar:
                outcome = calibrate_device(info, quick=self.opts.quick, progress=bar, options=self.theory)
        except (PeakUnknown, ValueError) as exc:
            raise TileOpsError(str(exc)) from None
        result = CalibrateResult(outcome.profile, [outcome.run], outcome.warnings)
        run = self.admit(outcome.run, result)
        if run is None:
            return result
        result.runs = [run]
        if run.marked is not None:  # the profile says so too: every row priced on it carries the mark
            result.profile = outcome.profile.model_copy(update={"calibration_marked": marked_note([run])})
        assert result.profile is not None
        result.written = self.write(result.profile, [run])
        return result

    def every_device(self, max_age: dt.timedelta | None) -> CalibrateResult:
        from tileops.calibrate.children import run_children, visible_devices
        from tileops.ledger import is_stored, stored_freshness

        devices = visible_devices()
        if devices == ["cpu"]:
            self.printer.say("no CUDA device visible: calibrating the CPU")
        children = run_children(devices, quick=self.opts.quick, echo=self.printer.say, max_age=self.opts.max_age)
        result = CalibrateResult(runs=[c.run for c in children if c.run is not None],
                                 failed=[f"{c.device} ({c.error})" for c in children if c.run is None])
        kept = [r for r in result.runs if max_age is not None and is_stored(r, self.store)]
        admitted = [r if r in kept else self.admit(r, result) for r in result.runs]
        result.runs = [a or r for a, r in zip(admitted, result.runs)]  # a refused run is still shown
        by_model: dict[tuple[str, str], list[DeviceCalibration]] = defaultdict(list)
        for r in admitted:  # a refused device's result is not stored, nor does it join its model's median
            if r is not None:
                by_model[(r.kind, r.name)].append(r)
        profiles: list[Profile] = []
        for (kind, name), group in by_model.items():
            measured = [r for r in group if r not in kept]
            if not measured and stale_profile(kind, name, self.theory, self.store) is None:
                self.printer.say(f"{name}: every device ({len(group)}) is within --max-age {self.opts.max_age}: "
                               "profile kept")
                continue
            # The model's profile: the median over every device of this host, stored (fresh) or new.
            profile, warnings = rebuilt_profile(group, self.theory)
            profiles.append(profile)
            result.warnings += [*warnings, *(x for r in measured for x in r.warnings)]
            result.written += self.write(profile, measured)
        result.profile = profiles[0] if len(profiles) == 1 else None
        if max_age is not None:
            result.skipped = [stored_freshness(r.device_key, max_age, store=self.store, quick=self.opts.quick)
                              for r in kept]
        self.models = [(p, [r for r in result.runs if p.matches(r.name)]) for p in profiles]
        return result


#: What a refused calibration's message tells the person to do.
REFUSAL_FIX = ("calibrate again once the host is idle (nothing else running on its CPUs or GPU); if the device "
               "really is slower now, `--force` stores this calibration marked, and every row priced on it says so "
               "(docs/profiles.md, \"A calibration looks at its host\")")


def refusal_code(judgement: Judgement) -> int:
    """A refused calibration's exit code: 5 (busy: retry later) when it was measured contended, else 8."""
    from tileops import exitcodes

    return exitcodes.BUSY if judgement.contended else exitcodes.BELOW_STORED


def _max_age(opts: CalibrateOptions) -> dt.timedelta | None:
    from tileops.durations import parse_duration

    if opts.max_age is None:
        return None
    if opts.write_shipped:
        raise TileOpsError("--max-age reads the profile store; --write-shipped always measures: use one of them")
    try:
        return parse_duration(opts.max_age)
    except ValueError as exc:
        raise TileOpsError(f"--max-age: {exc}") from None


def _check_host_name() -> None:
    """A CPU's results are stored as ``devices/cpu-<host>.yaml``: a host name that cannot be part of a file
    name (``$TILEOPS_HOSTNAME=../../x``) is refused before anything is measured or written."""
    from tileops.ledger import check_device_key
    from tileops.device import HOSTNAME_ENV, host_name

    name = host_name()
    source = next((f"${v}" for v in HOSTNAME_ENV if os.environ.get(v, "").strip()), "the system host name")
    try:
        check_device_key(f"cpu-{name}", f"host name {name!r} (from {source})")
    except TileOpsError as exc:
        raise TileOpsError(f"{exc}; set $TILEOPS_HOSTNAME to a name of letters, digits, '.', '-' and '_' "
                           "(nothing measured, nothing written)") from None


def run_calibrate(opts: CalibrateOptions, printer: Printer | None = None) -> CalibrateResult:
    """``tileops calibrate``: measure the device (or every device, each in its own process) and write its
    model's profile and its own result to the store, showing the summary (a table, or JSON) and the progress
    through ``printer``. With ``max_age``, a device whose stored result is fresh is not measured.
    TileOpsError, before anything is measured, for a bad duration, an unwritable store or a host name
    that cannot name a file."""
    from tileops.calibrate.summary import piped_width
    from tileops.fsutil import unwritable_dir
    from tileops.profiles import PROFILE_DIR_ENV
    from tileops.report.printer import make_printer

    theory = theory_options(opts)  # bad arguments are refused before anything is measured
    max_age = _max_age(opts)
    if opts.profile_dir is not None:  # one store for every lookup here and in child processes
        os.environ[PROFILE_DIR_ENV] = str(opts.profile_dir)
    printer = printer if printer is not None else make_printer("console", piped_width=piped_width())
    cal = _Calibration(opts, theory, printer)
    if opts.write:  # before minutes of measuring, not after
        _check_host_name()
        why = unwritable_dir(cal.target) or unwritable_dir(cal.store)
        if why:
            raise TileOpsError(f"cannot write profiles to {cal.target} ({why}); give a writable "
                               "--profile-dir (or TILEOPS_PROFILE_DIR), or pass --no-write")
    if opts.textfile_dir is not None and not opts.check:
        raise TileOpsError("--textfile writes the node intake's metrics: give --check with it")
    if opts.textfile_dir is not None and (why := unwritable_dir(opts.textfile_dir)):
        raise TileOpsError(f"--textfile {opts.textfile_dir}: {why}; give a writable directory")
    if opts.all_devices:
        return _every_device(cal, max_age)
    info = describe_device(opts.device)  # described once: every step below reads it
    cal.preflight(info)  # a store it could not read or may not write: said now, before measuring
    fresh = cal.fresh(info, max_age) if max_age is not None else None
    result = cal.kept(fresh) if fresh is not None else cal.one(info)
    _intake(cal, result)
    if opts.format == "json":
        printer.text(result.as_json() + "\n")
    elif result.profile is not None:
        from tileops.calibrate.summary import profile_view

        printer.show(profile_view(result.profile, result.runs[0]))
        if fresh is None:
            for w in result.warnings:
                printer.say(w, kind="warning", result=True)
    cal.say_refused(result)
    return result


def _intake(cal: _Calibration, result: CalibrateResult) -> None:
    """``--check``: every device's result (just written, or kept under --max-age) against its SKU's floors."""
    if not cal.opts.check:
        return
    from tileops.pipeline.intake import check_intake, say_not_judged

    on_stdout = cal.opts.format != "json"
    for key, judgement in result.refused.items():  # never judged: a neighbour's load is no reject, nor a pass
        say_not_judged(key, judgement.reasons(), refusal_code(judgement), cal.printer, on_stdout)
    judged = [r for r in result.runs if r.device_key not in result.refused]
    if judged or not result.refused:
        result.intake = check_intake(judged, cal.store, cal.printer, cal.opts.textfile_dir, on_stdout=on_stdout)


def _every_device(cal: _Calibration, max_age: dt.timedelta | None) -> CalibrateResult:
    """``--all-devices``: each device in its own process, then each model's profile and the devices' table."""
    from tileops.calibrate.summary import devices_table, profile_view

    result = cal.every_device(max_age)
    _intake(cal, result)
    printer = cal.printer
    if cal.opts.format == "json":
        printer.text(result.as_json() + "\n")
    else:
        for prof, group in cal.models:
            printer.show(profile_view(prof, group[0] if len(group) == 1 else None))
        printer.show(devices_table(result.runs))
        for w in result.warnings:
            printer.say(w, kind="warning", result=True)
    for f in result.failed:
        printer.say(f"tileops calibrate: device {f} failed", kind="error", bare=True)
    cal.say_refused(result)
    return result
