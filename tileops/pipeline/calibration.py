"""Calibrate the device before measuring it, when it needs it (spec §5.1: calibration is a per-device input).

A fresh GPU host (or a CPU) has no calibration of its own, so every row would be
priced blank (``uncalibrated``) or on another device's figures. ``tileops bench``
therefore looks for this device's own result in the profile store
(``devices/<uuid>.yaml``; ``cpu-<hostname>`` for a CPU) and, when there is none
or it is older than the maximum age, measures the device first: quick on a GPU
(seconds; ``tileops calibrate`` measures the full one), full on a CPU (about a
minute). The result is stored under the device's key with when, how and on what
it was measured, and from then on prices this device's rows. ``--calibrate
never`` skips all of this and leaves uncalibrated rows blank with their reason.
"""

from __future__ import annotations

import datetime as dt
from typing import Callable

from tileops.device import DeviceInfo
from tileops.errors import TileOpsError
from tileops.profiles import ProfileChooser, write_profile

#: How old a device's calibration may be before the bench measures it again (the chart's default too).
DEFAULT_MAX_AGE = dt.timedelta(days=7)
POLICIES = ("auto", "quick", "full", "never")


def ensure_calibrated(device: DeviceInfo, chooser: ProfileChooser, policy: str, max_age: dt.timedelta,
                      say: Callable[[str], None], progress: Callable[[str, int, int], None] | None = None) -> None:
    """Calibrate ``device`` first unless the store holds a calibration of it newer than ``max_age``.

    ``policy``: ``auto`` (quick on a GPU, full on a CPU), ``quick``, ``full``, or
    ``never``. An explicit ``--profile`` (a fixed chooser) prices every row on
    that profile, so nothing is calibrated then.
    """
    if policy == "never" or chooser.fixed is not None:
        return
    from tileops.calibrate.theoretical import base_profile
    from tileops.calibrate.results import build_profile, device_key, stored_freshness

    key = device_key(device.uuid, device.hostname)
    fresh = stored_freshness(key, max_age, quick=True)  # any calibration of this device will do
    model = chooser(device.name)
    if fresh.fresh and fresh.result is not None:
        if model is None and device.kind == "cpu":  # the model's profile was removed: rebuild it, measure nothing
            base, _ = base_profile("cpu", device.name)
            profile, _ = build_profile(base, [fresh.result])
            path = write_profile(profile)
            chooser.add(profile)
            say(f"calibration of {key}: {fresh.reason}; rebuilt the CPU profile {path} from it")
        else:
            say(f"calibration of {key}: {fresh.reason}")
        return
    if model is None and device.kind == "cuda":
        say(f"[yellow]no profile names {device.name!r}[/]: a calibration measures fractions of the datasheet "
            "ceilings, and no profile states them for this GPU, so SOL stays blank; add a profile "
            "(docs/profiles.md) and run `tileops calibrate`")
        return
    quick = policy == "quick" or (policy == "auto" and device.kind == "cuda")
    say(f"calibrating {device.device} ({key}) first: {fresh.reason}; a {'quick' if quick else 'full'} calibration"
        f" ({'seconds' if quick else 'about a minute'}) so its rows are priced on what it reaches; "
        "--calibrate never skips it")
    from tileops.calibrate.results import write_device_result
    from tileops.calibrate.run import calibrate_device

    try:
        outcome = calibrate_device(device.device, quick=quick, progress=progress, profiles=chooser.profiles)
    except ValueError as exc:
        raise TileOpsError(f"the calibration of {device.device} failed: {exc}") from None
    written = [write_device_result(outcome.run)]
    if model is None:  # a CPU no profile matches: its model profile is this calibration
        written.append(write_profile(outcome.profile))
        chooser.add(outcome.profile)
    else:
        chooser.forget()  # the device's own calibration prices it from now on
    for warning in outcome.warnings:
        say(f"[yellow]calibration warning[/]: {warning}")
    say("wrote " + ", ".join(str(p) for p in written))
