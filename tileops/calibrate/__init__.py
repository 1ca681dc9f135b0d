"""Calibration microbenchmarks (§5.1): bandwidth mixes, compute roofs, latency floor.

``calibrate_cpu`` / ``calibrate_gpu`` measure this host's device and return its
calibrated Profile without writing it; ``tileops calibrate`` writes it to the
profile store. See docs/profiles.md.
"""

from tileops.calibrate.base import CPU_ROOF_ALIASES, TheoryOptions
from tileops.calibrate.results import DeviceCalibration, build_profile, load_device_results
from tileops.calibrate.run import Outcome, calibrate_cpu, calibrate_device, calibrate_gpu, measure_device

__all__ = [
    "CPU_ROOF_ALIASES", "DeviceCalibration", "Outcome", "TheoryOptions", "build_profile", "calibrate_cpu",
    "calibrate_device", "calibrate_gpu", "load_device_results", "measure_device",
]
