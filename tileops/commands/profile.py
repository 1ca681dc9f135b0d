"""`tileops profile list|show|match|check`: the device profiles this host would price against.

``list`` shows every profile (shipped and store, the store's overriding), ``show``
one profile's theoretical, calibration and effective figures side by side,
``match`` which profile a device name (default: this host's device) selects, or
that none does, in which case SOL readings are blank (§1.2), and ``check`` holds
profiles' theoretical figures against the ceilings the device's own facts give
and their calibrations against what others measured (``tileops.ceilings``). The workflow is
``tileops.pipeline.profile``; this module parses its arguments.
"""

from __future__ import annotations

import argparse

from tileops.commands import argtypes


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
    show.add_argument("name", nargs="*", help="profile name, a device name it matches (quoted or not: NVIDIA "
                                              "H200), or a YAML file (default: the profile matching this host's "
                                              "device)")
    match = verbs.add_parser("match", help="which profile a device name selects", parents=[common])
    match.add_argument("device_name", nargs="*", help="the device name, quoted or not (NVIDIA H200; default: this "
                                                      "host's device)")
    check = verbs.add_parser("check", help="theoretical figures against the device's own facts; calibrations "
                                           "against what others measured on the same SKU", parents=[common])
    check.add_argument("name", nargs="*", help="profile name, a device name it matches (quoted or not), or a YAML "
                                               "file (default: the profile matching this host's device)")
    check.add_argument("--all", action="store_true", dest="all_profiles",
                       help="every profile, shipped and store (exit 1 when any has a defect)")
    p.set_defaults(func=run, verb="list")


def _common_options(p: argparse.ArgumentParser, store_default: object, format_default: object) -> None:
    p.add_argument("--profile-dir", type=argtypes.profile_store, default=store_default,
                   help="profile store (default: $TILEOPS_PROFILE_DIR or the user data dir)")
    p.add_argument("--format", choices=("table", "json", "yaml"), default=format_default,
                   help="table (default), json or yaml; before or after the verb")


def run(args: argparse.Namespace) -> int:
    from tileops.pipeline.profile import ProfileRequest, run_profile

    req = ProfileRequest(verb=args.verb, name=_words(getattr(args, "name", None)),
                         device_name=_words(getattr(args, "device_name", None)), profile_dir=args.profile_dir,
                         format=args.format, all_profiles=getattr(args, "all_profiles", False))
    return run_profile(req).exit_code


def _words(given: list[str] | None) -> str | None:
    """A name typed unquoted (`profile match NVIDIA H200`) is one name: its words joined as a shell would have kept
    them quoted; none given, None (this host's device)."""
    return " ".join(given) if given else None
