"""`tileops calibrate`: measure this device's ceilings and write its calibrated profile.

The profile goes to the profile store (``--profile-dir``, ``TILEOPS_PROFILE_DIR``,
default under the user's data dir), plus a per-device raw result under
``devices/<uuid>.yaml``; the shipped profiles change only with
``--write-shipped``. ``--all-devices`` calibrates each visible GPU in turn, each
in its own process, and writes one profile per device model (median over its
devices) plus every device's own result.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from tileops.calibrate.base import TheoryOptions, base_profile
from tileops.calibrate.cpupeak import PeakUnknown
from tileops.calibrate.dram import parse_bandwidth, read_bandwidth_file
from tileops.calibrate.results import DeviceCalibration, build_profile, write_device_result
from tileops.calibrate.summary import devices_table, make_console, profile_view, run_view
from tileops.commands import argtypes
from tileops.errors import TileOpsError
from tileops.fsutil import unwritable_dir
from tileops.profiles import PROFILE_DIR_ENV, Profile, shipped_dir, store_dir, write_profile


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate", help="measure this device's bandwidth mixes, compute roofs and latency floor",
        description="Measure the device this runs on and write its calibrated profile to the profile store.")
    p.add_argument("--device", default="auto", help="auto (default: cuda:0 if present, else cpu), cpu, cuda:N")
    p.add_argument("--all-devices", action="store_true",
                   help="calibrate every visible GPU in turn, each in its own process (the CPU when there is none)")
    p.add_argument("--quick", action="store_true", help="small sizes and few repetitions: seconds, rough figures")
    p.add_argument("--profile-dir", type=Path, default=None,
                   help="profile store to write (default: $TILEOPS_PROFILE_DIR or the user data dir)")
    p.add_argument("--write-shipped", action="store_true",
                   help="write the model profile into the shipped profiles/ folder instead of the store")
    p.add_argument("--no-write", action="store_true", help="measure and print only")
    p.add_argument("--dram-bandwidth", metavar="BW",
                   help="nominal memory bandwidth, e.g. 76.8GB/s or 7.68e10 (bytes/s), when DMI cannot tell")
    p.add_argument("--dram-bandwidth-file", type=Path, metavar="FILE",
                   help="a file holding the nominal bandwidth (`dram_bandwidth: 76.8GB/s`)")
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
                  written: list[str], failed: list[str]) -> str:
    return json.dumps({
        "profile": profile.model_dump(mode="json") if profile else None,
        "devices": [r.model_dump(mode="json") for r in runs],
        "warnings": warnings, "written": written, "failed": failed}, indent=2)


def run(args: argparse.Namespace) -> int:
    from tileops.calibrate.run import calibrate_device, measure_device  # torch: imported only when run

    if args.profile_dir is not None:  # one store for every lookup here and in child processes
        os.environ[PROFILE_DIR_ENV] = str(args.profile_dir)
    out = make_console()
    err = make_console(stderr=True)
    options = _options(args)
    if not args.no_write and not args.results_out:  # before minutes of measuring, not after
        why = unwritable_dir(_target_dir(args)) or unwritable_dir(_store(args))
        if why:
            raise TileOpsError(f"cannot write profiles to {_target_dir(args)} ({why}); give a writable "
                               "--profile-dir (or TILEOPS_PROFILE_DIR), or pass --no-write")
    if args.results_out:  # a child of --all-devices: measure, write the raw result, nothing else
        with _Bar(err, args.device) as bar:
            dev_run = measure_device(args.device, quick=args.quick, progress=bar)
        write_device_result(dev_run, path=args.results_out)
        err.print(run_view(dev_run))
        return 0
    if args.all_devices:
        return _run_all(args, options, out, err)
    try:
        with _Bar(err, args.device) as bar:
            outcome = calibrate_device(args.device, quick=args.quick, progress=bar, options=options)
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


def _run_all(args: argparse.Namespace, options: TheoryOptions, out: Console, err: Console) -> int:
    from tileops.calibrate.run import run_children, visible_devices

    devices = visible_devices()
    if devices == ["cpu"]:
        err.print("no CUDA device visible: calibrating the CPU")
    children = run_children(devices, quick=args.quick, echo=err.print)
    runs = [c.run for c in children if c.run is not None]
    failed = [f"{c.device} ({c.error})" for c in children if c.run is None]
    by_model: dict[tuple[str, str], list[DeviceCalibration]] = defaultdict(list)
    for r in runs:
        by_model[(r.kind, r.name)].append(r)
    warnings: list[str] = []
    profiles: list[tuple[Profile, list[DeviceCalibration]]] = []
    written: list[str] = []
    for (kind, name), group in by_model.items():
        try:
            base, notes = base_profile(kind, name, options)
        except PeakUnknown as exc:
            raise TileOpsError(str(exc)) from None
        profile, w = build_profile(base, group)
        profiles.append((profile, group))
        warnings += [*notes, *w, *(x for r in group for x in r.warnings)]
        written += _write(args, profile, group, err)
    if args.format == "json":
        print(_json_summary(profiles[0][0] if len(profiles) == 1 else None, runs, warnings, written, failed))
    else:
        for prof, group in profiles:
            out.print(profile_view(prof, group[0] if len(group) == 1 else None))
        out.print(devices_table(runs))
        for w in warnings:
            out.print(f"[yellow]warning:[/] {w}")
    for f in failed:
        print(f"tileops calibrate: device {f} failed", file=sys.stderr)
    return 1 if failed else 0
