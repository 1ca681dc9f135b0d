"""Per-device calibration results (``tileops calibrate``), looked up by device for the metrics.

A model's profile holds the median over its devices; the per-device result
(``<profile store>/devices/<uuid>.yaml``, ``cpu-<hostname>`` on a CPU) is what
shows one weak device among many, so the calibration gauges come from there.
Each result carries the device's previous one of the same mode
(``devices/history/<uuid>/``), so a device that falls against its own past is
seen even when its whole SKU drifts with it. Files are re-read only when they
change; an unreadable one is skipped (the calibration tools report it; an
exporter must keep exporting).
"""

from __future__ import annotations

import stat
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from tileops.errors import TileOpsError

if TYPE_CHECKING:
    from tileops.ledger import DeviceCalibration

_MAX_BYTES = 2**20  # a calibration result is a page of YAML
_cache: dict[Path, tuple[tuple[int, int], DeviceCalibration | None]] = {}
_lock = threading.Lock()


def _read(path: Path) -> DeviceCalibration | None:
    """One result file, re-read only when its stamp changes; None when unreadable (the caller holds _lock)."""
    from tileops.ledger import read_device_result

    try:
        st = path.stat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_BYTES:  # a FIFO would hang every scrape
        return None
    stamp = (st.st_mtime_ns, st.st_size)
    hit = _cache.get(path)
    if hit is None or hit[0] != stamp:
        try:
            hit = (stamp, read_device_result(path))
        except TileOpsError:
            hit = (stamp, None)
        _cache[path] = hit
    return hit[1]


def device_calibrations(store: Path | None = None) -> dict[str, DeviceCalibration]:
    """The newest result per device key (uuid, or ``cpu-<hostname>``) in the profile store, each with its
    ``previous`` (the device's previous calibration of the same mode) when the store keeps history."""
    # Imported here: the calibrate package pulls in torch, which an exporter otherwise never needs.
    from tileops.ledger import devices_dir, history_dir, with_previous

    d = devices_dir(store)
    if not d.is_dir():
        return {}
    out: dict[str, DeviceCalibration] = {}
    with _lock:
        for path in sorted(d.glob("*.yaml")):
            cal = _read(path)
            if cal is None:
                continue
            cur = out.get(cal.device_key)
            if cur is None or cal.finished_at > cur.finished_at:
                out[cal.device_key] = cal
        for key, cal in out.items():
            hist = history_dir(key, store)
            history = [h for p in sorted(hist.glob("*.yaml")) if (h := _read(p)) is not None] if hist.is_dir() else []
            out[key] = with_previous(cal, history)
    return out
