"""A node's intake verdict as metrics: ``tileops_node_intake{state=...}`` in a textfile of its own.

``tileops calibrate --check --textfile DIR`` writes ``DIR/tileops_<device key>.intake.prom``, one file per
device beside the run's ``tileops_<key>.prom`` and the audit's, replaced atomically, so node_exporter's
textfile collector scrapes it and an alert (``TileOpsNodeBelowFloor``) can hold a node out of work. Its own
file for the reason the audit has one: a benchmark's export must not erase the intake, nor the intake the run.
The state is one-hot (every state exported, the current one 1), so a node that moves from ``below_floor``
to ``pass`` clears the alert without a stale series lingering.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from tileops.fsutil import write_atomic
from tileops.ledger import DeviceCalibration
from tileops.ledger.intake import INTAKE_STATES, IntakeVerdict

from .exposition import format_samples
from .metrics import METRICS
from .snapshot import DeviceLabels
from .textfile import textfile_path


def intake_exposition(run: DeviceCalibration, verdict: IntakeVerdict, judged_at: dt.datetime) -> bytes:
    """The intake's three families for one device, as the Prometheus text format."""
    dev = DeviceLabels.of(run.device).labels()
    sku = verdict.sku or ""
    states = [(dev + (sku, s), 1.0 if s == verdict.state else 0.0) for s in INTAKE_STATES]
    gaps = [(dev + (sku, c.floor.ceiling), c.gap) for c in verdict.checks if c.gap is not None]
    return format_samples([(METRICS["tileops_node_intake"], states),
                           (METRICS["tileops_node_intake_gap_ratio"], gaps),
                           (METRICS["tileops_node_intake_timestamp_seconds"], [(dev + (sku,), judged_at.timestamp())])])


def intake_textfile_path(directory: Path, run: DeviceCalibration) -> Path:
    """``DIR/tileops_<device key>.intake.prom``."""
    run_file = textfile_path(directory, DeviceLabels.of(run.device))
    return run_file.with_name(run_file.name.removesuffix(".prom") + ".intake.prom")


def write_intake_textfile(directory: Path, run: DeviceCalibration, verdict: IntakeVerdict,
                          judged_at: dt.datetime) -> Path:
    """Write the device's intake file atomically (node_exporter never reads half of one); its path."""
    path = intake_textfile_path(directory, run)
    write_atomic(path, intake_exposition(run, verdict, judged_at))
    return path
