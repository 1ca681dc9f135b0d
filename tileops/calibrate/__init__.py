"""Calibration microbenchmarks (§5.1): bandwidth mixes, compute roofs, latency floor.

``calibrate_device`` (``calibrate_cpu``) measures a device and returns its
calibrated Profile without writing it; ``tileops calibrate`` writes it to the
profile store. See docs/profiles.md.

The measuring functions import torch, so they load on first use. Reading
results is not here: ``tileops.ledger`` keeps each device's calibrations.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "CPU_ROOF_ALIASES": "tileops.calibrate.theoretical", "TheoryOptions": "tileops.calibrate.theoretical",
    "CalibrationOutcome": "tileops.calibrate.run", "calibrate_cpu": "tileops.calibrate.run",
    "calibrate_device": "tileops.calibrate.run",
    "measure_device": "tileops.calibrate.run",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tileops.calibrate' has no attribute {name!r}")
