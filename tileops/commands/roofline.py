"""`tileops roofline RESULTS...`: price benchmark records against a device profile (§4.3).

Exit codes (tileops.cli): 0 healthy; 3 a physics breach (a formula error,
checked first); 1 a row more than ``--threshold`` slower than ``--baseline``,
or an error record in the results; 2 unreadable input (a missing or invalid
records file, an unknown or invalid profile, no records).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml
from pydantic import ValidationError
from rich.console import Console

from tileops.bench.records import Record, RecordFileError, load_records
from tileops.cli import EXIT_DEFECTS, EXIT_OK, EXIT_PHYSICS, EXIT_USAGE
from tileops.errors import TileOpsError
from tileops.profiles import Profile
from tileops.report import FORMATS, compare, render, render_summary
from tileops.report.baseline import DEFAULT_THRESHOLD
from tileops.roofline import Priced, health, price_all


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "roofline", help="price benchmark records against a device profile: SOL efficiency, verdicts, physics check",
        description="Price benchmark records against a device profile (SOL efficiency, bound, verdicts, "
                    "physics check). Exit 0 healthy, 3 physics breach (a formula error), 1 baseline "
                    "regression or error rows, 2 unreadable input.")
    p.add_argument("results", nargs="+", type=Path, metavar="RESULTS",
                   help="run directories (holding records.jsonl) or records.jsonl files")
    p.add_argument("--profile", metavar="NAME|FILE",
                   help="a profile name or a profile YAML file (default: match each record's device name)")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("--baseline", type=Path, action="append", metavar="OLD",
                   help="an older run (directory or records.jsonl) to compare with, row by row; repeatable")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                   help="flag rows slower than the baseline by more than this fraction (default 0.10 = 10%%)")
    p.add_argument("--plot", type=Path, metavar="DIR",
                   help="write roofline.png and roofline.svg into DIR (one pair per profile)")
    p.set_defaults(func=run)


class ProfileArgError(TileOpsError):
    """--profile names no profile, or its file is not a valid profile."""


def read_profile_file(path: Path) -> Profile:
    """A profile YAML file, validated; errors name the file and the field."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ProfileArgError(f"{path}: cannot read profile: {exc}") from None
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first.get("loc", ()))
        raise ProfileArgError(f"{path}: not a valid profile ({loc}: {first.get('msg')}); fix that field") from None


def available_profiles() -> list[Profile]:
    """Every profile known, in precedence order (the calibrated store before the shipped files).

    Uses ``tileops.profiles.load_profiles`` when it exists; until then reads
    ``$TILEOPS_PROFILE_DIR`` and the shipped ``profiles/`` folder directly.
    """
    import tileops.profiles as profiles_mod

    loader = getattr(profiles_mod, "load_profiles", None)
    if loader is not None:
        got = loader()
        return list(got.values()) if isinstance(got, dict) else list(got)
    from tileops.paths import data_dir

    dirs = [Path(d) for d in os.environ.get("TILEOPS_PROFILE_DIR", "").split(os.pathsep) if d]
    dirs.append(data_dir("profiles"))
    out: list[Profile] = []
    for d in dirs:
        if d.is_dir():
            for f in sorted([*d.glob("*.yaml"), *d.glob("*.yml")]):
                out.append(read_profile_file(f))
    return out


def resolve_profile_arg(arg: str) -> Profile:
    """``--profile``: an existing file is read as YAML; anything else is a profile name."""
    path = Path(arg)
    if path.is_file():
        return read_profile_file(path)
    known = available_profiles()
    for p in known:
        if p.name == arg:
            return p
    for p in known:  # a device name or alias works too
        if p.matches(arg):
            return p
    names = ", ".join(sorted(p.name for p in known)) or "none found"
    raise ProfileArgError(f"--profile {arg!r}: no such profile file or profile name (known: {names}); "
                          "see `tileops profile list`")


def _load(paths: list[Path], what: str) -> list[Record]:
    records = load_records(paths)
    if not records:
        raise ProfileArgError(f"{what} {', '.join(map(str, paths))}: no records")
    return records


def _plot(priced: list[Priced], profiles: list[Profile], out_dir: Path, err: Console) -> None:
    from tileops.report.plot import write_plot  # matplotlib only when asked

    used = [p for p in profiles if any(q.profile == p.name for q in priced)]
    if not used:
        err.print("roofline: no row is priced on a profile, so there is no roofline to plot")
        return
    for prof in used:
        stem = "roofline" if len(used) == 1 else f"roofline-{prof.name}"
        for path in write_plot(priced, prof, out_dir, stem=stem):
            err.print(f"wrote {path}")


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    try:
        records = _load(args.results, "results")
        baseline = _load(args.baseline, "baseline") if args.baseline else None
        if args.profile:
            chosen = resolve_profile_arg(args.profile)
            profiles = [chosen]
            choice: Profile | list[Profile] = chosen
        else:
            profiles = available_profiles()
            choice = profiles
    except (FileNotFoundError, RecordFileError, ProfileArgError) as exc:
        print(f"tileops roofline: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.threshold < 0:
        print("tileops roofline: error: --threshold must be >= 0 (a fraction: 0.10 = 10 %)", file=sys.stderr)
        return EXIT_USAGE

    priced = price_all(records, choice)
    comparison = compare(priced, price_all(baseline, choice), args.threshold) if baseline is not None else None
    if args.format == "table":
        h = render_summary(priced, Console(), comparison=comparison)
    else:
        sys.stdout.write(render(priced, args.format, comparison=comparison))
        h = health(priced)
    if args.plot:
        _plot(priced, profiles, args.plot, err)

    if not h.ok:
        err.print(f"roofline: physics check FAILED: {h.breaches} row(s) breach a theoretical ceiling "
                  f"(FORMULA ERROR); exit {EXIT_PHYSICS}", style="bold red")
        return EXIT_PHYSICS
    if comparison is not None and comparison.regressions:
        err.print(f"roofline: {len(comparison.regressions)} row(s) more than {args.threshold:.0%} slower than the "
                  f"baseline; exit {EXIT_DEFECTS}", style="red")
        return EXIT_DEFECTS
    if h.errors:
        err.print(f"roofline: {h.errors} error record(s) in the results; exit {EXIT_DEFECTS}", style="red")
        return EXIT_DEFECTS
    return EXIT_OK
