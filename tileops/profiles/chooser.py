"""Which profile prices a device: the one place that decides it (§4.3, §5.1).

A profile is selected by matching the measured device name; no match leaves
SOL blank (§1.2), and two profiles from the same place claiming one device is
an error rather than a guess. The bench, ``roofline``, ``export``, ``serve``
and the fleet all choose through :class:`ProfileChooser`.
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Callable, Iterable

from tileops.errors import LIST_AT_MOST, unknown_value
from tileops.profiles.model import Profile, ProfileError
from tileops.profiles.store import ErrorSink, ProfileReader, is_store_profile, load_profile, load_profiles

def select_profile(device_name: str, profiles: Iterable[Profile] | None = None) -> Profile | None:
    """The profile whose ``match`` names this device (exact, case-insensitive), or None (§1.2: SOL blank).

    Store profiles win over shipped ones; two profiles from the same place claiming
    the same device is an error, since either choice would be a guess.
    """
    pool = list(load_profiles() if profiles is None else profiles)
    hits = [p for p in pool if p.matches(device_name)]
    if len(hits) <= 1:
        return hits[0] if hits else None
    in_store = [p for p in hits if is_store_profile(p)]
    if len(in_store) == 1:
        return in_store[0]
    tied = in_store or hits
    files = ", ".join(f"{p.name} ({p.source_path or 'in memory'})" for p in tied)
    raise ProfileError(f"device {device_name!r} matches several profiles: {files}",
                       file=tied[0].source_path, field="match",
                       fix=f"remove {device_name!r} from all but one profile's match list")


def find_profile(name_or_path: str | Path, profiles: Iterable[Profile] | None = None, *,
                 read: ProfileReader = load_profile) -> Profile:
    """A profile by file path, by name, or by a device name it matches; ProfileError listing the names otherwise."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or (p.exists() and not p.is_dir()):  # a file (load_profile refuses a FIFO)
        return read(p)
    pool = list(load_profiles() if profiles is None else profiles)
    key = str(name_or_path).strip().lower()
    for prof in pool:
        if prof.name.lower() == key:
            return prof
    hit = select_profile(str(name_or_path), pool)
    if hit is not None:
        return hit
    # a SKU's profile names are few and what the fix needs: listed whole up to twice the usual limit
    said = unknown_value(str(name_or_path), (x.name for x in pool), noun="known profiles",
                         lister="tileops profile list", listed_as="known profiles", at_most=2 * LIST_AT_MOST)
    raise ProfileError(f"no profile named or matching {str(name_or_path)!r}{said}",
                       field="name", fix="run `tileops profile list`, or `tileops calibrate` on that device")


#: A device's own profile from its key and its model's profile, or None (the model's prices it).
DeviceProfiles = Callable[[str, Profile], "Profile | None"]


class ProfileChooser:
    """The one place that decides which profile prices a device (§4.3, §5.1).

    Given an explicit profile (``--profile NAME|FILE``), that profile prices
    every device. Otherwise a device's model profile is the one whose ``match``
    names it (:func:`select_profile`: the store's calibrated profiles before the
    shipped ones; two claimants raise rather than guess), and, where the store
    holds the device's own calibration (``per_device``, given by the calibration
    store: ``tileops.ledger.device_profile_reader``), the device is
    priced on that calibration over its model's theoretical ceilings, since
    calibration is a per-device input (§5.1). Each is looked up once. None means
    no profile: SOL stays blank (§1.2), never guessed. The bench, ``roofline``,
    ``export``, ``serve`` and the fleet all choose here.
    """

    def __init__(self, profiles: Iterable[Profile] = (), *, fixed: Profile | None = None,
                 use_fixed: bool = False, per_device: DeviceProfiles | None = None) -> None:
        self._profiles = list(profiles)
        self._fixed = fixed
        self._use_fixed = use_fixed or fixed is not None
        self._per_device = per_device
        self._cache: dict[str, Profile | None] = {}
        self._device_cache: dict[tuple[str, str], Profile | None] = {}

    @classmethod
    def resolve(cls, choice: str | Path | None = None, *, store_path: Path | None = None,
                read: ProfileReader = load_profile, on_error: ErrorSink | None = None,
                per_device: DeviceProfiles | None = None) -> ProfileChooser:
        """``--profile NAME|FILE`` as a fixed choice; without it every known profile (and each device's own
        calibration, with ``per_device``). Reads (and so validates) the profiles now: a bad name or file is
        an error before any work starts. With ``on_error``, a bad file in the folders is reported there and
        skipped (see :func:`load_profiles`); a bad explicit choice still raises."""
        pool = load_profiles(store_path=store_path, read=read, on_error=on_error)
        if choice:
            return cls(pool, fixed=find_profile(choice, pool, read=read))
        return cls(pool, per_device=per_device)

    @classmethod
    def only(cls, profile: Profile | None) -> ProfileChooser:
        """``profile`` for every device (None: every row blank, no profile)."""
        return cls([profile] if profile is not None else [], fixed=profile, use_fixed=True)

    def __call__(self, device_name: str, device_key: str | None = None) -> Profile | None:
        """The profile that prices the device named ``device_name`` whose stable key (GPU uuid, or
        ``cpu-<hostname>``: ``tileops.records.Machine.device_key``) is ``device_key``."""
        if self._use_fixed:
            return self._fixed
        if device_name not in self._cache:
            self._cache[device_name] = select_profile(device_name, self._profiles)
        model = self._cache[device_name]
        if model is None or device_key is None or self._per_device is None:
            return model
        key = (device_name, device_key)
        if key not in self._device_cache:
            self._device_cache[key] = self._per_device(device_key, model) or model
        return self._device_cache[key]

    def add(self, profile: Profile) -> None:
        """A profile written meanwhile (a calibration) joins the pool, replacing one of its name."""
        self._profiles = [p for p in self._profiles if p.name != profile.name] + [profile]
        self.forget()

    def forget(self) -> None:
        """Look everything up again (a device was calibrated meanwhile)."""
        self._cache.clear()
        self._device_cache.clear()

    @property
    def fixed(self) -> Profile | None:
        return self._fixed

    @property
    def profiles(self) -> list[Profile]:
        """Every profile this chooser can answer with."""
        return [self._fixed] if self._use_fixed and self._fixed is not None else list(self._profiles)
