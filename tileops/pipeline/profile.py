"""``tileops profile list|show|match|check`` composed: the device profiles this host would price against.

``list`` shows every profile (shipped and store, the store's overriding), ``show``
one profile's theoretical, calibration and effective figures side by side, and
``match`` which profile a device name (default: this host's device) selects, or
that none does, in which case SOL readings are blank (§1.2), and ``check`` holds
profiles' theoretical figures against the ceilings the device's own facts give
and their calibrations against what others measured (``tileops.ceilings``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tileops.errors import TileOpsError
from tileops.pipeline.outcome import exit_code
from tileops.profiles import (PROFILE_DIR_ENV, Profile, ProfileError, find_profile, load_profiles,
                              select_profile, store_dir)

if TYPE_CHECKING:
    from tileops.report.printer import Printer


@dataclass(frozen=True)
class ProfileRequest:
    verb: str = "list"  # list, show, match, check
    name: str | None = None  # show: a profile name, a device name it matches, or a file; None: this host's device
    device_name: str | None = None  # match: None: this host's device
    profile_dir: Path | None = None  # the store; None: $TILEOPS_PROFILE_DIR or the user data dir
    format: str = "table"  # table, json, yaml
    all_profiles: bool = False  # check: every profile, shipped and store


@dataclass(frozen=True)
class ProfileAnswer:
    """``match`` found no profile for the device, or ``check`` found a defect (exit 1); every other answer is 0."""

    matched: bool = True
    defects: bool = False

    @property
    def exit_code(self) -> int:
        return exit_code(failed=0 if self.matched and not self.defects else 1)


def run_profile(req: ProfileRequest, printer: Printer | None = None) -> ProfileAnswer:
    """Answer one ``tileops profile`` verb through ``printer`` (default: a console on stdout). TileOpsError
    naming the file, the field and the fix for a profile that cannot be read, or a name nothing matches."""
    from tileops.calibrate.summary import piped_width
    from tileops.report.printer import make_printer

    printer = printer if printer is not None else make_printer("console", piped_width=piped_width())
    if req.profile_dir is not None:
        os.environ[PROFILE_DIR_ENV] = str(req.profile_dir)  # one store for every lookup in this process
    try:
        profiles = load_profiles()
        if req.verb == "show":
            return _show(req, profiles, printer)
        if req.verb == "match":
            return _match(req, profiles, printer)
        if req.verb == "check":
            return _check(req, profiles, printer)
        return _list(req, profiles, printer)
    except ProfileError as exc:
        raise TileOpsError(str(exc) + (f" (fix: {exc.fix})" if exc.fix and "fix:" not in str(exc) else "")) from None


def _this_device_name() -> str:
    from tileops.device import describe_device

    return describe_device("auto").name


def _dump(data: object, fmt: str) -> str:
    import yaml

    return json.dumps(data, indent=2) if fmt == "json" else yaml.safe_dump(data, sort_keys=False)


def _list(req: ProfileRequest, profiles: list[Profile], printer: Printer) -> ProfileAnswer:
    from tileops.calibrate.summary import profiles_table

    if req.format != "table":
        printer.text(_dump([p.model_dump(mode="json", exclude_none=True) for p in profiles], req.format) + "\n")
        return ProfileAnswer()
    printer.show(profiles_table(profiles, store_dir()))
    return ProfileAnswer()


def _show(req: ProfileRequest, profiles: list[Profile], printer: Printer) -> ProfileAnswer:
    from tileops.calibrate.summary import profile_view

    if req.name:
        profile = find_profile(req.name, profiles)
    else:
        name = _this_device_name()
        hit = select_profile(name, profiles)
        if hit is None:
            raise ProfileError(f"no profile matches this device ({name!r}): SOL readings here are blank",
                               fix="run `tileops calibrate` (CPU) or add a profile whose match lists it")
        profile = hit
    if req.format != "table":
        printer.text(_dump(profile.model_dump(mode="json", exclude_none=True), req.format) + "\n")
        return ProfileAnswer()
    printer.show(profile_view(profile))
    return ProfileAnswer()


def _match(req: ProfileRequest, profiles: list[Profile], printer: Printer) -> ProfileAnswer:
    name = req.device_name or _this_device_name()
    hit = select_profile(name, profiles)
    if req.format != "table":
        printer.text(json.dumps({"device_name": name, "profile": hit.name if hit else None,
                                 "file": str(hit.source_path) if hit and hit.source_path else None}) + "\n")
        return ProfileAnswer(hit is not None)
    if hit is None:
        printer.say(f"{name!r}: no profile matches; SOL readings on this device are blank (§1.2). "
                    "Calibrate it, or add the name to a profile's match list.", result=True)
        return ProfileAnswer(False)
    printer.say(f"{name!r} -> {hit.name} ({hit.source_path})", result=True)
    return ProfileAnswer()


def _check(req: ProfileRequest, profiles: list[Profile], printer: Printer) -> ProfileAnswer:
    from tileops.ceilings.check import check_report
    from tileops.ceilings.facts import host_facts

    if req.all_profiles and req.name:
        raise TileOpsError(f"`tileops profile check` takes a NAME or --all, not both (got {req.name!r} and --all)")
    device = host_facts()
    if req.all_profiles:
        chosen = profiles
    elif req.name:
        chosen = [find_profile(req.name, profiles)]
    else:
        name = device.facts.name if device.facts is not None else _this_device_name()
        hit = select_profile(name, profiles)
        if hit is None:
            raise ProfileError(f"no profile matches this device ({name!r}), so there is nothing to check",
                               fix="name a profile (`tileops profile check H200`), or --all")
        chosen = [hit]
    report = check_report(chosen, device)
    if req.format != "table":
        printer.text(_dump(report.as_dict(), req.format) + "\n")
        return ProfileAnswer(defects=report.failed)
    from tileops.calibrate.summary import check_table

    printer.show(check_table(report, device))
    for heading, lines in (
            ("facts", [f"{p.profile}: {p.facts.describe()}" for p in report.profiles if p.facts is not None]),
            ("defects", [c.describe(p.profile) for p in report.profiles for c in p.defects]),
            ("not checked", [line for p in report.profiles for line in p.unchecked()]),
            ("calibration against what others measured on the same SKU",
             [c.describe(name) for name, cs in report.peers.items() for c in cs])):
        if lines:
            printer.say(f"{heading}:", result=True)
            for line in lines:
                printer.say(f"  {line}", result=True)
    printer.say(report.summary(), result=True)
    return ProfileAnswer(defects=report.failed)
