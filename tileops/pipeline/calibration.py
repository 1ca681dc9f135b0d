"""Calibrate the device before measuring it, when it needs it (spec §5.1: calibration is a per-device input).

A fresh GPU host (or a CPU) has no calibration of its own, so every row would be
priced blank (``uncalibrated``) or on another device's figures. ``tileops bench``
therefore looks for this device's own result in the profile store
(``devices/<uuid>.yaml``; ``cpu-<hostname>`` for a CPU) and measures the device
first whenever that result is missing, unreadable or older than the maximum age
(``--calibration-max-age``, default 7 days), whether or not a profile matches
the device: quick on a GPU (seconds; ``tileops calibrate`` measures the full
one), full on a CPU (tens of seconds). The result is stored under the device's
key with when, how and on what it was measured, and from then on prices this
device's rows; a quick one is named in the run's summary, because its figures
are rough. ``--calibrate never`` skips all of this and leaves uncalibrated rows
blank with their reason.

A CPU's nominal memory bandwidth (``$TILEOPS_DRAM_BANDWIDTH``) lives in its model
profile: when the variable names one the profile lacks or states otherwise, the
profile is rebuilt from the stored result with it (nothing is measured), so the
physics check can judge bandwidth from this run on.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from tileops.device import DeviceInfo
from tileops.errors import TileOpsError
from tileops.profiles import Profile, ProfileChooser, write_profile

if TYPE_CHECKING:
    from tileops.calibrate.results import DeviceCalibration
    from tileops.calibrate.theoretical import TheoryOptions

#: How old a device's calibration may be before the bench measures it again (the chart's default too).
DEFAULT_MAX_AGE = dt.timedelta(days=7)
POLICIES = ("auto", "quick", "full", "never")


@dataclass(frozen=True)
class Calibrated:
    """The device's own calibration as the bench left it: its key and stored result (None: none is used)."""

    key: str
    device: str  # as --device names it: cpu, cuda:0
    result: DeviceCalibration | None = None

    def quick_note(self) -> str | None:
        """A sentence for the run's summary when the rows are priced on a quick (rough) calibration."""
        r = self.result
        if r is None or not r.quick:
            return None
        when = r.finished_at.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        return (f"priced on a quick calibration of {self.key} ({when}): small sizes and few repetitions, rough "
                f"figures; `tileops calibrate --device {self.device}` measures the full one "
                "(docs/profiles.md)")


def ensure_calibrated(device: DeviceInfo, chooser: ProfileChooser, policy: str, max_age: dt.timedelta,
                      say: Callable[[str], None], progress: Callable[[str, int, int], None] | None = None
                      ) -> Calibrated | None:
    """Calibrate ``device`` first unless the store holds a calibration of it newer than ``max_age``.

    ``policy``: ``auto`` (quick on a GPU, full on a CPU), ``quick``, ``full``, or
    ``never``. An explicit ``--profile`` (a fixed chooser) prices every row on
    that profile, so nothing is calibrated then (None). TileOpsError, before
    anything is read or written, for a device key that cannot name a file (a host
    name such as ``../../x``).
    """
    if policy == "never" or chooser.fixed is not None:
        return None
    from tileops.calibrate.results import build_profile, check_device_key, stored_freshness
    from tileops.calibrate.theoretical import TheoryOptions, base_profile

    key = check_device_key(device.key, f"device {device.torch_device} on host {device.hostname!r}")
    try:
        options = TheoryOptions.from_env()
    except ValueError as exc:
        raise TileOpsError(str(exc)) from None
    fresh = stored_freshness(key, max_age, quick=True)  # any calibration of this device will do
    model = chooser(device.name)
    if fresh.fresh and fresh.result is not None:
        why = _rebuild_reason(device, model, options)
        if why is not None:  # the model's profile is missing or lacks the stated nominal: rebuild, measure nothing
            base, _ = base_profile("cpu", device.name, options, chooser.profiles)
            profile, _ = build_profile(base, [fresh.result])
            path = write_profile(profile)
            chooser.add(profile)
            say(f"calibration of {key}: {fresh.reason}; {why}: rebuilt the CPU profile {path} from it")
        else:
            say(f"calibration of {key}: {fresh.reason}")
        return Calibrated(key, device.torch_device, fresh.result)
    if model is None and device.kind == "cuda":
        say(f"[yellow]no profile names {device.name!r}[/]: a calibration measures fractions of the datasheet "
            "ceilings, and no profile states them for this GPU, so SOL stays blank; add a profile "
            "(docs/profiles.md) and run `tileops calibrate`")
        return Calibrated(key, device.torch_device)
    quick = policy == "quick" or (policy == "auto" and device.kind == "cuda")
    say(f"calibrating {device.torch_device} ({key}) first: {fresh.reason}; a {'quick' if quick else 'full'} calibration"
        f" ({'seconds' if quick else 'tens of seconds'}) so its rows are priced on what it reaches; "
        "--calibrate never skips it")
    from tileops.calibrate.results import write_device_result
    from tileops.calibrate.run import calibrate_device

    try:
        outcome = calibrate_device(device, quick=quick, progress=progress, options=options,
                                   profiles=chooser.profiles)
    except ValueError as exc:
        raise TileOpsError(f"the calibration of {device.torch_device} failed: {exc}") from None
    written = [write_device_result(outcome.run)]
    if model is None or _rebuild_reason(device, model, options) is not None:
        # a CPU no profile matches, or whose profile lacks the stated nominal: its model profile is this calibration
        written.append(write_profile(outcome.profile))
        chooser.add(outcome.profile)
    chooser.forget()  # the device's own calibration prices it from now on
    for warning in outcome.warnings:
        say(f"[yellow]calibration warning[/]: {warning}")
    say("wrote " + ", ".join(str(p) for p in written))
    return Calibrated(key, device.torch_device, outcome.run)


def _rebuild_reason(device: DeviceInfo, model: Profile | None, options: TheoryOptions) -> str | None:
    """Why a CPU's model profile must be rebuilt from its calibration (None: it need not)."""
    if device.kind != "cpu":
        return None
    if model is None:
        return "no profile of this CPU model in the store"
    nominal = options.memory_bandwidth
    if nominal is not None and (model.memory is None or model.memory.theoretical != nominal):
        return f"{options.memory_bandwidth_ref} states the nominal memory bandwidth its profile lacks"
    return None
