"""Per-device calibration results (``tileops calibrate``), looked up by device for the metrics.

A model's profile holds the median over its devices; the per-device result
(``<profile store>/devices/<uuid>.yaml``, ``cpu-<hostname>`` on a CPU) is what
shows one weak device among many, so the calibration gauges come from there.
Files are re-read only when they change; an unreadable one is skipped (the
calibration tools report it; an exporter must keep exporting).
"""

from __future__ import annotations

import stat
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from tileops.errors import TileOpsError

if TYPE_CHECKING:
    from tileops.calibrate.results import DeviceCalibration

_MAX_BYTES = 2**20  # a calibration result is a page of YAML
_cache: dict[Path, tuple[tuple[int, int], "DeviceCalibration | None"]] = {}
_lock = threading.Lock()


def device_calibrations(store: Path | None = None) -> dict[str, DeviceCalibration]:
    """The newest result per device key (uuid, or ``cpu-<hostname>``) in the profile store."""
    # Imported here: the calibrate package pulls in torch, which an exporter otherwise never needs.
    from tileops.calibrate.results import devices_dir, read_device_result

    d = devices_dir(store)
    if not d.is_dir():
        return {}
    out: dict[str, DeviceCalibration] = {}
    with _lock:
        for path in sorted(d.glob("*.yaml")):
            try:
                st = path.stat()
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_BYTES:  # a FIFO would hang every scrape
                continue
            stamp = (st.st_mtime_ns, st.st_size)
            hit = _cache.get(path)
            if hit is None or hit[0] != stamp:
                try:
                    hit = (stamp, read_device_result(path))
                except TileOpsError:
                    hit = (stamp, None)
                _cache[path] = hit
            cal = hit[1]
            if cal is None:
                continue
            cur = out.get(cal.device_key)
            if cur is None or cal.finished_at > cur.finished_at:
                out[cal.device_key] = cal
    return out
