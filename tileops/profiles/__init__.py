"""Device profiles (§5.1): what a profile is (``model``), where profiles live and how they are read and
written (``store``), and which one prices a device (``chooser``). What the rest of the package uses is
named here."""

from tileops.profiles.chooser import DeviceProfiles, ProfileChooser, find_profile, select_profile
from tileops.profiles.model import (MAX_RATE, MIN_FRACTION, MIN_RATE, MIXES, PROFILE_SCHEMA, ROOF_KEYS,
                                    SUSPECT_CALIBRATION, MemoryRoof, PeakBasis, Profile, ProfileError, Provenance,
                                    Roof, newer_schema, parse_profile, suspect_calibration)
from tileops.profiles.store import (PROFILE_DIR_ENV, PROFILE_MAX_BYTES, ErrorSink, ProfileReader, dump_profile,
                                    is_store_profile, leading_comments, load_profile, load_profiles,
                                    profile_filename, shipped_dir, store_dir, store_problem, write_profile)

__all__ = [
    "MAX_RATE", "MIN_FRACTION", "MIN_RATE", "MIXES", "PROFILE_DIR_ENV", "PROFILE_MAX_BYTES", "PROFILE_SCHEMA",
    "ROOF_KEYS",
    "SUSPECT_CALIBRATION", "DeviceProfiles", "ErrorSink", "MemoryRoof", "PeakBasis", "Profile", "ProfileChooser",
    "ProfileError", "ProfileReader", "Provenance", "Roof", "dump_profile", "find_profile", "is_store_profile",
    "leading_comments", "load_profile", "load_profiles", "newer_schema", "parse_profile", "profile_filename",
    "select_profile",
    "shipped_dir", "store_dir", "store_problem", "suspect_calibration", "write_profile",
]
