"""Prometheus metrics of priced runs: the catalogue, its samples, and a prometheus_client collector.

Every metric is a gauge built fresh from snapshots at collection time, so
nothing is left over from a previous run and no global state is touched.
:func:`exposition` writes the text format through our fast writer
(``exposition.py``: the one writer every sink uses), and a test holds it equal
to prometheus_client's ``generate_latest`` of the same samples. Names follow Prometheus
conventions: base units (``_seconds``, ``_bytes_per_second``), ratios in 0–1
(``_ratio``), ``_info`` series with value 1 for descriptive labels, and
``_timestamp_seconds`` for Unix times.

Labels join NVIDIA's dcgm-exporter as it names them (``Hostname``, ``UUID``,
``modelName``), plus ``op``, ``label``, ``dtype``, ``backend`` for a workload
row. High-cardinality detail (shapes, params, run id, git revision) lives only
in ``_info`` series, so a new shape or commit never multiplies the numeric series.

Two detail levels (``DETAILS``). ``lean``, the default, exports per row only
what cannot be derived, at most four series on a healthy row: device time, SOL
ratio, the top of the SOL's 95 % interval (where the record has one) and the
row's state (verdict, bound, roof, physics as labels); a breached row adds its
breach ratio, an unstable row one series per reason it is unstable (a dashboard
greys it out and says why). SOL time is ``sol_ratio x device_time``; the achieved
rate on the bounding roof is ``sol_ratio x`` that roof, which is a per-device
profile gauge, not a per-row one. ``full`` adds per row what those give (SOL
time, both achieved rates) and the ``tileops_row_info`` detail (shapes,
params, ``data_terms``): about twice the series per row (docs/metrics.md,
"Capacity", counts them). The device's state read by the reference probe (issue
39) costs the lean set no series per row: it is published per device, the run's
median per probe kind; a row's own probe ratio and its SOL against it are ``full``.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from functools import lru_cache
from statistics import median
from collections.abc import Iterable, Iterator, Sequence

from tileops import __version__
from tileops.defaults import METRICS_DETAIL as DEFAULT_DETAIL
from tileops.defaults import METRICS_DETAILS as DETAILS
from tileops.profiles import MIXES
from tileops.records import AUDIT_VERDICTS
from tileops.revision import git_revision
from tileops.roofline import HEALTH_STATES, VERDICTS

from .exposition import format_samples
from .rowseries import RowSeries
from .snapshot import AuditSnapshot, RunSnapshot, Snapshot

DEVICE_LABELS: tuple[str, ...] = ("Hostname", "UUID", "modelName")
ROW_LABELS: tuple[str, ...] = DEVICE_LABELS + ("op", "label", "dtype", "backend")


@dataclass(frozen=True)
class MetricSpec:
    """One metric of the catalogue: its name, help text and label names (in order)."""

    name: str
    help: str
    labels: tuple[str, ...]
    # "row", "run", "physics", "calibration", "profile", "intake", "audit", "build": its docs/metrics.md section
    scope: str
    detail: str = "lean"  # the lowest detail level that exports it


def _spec(name: str, help: str, labels: Sequence[str], scope: str, detail: str = "lean") -> MetricSpec:
    return MetricSpec(name, help, tuple(labels), scope, detail)


#: The catalogue: every metric the exporters emit. docs/metrics.md documents each one (a test checks).
METRICS: dict[str, MetricSpec] = {s.name: s for s in (
    # ---- per workload row: lean (what cannot be derived)
    _spec("tileops_device_time_seconds", "Measured device-busy time of one call (median, plus excluded copies).",
          ROW_LABELS, "row"),
    _spec("tileops_sol_ratio", "SOL efficiency: sol time / device time (1 = at the speed of light; "
          "above 1.05 the row is an anomaly). SOL time is this times the device time.", ROW_LABELS, "row"),
    _spec("tileops_sol_ratio_upper", "The top of the SOL ratio's 95 % interval: the most a rerun of the row is "
          "expected to reach (sol time / the low end of the device time's interval). Absent where the record has "
          "no interval. The SOL regression alert fires on it, so noise cannot page.", ROW_LABELS, "row"),
    _spec("tileops_row_verdict", "The row's state (value 1): verdict; blank_reason (why a blank or error row has "
          "no SOL); bound (memory or compute); roof (the profile roof that priced its FLOPs); physics (held, "
          "breach or not-judged: the physics check of its ceilings).",
          ROW_LABELS + ("verdict", "blank_reason", "bound", "roof", "physics"), "row"),
    _spec("tileops_row_unstable", "On an unstable row only (value 1), one series per reason its verdict cannot "
          "stand: wide-interval (its time's interval is wider than a verdict needs), contended (another load "
          "shared the device), throttled (the clocks fell during the row), time-sliced (a CPU row timed in "
          "scheduler slices).", ROW_LABELS + ("reason",), "row"),
    _spec("tileops_physics_breach_ratio", "Implied rate / theoretical ceiling for each breached ceiling "
          "(above 1 by definition; only on rows that breach).", ROW_LABELS + ("ceiling",), "row"),
    _spec("tileops_row_host_bound_ratio", "On a host-bound row only: a call's span from its first launch to its "
          "last device activity over its device-busy time (above 1.2 by definition: the device waits on the host "
          "between kernels, so the row's SOL ratio, of busy time, overstates it).", ROW_LABELS, "row"),
    _spec("tileops_best_backend_margin_ratio", "On a row (op, label, dtype) run on several backends, one series "
          "for the backend with the highest SOL (the backend label): its SOL ratio minus the runner-up's "
          "(runner_up; 0.25 = 25 points ahead). Absent when fewer than two of its backends were priced.",
          ROW_LABELS + ("runner_up",), "row"),
    # ---- per workload row: full detail (derivable, or descriptive)
    _spec("tileops_sol_time_seconds", "Speed-of-light time of one call: max(memory time, compute time) "
          "on the effective roofs.", ROW_LABELS, "row", "full"),
    _spec("tileops_achieved_bytes_per_second", "Bytes the roofline formula moves per second of device time.",
          ROW_LABELS, "row", "full"),
    _spec("tileops_achieved_flops_per_second", "FLOPs the roofline formula counts per second of device time.",
          ROW_LABELS, "row", "full"),
    _spec("tileops_row_span_seconds", "A call's span from its first launch to its last device activity's "
          "end (median over repetitions; CUPTI rows): device-busy time plus the host's gaps.", ROW_LABELS, "row",
          "full"),
    _spec("tileops_compile_seconds", "A compile or triton row's first call, compilation included (or the "
          "compiled code loaded from the compile cache); recorded apart, never part of the device time.",
          ROW_LABELS, "row", "full"),
    _spec("tileops_row_info", "Descriptive detail of a row (value 1): family, roof key, shapes, params, timer, "
          "profile, and the values that decided a value-dependent bytes figure (data_terms, §4.7).",
          ROW_LABELS + ("family", "roof_key", "roof", "profile", "timer", "status", "shapes", "params",
                        "data_terms"), "row", "full"),
    # ---- per workload row, full detail: the SOL gap split, energy, power state (issue 28)
    _spec("tileops_row_gap_traffic_ratio", "Where the audit measured the row's DRAM traffic: bytes moved / the "
          "formula's bytes (above 1: excess traffic).", ROW_LABELS, "row", "full"),
    _spec("tileops_row_gap_achieved_ratio", "Where the audit measured the row's DRAM traffic: the fraction of "
          "the ceiling the row reaches at the bytes it moves (the SOL ratio with its excess traffic forgiven).",
          ROW_LABELS, "row", "full"),
    _spec("tileops_row_energy_joules", "Energy per call: the row window's energy (NVML on a GPU, RAPL on a CPU) "
          "over the calls it held, flushes and gaps included (an upper bound).", ROW_LABELS, "row", "full"),
    _spec("tileops_row_flops_per_joule", "FLOPs the formula counts per joule of the row's energy per call.",
          ROW_LABELS, "row", "full"),
    _spec("tileops_row_bytes_per_joule", "Bytes the formula moves per joule of the row's energy per call.",
          ROW_LABELS, "row", "full"),
    _spec("tileops_row_power_state", "A GPU row's power state over its window (value 1): state (power-capped, "
          "thermal, power-capped+thermal, uncapped) and basis (burst or sustained: the ceiling fraction it was "
          "priced against).", ROW_LABELS + ("state", "basis"), "row", "full"),
    _spec("tileops_row_sm_clock_min_hertz", "A GPU row's lowest SM clock over its window.", ROW_LABELS, "row",
          "full"),
    _spec("tileops_row_power_watts", "A GPU row's mean power draw over its window.", ROW_LABELS, "row", "full"),
    # ---- per workload row, full detail: the device's state during the row (issue 39)
    _spec("tileops_row_probe_ratio", "The device's state during the row: the reference probe timed between the "
          "row's blocks, its rate over the calibrated ceiling's of the same kind (kind: memory, or fma for a "
          "compute-bound row; 1 = the device ran as calibrated).", ROW_LABELS + ("kind",), "row", "full"),
    _spec("tileops_sol_state_ratio", "SOL against the device's state during the row (the SOL ratio over the "
          "probe ratio): the kernel's own efficiency, which a slow device does not move.", ROW_LABELS, "row",
          "full"),
    # ---- per run (one device's share of one bench run)
    _spec("tileops_run_healthy", "1 when the run completed and the physics check judged at least one ceiling and "
          "found no breach; 0 on a breach or an unfinished run; absent when nothing could be judged "
          "(tileops_run_physics_check says so).", DEVICE_LABELS, "run"),
    _spec("tileops_run_physics_check", "The run's physics check (value 1 for its state, 0 for the others): held "
          "(every ceiling judged), partial (some not judged), not-judged (none), breached.",
          DEVICE_LABELS + ("state",), "run"),
    _spec("tileops_run_duration_seconds", "Wall time of the run, start to finish.", DEVICE_LABELS, "run"),
    _spec("tileops_run_timestamp_seconds", "When the run finished (Unix time).", DEVICE_LABELS, "run"),
    _spec("tileops_run_last_success_timestamp_seconds", "When the latest run that completed without a physics "
          "breach finished (Unix time); absent until there is one.", DEVICE_LABELS, "run"),
    _spec("tileops_run_last_healthy_timestamp_seconds", "When the latest healthy run finished (Unix time): "
          "completed, a ceiling judged, no breach (tileops_run_healthy 1); a run nothing could be judged on does "
          "not count. Absent until there is one.", DEVICE_LABELS, "run"),
    _spec("tileops_run_probe_ratio", "The device's state during the run (issue 39): per probe kind (memory, fma), "
          "the median over the run's rows of the reference probe's rate over the calibrated ceiling's (1 = as "
          "calibrated). The straggler alert compares it with the SKU median; the regression alert divides a row's "
          "SOL by it. Absent where no row carries a probe of that kind.", DEVICE_LABELS + ("kind",), "run"),
    _spec("tileops_run_probe_ratio_upper", "Per probe kind, the median over the run's rows of the top of each "
          "row's probe-ratio 95 % interval: the best state the device showed, which the straggler alert reads "
          "so noise cannot make a straggler. Absent where no row's probe has an interval.",
          DEVICE_LABELS + ("kind",), "run"),
    _spec("tileops_run_rows", "Rows of the run by verdict (every verdict listed, zeros included).",
          DEVICE_LABELS + ("verdict",), "run"),
    _spec("tileops_run_physics_breaches", "Rows of the run that breach the physics check.", DEVICE_LABELS,
          "run"),
    _spec("tileops_run_host_noise_sigma", "The host's noise components as the bench's two passes measured them, "
          "one sd of ln(time) each (run.json's host_noise): component=between_visits (a row's offset per visit, "
          "each visit in its own process), host (a pass's offset shared by the kind's rows), within_visit (a "
          "visit's blocks), per row kind (memory, compute). Absent for a one-pass run.",
          DEVICE_LABELS + ("component", "kind"), "run"),
    _spec("tileops_run_info", "Descriptive detail of a run (value 1): run id, versions, git revision, profile.",
          DEVICE_LABELS + ("run_id", "status", "profile", "git_revision", "tileops_version", "torch_version",
                           "driver", "cuda", "cpu_model"), "run"),
    # ---- the physics check per ceiling of the device's run
    _spec("tileops_physics_check_judged", "1 when the physics check compared the device's rows with this "
          "ceiling's theoretical figure, 0 when it could not (reason: no-profile, nominal-unknown, "
          "theoretical-missing, roof-absent, no-timing, no-roofline, estimate, ceiling-suspect, within-noise).",
          DEVICE_LABELS + ("ceiling", "reason"),
          "physics"),
    # ---- this device's own calibration (tileops calibrate: <store>/devices/<uuid>.yaml and its history)
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
    _spec("tileops_calibration_marked", "1 when this device's current calibration was stored marked (measured "
          "contended, or below the stored one beyond its noise, and stored anyway: --force or the bench's own "
          "calibration step), cause saying which; 0 when it was not.", DEVICE_LABELS + ("cause",), "calibration"),
    _spec("tileops_calibration_previous_memory_bytes_per_second", "Bandwidth per mix of this device's previous "
          "calibration of the same mode (quick or full); absent without history.", DEVICE_LABELS + ("mix",),
          "calibration"),
    _spec("tileops_calibration_previous_compute_flops_per_second", "Compute rate per roof of this device's "
          "previous calibration of the same mode; absent without history.", DEVICE_LABELS + ("roof",),
          "calibration"),
    _spec("tileops_calibration_previous_timestamp_seconds", "When that previous calibration finished (Unix time).",
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
    # ---- node intake (tileops calibrate --check): the device's calibration against its SKU's floors
    _spec("tileops_node_intake", "The device's intake against its SKU's floors: 1 on its state (pass, "
          "below_floor, no_floor), 0 on the others.", DEVICE_LABELS + ("sku", "state"), "intake"),
    _spec("tileops_node_intake_gap_ratio", "Per ceiling with a floor: measured / floor - 1 (negative: below the "
          "floor); absent where the ceiling was not measured.", DEVICE_LABELS + ("sku", "ceiling"), "intake"),
    _spec("tileops_node_intake_timestamp_seconds", "When the intake was judged (Unix time).",
          DEVICE_LABELS + ("sku",), "intake"),
    # ---- read-side bytes audit
    _spec("tileops_audit_verdict", "The audit's verdict for a row (value 1): PASS, FAIL, WARN, EXEMPT, SKIPPED, "
          "ERROR, NO-VERDICT.", ROW_LABELS + ("verdict",), "audit"),
    _spec("tileops_audit_read_bytes_ratio", "DRAM bytes read as measured by ncu / bytes the read formula "
          "states.", ROW_LABELS, "audit"),
    # ---- the exporter itself
    _spec("tileops_serve_read_error", "tileops serve only: 1 for each results folder (or profile file) it cannot "
          "read as it is now (malformed, half-written, not a regular file, too large); the folder's last version "
          "that read whole is served meanwhile, or nothing when none did. path: relative to the served directory.",
          ("path",), "build"),
    _spec("tileops_serve_last_good_timestamp_seconds", "tileops serve only, beside tileops_serve_read_error: when "
          "the version of that folder now served was read (Unix time); absent when none ever read whole.",
          ("path",), "build"),
    _spec("tileops_build_info", "The exporter's build (value 1).", ("version", "revision", "python_version"),
          "build"),
)}


class Samples:
    """The samples of one exposition, by metric name in catalogue order: ``[(label values, value), ...]``.

    Plain tuples rather than prometheus_client ``Metric`` objects: building
    10,000 of those costs more than the whole exposition may (see
    ``benchmarks/exposition.py``).
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


def _rows(fam: Samples, dev: tuple[str, ...], rows: Iterable[RowSeries], full: bool) -> None:
    """Each row's series, appended straight to their lists (a run may hold 100,000 rows)."""
    d = fam.data
    times, sols, states = (d["tileops_device_time_seconds"], d["tileops_sol_ratio"], d["tileops_row_verdict"])
    uppers, unstable = d["tileops_sol_ratio_upper"], d["tileops_row_unstable"]
    breach_ratio, host_bound = d["tileops_physics_breach_ratio"], d["tileops_row_host_bound_ratio"]
    if full:
        compiles, sol_times = d["tileops_compile_seconds"], d["tileops_sol_time_seconds"]
        bytes_rates, flops_rates = d["tileops_achieved_bytes_per_second"], d["tileops_achieved_flops_per_second"]
        spans, infos = d["tileops_row_span_seconds"], d["tileops_row_info"]
        conditions = [d[n] for n in ("tileops_row_gap_traffic_ratio", "tileops_row_gap_achieved_ratio",
                                     "tileops_row_energy_joules", "tileops_row_flops_per_joule",
                                     "tileops_row_bytes_per_joule")]
        power_states = d["tileops_row_power_state"]
        clocks, watts = d["tileops_row_sm_clock_min_hertz"], d["tileops_row_power_watts"]
        probes, state_sols = d["tileops_row_probe_ratio"], d["tileops_sol_state_ratio"]
    for row in rows:
        lab = dev + row.key
        if row.device_time_s is not None:
            times.append((lab, row.device_time_s))
        if row.sol_ratio is not None:
            sols.append((lab, row.sol_ratio))
        if row.sol_ratio_upper is not None:
            uppers.append((lab, row.sol_ratio_upper))
        states.append((lab + row.state, 1.0))
        for reason in row.unstable:
            unstable.append((lab + (reason,), 1.0))
        for ceiling, ratio in row.breaches:
            breach_ratio.append((lab + (ceiling,), ratio))
        if row.host_bound_ratio is not None:
            host_bound.append((lab, row.host_bound_ratio))
        if not full:
            continue
        for values, value in ((compiles, row.compile_s), (sol_times, row.sol_time_s),
                              (bytes_rates, row.achieved_bytes_per_s), (flops_rates, row.achieved_flops_per_s),
                              (spans, row.span_s), (state_sols, row.sol_state_ratio)):
            if value is not None:
                values.append((lab, value))
        infos.append((lab + row.info, 1.0))
        _conditions(row, lab, conditions, power_states, clocks, watts, probes)


def _conditions(row: RowSeries, lab: tuple[str, ...], series: list[list], power_states: list, clocks: list,
                watts: list, probes: list) -> None:
    """A row's full-detail gap, energy and power series (issue 28) and the device's state during it (issue 39):
    each only where the row has the value."""
    if row.probe is not None:
        probes.append((lab + (row.probe[0],), row.probe[1]))
    for values, value in zip(series, (row.gap_traffic_ratio, row.gap_achieved_ratio, row.energy_joules,
                                      row.flops_per_joule, row.bytes_per_joule)):
        if value is not None:
            values.append((lab, float(value)))
    if row.power is not None:
        power_states.append((lab + row.power, 1.0))
    for values, value in ((clocks, row.sm_clock_min_hz), (watts, row.power_watts)):
        if value is not None:
            values.append((lab, float(value)))


def _races(fam: Samples, dev: tuple[str, ...], s: RunSnapshot) -> None:
    """One series per row run on several backends with two priced: the best backend's lead."""
    for race in s.races:
        best, runner_up, margin = race.best, race.runner_up, race.margin
        if margin is not None and best is not None and runner_up is not None:  # a margin needs both
            _, op, label, dtype = race.key
            fam.add("tileops_best_backend_margin_ratio", dev + (op, label, dtype, best, runner_up), margin)


def _probes(fam: Samples, dev: tuple[str, ...], rows: Iterable[RowSeries]) -> None:
    """The device's state over the run, per probe kind: the median of its rows' probe ratios (and of the tops
    of their intervals). Per device, not per row, so the straggler rule reads a handful of series whatever the
    run's size, and the lean set stays at its series per row (docs/metrics.md, "Detail levels")."""
    ratios: dict[str, list[float]] = {}
    uppers: dict[str, list[float]] = {}
    for row in rows:
        probe = row.probe
        if probe is None:
            continue
        kind, ratio, upper = probe
        ratios.setdefault(kind, []).append(ratio)
        if upper is not None:
            uppers.setdefault(kind, []).append(upper)
    for kind in sorted(ratios):
        fam.add("tileops_run_probe_ratio", dev + (kind,), median(ratios[kind]))
        if kind in uppers:
            fam.add("tileops_run_probe_ratio_upper", dev + (kind,), median(uppers[kind]))


def _run(fam: Samples, dev: tuple[str, ...], s: RunSnapshot) -> None:
    healthy = s.healthy
    fam.add("tileops_run_healthy", dev, None if healthy is None else 1 if healthy else 0)
    state = s.health.state
    for st in HEALTH_STATES:
        fam.add("tileops_run_physics_check", dev + (st,), 1 if st == state else 0)
    fam.add("tileops_run_duration_seconds", dev, s.duration_s)
    fam.add("tileops_run_timestamp_seconds", dev, s.finished_at.timestamp())
    fam.add("tileops_run_last_success_timestamp_seconds", dev, s.last_success_s)
    fam.add("tileops_run_last_healthy_timestamp_seconds", dev, s.last_healthy_s)
    for v in VERDICTS:
        fam.add("tileops_run_rows", dev + (v,), s.health.by_verdict.get(v, 0))
    fam.add("tileops_run_physics_breaches", dev, s.health.breaches)
    noise = s.info.host_noise if s.info else {}
    for component, key in (("between_visits", "between_visits"), ("host", "host")):
        for kind, e in (noise.get(key) or {}).items():
            if kind in (noise.get("rows_by_kind") or {}):
                fam.add("tileops_run_host_noise_sigma", dev + (component, kind), e.get("sigma"))
    for kind, spread in (noise.get("within_visit") or {}).items():
        fam.add("tileops_run_host_noise_sigma", dev + ("within_visit", kind), spread)
    env = s.env
    fam.add("tileops_run_info", dev + (
        s.run_id, s.status, s.profile.name if s.profile else "",
        (env.git_revision or "") if env else "", env.tileops_version if env else "",
        env.torch_version if env else "", (env.driver or "") if env else "", (env.cuda or "") if env else "",
        (env.cpu_model or "") if env else ""), 1)


def _physics(fam: Samples, dev: tuple[str, ...], s: RunSnapshot) -> None:
    """Per ceiling: whether the physics check could judge it on this device's rows, and if not, why."""
    judged: dict[str, tuple[bool, str]] = {}
    for c in s.health.ceilings:  # one device has one profile, so a ceiling name is unique here
        was, why = judged.get(c.ceiling, (False, ""))
        judged[c.ceiling] = (was or c.judged > 0, why or (c.reason or ""))
    for ceiling, (was, why) in judged.items():
        fam.add("tileops_physics_check_judged", dev + (ceiling, why), 1 if was else 0)


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
    fam.add("tileops_calibration_marked", dev + (cal.marked.cause if cal.marked else "",), 1 if cal.marked else 0)
    prev = cal.previous  # the device's own history: what the drop-against-history alert compares with
    if prev is None:
        return
    for mix in MIXES:
        m = prev.mixes.get(mix)
        if m is not None:
            fam.add("tileops_calibration_previous_memory_bytes_per_second", dev + (mix,), m.bytes_per_s)
    for key, r in sorted(prev.roofs.items()):
        fam.add("tileops_calibration_previous_compute_flops_per_second", dev + (key,), r.flops_per_s)
    fam.add("tileops_calibration_previous_timestamp_seconds", dev, prev.finished_at.timestamp())


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


def _audit(fam: Samples, dev: tuple[str, ...], s: Snapshot) -> None:
    for a in s.audit:
        lab = dev + a.key
        if a.verdict in AUDIT_VERDICTS:
            fam.add("tileops_audit_verdict", lab + (a.verdict,), 1)
        fam.add("tileops_audit_read_bytes_ratio", lab, a.read_ratio)


@lru_cache(maxsize=1)
def _build_labels() -> tuple[str, str, str]:
    return (__version__, git_revision() or "", platform.python_version())


def _check_detail(detail: str) -> bool:
    """True for ``full``; ValueError naming the levels for anything but a known level."""
    if detail not in DETAILS:
        raise ValueError(f"metrics detail {detail!r} is not one of {', '.join(DETAILS)}")
    return detail == "full"


def collect_samples(snapshots: Iterable[Snapshot], *, build_info: bool = True,
                    detail: str = DEFAULT_DETAIL) -> Samples:
    """Every sample for these snapshots at ``detail`` (and ``tileops_build_info`` unless told not).
    An :class:`AuditSnapshot` (an audit with no run) gives its audit series only."""
    full = _check_detail(detail)
    fam = Samples()
    for s in snapshots:
        dev = s.device.labels()
        if isinstance(s, AuditSnapshot):
            _audit(fam, dev, s)
            continue
        _rows(fam, dev, s.rows, full)
        _races(fam, dev, s)
        _run(fam, dev, s)
        _probes(fam, dev, s.rows)
        _physics(fam, dev, s)
        _calibration(fam, dev, s)
        _profile(fam, dev, s)
        _audit(fam, dev, s)
    if build_info:
        fam.add("tileops_build_info", _build_labels(), 1)
    return fam


def exposition(snapshots: Iterable[Snapshot], *, build_info: bool = True, detail: str = DEFAULT_DETAIL) -> bytes:
    """The Prometheus text exposition (format 0.0.4) of these snapshots at ``detail`` (``lean`` or ``full``).

    Written by :func:`tileops.export.exposition.format_samples`, which a test holds equal to prometheus_client's
    ``generate_latest`` of the same samples as its gauge families.
    """
    return format_samples(collect_samples(snapshots, build_info=build_info, detail=detail).items())
