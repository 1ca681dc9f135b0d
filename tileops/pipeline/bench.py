"""``tileops bench`` composed: check inputs, measure, price once, then every output from that pricing.

The order is what a user sees happen::

    1. describe the device, plan the rows, resolve the profile (a bad --profile fails here, before any row)
    2. calibrate the device first when no profile can price it (a CPU no profile matches)
    3. the sweep (tileops.bench): one record per row, appended as each finishes
    4. price the records once (tileops.roofline) and decide the run's health there
    5. from that one pricing: the table, roofline.json, the plot, run.json's health, the metrics sinks

Nothing is read back from disk between steps and no profile is chosen twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from tileops import exitcodes
from tileops.bench import sweep as bench
from tileops.device import DeviceInfo
from tileops.errors import TileOpsError
from tileops.pipeline.progress import RowProgress
from tileops.profiles import Profile, ProfileChooser
from tileops.records import write_run_info
from tileops.roofline import Health, Priced, health, price_all

if TYPE_CHECKING:  # the export package (prometheus_client) loads only when a run is exported
    from tileops.export.push import RetryPolicy


@dataclass
class OutputOptions:
    """What to do with the measured run: pricing, files, metrics sinks."""

    profile: str | None = None  # a profile name or file; default: the profile matching the device
    calibrate: str = "auto"  # auto: calibrate a CPU that no profile matches, before the rows; never
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


def run_bench(req: BenchRequest, console: Console) -> int:
    """Run ``tileops bench``; returns its exit code (tileops.exitcodes)."""
    out = req.output
    chooser = ProfileChooser.resolve(out.profile)  # validated before the first row
    prep = bench.prepare(req.sweep)
    device = prep.device
    console.print(f"[bold]tileops bench[/] run {prep.info.run_id} on {device.name} ({device.device}"
                  + (f", {prep.threads} threads" if prep.threads else "") + f") -> {prep.run_dir}")
    profile = chooser(device.name)
    if profile is None and out.calibrate == "auto" and device.kind == "cpu":
        profile = _calibrate_cpu(console)
        chooser.add(profile)
    if profile is None:
        console.print(f"[yellow]no profile matches {device.name!r}[/]: SOL will be left blank (never guessed). "
                      "Run `tileops calibrate` on this device, or pass --profile.")
    if prep.done:
        console.print(f"resuming: {prep.done} row(s) already recorded OK, {len(prep.todo)} to run")

    with RowProgress(console, len(prep.todo)) as progress:
        result = bench.run(prep, progress)
    info = result.info
    if result.interrupted:
        info.exit_code = exitcodes.INTERRUPTED
        write_run_info(result.run_dir, info)
        console.print(f"[yellow]interrupted[/]: {len(result.records)} row(s) recorded in {result.records_path}; "
                      f"finish with `tileops bench --resume {result.run_dir}`")
        return exitcodes.INTERRUPTED

    priced = price_all(result.records, chooser)
    h = health(priced)
    _report(priced, h, device, profile, result.run_dir, out, console)
    rc = exitcodes.OK if h.ok else exitcodes.PHYSICS
    if info.rows_error and rc == exitcodes.OK:
        rc = exitcodes.FAILED
    info.health = h.as_dict()  # ok, state (held / partial / not-judged / breached) and each ceiling's check
    info.exit_code = rc
    write_run_info(result.run_dir, info)  # the run's final state, before any network work

    if out.push_url or out.textfile_dir:
        push_rc = _export(result, priced, chooser, out)
        if push_rc and rc == exitcodes.OK:
            rc = info.exit_code = push_rc
            write_run_info(result.run_dir, info)
    if info.rows_error:
        console.print(f"[red]{info.rows_error} row(s) failed[/] (error records in {result.records_path})")
    return rc


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


def _calibrate_cpu(console: Console) -> Profile:
    """A CPU no profile matches is calibrated once, first (stored in the profile store): SOL is measured,
    not guessed, and the calibration runs on a host the sweep is not yet loading."""
    from tileops.calibrate.run import calibrate_cpu
    from tileops.profiles import write_profile

    console.print("no profile matches this CPU: calibrating it first (bandwidth mixes, FMA and matmul peaks; "
                  "about a minute; pass --calibrate never to skip)")
    try:
        profile = calibrate_cpu(quick=False)
    except ValueError as exc:
        raise TileOpsError(f"the CPU calibration failed: {exc}") from None
    path = write_profile(profile)
    console.print(f"wrote CPU profile {path}")
    return profile
