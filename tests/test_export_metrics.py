"""The metric catalogue and its exposition: names, labels, values against the roofline tool, docs."""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from export_support import T0, env, profile, record, write_run
from tileops.ledger import DeviceCalibration, MixMeasurement, RoofMeasurement
from tileops.profiles import ProfileChooser
from tileops.records import load_records
from tileops.export.metrics import DEVICE_LABELS, METRICS, ROW_LABELS, collect_samples, exposition
from tileops.export.snapshot import DeviceLabels, ExportInputError, latest_per_device, load_run
from tileops.records import RowConditions
from tileops.roofline import VERDICTS, price, unstable_code

REPO = Path(__file__).resolve().parents[1]
NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def parse(body: bytes) -> dict[str, list]:
    """metric name -> samples, through prometheus_client's own parser (so the text is valid exposition)."""
    return {f.name: f.samples for f in text_string_to_metric_families(body.decode("utf-8"))}


def one(samples: list, **labels: str):
    hits = [s for s in samples if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, f"expected one sample with {labels}, got {hits}"
    return hits[0]


# --------------------------------------------------------------------------- catalogue


def test_catalogue_follows_prometheus_naming():
    for name, spec in METRICS.items():
        assert NAME_RE.match(name) and name.startswith("tileops_"), name
        assert all(LABEL_RE.match(label) and not label.startswith("__") for label in spec.labels), name
        assert len(set(spec.labels)) == len(spec.labels), name
        if "time" in name or "duration" in name or "latency" in name:
            assert name.endswith(("_seconds", "_timestamp_seconds")), f"{name}: times are in seconds"
        assert not re.search(r"_(ms|us|percent|gb|tflops|gbps)(_|$)", name), f"{name}: use base units"
        assert not name.endswith("_total"), f"{name}: every metric is a gauge, not a counter"


def test_labels_join_dcgm_exporter_and_high_cardinality_stays_in_info():
    # dcgm-exporter labels its series Hostname, UUID and modelName (exact case).
    assert DEVICE_LABELS == ("Hostname", "UUID", "modelName")
    assert ROW_LABELS[3:] == ("op", "label", "dtype", "backend")
    detail = {"shapes", "params", "run_id", "git_revision", "cpu_model", "torch_version"}
    for name, spec in METRICS.items():
        if not name.endswith("_info"):
            assert not detail & set(spec.labels), f"{name} carries high-cardinality labels {detail & set(spec.labels)}"


def test_every_metric_is_documented_and_every_documented_metric_exists():
    doc = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(tileops_[a-z0-9_]+)`", doc, flags=re.M))  # the metric tables' rows
    assert set(METRICS) <= documented, f"undocumented: {sorted(set(METRICS) - documented)}"
    assert documented <= set(METRICS), f"documented but not emitted: {sorted(documented - set(METRICS))}"
    for name, spec in METRICS.items():  # each metric's labels are listed on its row
        row = next(line for line in doc.splitlines() if line.startswith(f"| `{name}`"))
        for label in spec.labels:
            if label not in DEVICE_LABELS + ROW_LABELS:
                assert f"`{label}`" in row, f"docs/metrics.md: {name} does not list its label {label}"


# --------------------------------------------------------------------------- values


@pytest.fixture
def mixed_run(tmp_path: Path) -> Path:
    """A healthy row, a row whose bytes are inflated past the theoretical bandwidth, an error row."""
    return write_run(tmp_path / "run", [
        record("relu", "small"),
        record("add", "inflated", bytes_=80_000_000_000),  # 80 GB in 1 ms: 800x the 100 GB/s nominal
        record("neg", "small", status="error"),
    ], audit=[{"op": "relu", "label": "small", "dtype": "float32", "backend": "torch", "verdict": "FAIL",
               "measured_read_bytes": 6_000_000, "expected_read_bytes": 4_000_000, "note": "extra fields are fine"}])


def test_row_values_equal_the_roofline_tools(mixed_run: Path):
    prof = profile()
    (snap,) = load_run(mixed_run, ProfileChooser.only(prof))
    m = parse(exposition([snap], detail="full"))
    for rec in load_records([mixed_run]):
        p = price(rec, prof)
        lab = {"op": rec.op, "label": rec.label, "dtype": rec.dtype, "backend": rec.backend,
               "Hostname": "node-a", "UUID": "cpu-node-a", "modelName": "Test CPU 9000"}
        state = one(m["tileops_row_verdict"], **lab).labels
        assert (state["verdict"], state["bound"], state["roof"]) == (p.verdict, p.bound or "", p.roof or "")
        if p.efficiency is None:
            assert not [s for s in m["tileops_sol_ratio"] if s.labels["op"] == rec.op]
            continue
        assert one(m["tileops_sol_ratio"], **lab).value == pytest.approx(p.efficiency)
        assert one(m["tileops_sol_time_seconds"], **lab).value == pytest.approx(p.sol_time_s)
        assert one(m["tileops_device_time_seconds"], **lab).value == pytest.approx(p.actual_time_s)
        assert one(m["tileops_achieved_bytes_per_second"], **lab).value == pytest.approx(p.achieved_bytes_per_s)
        assert one(m["tileops_achieved_flops_per_second"], **lab).value == pytest.approx(p.achieved_flops_per_s)
        # the fleet divides sums: sol time / device time is the ratio
        assert (one(m["tileops_sol_time_seconds"], **lab).value / one(m["tileops_device_time_seconds"], **lab).value
                == pytest.approx(one(m["tileops_sol_ratio"], **lab).value))


def test_lean_rows_derive_what_full_exports(mixed_run: Path):
    """The lean set drops per-row series that follow from the rest: SOL time is sol_ratio x device time, and
    the achieved rate on the bounding roof is sol_ratio x that roof's per-device profile gauge (what the
    dashboard computes). Checked against the full level's own numbers."""
    prof = profile()
    (snap,) = load_run(mixed_run, ProfileChooser.only(prof))
    lean, full = parse(exposition([snap])), parse(exposition([snap], detail="full"))
    row_metrics = {n for n, spec in METRICS.items() if spec.scope == "row"}
    lean_rows = {n for n in lean if n in row_metrics}
    assert lean_rows == {"tileops_device_time_seconds", "tileops_sol_ratio", "tileops_row_verdict",
                         "tileops_physics_breach_ratio"}
    assert all(METRICS[n].detail == "lean" for n in lean_rows)
    # at most 3 series per healthy row, 4 on the row that breaches one ceiling
    per_row: dict[str, int] = {}
    for name in lean_rows:
        for smp in lean[name]:
            per_row[smp.labels["op"]] = per_row.get(smp.labels["op"], 0) + 1
    assert per_row == {"relu": 3, "add": 4, "neg": 1}  # neg is an error row: its state only
    mem_roof = one(lean["tileops_profile_memory_effective_bytes_per_second"]).value
    for smp in lean["tileops_sol_ratio"]:
        lab = {k: smp.labels[k] for k in ROW_LABELS}
        time_s = one(lean["tileops_device_time_seconds"], **lab).value
        assert smp.value * time_s == pytest.approx(one(full["tileops_sol_time_seconds"], **lab).value)
        state = one(lean["tileops_row_verdict"], **lab).labels
        if state["bound"] == "memory":
            achieved = one(full["tileops_achieved_bytes_per_second"], **lab).value
            assert smp.value * mem_roof == pytest.approx(achieved)
        else:
            peak = one(lean["tileops_profile_compute_effective_flops_per_second"], roof=state["roof"]).value
            assert smp.value * peak == pytest.approx(one(full["tileops_achieved_flops_per_second"], **lab).value)
    with pytest.raises(ValueError, match="lean, full"):
        exposition([snap], detail="verbose")


def test_breach_row_run_health_and_rows_by_verdict(mixed_run: Path):
    (snap,) = load_run(mixed_run, ProfileChooser.only(profile()))
    m = parse(exposition([snap]))
    assert one(m["tileops_row_verdict"], op="add").labels["physics"] == "breach"
    assert one(m["tileops_row_verdict"], op="relu").labels["physics"] == "held"
    assert one(m["tileops_row_verdict"], op="neg").labels["physics"] == ""  # an error row is not checked
    ratio = one(m["tileops_physics_breach_ratio"], op="add", ceiling="memory")
    assert ratio.value == pytest.approx(800.0)
    assert one(m["tileops_run_healthy"]).value == 0
    assert one(m["tileops_run_physics_check"], state="breached").value == 1
    assert sum(s.value for s in m["tileops_run_physics_check"]) == 1
    assert "tileops_run_last_success_timestamp_seconds" not in m  # never after an unhealthy run
    assert one(m["tileops_run_physics_breaches"]).value == 1
    rows = {s.labels["verdict"]: s.value for s in m["tileops_run_rows"]}
    assert set(rows) == set(VERDICTS)  # zeros listed, so a verdict that empties still reads 0
    assert sum(rows.values()) == 3 and rows["error"] == 1
    assert one(m["tileops_row_verdict"], op="neg").labels["blank_reason"] == "error"
    assert one(m["tileops_run_duration_seconds"]).value == pytest.approx(120.0)


def test_not_judged_is_neither_healthy_nor_unhealthy(tmp_path: Path):
    """Nominal bandwidth unknown: a memory-only run cannot be judged at all, so it is not called healthy (no
    tileops_run_healthy), yet it is no failure either (the bench ran: its last success counts)."""
    prof = profile().model_copy(update={"memory": profile().memory.model_copy(
        update={"theoretical": None, "calibration": None, "calibration_source": None, "mixes": {}})})
    run = write_run(tmp_path / "r", [record("cast", "small", flops=0)])  # memory only: nothing to judge it on
    (snap,) = load_run(run, ProfileChooser.only(prof))
    m = parse(exposition([snap]))
    assert "tileops_run_healthy" not in m
    assert one(m["tileops_run_physics_check"], state="not-judged").value == 1
    judged = one(m["tileops_physics_check_judged"], ceiling="memory")
    assert judged.value == 0 and judged.labels["reason"] == "nominal-unknown"
    assert one(m["tileops_row_verdict"]).labels["physics"] == "not-judged"
    assert one(m["tileops_run_last_success_timestamp_seconds"]).value == (T0 + timedelta(minutes=2)).timestamp()
    # a row with FLOPs on a roof the profile has: compute judged, memory not: partial, healthy so far as judged
    (snap,) = load_run(write_run(tmp_path / "r3", [record()]), ProfileChooser.only(prof))
    m = parse(exposition([snap]))
    assert one(m["tileops_run_healthy"]).value == 1
    assert one(m["tileops_run_physics_check"], state="partial").value == 1
    assert one(m["tileops_physics_check_judged"], ceiling="cpu.fp32").labels["reason"] == ""
    assert one(m["tileops_physics_check_judged"], ceiling="cpu.fp32").value == 1
    assert one(m["tileops_physics_check_judged"], ceiling="memory").value == 0


def test_healthy_run_sets_last_success_to_its_finish(tmp_path: Path):
    (snap,) = load_run(write_run(tmp_path / "ok", [record()]), ProfileChooser.only(profile()))
    m = parse(exposition([snap]))
    assert one(m["tileops_run_healthy"]).value == 1
    expected = (T0 + timedelta(minutes=2)).timestamp()
    assert one(m["tileops_run_last_success_timestamp_seconds"]).value == pytest.approx(expected)
    assert one(m["tileops_run_timestamp_seconds"]).value == pytest.approx(expected)


def test_an_interrupted_run_is_not_a_success(tmp_path: Path):
    (snap,) = load_run(write_run(tmp_path / "cut", [record()], status="interrupted"), ProfileChooser.only(profile()))
    m = parse(exposition([snap]))
    assert one(m["tileops_run_healthy"]).value == 0
    assert "tileops_run_last_success_timestamp_seconds" not in m


def test_detail_lives_in_info_series(mixed_run: Path):
    (snap,) = load_run(mixed_run, ProfileChooser.only(profile()))
    m = parse(exposition([snap], detail="full"))
    info = one(m["tileops_row_info"], op="relu")
    assert info.value == 1 and info.labels["shapes"] == '{"x":[1000,2000]}'
    assert info.labels["roof_key"] == "cuda_core.fp32" and info.labels["roof"] == "cpu.fp32"
    assert "tileops_row_info" not in parse(exposition([snap]))  # row detail is opt-in (--metrics-detail full)
    run = one(m["tileops_run_info"])
    assert run.labels["git_revision"] == "abc123def456" and run.labels["run_id"] == "run-1"
    assert one(m["tileops_build_info"]).labels["version"]


def test_audit_verdicts_when_present(mixed_run: Path, tmp_path: Path):
    (snap,) = load_run(mixed_run, ProfileChooser.only(profile()))
    m = parse(exposition([snap]))
    assert one(m["tileops_audit_verdict"], op="relu").labels["verdict"] == "FAIL"
    assert one(m["tileops_audit_read_bytes_ratio"], op="relu").value == pytest.approx(1.5)
    (plain,) = load_run(write_run(tmp_path / "no-audit", [record()]), ProfileChooser.only(profile()))
    assert "tileops_audit_verdict" not in parse(exposition([plain]))


def test_a_bad_audit_line_names_the_file_and_line(tmp_path: Path):
    run = write_run(tmp_path / "r", [record()])
    (run / "audit.jsonl").write_text('{"op": "relu"}\n', encoding="utf-8")
    with pytest.raises(ExportInputError, match=r"audit\.jsonl:1: not a valid audit entry"):
        load_run(run, ProfileChooser.only(profile()))


def test_profile_ceilings_and_this_devices_calibration(tmp_path: Path):
    prof = profile(bandwidth=100e9)
    cal = DeviceCalibration(
        run_id="cal-7", started_at=T0, finished_at=T0 + timedelta(minutes=1), tool_version="0.1.0",
        torch_version="2.13.0", quick=True, kind="cpu", name="Test CPU 9000", hostname="node-a",
        mixes={"copy": MixMeasurement(bytes_per_s=60e9, bytes=1 << 30, array_bytes=1 << 29, best_s=0.1, reps=3,
                                      kernel="copy"),
               "triad": MixMeasurement(bytes_per_s=70e9, bytes=1 << 30, array_bytes=1 << 29, best_s=0.1, reps=3,
                                       kernel="triad")},
        roofs={"cpu.fp32": RoofMeasurement(flops_per_s=4e11, flops=1e9, best_s=0.01, reps=3, method="fma")},
        latency_floor_s=5e-6)
    run = write_run(tmp_path / "r", [record()])
    (snap,) = load_run(run, ProfileChooser.only(prof), {"cpu-node-a": cal, "cpu-other-host": cal})
    m = parse(exposition([snap]))
    assert one(m["tileops_calibration_memory_bytes_per_second"], mix="triad").value == 70e9
    assert one(m["tileops_calibration_memory_ratio"], mix="copy").value == pytest.approx(0.6)
    assert one(m["tileops_calibration_compute_flops_per_second"], roof="cpu.fp32").value == 4e11
    assert one(m["tileops_calibration_compute_ratio"], roof="cpu.fp32").value == pytest.approx(0.4)
    assert one(m["tileops_calibration_latency_floor_seconds"]).value == 5e-6
    assert one(m["tileops_calibration_timestamp_seconds"]).value == (T0 + timedelta(minutes=1)).timestamp()
    assert one(m["tileops_profile_memory_theoretical_bytes_per_second"], profile="TestCPU").value == 100e9
    assert one(m["tileops_profile_memory_effective_bytes_per_second"]).value == pytest.approx(80e9)
    assert one(m["tileops_profile_compute_effective_flops_per_second"], roof="cpu.fp32").value == 5e11
    assert one(m["tileops_calibration_marked"]).value == 0 and one(m["tileops_calibration_marked"]).labels["cause"] == ""
    # stored marked: 1, with what marked it (the judge's own reasons, so the cause is read as the store writes it)
    from tileops.ledger.judge import Drop, Judgement

    drop = Drop(ceiling="memory.triad", measured=50e9, stored=70e9, tolerance=0.05, noise="its own spread")
    for judgement, cause in ((Judgement(contended=["load 3.1 before the first step"]), "contended"),
                             (Judgement(drops=[drop], reference="cal-6"), "below-stored"),
                             (Judgement(contended=["steal 12 %"], drops=[drop], reference="cal-6"),
                              "contended+below-stored")):
        marked = cal.model_copy(update={"marked": judgement.mark("tileops calibrate --force")})
        (snap,) = load_run(run, ProfileChooser.only(prof), {"cpu-node-a": marked})
        sample = one(parse(exposition([snap]))["tileops_calibration_marked"])
        assert (sample.value, sample.labels["cause"]) == (1, cause)
    # another device's result is not this one's
    (other,) = load_run(run, ProfileChooser.only(prof), {"cpu-other-host": cal})
    assert "tileops_calibration_memory_bytes_per_second" not in parse(exposition([other]))


def test_the_previous_calibration_is_exported_beside_the_current(tmp_path: Path):
    """The device's own history (<store>/devices/history/<key>/): the previous run's figures sit beside the
    current ones, so a drop against the device's own past shows even when its whole SKU drifts."""
    from tileops.ledger import write_device_result
    from tileops.export.calibration import device_calibrations

    def cal(run_id: str, minutes: int, scale: float) -> DeviceCalibration:
        return DeviceCalibration(
            run_id=run_id, started_at=T0, finished_at=T0 + timedelta(minutes=minutes), tool_version="0.1.0",
            torch_version="2.13.0", quick=False, kind="cpu", name="Test CPU 9000", hostname="node-a",
            mixes={"triad": MixMeasurement(bytes_per_s=70e9 * scale, bytes=1 << 30, array_bytes=1 << 29,
                                           best_s=0.1, reps=3, kernel="triad")},
            roofs={"cpu.fp32": RoofMeasurement(flops_per_s=4e11 * scale, flops=1e9, best_s=0.01, reps=3,
                                               method="fma")})

    store = tmp_path / "store"
    write_device_result(cal("cal-1", 1, 1.0), store)
    run = write_run(tmp_path / "r", [record()])
    (snap,) = load_run(run, ProfileChooser.only(profile()), device_calibrations(store))
    m = parse(exposition([snap]))
    assert "tileops_calibration_previous_memory_bytes_per_second" not in m  # one calibration: no history yet
    write_device_result(cal("cal-2", 60, 0.8), store)
    (snap,) = load_run(run, ProfileChooser.only(profile()), device_calibrations(store))
    m = parse(exposition([snap]))
    assert one(m["tileops_calibration_memory_bytes_per_second"], mix="triad").value == pytest.approx(56e9)
    assert one(m["tileops_calibration_previous_memory_bytes_per_second"], mix="triad").value == pytest.approx(70e9)
    assert one(m["tileops_calibration_previous_compute_flops_per_second"], roof="cpu.fp32").value == 4e11
    assert one(m["tileops_calibration_previous_timestamp_seconds"]).value == (T0 + timedelta(minutes=1)).timestamp()


def test_no_matching_profile_leaves_sol_blank(tmp_path: Path):
    (snap,) = load_run(write_run(tmp_path / "r", [record()]), ProfileChooser([profile(match="Some Other CPU")]))
    m = parse(exposition([snap]))
    assert "tileops_sol_ratio" not in m
    assert one(m["tileops_row_verdict"]).labels == {**one(m["tileops_row_verdict"]).labels, "verdict": "blank",
                                                    "blank_reason": "no-profile"}


def test_devices_are_split_and_labelled_like_dcgm(tmp_path: Path):
    gpu = env(device="NVIDIA H200", uuid="GPU-1234", kind="cuda", hostname="node-b")
    run = write_run(tmp_path / "r", [record(), record(e=gpu)])
    snaps = load_run(run, ProfileChooser([profile()]))
    assert {s.device for s in snaps} == {DeviceLabels("node-a", "cpu-node-a", "Test CPU 9000", "cpu"),
                                         DeviceLabels("node-b", "GPU-1234", "NVIDIA H200", "cuda")}
    m = parse(exposition(snaps))
    uuids = {s.labels["UUID"] for s in m["tileops_run_physics_check"]}
    assert uuids == {"cpu-node-a", "GPU-1234"}
    # the GPU has no profile: nothing judged, so no claim of health either way
    assert {s.labels["UUID"] for s in m["tileops_run_healthy"]} == {"cpu-node-a"}
    assert one(m["tileops_run_physics_check"], UUID="GPU-1234", state="not-judged").value == 1


def test_latest_per_device_keeps_the_newest_run_and_the_newest_success(tmp_path: Path):
    good = write_run(tmp_path / "a", [record(e=env(run_id="a"))], start=T0)
    bad = write_run(tmp_path / "b", [record("add", "inflated", bytes_=80_000_000_000, e=env(run_id="b"))],
                    start=T0 + timedelta(hours=3))
    snaps = latest_per_device([*load_run(bad, ProfileChooser.only(profile())), *load_run(good, ProfileChooser.only(profile()))])
    (s,) = snaps
    assert s.run_id == "b" and not s.healthy
    assert s.last_success_s == pytest.approx((T0 + timedelta(minutes=2)).timestamp())
    assert s.last_healthy_s == s.last_success_s
    # a newer run nothing could be judged on (no profile): the newest success, but the healthy run stays a's
    unjudged = write_run(tmp_path / "c", [record(e=env(run_id="c"))], start=T0 + timedelta(hours=5))
    (s,) = latest_per_device([*snaps, *load_run(unjudged, ProfileChooser.only(None))])
    assert s.run_id == "c" and s.healthy is None
    assert s.last_success_s == pytest.approx((T0 + timedelta(hours=5, minutes=2)).timestamp())
    assert s.last_healthy_s == pytest.approx((T0 + timedelta(minutes=2)).timestamp())
    m = parse(exposition([s]))
    assert one(m["tileops_run_last_healthy_timestamp_seconds"]).value == s.last_healthy_s
    assert "tileops_run_healthy" not in m


def _timed(rec, half_width: float, conditions=None):
    """``rec`` with a level interval of ± ``half_width`` around its time, and ``conditions``."""
    t = rec.timing
    m = t.median_s
    ci = [m * (1 - half_width), m * (1 + half_width)]
    return dataclasses.replace(rec, timing=dataclasses.replace(t, level_ci_s=ci, median_ci_s=ci), conditions=conditions)


def test_an_unstable_row_says_why_in_short_names_and_a_stable_one_says_nothing(tmp_path: Path):
    """tileops_row_unstable: one series per reason on an unstable row (issue 37), named by a short code, never
    the phrase (whose numbers change every run); none on a row whose verdict stands; lean."""
    busy = RowConditions(window_s=1.0, contended=True, contention=["other processes used 50% of the CPUs"])
    hot = RowConditions(window_s=1.0, throttled=True, thermal=True)
    run = write_run(tmp_path / "r", [
        _timed(record("relu", "quiet"), 0.01),
        _timed(record("relu", "wide"), 0.2),
        _timed(record("relu", "busy"), 0.2, busy),
        _timed(record("relu", "hot"), 0.01, hot),
    ])
    (snap,) = load_run(run, ProfileChooser.only(profile()))
    m = parse(exposition([snap]))
    reasons: dict[str, set[str]] = {}
    for smp in m["tileops_row_unstable"]:
        assert smp.value == 1
        reasons.setdefault(smp.labels["label"], set()).add(smp.labels["reason"])
    assert reasons == {"wide": {"wide-interval"}, "busy": {"wide-interval", "contended"}, "hot": {"throttled"}}
    verdicts = {s.labels["label"]: s.labels["verdict"] for s in m["tileops_row_verdict"]}
    assert {label for label, v in verdicts.items() if v == "unstable"} == set(reasons)
    assert METRICS["tileops_row_unstable"].detail == "lean"
    # every phrase the roofline gives an unstable row has a code of its own
    for rec in load_records([run]):
        for phrase in price(rec, profile()).unstable:
            assert unstable_code(phrase) != "other", phrase


def test_unreadable_input_names_the_fix(tmp_path: Path):
    with pytest.raises(ExportInputError, match="not a run directory"):
        load_run(tmp_path, ProfileChooser.only(profile()))
    run = write_run(tmp_path / "r", [record()])
    with (run / "records.jsonl").open("a") as f:
        f.write('{"not": "a record"}\n{"op": "x"}\n')
    with pytest.raises(ExportInputError, match=r"records\.jsonl:2"):
        load_run(run, ProfileChooser.only(profile()))


def _registry(samples) -> CollectorRegistry:  # tileops.export.metrics.Samples
    """prometheus_client's own families of the same samples, in a private registry: the reference the fast
    writer is held to (the package has one writer; prometheus_client's is the test's oracle)."""

    class Families:
        def collect(self):
            for spec, rows in samples.items():
                fam = GaugeMetricFamily(spec.name, spec.help, labels=list(spec.labels))
                for labels, value in rows:
                    fam.add_metric(labels, value)
                yield fam

    reg = CollectorRegistry(auto_describe=False)
    reg.register(Families())  # type: ignore[arg-type]  # a collector is anything with collect()
    return reg


def test_text_writer_equals_prometheus_client(tmp_path: Path):
    """Our fast writer and prometheus_client's generate_latest say the same thing, escapes included."""
    nasty = env(hostname='host "quoted"\\back\nslash')
    run = write_run(tmp_path / "r", [record(e=nasty), record("add", 'label "x"', bytes_=80_000_000_000, e=nasty),
                                     record("neg", status="error", e=nasty)])
    snaps = load_run(run, ProfileChooser.only(profile()))

    def norm(body: bytes) -> list:
        return [(f.name, f.documentation, f.type,
                 sorted((s.name, tuple(sorted(s.labels.items())), s.value) for s in f.samples))
                for f in text_string_to_metric_families(body.decode("utf-8"))]

    ours = exposition(snaps)
    theirs = generate_latest(_registry(collect_samples(snaps)))
    assert norm(ours) == norm(theirs)
    assert len(collect_samples(snaps)) == sum(len(f[3]) for f in norm(ours))


def test_every_sink_takes_the_detail_level(tmp_path: Path):
    """`serve`, the textfile and the Pushgateway body all render at the level asked for (default lean)."""
    from tileops.export.server import DirectorySource, make_app
    from tileops.export.textfile import write_textfile

    run = write_run(tmp_path / "results" / "r", [record()])
    source = DirectorySource(tmp_path / "results", lambda: ProfileChooser.only(profile()), log=lambda msg: None)

    def scrape(detail: str) -> dict[str, list]:
        body = b"".join(make_app(source, detail)({"PATH_INFO": "/metrics"}, lambda status, headers: None))
        return parse(body)

    assert "tileops_row_info" not in scrape("lean") and "tileops_row_info" in scrape("full")
    (snap,) = load_run(run, ProfileChooser.only(profile()))
    lean = parse(write_textfile(tmp_path / "tf", snap).read_bytes())
    full = parse(write_textfile(tmp_path / "tf-full", snap, detail="full").read_bytes())
    assert "tileops_sol_time_seconds" not in lean and "tileops_sol_time_seconds" in full


def test_the_newest_audit_of_a_device_is_published_with_its_newest_run(tmp_path: Path):
    """An audit folder of its own joins the device's run when it is newer than the run's own audit; an older one
    does not, and an audit of a device with no run is published alone, with no run series."""
    import json

    from tileops.export.snapshot import AuditSnapshot, RunSnapshot, load_results

    def entry(verdict: str, at, **device) -> dict:
        return {"op": "relu", "label": "small", "dtype": "float32", "backend": "torch", "verdict": verdict,
                "finished_at": at.isoformat(), **device}

    cpu = {"hostname": "node-a", "device_uuid": "cpu-node-a", "device_name": "Test CPU 9000"}
    run = write_run(tmp_path / "run", [record()], audit=[entry("FAIL", T0 + timedelta(hours=1))])

    def folder(name: str, *entries: dict) -> Path:
        d = tmp_path / name
        d.mkdir()
        (d / "audit.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
        return d

    older = folder("older", entry("PASS", T0, **cpu))
    newer = folder("newer", entry("WARN", T0 + timedelta(hours=2), **cpu))
    gpu_only = folder("gpu", entry("ERROR", T0, hostname="node-a", device_uuid="GPU-9", device_name="NVIDIA H200"))
    chooser = ProfileChooser.only(profile())

    def verdicts(*dirs: Path) -> dict[str, set[str]]:
        snaps = latest_per_device(s for d in dirs for s in load_results(d, chooser))
        m = parse(exposition(snaps))
        assert {s.labels["UUID"] for s in m["tileops_run_info"]} == {"cpu-node-a"}  # no run for the GPU's audit
        out: dict[str, set[str]] = {}
        for s in m["tileops_audit_verdict"]:
            out.setdefault(s.labels["UUID"], set()).add(s.labels["verdict"])
        return out

    assert verdicts(run, older, gpu_only) == {"cpu-node-a": {"FAIL"}, "GPU-9": {"ERROR"}}
    assert verdicts(run / "audit.jsonl") == {"cpu-node-a": {"FAIL"}}  # the audit file of a run is that run
    assert verdicts(run, older, newer, gpu_only) == {"cpu-node-a": {"WARN"}, "GPU-9": {"ERROR"}}
    kinds = [type(s) for s in latest_per_device(s for d in (run, gpu_only) for s in load_results(d, chooser))]
    assert sorted(kinds, key=lambda t: t.__name__) == [AuditSnapshot, RunSnapshot]


def test_a_host_bound_row_publishes_its_span_over_busy_time(tmp_path: Path):
    """Lean: tileops_row_host_bound_ratio on the host-bound row only (as breach ratios, only where there is one);
    full: every span the timer saw."""
    import dataclasses

    def spanned(rec, span):
        return dataclasses.replace(rec, timing=dataclasses.replace(rec.timing, span_s=span))

    recs = [spanned(record("fused_experts", "prefill", seconds=1e-3), 3.2e-3),
            spanned(record("relu", "tight", seconds=1e-3), 1.1e-3), record("add", "cpu")]
    run = write_run(tmp_path / "run", recs)
    (snap,) = load_run(run, ProfileChooser.only(profile()))
    lean, full = parse(exposition([snap])), parse(exposition([snap], detail="full"))
    (hb,) = lean["tileops_row_host_bound_ratio"]
    assert hb.labels["op"] == "fused_experts" and hb.value == pytest.approx(3.2)
    assert {s.labels["op"]: s.value for s in full["tileops_row_span_seconds"]} == pytest.approx(
        {"fused_experts": 3.2e-3, "relu": 1.1e-3})
    assert "tileops_row_span_seconds" not in lean


def test_a_row_with_an_interval_adds_one_lean_series_the_top_of_its_sol_interval(tmp_path: Path):
    """Issue 26: at most one more lean series per row (4 in all on a healthy row): tileops_sol_ratio_upper,
    sol time over the low end of the time's interval. A record without an interval exports none."""
    from dataclasses import replace

    with_ci = record("relu", "steady")
    with_ci = replace(with_ci, timing=replace(with_ci.timing, median_ci_s=[0.98e-3, 1.03e-3]))
    run = write_run(tmp_path / "run", [with_ci, record("add", "old")])
    prof = profile()
    (snap,) = load_run(run, ProfileChooser.only(prof))
    lean = parse(exposition([snap]))
    lab = {"op": "relu", "label": "steady", "dtype": "float32", "backend": "torch"}
    p = price(with_ci, prof)
    assert one(lean["tileops_sol_ratio_upper"], **lab).value == pytest.approx(p.sol_time_s / 0.98e-3)
    assert one(lean["tileops_sol_ratio_upper"], **lab).value > one(lean["tileops_sol_ratio"], **lab).value
    assert [s.labels["op"] for s in lean["tileops_sol_ratio_upper"]] == ["relu"]  # the old record has none
    row_metrics = {n for n, spec in METRICS.items() if spec.scope == "row"}
    per_row: dict[str, int] = {}
    for name in (n for n in lean if n in row_metrics):
        for smp in lean[name]:
            per_row[smp.labels["op"]] = per_row.get(smp.labels["op"], 0) + 1
    assert per_row == {"relu": 4, "add": 3}
