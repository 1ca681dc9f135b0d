"""Prometheus metrics of priced runs: the catalogue, its samples, and a prometheus_client collector.

Every metric is a gauge built fresh from snapshots at collection time, so
nothing is left over from a previous run and no global state is touched.
:func:`render` writes the text format through our fast writer
(``exposition.py``); :class:`SnapshotCollector` / :func:`registry_for` give the
same metrics as prometheus_client families, for a custom registry (OpenMetrics,
embedding in another exporter), and a test holds the two equal. Names follow Prometheus
conventions: base units (``_seconds``, ``_bytes_per_second``), ratios in 0–1
(``_ratio``), ``_info`` series with value 1 for descriptive labels, and
``_timestamp_seconds`` for Unix times.

Labels join NVIDIA's dcgm-exporter as it names them (``Hostname``, ``UUID``,
``modelName``), plus ``op``, ``label``, ``dtype``, ``backend`` for a workload
row. High-cardinality detail (shapes, params, run id, git revision) lives only
in ``_info`` series, so a new shape or commit never multiplies the numeric series.

Rates are exported as separate gauges (achieved and roof, bytes/s and FLOP/s;
device time and sol time) so fleet aggregation divides sums
(``sum(sol_time) / sum(device_time)``) rather than averaging ratios.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tileops import __version__
from tileops.profiles import MIXES
from tileops.roofline import VERDICTS, Priced

from .exposition import render_text
from .snapshot import AUDIT_VERDICTS, RunSnapshot

DEVICE_LABELS: tuple[str, ...] = ("Hostname", "UUID", "modelName")
ROW_LABELS: tuple[str, ...] = DEVICE_LABELS + ("op", "label", "dtype", "backend")


@dataclass(frozen=True)
class MetricSpec:
    """One metric of the catalogue: its name, help text and label names (in order)."""

    name: str
    help: str
    labels: tuple[str, ...]
    scope: str  # "row", "run", "calibration", "profile", "audit", "build": its section in docs/metrics.md


def _spec(name: str, help: str, labels: Sequence[str], scope: str) -> MetricSpec:
    return MetricSpec(name, help, tuple(labels), scope)


#: The catalogue: every metric the exporters emit. docs/metrics.md documents each one (a test checks).
METRICS: dict[str, MetricSpec] = {s.name: s for s in (
    # ---- per workload row
    _spec("tileops_sol_ratio", "SOL efficiency: sol time / device time (1 = at the speed of light; "
          "above 1.05 the row is an anomaly).", ROW_LABELS, "row"),
    _spec("tileops_device_time_seconds", "Measured device-busy time of one call (median, plus excluded copies).",
          ROW_LABELS, "row"),
    _spec("tileops_sol_time_seconds", "Speed-of-light time of one call: max(memory time, compute time) "
          "on the effective roofs.", ROW_LABELS, "row"),
    _spec("tileops_achieved_bytes_per_second", "Bytes the roofline formula moves per second of device time.",
          ROW_LABELS, "row"),
    _spec("tileops_achieved_flops_per_second", "FLOPs the roofline formula counts per second of device time.",
          ROW_LABELS, "row"),
    _spec("tileops_roof_bytes_per_second", "Effective memory roof that priced the row (theoretical x calibration).",
          ROW_LABELS, "row"),
    _spec("tileops_roof_flops_per_second", "Effective compute roof of the row's roof key (theoretical x "
          "calibration).", ROW_LABELS, "row"),
    _spec("tileops_row_verdict", "The row's verdict (value 1); blank_reason names why a blank or error row "
          "has no SOL.", ROW_LABELS + ("verdict", "blank_reason"), "row"),
    _spec("tileops_row_bound", "What bounds the row at its SOL (value 1): memory or compute.",
          ROW_LABELS + ("bound",), "row"),
    _spec("tileops_physics_breach", "1 when the row implies a rate above a theoretical ceiling (a formula "
          "error), else 0.", ROW_LABELS, "row"),
    _spec("tileops_physics_breach_ratio", "Implied rate / theoretical ceiling for each breached ceiling "
          "(above 1 by definition).", ROW_LABELS + ("ceiling",), "row"),
    _spec("tileops_row_info", "Descriptive detail of a row (value 1): family, roof key, shapes, params, timer, "
          "profile.", ROW_LABELS + ("family", "roof_key", "roof", "profile", "timer", "status", "shapes",
                                     "params"), "row"),
    # ---- per run (one device's share of one bench run)
    _spec("tileops_run_healthy", "1 when the run completed without a physics breach, else 0.", DEVICE_LABELS,
          "run"),
    _spec("tileops_run_duration_seconds", "Wall time of the run, start to finish.", DEVICE_LABELS, "run"),
    _spec("tileops_run_timestamp_seconds", "When the run finished (Unix time).", DEVICE_LABELS, "run"),
    _spec("tileops_run_last_success_timestamp_seconds", "When the latest healthy run finished (Unix time); "
          "absent until a healthy run.", DEVICE_LABELS, "run"),
    _spec("tileops_run_rows", "Rows of the run by verdict (every verdict listed, zeros included).",
          DEVICE_LABELS + ("verdict",), "run"),
    _spec("tileops_run_physics_breaches", "Rows of the run that breach the physics check.", DEVICE_LABELS,
          "run"),
    _spec("tileops_run_info", "Descriptive detail of a run (value 1): run id, versions, git revision, profile.",
          DEVICE_LABELS + ("run_id", "status", "profile", "git_revision", "tileops_version", "torch_version",
                           "driver", "cuda", "cpu_model"), "run"),
    # ---- this device's own calibration (tileops calibrate: <store>/devices/<uuid>.yaml)
    _spec("tileops_calibration_memory_bytes_per_second", "Bandwidth this device measured per mix (copy, triad, "
          "read, write), STREAM counting.", DEVICE_LABELS + ("mix",), "calibration"),
    _spec("tileops_calibration_memory_ratio", "This device's measured bandwidth per mix as a fraction of the "
          "profile's theoretical; absent when the nominal is unknown.", DEVICE_LABELS + ("mix",), "calibration"),
    _spec("tileops_calibration_compute_flops_per_second", "Compute rate this device measured per roof.",
          DEVICE_LABELS + ("roof",), "calibration"),
    _spec("tileops_calibration_compute_ratio", "This device's measured compute rate as a fraction of the "
          "profile roof's theoretical peak.", DEVICE_LABELS + ("roof",), "calibration"),
    _spec("tileops_calibration_latency_floor_seconds", "This device's measured latency floor (a trivial op).",
          DEVICE_LABELS, "calibration"),
    _spec("tileops_calibration_timestamp_seconds", "When this device's calibration finished (Unix time).",
          DEVICE_LABELS, "calibration"),
    # ---- the profile that priced the device's rows (the model's ceilings)
    _spec("tileops_profile_memory_theoretical_bytes_per_second", "Nominal (datasheet) memory bandwidth of the "
          "profile; absent when unknown.", DEVICE_LABELS + ("profile",), "profile"),
    _spec("tileops_profile_memory_effective_bytes_per_second", "The profile's effective memory roof "
          "(theoretical x calibration, or the measured envelope when the nominal is unknown).",
          DEVICE_LABELS + ("profile",), "profile"),
    _spec("tileops_profile_memory_calibration_ratio", "The profile's memory calibration: the envelope (max) of "
          "its mix fractions.", DEVICE_LABELS + ("profile",), "profile"),
    _spec("tileops_profile_compute_theoretical_flops_per_second", "Theoretical (dense) peak of a profile roof.",
          DEVICE_LABELS + ("profile", "roof"), "profile"),
    _spec("tileops_profile_compute_effective_flops_per_second", "Effective compute roof of the profile "
          "(theoretical x calibration).", DEVICE_LABELS + ("profile", "roof"), "profile"),
    _spec("tileops_profile_compute_calibration_ratio", "The profile's calibration of a compute roof.",
          DEVICE_LABELS + ("profile", "roof"), "profile"),
    _spec("tileops_profile_latency_floor_seconds", "The profile's latency floor.", DEVICE_LABELS + ("profile",),
          "profile"),
    # ---- read-side bytes audit
    _spec("tileops_audit_verdict", "The audit's verdict for a row (value 1): FAIL, WARN, EXEMPT, SKIPPED, ERROR, "
          "NO-VERDICT.", ROW_LABELS + ("verdict",), "audit"),
    _spec("tileops_audit_read_bytes_ratio", "DRAM bytes read as measured by ncu / bytes the read formula "
          "states.", ROW_LABELS, "audit"),
    # ---- the exporter itself
    _spec("tileops_build_info", "The exporter's build (value 1).", ("version", "revision", "python_version"),
          "build"),
)}


class Samples:
    """The samples of one exposition, by metric name in catalogue order: ``[(label values, value), ...]``.

    Plain tuples rather than prometheus_client ``Metric`` objects: building
    10,000 of those costs more than the whole exposition may (see
    ``benchmarks/exposition.py``). :func:`to_families` turns them into
    prometheus_client families when a registry needs them.
    """

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data: dict[str, list[tuple[tuple[str, ...], float]]] = {name: [] for name in METRICS}

    def add(self, name: str, labels: tuple[str, ...], value: float | None) -> None:
        if value is not None:
            self.data[name].append((labels, float(value)))

    def items(self) -> Iterator[tuple[MetricSpec, list[tuple[tuple[str, ...], float]]]]:
        for name, rows in self.data.items():
            if rows:
                yield METRICS[name], rows

    def __len__(self) -> int:
        return sum(len(rows) for rows in self.data.values())


def _compact(obj: object) -> str:
    """A short, stable rendering of shapes/params for an _info label."""
    if not obj:
        return ""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def _row(fam: Samples, dev: tuple[str, ...], p: Priced) -> None:
    r = p.record
    lab = dev + (r.op, r.label, r.dtype, r.backend)
    fam.add("tileops_sol_ratio", lab, p.efficiency)
    fam.add("tileops_device_time_seconds", lab, p.actual_time_s)
    fam.add("tileops_sol_time_seconds", lab, p.sol_time_s)
    fam.add("tileops_achieved_bytes_per_second", lab, p.achieved_bytes_per_s)
    fam.add("tileops_achieved_flops_per_second", lab, p.achieved_flops_per_s)
    fam.add("tileops_roof_bytes_per_second", lab, p.effective_bandwidth)
    fam.add("tileops_roof_flops_per_second", lab, p.effective_peak)
    fam.add("tileops_row_verdict", lab + (p.verdict, p.blank_reason or ""), 1)
    if p.bound is not None:
        fam.add("tileops_row_bound", lab + (p.bound,), 1)
    if p.actual_time_s is not None:  # the physics check judged the row
        fam.add("tileops_physics_breach", lab, 1 if p.breaches else 0)
    for b in p.breaches:
        fam.add("tileops_physics_breach_ratio", lab + (b.ceiling,), b.ratio)
    fam.add("tileops_row_info", lab + (
        r.family, r.roof_key or "", p.roof or "", p.profile or "", r.timing.timer if r.timing else "", r.status,
        _compact(r.shapes), _compact(r.params)), 1)


def _run(fam: Samples, dev: tuple[str, ...], s: RunSnapshot) -> None:
    fam.add("tileops_run_healthy", dev, 1 if s.healthy else 0)
    fam.add("tileops_run_duration_seconds", dev, s.duration_s)
    fam.add("tileops_run_timestamp_seconds", dev, s.finished_at.timestamp())
    fam.add("tileops_run_last_success_timestamp_seconds", dev, s.last_success_s)
    for v in VERDICTS:
        fam.add("tileops_run_rows", dev + (v,), s.health.by_verdict.get(v, 0))
    fam.add("tileops_run_physics_breaches", dev, s.health.breaches)
    env = s.records[0].env if s.records else None
    fam.add("tileops_run_info", dev + (
        s.run_id, s.status, s.profile.name if s.profile else "",
        (env.git_revision or "") if env else "", env.tileops_version if env else "",
        env.torch_version if env else "", (env.driver or "") if env else "", (env.cuda or "") if env else "",
        (env.cpu_model or "") if env else ""), 1)


def _calibration(fam: Samples, dev: tuple[str, ...], s: RunSnapshot) -> None:
    """This device's own measurements, as fractions of its profile's theoretical ceilings where known."""
    cal = s.calibration
    if cal is None:
        return
    prof = s.profile
    theo_bw = prof.memory.theoretical if prof is not None and prof.memory is not None else None
    for mix in MIXES:
        m = cal.mixes.get(mix)
        if m is None:
            continue
        fam.add("tileops_calibration_memory_bytes_per_second", dev + (mix,), m.bytes_per_s)
        fam.add("tileops_calibration_memory_ratio", dev + (mix,), m.bytes_per_s / theo_bw if theo_bw else None)
    for key, r in sorted(cal.roofs.items()):
        roof = prof.compute.get(key) if prof is not None else None
        fam.add("tileops_calibration_compute_flops_per_second", dev + (key,), r.flops_per_s)
        fam.add("tileops_calibration_compute_ratio", dev + (key,), r.flops_per_s / roof.theoretical if roof else None)
    fam.add("tileops_calibration_latency_floor_seconds", dev, cal.latency_floor_s)
    fam.add("tileops_calibration_timestamp_seconds", dev, cal.finished_at.timestamp())


def _profile(fam: Samples, dev: tuple[str, ...], s: RunSnapshot) -> None:
    """The ceilings that priced the device's rows."""
    prof = s.profile
    if prof is None:
        return
    lab = dev + (prof.name,)
    mem = prof.memory
    if mem is not None:
        fam.add("tileops_profile_memory_theoretical_bytes_per_second", lab, mem.theoretical)
        fam.add("tileops_profile_memory_effective_bytes_per_second", lab, mem.effective)
        fam.add("tileops_profile_memory_calibration_ratio", lab, mem.calibration)
    for key, roof in sorted(prof.compute.items()):
        fam.add("tileops_profile_compute_theoretical_flops_per_second", lab + (key,), roof.theoretical)
        fam.add("tileops_profile_compute_effective_flops_per_second", lab + (key,), roof.effective)
        fam.add("tileops_profile_compute_calibration_ratio", lab + (key,), roof.calibration)
    fam.add("tileops_profile_latency_floor_seconds", lab, prof.latency_floor_s)


def _audit(fam: Samples, dev: tuple[str, ...], s: RunSnapshot) -> None:
    for a in s.audit:
        lab = dev + a.key
        if a.verdict in AUDIT_VERDICTS:
            fam.add("tileops_audit_verdict", lab + (a.verdict,), 1)
        fam.add("tileops_audit_read_bytes_ratio", lab, a.read_bytes_ratio)


@lru_cache(maxsize=1)
def _build_labels() -> tuple[str, str, str]:
    from tileops.paths import repo_root

    revision = os.environ.get("TILEOPS_GIT_REVISION", "")[:12]  # set in the image, which has no .git
    root = None if revision else repo_root()
    if root is not None:
        head = root / ".git" / "HEAD"
        try:  # read the ref file rather than run git: a scrape must not fork
            ref = head.read_text().strip()
            if ref.startswith("ref: "):
                ref_file = root / ".git" / ref[5:]
                ref = ref_file.read_text().strip() if ref_file.exists() else ""
            revision = ref[:12]
        except OSError:
            revision = ""
    return (__version__, revision, platform.python_version())


def collect_samples(snapshots: Iterable[RunSnapshot], *, build_info: bool = True) -> Samples:
    """Every sample for these snapshots (and ``tileops_build_info`` unless told not)."""
    fam = Samples()
    for s in snapshots:
        dev = s.device.labels()
        for p in s.priced:
            _row(fam, dev, p)
        _run(fam, dev, s)
        _calibration(fam, dev, s)
        _profile(fam, dev, s)
        _audit(fam, dev, s)
    if build_info:
        fam.add("tileops_build_info", _build_labels(), 1)
    return fam


def to_families(samples: Samples) -> list[Metric]:
    """prometheus_client gauge families of these samples, in catalogue order."""
    out: list[Metric] = []
    for spec, rows in samples.items():
        fam = GaugeMetricFamily(spec.name, spec.help, labels=list(spec.labels))
        for labels, value in rows:
            fam.add_metric(labels, value)
        out.append(fam)
    return out


def families(snapshots: Iterable[RunSnapshot], *, build_info: bool = True) -> list[Metric]:
    """Every metric family for these snapshots as prometheus_client objects."""
    return to_families(collect_samples(snapshots, build_info=build_info))


class SnapshotCollector(Collector):
    """A collector over whatever ``source`` returns at scrape time (a fixed list, or a directory scan)."""

    def __init__(self, source: Callable[[], Iterable[RunSnapshot]], *, build_info: bool = True) -> None:
        self._source = source
        self._build_info = build_info

    def collect(self) -> Iterator[Metric]:
        yield from families(self._source(), build_info=self._build_info)


def registry_for(source: Callable[[], Iterable[RunSnapshot]], *, build_info: bool = True) -> CollectorRegistry:
    """A private registry (no process/platform collectors) holding only our metrics."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(source, build_info=build_info))
    return reg


def render(snapshots: Iterable[RunSnapshot], *, build_info: bool = True) -> bytes:
    """The Prometheus text exposition (format 0.0.4) of these snapshots.

    Written by :func:`tileops.export.exposition.render_text`, which a test holds
    equal to prometheus_client's ``generate_latest`` of :class:`SnapshotCollector`.
    """
    return render_text(collect_samples(snapshots, build_info=build_info).items())
