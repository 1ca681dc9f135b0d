"""node_exporter textfile-collector output: one ``.prom`` file per device, replaced atomically.

node_exporter reads every ``*.prom`` file in its ``--collector.textfile.directory``
at each scrape; a half-written file would be read as a broken one. So the text
goes to a hidden temporary file in the same directory (not matching ``*.prom``),
is fsync'd, and renamed over the old file in one step.

The previous file is also where an unhealthy run finds the last success time
it must keep publishing.
"""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tileops.fsutil import write_atomic

from .metrics import DEFAULT_DETAIL, render
from .push import LAST_SUCCESS
from .snapshot import DeviceLabels, RunSnapshot


def textfile_path(directory: Path, device: DeviceLabels) -> Path:
    """``DIR/tileops_<uuid>.prom``: one file per device, so devices of one host never overwrite each other."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", device.uuid)
    return Path(directory) / f"tileops_{safe}.prom"


def previous_last_success(path: Path) -> float | None:
    """The last-success timestamp in an earlier file, or None (no file, unreadable, or never succeeded)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return None
    try:
        for fam in text_string_to_metric_families(text):
            if fam.name == LAST_SUCCESS:
                values = [s.value for s in fam.samples]
                return max(values) if values else None
    except ValueError:
        return None
    return None



BUILD_FILE = "tileops_build.prom"


def write_textfile(directory: Path, snapshot: RunSnapshot, *, detail: str = DEFAULT_DETAIL) -> Path:
    """Write one device's metrics (at ``detail``) into ``directory`` (created if missing); returns the file.

    ``tileops_build_info`` goes to its own file: node_exporter rejects a series
    that two files both define, and every device's file would otherwise hold it.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = textfile_path(directory, snapshot.device)
    snap = snapshot.with_last_success(previous_last_success(path))
    write_atomic(path, render([snap], build_info=False, detail=detail))
    write_atomic(directory / BUILD_FILE, render([]))
    return path
