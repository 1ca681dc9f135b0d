"""Prometheus export of priced runs: metrics, Pushgateway, node_exporter textfile, HTTP ``serve``.

The pipeline hands the bench's priced run to :func:`export_snapshots` (``tileops
bench --push URL --textfile DIR``); ``tileops export`` reads a results folder
with :func:`export_run` (a run directory, or an audit folder of its own). ``docs/metrics.md`` documents every metric, label and sink.
"""

from .metrics import DEVICE_LABELS, METRICS, ROW_LABELS, families, render
from .push import AUDIT_JOB_SUFFIX, DEFAULT_JOB, PushResult, RetryPolicy, grouping_key, push_snapshot
from .sinks import export_run, export_snapshots
from .snapshot import (AuditSnapshot, DeviceLabels, ExportInputError, RunSnapshot, Snapshot, build_snapshots,
                       load_audit, load_results, load_run)
from .textfile import write_textfile

__all__ = [
    "AUDIT_JOB_SUFFIX", "DEFAULT_JOB", "DEVICE_LABELS", "METRICS", "ROW_LABELS", "AuditSnapshot", "DeviceLabels",
    "ExportInputError", "PushResult", "RetryPolicy", "RunSnapshot", "Snapshot", "build_snapshots", "export_run",
    "export_snapshots", "families", "grouping_key", "load_audit", "load_results", "load_run", "push_snapshot",
    "render", "write_textfile",
]
