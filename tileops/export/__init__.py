"""Prometheus export of priced runs: metrics, Pushgateway, node_exporter textfile, HTTP ``serve``.

The bench calls :func:`export_run` at the end of a run (``tileops bench --push
URL --textfile DIR``); ``tileops export`` calls it on a results folder.
``docs/metrics.md`` documents every metric, label and sink.
"""

from .metrics import DEVICE_LABELS, METRICS, ROW_LABELS, families, render
from .pipeline import EXIT_PUSH, export_run, export_snapshots
from .push import DEFAULT_JOB, PushResult, RetryPolicy, grouping_key, push_snapshot
from .snapshot import AuditEntry, Device, ExportInputError, RunSnapshot, load_run, resolve_profiles
from .textfile import write_textfile

__all__ = [
    "DEFAULT_JOB", "DEVICE_LABELS", "EXIT_PUSH", "METRICS", "ROW_LABELS", "AuditEntry", "Device",
    "ExportInputError", "PushResult", "RetryPolicy", "RunSnapshot", "export_run", "export_snapshots", "families",
    "grouping_key", "load_run", "push_snapshot", "render", "resolve_profiles", "write_textfile",
]
