"""`tileops calibrate`: measure this device's ceilings and write its calibrated profile.

The profile goes to the profile store (``--profile-dir``, ``TILEOPS_PROFILE_DIR``,
default under the user's data dir), plus a per-device raw result under
``devices/<uuid>.yaml``; the shipped profiles change only with
``--write-shipped``. ``--all-devices`` calibrates each visible GPU in turn, each
in its own process, and writes one profile per device model (median over its
devices) plus every device's own result. ``--max-age 7d`` measures only the
devices whose stored result is missing, rough (quick) or older than that: what
an init container runs before every benchmark.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tileops.calibrate.theoretical import TheoryOptions, base_profile
from tileops.calibrate.cpupeak import PeakUnknown
from tileops.calibrate.dram import bandwidth_from_env, parse_bandwidth, read_bandwidth_file
from tileops.calibrate.results import (DeviceCalibration, Freshness, build_profile, devices_dir,
                                      parse_duration, read_device_result, stored_freshness, write_device_result)
from tileops.calibrate.summary import devices_table, make_console, profile_view, run_view
from tileops.commands import argtypes
from tileops.device import DeviceInfo
from tileops.errors import TileOpsError
from tileops.fsutil import unwritable_dir
from tileops.profiles import (PROFILE_DIR_ENV, Profile, load_profiles, select_profile, shipped_dir, store_dir,
                              write_profile)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate", help="measure this device's bandwidth mixes, compute roofs and latency floor",
        description="Measure the device this runs on and write its calibrated profile to the profile store.")
    p.add_argument("--device", default="auto", help="auto (default: cuda:0 if present, else cpu), cpu, cuda:N")
    p.add_argument("--all-devices", action="store_true",
                   help="calibrate every visible GPU in turn, each in its own process (the CPU when there is none)")
    p.add_argument("--quick", action="store_true", help="small sizes and few repetitions: seconds, rough figures")
    p.add_argument("--max-age", metavar="DURATION",
                   help="skip a device whose stored result (<store>/devices/<uuid>.yaml) is newer than this "
                        "(e.g. 12h, 7d; a quick result never stands in for a full one), say so, exit 0")
    p.add_argument("--profile-dir", type=argtypes.profile_store, default=None,
                   help="profile store to write (default: $TILEOPS_PROFILE_DIR or the user data dir)")
    p.add_argument("--write-shipped", action="store_true",
                   help="write the model profile into the shipped profiles/ folder instead of the store")
    p.add_argument("--no-write", action="store_true", help="measure and print only")
    # One nominal, one source: both flags at once is exit 2 from the parser, never one silently winning.
    nominal = p.add_mutually_exclusive_group()
    nominal.add_argument("--dram-bandwidth", metavar="BW",
                         help="nominal memory bandwidth, e.g. 76.8GB/s or 7.68e10 (bytes/s), when DMI cannot tell "
                              "(default: $TILEOPS_DRAM_BANDWIDTH; the flag wins over it)")
    nominal.add_argument("--dram-bandwidth-file", type=Path, metavar="FILE",
                         help="a file holding the nominal bandwidth (`dram_bandwidth: 76.8GB/s`); wins over "
                              "$TILEOPS_DRAM_BANDWIDTH")
    p.add_argument("--cpu-ghz", type=argtypes.positive, metavar="GHZ",
                   help="CPU all-core clock for the peak estimate")
    p.add_argument("--format", choices=("table", "json"), default="table", help="summary format (stdout)")
    p.add_argument("--results-out", type=Path, help=argparse.SUPPRESS)  # child of --all-devices: raw result only
    p.set_defaults(func=run)


def _options(args: argparse.Namespace) -> TheoryOptions:
    bw = ref = None
    try:
        if args.dram_bandwidth:
            bw, ref = parse_bandwidth(args.dram_bandwidth), f"--dram-bandwidth {args.dram_bandwidth}"
        elif args.dram_bandwidth_file:
            bw, ref = read_bandwidth_file(args.dram_bandwidth_file), f"file {args.dram_bandwidth_file}"
        elif (env := bandwidth_from_env()) is not None:  # the image's or chart's nominal; a flag wins
            bw, ref = env
    except ValueError as exc:
        raise TileOpsError(str(exc)) from None
    if args.cpu_ghz is not None and args.cpu_ghz <= 0:
        raise TileOpsError("--cpu-ghz must be positive (the all-core clock in GHz, e.g. 3.5)")
    return TheoryOptions(memory_bandwidth=bw, memory_bandwidth_ref=ref, cpu_ghz=args.cpu_ghz)


class _Bar:
    """A rich progress bar on stderr driven by the calibration's progress(what, step, steps) calls."""

    def __init__(self, console: Console, label: str) -> None:
        self.progress = Progress(TextColumn(f"[bold]{label}[/] {{task.description}}"), BarColumn(),
                                 TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                 console=console, transient=False)
        self.task = None

    def __call__(self, what: str, step: int, steps: int) -> None:
        if self.task is None:
            self.task = self.progress.add_task(what, total=steps)
        self.progress.update(self.task, description=what, completed=step)

    def __enter__(self) -> "_Bar":
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()


def _target_dir(args: argparse.Namespace) -> Path:
    return shipped_dir() if args.write_shipped else (args.profile_dir or store_dir())


def _store(args: argparse.Namespace) -> Path:
    return args.profile_dir or store_dir()


def _write(args: argparse.Namespace, profile: Profile, runs: list[DeviceCalibration], err: Console) -> list[str]:
    """The model's profile and the per-device results of ``runs`` (the newly measured ones)."""
    if args.no_write:
        return []
    try:
        written = [str(write_profile(profile, _target_dir(args), keep_header=args.write_shipped))]
        written += [str(write_device_result(r, _store(args))) for r in runs]
    except OSError as exc:  # a full disk after the measurement: say where, and how to keep the figures
        raise TileOpsError(f"cannot write the calibration to {_target_dir(args)}: {exc.strerror or exc}; free "
                           "space or fix the permissions, then calibrate again") from None
    for w in written:
        err.print(f"wrote {w}")
    return written


def _json_summary(profile: Profile | None, runs: list[DeviceCalibration], warnings: list[str],
                  written: list[str], failed: list[str], skipped: list[Freshness] = ()) -> str:
    return json.dumps({
        "profile": profile.model_dump(mode="json") if profile else None,
        "devices": [r.model_dump(mode="json") for r in runs],
        "warnings": warnings, "written": written, "failed": failed,
        "skipped": [{"device": f.key, "reason": f.reason} for f in skipped]}, indent=2)


def _max_age(args: argparse.Namespace) -> dt.timedelta | None:
    if args.max_age is None:
        return None
    if args.write_shipped:
        raise TileOpsError("--max-age reads the profile store; --write-shipped always measures: use one of them")
    try:
        return parse_duration(args.max_age)
    except ValueError as exc:
        raise TileOpsError(f"--max-age: {exc}") from None


def _store_has_profile(name: str, store: Path) -> bool:
    """A profile in the store itself (not only a shipped one) matches this device name."""
    return select_profile(name, load_profiles(shipped=False, store=True, store_path=store)) is not None


def _is_stored(run: DeviceCalibration, store: Path) -> bool:
    """``run`` is the device's stored result handed back unmeasured (a --max-age skip), not a new one."""
    path = devices_dir(store) / f"{run.device_key}.yaml"
    try:
        return path.is_file() and read_device_result(path).run_id == run.run_id
    except TileOpsError:
        return False


def _check_host_name() -> None:
    """A CPU's results are stored as ``devices/cpu-<host>.yaml``: a host name that cannot be part of a file
    name (``$TILEOPS_HOSTNAME=../../x``) is refused before anything is measured or written."""
    from tileops.calibrate.results import check_device_key
    from tileops.device import HOSTNAME_ENV, host_name

    name = host_name()
    source = next((f"${v}" for v in HOSTNAME_ENV if os.environ.get(v, "").strip()), "the system host name")
    try:
        check_device_key(f"cpu-{name}", f"host name {name!r} (from {source})")
    except TileOpsError as exc:
        raise TileOpsError(f"{exc}; set $TILEOPS_HOSTNAME to a name of letters, digits, '.', '-' and '_' "
                           "(nothing measured, nothing written)") from None


def run(args: argparse.Namespace) -> int:
    options = _options(args)  # bad arguments are refused before torch loads
    max_age = _max_age(args)
    from tileops.calibrate.run import calibrate_device, measure_device  # torch: imported only when run

    if args.profile_dir is not None:  # one store for every lookup here and in child processes
        os.environ[PROFILE_DIR_ENV] = str(args.profile_dir)
    out = make_console()
    err = make_console(stderr=True)
    if not args.no_write and not args.results_out:  # before minutes of measuring, not after
        _check_host_name()
        why = unwritable_dir(_target_dir(args)) or unwritable_dir(_store(args))
        if why:
            raise TileOpsError(f"cannot write profiles to {_target_dir(args)} ({why}); give a writable "
                               "--profile-dir (or TILEOPS_PROFILE_DIR), or pass --no-write")
    info = None if args.all_devices else _describe(args.device)  # described once: every step below reads it
    fresh = _fresh(args, info, max_age, err) if info is not None and max_age is not None else None
    if args.results_out:  # a child of --all-devices: measure, write the raw result, nothing else
        if fresh is not None:  # hand the stored result back; the parent sees its run_id unchanged
            write_device_result(fresh.result, path=args.results_out)
            return 0
        with _Bar(err, args.device) as bar:
            dev_run = measure_device(info, quick=args.quick, progress=bar)
        write_device_result(dev_run, path=args.results_out)
        err.print(run_view(dev_run))
        return 0
    if args.all_devices:
        return _run_all(args, options, out, err, max_age)
    if fresh is not None:
        return _kept(args, fresh, options, out, err)
    try:
        with _Bar(err, args.device) as bar:
            outcome = calibrate_device(info, quick=args.quick, progress=bar, options=options)
    except (PeakUnknown, ValueError) as exc:
        raise TileOpsError(str(exc)) from None
    written = _write(args, outcome.profile, [outcome.run], err)
    if args.format == "json":
        print(_json_summary(outcome.profile, [outcome.run], outcome.warnings, written, []))
    else:
        out.print(profile_view(outcome.profile, outcome.run))
        for w in outcome.warnings:
            out.print(f"[yellow]warning:[/] {w}")
    return 0


def _describe(device: str) -> "DeviceInfo":
    from tileops.device import describe_device

    try:
        return describe_device(device)
    except ValueError as exc:
        raise TileOpsError(str(exc)) from None


def _fresh(args: argparse.Namespace, info: "DeviceInfo", max_age: dt.timedelta, err: Console) -> Freshness | None:
    """The device's stored result when it is newer than --max-age (said on stderr), else None (said too)."""
    f = stored_freshness(info.key, max_age, store=_store(args), quick=args.quick)
    if f.fresh:
        err.print(f"{f.key}: {f.reason}: skipped, nothing measured")
        return f
    err.print(f"{f.key}: {f.reason}: calibrating")
    return None


def _kept(args: argparse.Namespace, fresh: Freshness, options: TheoryOptions, out: Console, err: Console) -> int:
    """A --max-age skip of one device: nothing measured; the profile is rebuilt from the stored
    result only when the store has none for the device's model (it was removed)."""
    run = fresh.result
    written: list[str] = []
    profile = None
    warnings: list[str] = []
    if not args.no_write and not _store_has_profile(run.name, _store(args)):
        try:
            base, notes = base_profile(run.kind, run.name, options)
        except PeakUnknown as exc:
            raise TileOpsError(str(exc)) from None
        profile, w = build_profile(base, [run])
        warnings = [*notes, *w]
        err.print(f"{run.name}: no profile in the store: rebuilt from the stored result")
        written = _write(args, profile, [], err)
    if args.format == "json":
        print(_json_summary(profile, [run], warnings, written, [], [fresh]))
    elif profile is not None:
        out.print(profile_view(profile, run))
    return 0


def _run_all(args: argparse.Namespace, options: TheoryOptions, out: Console, err: Console,
             max_age: dt.timedelta | None) -> int:
    from tileops.calibrate.run import run_children, visible_devices

    devices = visible_devices()
    if devices == ["cpu"]:
        err.print("no CUDA device visible: calibrating the CPU")
    children = run_children(devices, quick=args.quick, echo=err.print, max_age=args.max_age)
    runs = [c.run for c in children if c.run is not None]
    failed = [f"{c.device} ({c.error})" for c in children if c.run is None]
    kept = [r for r in runs if max_age is not None and _is_stored(r, _store(args))]
    by_model: dict[tuple[str, str], list[DeviceCalibration]] = defaultdict(list)
    for r in runs:
        by_model[(r.kind, r.name)].append(r)
    warnings: list[str] = []
    profiles: list[tuple[Profile, list[DeviceCalibration]]] = []
    written: list[str] = []
    for (kind, name), group in by_model.items():
        measured = [r for r in group if r not in kept]
        if not measured and _store_has_profile(name, _store(args)):
            err.print(f"{name}: every device ({len(group)}) is within --max-age {args.max_age}: profile kept")
            continue
        try:
            base, notes = base_profile(kind, name, options)
        except PeakUnknown as exc:
            raise TileOpsError(str(exc)) from None
        # The model's profile: the median over every device of this host, stored (fresh) or new.
        profile, w = build_profile(base, group)
        profiles.append((profile, group))
        warnings += [*notes, *w, *(x for r in measured for x in r.warnings)]
        written += _write(args, profile, measured, err)
    skipped = [stored_freshness(r.device_key, max_age, store=_store(args), quick=args.quick) for r in kept]
    if args.format == "json":
        print(_json_summary(profiles[0][0] if len(profiles) == 1 else None, runs, warnings, written, failed,
                            skipped))
    else:
        for prof, group in profiles:
            out.print(profile_view(prof, group[0] if len(group) == 1 else None))
        out.print(devices_table(runs))
        for w in warnings:
            out.print(f"[yellow]warning:[/] {w}")
    for f in failed:
        print(f"tileops calibrate: device {f} failed", file=sys.stderr)
    return 1 if failed else 0
