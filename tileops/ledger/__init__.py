"""The calibration ledger: each device's calibrations on disk and what they make of a profile (§5.1).

``tileops.calibrate`` measures a device and hands the result here; everything that *reads* calibrations
(the bench pricing a device on its own ceilings, the exporters, the fleet launcher, ``tileops calibrate``'s
bookkeeping) reads them here, without importing the measuring code or torch.

- ``model``: one device's raw result (``DeviceCalibration``) and the form of a device key;
- ``store``: ``<store>/devices/<key>.yaml``, its history, and whether it is fresh;
- ``peak``: a CPU's peak decided by the measured clock and rate;
- ``build``: a model's profile from its devices' results;
- ``judge``: whether a new calibration may replace the stored one (contended, or a ceiling dropped beyond noise);
- ``reader``: the per-device reader and the one profile chooser every reader of results builds.
"""

from tileops.ledger.build import build_profile, marked_note
from tileops.ledger.judge import Drop, Judgement, judge_calibration
from tileops.ledger.model import (DEVICE_KEY, MAX_FRACTION, RESULTS_SCHEMA, STREAM_WORDS, CalibrationMark,
                                  ClockMeasurement, DeviceCalibration, HostCheck, MixMeasurement, RoofMeasurement,
                                  check_device_key, new_run_id)
from tileops.ledger.peak import PeakUnknown, decide_peak, peak_provenance
from tileops.ledger.reader import device_profile_reader, profile_chooser
from tileops.ledger.store import (HISTORY_KEEP, Freshness, devices_dir, history_dir, history_problems, is_stored,
                                  load_device_history, load_device_results, read_device_result, rewrite_problem,
                                  stored_freshness, with_previous, write_device_result)

__all__ = ["DEVICE_KEY", "HISTORY_KEEP", "MAX_FRACTION", "RESULTS_SCHEMA", "STREAM_WORDS", "CalibrationMark",
           "ClockMeasurement", "DeviceCalibration", "Drop", "Freshness", "HostCheck", "Judgement", "MixMeasurement",
           "PeakUnknown", "RoofMeasurement", "build_profile", "check_device_key", "decide_peak",
           "device_profile_reader", "devices_dir", "history_dir", "history_problems", "is_stored",
           "judge_calibration", "load_device_history", "load_device_results", "marked_note", "new_run_id",
           "peak_provenance", "profile_chooser", "read_device_result", "rewrite_problem", "stored_freshness",
           "with_previous", "write_device_result"]
