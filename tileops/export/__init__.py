"""Prometheus export of priced runs: metrics, Pushgateway, node_exporter textfile, HTTP ``serve``.

The composing layer (``tileops.pipeline.export``) reads results folders into
snapshots (:func:`load_results`: a run directory, or an audit folder of its
own), or builds them from the bench's priced run (:func:`build_snapshots`), and
hands them to :func:`export_snapshots` (textfile, Pushgateway).
``docs/metrics.md`` documents every metric, label and sink.
"""

from .metrics import DEVICE_LABELS, METRICS, ROW_LABELS, collect_samples, exposition
from .push import AUDIT_JOB_SUFFIX, DEFAULT_JOB, PushResult, RetryPolicy, grouping_key, push_snapshot
from .sinks import Published, check_sinks, export_snapshots
from .snapshot import (AuditSnapshot, DeviceLabels, ExportInputError, RunSnapshot, Snapshot, build_snapshots,
                       load_audit, load_results, load_run)
from .textfile import write_textfile

__all__ = [
    "AUDIT_JOB_SUFFIX", "DEFAULT_JOB", "DEVICE_LABELS", "METRICS", "ROW_LABELS", "AuditSnapshot", "DeviceLabels",
    "ExportInputError", "Published", "PushResult", "RetryPolicy", "RunSnapshot", "Snapshot", "build_snapshots",
    "check_sinks", "collect_samples", "export_snapshots", "exposition", "grouping_key", "load_audit",
    "load_results", "load_run", "push_snapshot", "write_textfile",
]
