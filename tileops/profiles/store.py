"""Where profiles live, and how they are read and written.

Two places: the shipped profiles (``profiles/*.yaml``, datasheet values,
calibration empty unless someone measured it) and the profile store
(``TILEOPS_PROFILE_DIR``, default ``<user data dir>/tileops/profiles``), where
``tileops calibrate`` writes. A store profile overrides a shipped one of the
same name, so a calibration never has to edit the shipped files. Every file is
read by the package's one YAML reader (``tileops.yamlfile``) and written
atomically, validated before it replaces anything.
"""

from __future__ import annotations

import os
import re
from decimal import Decimal
from pathlib import Path
from typing import Any
from collections.abc import Callable

import yaml

from tileops.fsutil import read_regular, unwritable_file, write_atomic
from tileops.profiles.model import Profile, ProfileError, Provenance, parse_profile
from tileops.yamlfile import YamlError, parse_yaml, read_yaml, refuse_duplicates

PROFILE_DIR_ENV = "TILEOPS_PROFILE_DIR"
#: A profile is a page of YAML; a file larger than this is not one (and is not read into memory).
PROFILE_MAX_BYTES = 2**20


def shipped_dir() -> Path:
    """The shipped profiles: ``profiles/`` in a checkout, ``tileops/_data/profiles`` when installed."""
    from tileops.paths import data_dir

    return data_dir("profiles")


def store_dir() -> Path:
    """The profile store: ``$TILEOPS_PROFILE_DIR`` or ``<user data dir>/tileops/profiles``."""
    env = os.environ.get(PROFILE_DIR_ENV)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("tileops")) / "profiles"



def load_profile(path: Path | str) -> Profile:
    """Read one profile file. Raises ProfileError naming the file, the field and the fix.

    Read by the package's one YAML reader (``tileops.yamlfile``): a regular file of bounded size, UTF-8,
    aliases bounded, every key once.
    """
    path = Path(path)
    try:
        data = refuse_duplicates(read_yaml(path, PROFILE_MAX_BYTES, whole=True), path)
    except YamlError as exc:
        field = f"line {exc.line}" if exc.line is not None else None
        raise ProfileError(str(exc), file=path, field=field,
                           fix="fix the file at that line" if field else "replace it with a profile YAML file, "
                                                                         "or remove it") from None
    return parse_profile(data, path)


ProfileReader = Callable[[Path], Profile]
ErrorSink = Callable[[ProfileError], None]


def _load_dir(directory: Path, read: ProfileReader, on_error: ErrorSink | None) -> dict[str, Profile]:
    out: dict[str, Profile] = {}
    if not directory.is_dir():
        return out
    for path in sorted(directory.glob("*.yaml")) + sorted(directory.glob("*.yml")):
        try:
            p = read(path)
            if p.name in out:
                other = out[p.name].source_path
                raise ProfileError(f"{path}: name {p.name!r} is also used by {other}; every profile in a folder "
                                   "needs its own name", file=path, field="name", fix="rename one of the two profiles")
        except ProfileError as exc:
            if on_error is None:
                raise
            on_error(exc)
            continue
        out[p.name] = p
    return out


def load_profiles(*, shipped: bool = True, store: bool = True, store_path: Path | None = None,
                  read: ProfileReader = load_profile, on_error: ErrorSink | None = None) -> list[Profile]:
    """Shipped profiles plus the store's, a store profile replacing a shipped one of the same name.

    A malformed file raises ProfileError: a profile that silently vanished would
    leave readings blank with a misleading reason. A long-running reader (``tileops
    serve``) passes ``on_error`` instead: the file is reported there and skipped,
    and every other profile still loads. ``read`` reads one file (a cache may
    stand in for :func:`load_profile`).
    """
    merged: dict[str, Profile] = {}
    if shipped:
        merged.update(_load_dir(shipped_dir(), read, on_error))
    if store:
        directory = store_path or store_dir()
        problem = store_problem(directory, explicit=store_path is not None)
        if problem is None:
            merged.update(_load_dir(directory, read, on_error))
        elif on_error is None:
            raise problem
        else:
            on_error(problem)
    return sorted(merged.values(), key=lambda p: p.name)


def store_problem(directory: Path, *, explicit: bool = False) -> ProfileError | None:
    """Why ``directory`` cannot be the profile store (it exists and is not a directory), naming what set it
    and the fix; None when it is a directory or absent (absent: no store profiles yet, calibrate makes it).

    Without this, every reader would find no store profile in a file and price rows blank (``no-profile``)
    without saying why. ``explicit``: the path was passed in rather than read from the environment."""
    if not directory.exists() or directory.is_dir():
        return None
    env = os.environ.get(PROFILE_DIR_ENV)
    if explicit:
        origin, fix = "the profile store given", "give a directory"
    elif env:
        origin = f"{PROFILE_DIR_ENV}={env}"
        fix = f"point {PROFILE_DIR_ENV} (or --profile-dir) at a directory, or unset it for the default store"
    else:
        origin = "the default profile store"
        fix = f"move the file away, or set {PROFILE_DIR_ENV} to a directory"
    return ProfileError(f"{directory}: {origin} is a file, not a directory; the profile store is a folder of "
                        f"profile YAML files (fix: {fix}; calibrate creates the directory when missing)",
                        file=directory, field=PROFILE_DIR_ENV, fix=fix)


def is_store_profile(profile: Profile, store_path: Path | None = None) -> bool:
    src = profile.source_path
    if src is None:
        return False
    try:
        return src.resolve().parent == (store_path or store_dir()).resolve()
    except OSError:
        return False



# --------------------------------------------------------------------------- writing


def profile_filename(name: str) -> str:
    """A file name for a profile name: lower case, anything but [a-z0-9._-] replaced by '-'."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", name.strip().lower()).strip("-.")
    return (slug or "profile") + ".yaml"


def _float_repr(dumper: yaml.SafeDumper, value: float) -> yaml.Node:
    """Large and small floats in scientific notation (3.35e+12), exactly round-tripping."""
    if value != value or value in (float("inf"), float("-inf")) or value == 0 or 1e-3 <= abs(value) < 1e6:
        return dumper.represent_float(value)
    mant, _, exp = format(Decimal(repr(value)).normalize(), "e").partition("e")
    if "." not in mant:
        mant += ".0"
    return dumper.represent_scalar("tag:yaml.org,2002:float", f"{mant}e{int(exp):+03d}")


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(float, _float_repr)


def _drop_empty(data: Any) -> Any:
    """Drop empty mappings (``mixes: {}``): absent and empty mean the same to the schema."""
    if isinstance(data, dict):
        return {k: _drop_empty(v) for k, v in data.items() if not (isinstance(v, dict) and not v)}
    return data


def leading_comments(path: Path) -> str | None:
    """The comment block a profile file starts with (its source notes), or None."""
    try:
        lines = read_regular(path, PROFILE_MAX_BYTES).decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    block = []
    for line in lines:
        if not line.startswith("#"):
            break
        block.append(line)
    return "\n".join(block) if block else None


def dump_profile(profile: Profile, header: str | None = None) -> str:
    """The profile as YAML text, after ``header`` (comment lines) or a generated one naming its sources."""
    data = _drop_empty(profile.model_dump(mode="json", exclude_none=True))
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=110)
    if header is not None:
        return header.rstrip("\n") + "\n" + body
    from tileops import __version__

    head = [f"# Device profile {profile.name} ({profile.kind}), written by tileops {__version__}.",
            "# Inputs only: effective = theoretical x calibration is computed on read (spec 5.1).",
            "# Sources:"]
    if profile.memory is not None:
        head.append(f"#   memory: {_describe_source(profile.memory.theoretical_source)}")
    for key, roof in profile.compute.items():
        head.append(f"#   {key}: {_describe_source(roof.theoretical_source)}")
    return "\n".join(head) + "\n" + body


def _describe_source(p: Provenance) -> str:
    return p.source + (f" ({p.ref})" if p.ref else "") + (f" - {p.note}" if p.note else "")


def _check_replaceable(target: Path) -> None:
    """ProfileError naming ``target`` when a write would replace a file this user may not write, or one that
    does not read as a profile (a newer schema, cut short, a field of the wrong type): never replaced unsaid."""
    why = unwritable_file(target)
    if why is not None:
        raise ProfileError(f"cannot write the profile {target}: {why}; fix the permissions, or give a profile "
                           "store of your own (--profile-dir); nothing was written", file=target,
                           field="permissions", fix="fix the permissions, or give another --profile-dir")
    if target.exists():
        try:
            load_profile(target)
        except ProfileError as exc:
            raise ProfileError(f"{exc}; writing the profile would replace it, so nothing was written: move it away "
                               "(or upgrade tileops, if a newer one wrote it)", file=target, field=exc.field,
                               fix="move it away, or upgrade tileops") from None


def write_profile(profile: Profile, directory: Path | None = None, *, path: Path | None = None,
                  keep_header: bool = False) -> Path:
    """Write ``profile`` atomically to ``path`` or ``directory/<name>.yaml`` (default: the store).

    ``keep_header`` keeps the comment block the existing file starts with (a shipped
    profile's datasheet notes). The text is re-read and validated before it
    replaces anything, so a bad write never leaves a profile that fails to load.
    """
    target = Path(path) if path is not None else (directory or store_dir()) / profile_filename(profile.name)
    _check_replaceable(target)
    text = dump_profile(profile, leading_comments(target) if keep_header and target.exists() else None)
    parse_profile(parse_yaml(text, target).data, target)  # what we write must load
    write_atomic(target, text)
    return target
