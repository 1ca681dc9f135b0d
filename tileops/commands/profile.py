"""`tileops profile list|show|match|check`: the device profiles this host would price against.

``list`` shows every profile (shipped and store, the store's overriding), ``show``
one profile's theoretical, calibration and effective figures side by side,
``match`` which profile a device name (default: this host's device) selects, or
that none does, in which case SOL readings are blank (§1.2), and ``check`` holds
profiles' theoretical figures against the ceilings the device's own facts give
and their calibrations against what others measured (``tileops.ceilings``).
"""

from __future__ import annotations

import argparse
import json
import os

import yaml
from rich.table import Table

from tileops.calibrate.summary import fmt_rate, fmt_seconds, make_console, profile_view
from tileops.commands import argtypes
from tileops.errors import TileOpsError
from tileops.profiles import PROFILE_DIR_ENV, Profile, ProfileError, find_profile, is_store_profile, \
    load_profiles, select_profile, store_dir


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="list and show device profiles (theoretical, calibration, effective)",
                       description="Device profiles: shipped ones plus the profile store, the store's overriding.")
    _common_options(p, None, "table")
    # The same options after the verb (`profile show NAME --format yaml`): given there, they win; left out,
    # the value given before the verb (or the default) stands.
    common = argparse.ArgumentParser(add_help=False)
    _common_options(common, argparse.SUPPRESS, argparse.SUPPRESS)
    verbs = p.add_subparsers(dest="verb", metavar="VERB")
    verbs.add_parser("list", help="every profile, one line each", parents=[common])
    show = verbs.add_parser("show", help="one profile: theoretical, calibration and effective side by side",
                            parents=[common])
    show.add_argument("name", nargs="?", help="profile name, a device name it matches, or a YAML file "
                                              "(default: the profile matching this host's device)")
    match = verbs.add_parser("match", help="which profile a device name selects", parents=[common])
    match.add_argument("device_name", nargs="?", help="the device name (default: this host's device)")
    check = verbs.add_parser("check", help="theoretical figures against the device's own facts; calibrations "
                                           "against what others measured on the same SKU", parents=[common])
    check.add_argument("name", nargs="?", help="profile name, a device name it matches, or a YAML file (default: the "
                                               "profile matching this host's device)")
    check.add_argument("--all", action="store_true", dest="all_profiles",
                       help="every profile, shipped and store (exit 1 when any has a defect)")
    p.set_defaults(func=run, verb="list")


def _common_options(p: argparse.ArgumentParser, store_default: object, format_default: object) -> None:
    p.add_argument("--profile-dir", type=argtypes.profile_store, default=store_default,
                   help="profile store (default: $TILEOPS_PROFILE_DIR or the user data dir)")
    p.add_argument("--format", choices=("table", "json", "yaml"), default=format_default,
                   help="table (default), json or yaml; before or after the verb")


def _profiles(args: argparse.Namespace) -> list[Profile]:
    if args.profile_dir is not None:
        os.environ[PROFILE_DIR_ENV] = str(args.profile_dir)  # one store for every lookup in this process
    return load_profiles()


def _this_device_name() -> str:
    from tileops.device import describe_device

    return describe_device("auto").name


def _dump(profile: Profile, fmt: str) -> str:
    data = profile.model_dump(mode="json", exclude_none=True)
    return json.dumps(data, indent=2) if fmt == "json" else yaml.safe_dump(data, sort_keys=False)


def run(args: argparse.Namespace) -> int:
    try:
        profiles = _profiles(args)
        if args.verb == "show":
            return _show(args, profiles)
        if args.verb == "match":
            return _match(args, profiles)
        if args.verb == "check":
            return _check(args, profiles)
        return _list(args, profiles)
    except ProfileError as exc:
        raise TileOpsError(str(exc) + (f" (fix: {exc.fix})" if exc.fix and "fix:" not in str(exc) else "")) from None


def _list(args: argparse.Namespace, profiles: list[Profile]) -> int:
    if args.format != "table":
        data = [p.model_dump(mode="json", exclude_none=True) for p in profiles]
        print(json.dumps(data, indent=2) if args.format == "json" else yaml.safe_dump(data, sort_keys=False))
        return 0
    t = Table(title=f"device profiles (store: {store_dir()})", title_justify="left")
    for col in ("name", "kind", "matches", "memory nominal", "effective", "roofs calibrated", "floor", "from"):
        t.add_column(col, no_wrap=col == "name")
    for p in profiles:
        mem = p.memory
        nominal = "-" if mem is None else (fmt_rate(mem.theoretical, "B/s") if mem.nominal_known else "unknown")
        eff = "-" if mem is None or mem.effective is None else fmt_rate(mem.effective, "B/s")
        calibrated = sum(r.calibration is not None for r in p.compute.values())
        t.add_row(p.name, p.kind, "\n".join(p.match), nominal, eff, f"{calibrated}/{len(p.compute)}",
                  fmt_seconds(p.latency_floor_s), "store" if is_store_profile(p) else "shipped")
    make_console().print(t)
    return 0


def _show(args: argparse.Namespace, profiles: list[Profile]) -> int:
    if args.name:
        profile = find_profile(args.name, profiles)
    else:
        name = _this_device_name()
        profile = select_profile(name, profiles)
        if profile is None:
            raise ProfileError(f"no profile matches this device ({name!r}): SOL readings here are blank",
                               fix="run `tileops calibrate` (CPU) or add a profile whose match lists it")
    if args.format != "table":
        print(_dump(profile, args.format))
        return 0
    make_console().print(profile_view(profile))
    return 0


def _match(args: argparse.Namespace, profiles: list[Profile]) -> int:
    name = args.device_name or _this_device_name()
    hit = select_profile(name, profiles)
    if args.format != "table":
        print(json.dumps({"device_name": name, "profile": hit.name if hit else None,
                          "file": str(hit.source_path) if hit and hit.source_path else None}))
        return 0 if hit else 1
    if hit is None:
        print(f"{name!r}: no profile matches; SOL readings on this device are blank (§1.2). "
              "Calibrate it, or add the name to a profile's match list.")
        return 1
    print(f"{name!r} -> {hit.name} ({hit.source_path})")
    return 0


def _check(args: argparse.Namespace, profiles: list[Profile]) -> int:
    from tileops import exitcodes
    from tileops.ceilings.check import check_report
    from tileops.ceilings.facts import host_facts

    if args.all_profiles and args.name:
        raise TileOpsError(f"`tileops profile check` takes a NAME or --all, not both (got {args.name!r} and --all)")
    device = host_facts()
    if args.all_profiles:
        chosen = profiles
    elif args.name:
        chosen = [find_profile(args.name, profiles)]
    else:
        name = device.facts.name if device.facts is not None else _this_device_name()
        hit = select_profile(name, profiles)
        if hit is None:
            raise ProfileError(f"no profile matches this device ({name!r}), so there is nothing to check",
                               fix="name a profile (`tileops profile check H200`), or --all")
        chosen = [hit]
    report = check_report(chosen, device)
    if args.format != "table":
        data = report.as_dict()
        print(json.dumps(data, indent=2) if args.format == "json" else yaml.safe_dump(data, sort_keys=False))
        return exitcodes.FAILED if report.failed else exitcodes.OK
    console = make_console()
    source = (f"this GPU's own ({device.facts.origin}) for the profile naming it, else those recorded per SKU"
              if device.facts is not None else f"those recorded per SKU ({device.why_not})")
    t = Table(title=f"profile check: theoretical figures against the ceilings the device's facts give; facts: {source}",
              title_justify="left")
    for col in ("profile", "ceiling", "profile states", "facts give", "off", "state"):
        t.add_column(col, no_wrap=col in ("profile", "ceiling"), justify="right" if col == "off" else "left")
    for p in report.profiles:
        if p.not_checked:
            t.add_row(p.profile, "-", "-", "-", "-", "not checked")
        for c in p.ceilings:
            off = "-" if c.ratio is None else f"{round((c.ratio - 1) * 100, 1) + 0.0:+.1f} %"
            state = {"defect": "[red]DEFECT[/]", "agrees": "agrees"}.get(c.state, "not checked")
            t.add_row(p.profile, c.ceiling, fmt_rate(c.stated, c.unit), fmt_rate(c.derived.value, c.unit), off, state)
    console.print(t)
    for heading, lines in (
            ("facts", [f"{p.profile}: {p.facts.describe()}" for p in report.profiles if p.facts is not None]),
            ("defects", [c.describe(p.profile) for p in report.profiles for c in p.defects]),
            ("not checked", [line for p in report.profiles for line in p.unchecked()]),
            ("calibration against what others measured on the same SKU",
             [c.describe(name) for name, cs in report.peers.items() for c in cs])):
        if lines:
            console.print(f"{heading}:", highlight=False)
            for line in lines:
                console.print(f"  {line}", soft_wrap=True, highlight=False)
    console.print(report.summary(), soft_wrap=True, highlight=False)
    return exitcodes.FAILED if report.failed else exitcodes.OK
