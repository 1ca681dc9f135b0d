"""Prometheus export of priced runs: metrics, Pushgateway, node_exporter textfile, HTTP ``serve``.

The pipeline hands the bench's priced run to :func:`export_snapshots` (``tileops
bench --push URL --textfile DIR``); ``tileops export`` reads a results folder
with :func:`export_run`. ``docs/metrics.md`` documents every metric, label and sink.
"""

from .metrics import DEVICE_LABELS, METRICS, ROW_LABELS, families, render
from .push import DEFAULT_JOB, PushResult, RetryPolicy, grouping_key, push_snapshot
from .sinks import export_run, export_snapshots
from .snapshot import DeviceLabels, ExportInputError, RunSnapshot, build_snapshots, load_run
from .textfile import write_textfile

__all__ = [
    "DEFAULT_JOB", "DEVICE_LABELS", "METRICS", "ROW_LABELS", "DeviceLabels", "ExportInputError", "PushResult",
    "RetryPolicy", "RunSnapshot", "build_snapshots", "export_run", "export_snapshots", "families",
    "grouping_key", "load_run", "push_snapshot", "render", "write_textfile",
]
