"""node_exporter textfile-collector output: one ``.prom`` file per device, replaced atomically.

node_exporter reads every ``*.prom`` file in its ``--collector.textfile.directory``
at each scrape; a half-written file would be read as a broken one. So the text
goes to a hidden temporary file in the same directory (not matching ``*.prom``),
is fsync'd, and renamed over the old file in one step.

The previous file is also where an unhealthy run finds the last success and
last healthy times it must keep publishing. A device's audit has its own file,
``tileops_<uuid>.audit.prom``, for the reason the Pushgateway keeps it in its own
group: a run without an audit must not erase the audit's verdicts, nor an audit
exported alone the run.
"""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tileops.fsutil import read_regular, write_atomic

from .metrics import DEFAULT_DETAIL, exposition
from .push import CARRIED, LAST_HEALTHY, LAST_SUCCESS
from .snapshot import AuditSnapshot, DeviceLabels, Snapshot

#: The previous exposition is read for one timestamp; a 100,000-row run's full exposition is tens of MB.
PREVIOUS_MAX_BYTES = 1 << 30


def textfile_path(directory: Path, device: DeviceLabels, *, audit: bool = False) -> Path:
    """``DIR/tileops_<uuid>.prom`` (``.audit.prom`` for the device's audit): one file per device, so devices of
    one host never overwrite each other. An audit that named no device is ``tileops_no-device.audit.prom``."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", device.uuid) or "no-device"
    return Path(directory) / f"tileops_{safe}{'.audit' if audit else ''}.prom"


def previous_last_success(path: Path) -> float | None:
    """The last-success timestamp in an earlier file, or None (no file, unreadable, or never succeeded)."""
    return previous_times(path).get(LAST_SUCCESS)


def previous_times(path: Path) -> dict[str, float]:
    """The :data:`~tileops.export.push.CARRIED` timestamps in an earlier file, by name (a name absent, the
    file missing or unreadable, or its line malformed: not in the answer).

    Only those families' lines are parsed (with prometheus_client's parser, as a
    scrape would read them): the file holds a few series per row, and parsing all
    of a large run's would cost every export after the first more than the export itself
    (docs/architecture.md, "Figures behind the code").
    """
    try:  # a regular file only: a FIFO left where the exposition belongs would block the export forever
        text = read_regular(path, PREVIOUS_MAX_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return {}
    found = {}
    for name in CARRIED:
        value = _family_value(text, name)
        if value is not None:
            found[name] = value
    return found


def _family_value(text: str, name: str) -> float | None:
    """The largest value of the family ``name`` in an exposition, read from its own lines; None without one."""
    lines = []
    start = 0
    line_re = re.compile(rf"(?:# (?:HELP|TYPE) )?{name}(?:[{{ ].*)?")  # its comments and its samples
    while (at := text.find(name, start)) != -1:  # a plain search: the name is on a few lines
        first = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        end = len(text) if end == -1 else end
        if line_re.fullmatch(text, first, end):
            lines.append(text[first:end])
        start = end
    if not lines:
        return None
    try:
        for fam in text_string_to_metric_families("\n".join(lines) + "\n"):
            if fam.name == name:
                values = [s.value for s in fam.samples]
                return max(values) if values else None
    except ValueError:
        return None
    return None


BUILD_FILE = "tileops_build.prom"


def write_textfile(directory: Path, snapshot: Snapshot, *, detail: str = DEFAULT_DETAIL) -> Path:
    """Write one device's metrics (at ``detail``) into ``directory`` (created if missing); returns the file.

    ``tileops_build_info`` goes to its own file: node_exporter rejects a series
    that two files both define, and every device's file would otherwise hold it.
    An :class:`AuditSnapshot` goes to the device's ``.audit.prom`` file; a run's
    audit is split off first (``export_snapshots`` does).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    audit = isinstance(snapshot, AuditSnapshot)
    path = textfile_path(directory, snapshot.device, audit=audit)
    if audit:
        snap = snapshot
    else:
        before = previous_times(path)
        snap = snapshot.with_last_success(before.get(LAST_SUCCESS), before.get(LAST_HEALTHY))
    write_atomic(path, exposition([snap], build_info=False, detail=detail))
    write_atomic(directory / BUILD_FILE, exposition([]))
    return path
