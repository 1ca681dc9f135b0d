"""Pricing each device on its own calibration: the per-device reader the profile chooser asks, and the
one chooser every reader of results (bench, export, the exporter's server) builds."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from collections.abc import Callable

from tileops.ledger.build import build_profile
from tileops.ledger.model import DEVICE_KEY
from tileops.ledger.store import devices_dir, read_device_result
from tileops.profiles import Profile, ProfileChooser, ProfileError

# --------------------------------------------------------------------------- pricing each device on its own


def device_profile_reader(store: Path | None = None) -> Callable[[str, Profile], Profile | None]:
    """What :class:`tileops.profiles.ProfileChooser` asks for one device (``per_device=``): the device's
    own calibration (``<store>/devices/<key>.yaml``) on its model's theoretical ceilings (``base``).

    Calibration is a per-device input (§5.1): two H200s of one fleet reach different
    bandwidths, and each row is priced on the ceiling its own device reached. None
    (the model's profile then prices the row) when the device has no readable result
    or its result names another model (a card swapped under the same uuid cannot
    happen; a result copied between hosts can). Reads one file per device, when asked.
    """

    def read(key: str, base: Profile) -> Profile | None:
        if not DEVICE_KEY.fullmatch(key or ""):
            return None
        path = devices_dir(store) / f"{key}.yaml"
        try:
            if not path.is_file():
                return None
            run = read_device_result(path)
        except (OSError, ProfileError):
            return None
        if not base.matches(run.name):
            return None
        profile, _ = build_profile(base, [run])
        return profile

    return read


def profile_chooser(choice: str | Path | None = None, *, store: Path | None = None, **resolve: Any
                    ) -> ProfileChooser:
    """The chooser every reader of results uses: ``choice`` (``--profile``) for every device, else each
    device's own calibration over its model's profile. ``resolve``: ``ProfileChooser.resolve``'s readers
    (``read``, ``on_error``), for a caller that reports bad files instead of stopping."""
    return ProfileChooser.resolve(choice, store_path=store, per_device=device_profile_reader(store), **resolve)
