"""The roofline tool (§1.2, §4.3): pricing, verdicts, blanks, latency floor, physics check, re-pricing."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from roofline_fixtures import make_profile, make_record

from tileops import roofline
from tileops.profiles import ProfileChooser, select_profile
from tileops.records import to_data
from tileops.roofline import Breach, health, price, price_all

# Memory roof 1e9 B/s effective (theoretical 1e9 × 1.0); time 1 s: efficiency = bytes / 1e9 exactly.
PROFILE = make_profile(bw_theoretical=2e9, bw_calibration=0.5, roofs={"cpu.fp32": (4e10, 0.25)})


@pytest.mark.parametrize("bytes_, verdict", [
    (799_900_000, "below"),  # 79.99 %
    (800_000_000, "at-ceiling"),  # 80 %
    (1_050_000_000, "at-ceiling"),  # 105 % is still at ceiling
    (1_050_100_000, "anomaly"),  # 105.01 %
])
def test_verdict_boundaries(bytes_: int, verdict: str) -> None:
    p = price(make_record(bytes=bytes_, flops=1, median_s=1.0), PROFILE)
    assert p.efficiency == pytest.approx(bytes_ / 1e9)
    assert p.verdict == verdict
    assert p.bound == "memory"


def test_pricing_numbers_memory_and_compute_bound() -> None:
    # compute roof: 4e10 × 0.25 = 1e10 FLOP/s; 5e9 FLOPs → 0.5 s; 2e8 bytes → 0.2 s.
    p = price(make_record(flops=5_000_000_000, bytes=200_000_000, median_s=2.0), PROFILE)
    assert p.memory_time_s == pytest.approx(0.2)
    assert p.compute_time_s == pytest.approx(0.5)
    assert p.sol_time_s == pytest.approx(0.5)
    assert p.bound == "compute"
    assert p.efficiency == pytest.approx(0.25)
    assert p.achieved_flops_per_s == pytest.approx(2.5e9)
    assert p.achieved_bytes_per_s == pytest.approx(1e8)
    assert p.effective_bandwidth == pytest.approx(1e9)
    assert p.effective_peak == pytest.approx(1e10)
    assert p.roof == "cpu.fp32"  # cuda_core.fp32 priced through the alias
    assert p.verdict == "below"
    assert p.intensity == pytest.approx(25.0)


def test_tie_is_memory_bound() -> None:
    # 1e9 bytes / 1e9 B/s = 1 s = 1e10 FLOPs / 1e10 FLOP/s
    p = price(make_record(flops=10_000_000_000, bytes=1_000_000_000, median_s=2.0), PROFILE)
    assert p.memory_time_s == p.compute_time_s
    assert p.bound == "memory"


def test_actual_time_includes_excluded_copies() -> None:
    r = make_record(bytes=500_000_000, median_s=0.5)
    r = dataclasses.replace(r, timing=dataclasses.replace(r.timing, excluded_copies_s=0.5))
    p = price(r, PROFILE)
    assert p.actual_time_s == pytest.approx(1.0)
    assert p.efficiency == pytest.approx(0.5)


def test_zero_flops_prices_with_zero_compute_time_even_without_the_roof() -> None:
    prof = make_profile(roofs={})
    p = price(make_record(flops=0, bytes=900_000_000, roof_key="tensor_core.bf16"), prof)
    assert p.verdict == "at-ceiling"
    assert p.compute_time_s == 0.0
    assert p.bound == "memory"


_PRICEABLE = dict(bytes=500_000_000, flops=1000)
#: Each blank case: the record and the profile it is priced on.
_BLANK_CASES = {
    "error": lambda: (make_record(status="error"), PROFILE),
    "skipped": lambda: (make_record(status="skipped"), PROFILE),
    "no-profile": lambda: (make_record(**_PRICEABLE), None),
    "no-cupti": lambda: (make_record(device_kind="cuda", timer="cuda-events", bytes=500_000_000), PROFILE),
    "bytes-zero": lambda: (make_record(bytes=0), PROFILE),
    "no-roofline": lambda: (make_record(bytes=None, flops=None), PROFILE),
    "no-timing": lambda: (make_record(median_s=None), PROFILE),
    "memory-uncalibrated": lambda: (make_record(**_PRICEABLE), make_profile(bw_calibration=None)),
    "no-memory-roof": lambda: (make_record(**_PRICEABLE), make_profile(memory=False)),
    "roof-absent": lambda: (make_record(roof_key="tensor_core.fp8"), PROFILE),
    "roof-key-missing": lambda: (make_record(roof_key=None), PROFILE),
    "roof-uncalibrated": lambda: (make_record(roof_key="cpu.fp32"),
                                  make_profile(roofs={"cpu.fp32": (1e10, None)}, aliases={})),
    "alias-uncalibrated": lambda: (make_record(**_PRICEABLE), make_profile(roofs={"cpu.fp32": (1e10, None)})),
}


@pytest.mark.parametrize("case, reason", [
    ("error", roofline.BLANK_ERROR),
    ("skipped", roofline.BLANK_SKIPPED),
    ("no-profile", roofline.BLANK_NO_PROFILE),
    ("no-cupti", roofline.BLANK_NO_CUPTI),
    ("bytes-zero", roofline.BLANK_BYTES_ZERO),
    ("no-roofline", roofline.BLANK_NO_ROOFLINE),
    ("no-timing", roofline.BLANK_NO_TIMING),
    ("memory-uncalibrated", roofline.BLANK_MEMORY_UNCALIBRATED),
    ("no-memory-roof", roofline.BLANK_MEMORY_UNCALIBRATED),
    ("roof-absent", roofline.BLANK_ROOF_ABSENT),
    ("roof-key-missing", roofline.BLANK_ROOF_ABSENT),
    ("roof-uncalibrated", roofline.BLANK_ROOF_UNCALIBRATED),
    ("alias-uncalibrated", roofline.BLANK_ROOF_UNCALIBRATED),
])
def test_each_blank_reason(case: str, reason: str) -> None:
    rec, prof = _BLANK_CASES[case]()
    p = price(rec, prof)
    assert p.blank_reason == reason
    assert p.verdict == ("error" if case in ("error", "skipped") else "blank")
    assert p.blank_detail  # a sentence with the particulars
    assert p.efficiency is None and p.sol_time_s is None and p.bound is None  # nothing guessed
    assert reason in roofline.BLANK_REASONS


def test_cupti_timed_gpu_row_is_priced() -> None:
    gpu = make_profile(name="gpu", kind="gpu", roofs={"cuda_core.fp32": (1e12, 0.9)}, aliases={})
    p = price(make_record(device_kind="cuda", timer="cupti", bytes=900_000_000), gpu)
    assert p.verdict == "at-ceiling"


@pytest.mark.parametrize("span, marked", [(None, None), (1.0, False), (1.2, False), (1.21, True), (3.0, True)])
def test_a_row_whose_span_exceeds_its_busy_time_by_20_percent_is_host_bound(span: float | None,
                                                                             marked: bool | None) -> None:
    """fused_experts syncs and loops over experts: its calls span more than their kernels' busy time. The
    SOL is still priced on busy time (the kernels' speed), and the row says what that leaves out."""
    gpu = make_profile(name="gpu", kind="gpu", roofs={"cuda_core.fp32": (1e12, 0.9)}, aliases={})
    rec = make_record(device_kind="cuda", timer="cupti", bytes=900_000_000, median_s=1.0, span_s=span)
    p = price(rec, gpu)
    plain = price(make_record(device_kind="cuda", timer="cupti", bytes=900_000_000, median_s=1.0), gpu)
    assert p.host_bound is marked and p.span_s == span
    assert (p.verdict, p.efficiency, p.sol_time_s) == (plain.verdict, plain.efficiency, plain.sol_time_s)
    notes = [n for n in p.notes if n.startswith("host-bound:")]
    if marked:
        assert len(notes) == 1 and f"{span:.2f}x" in notes[0] and "overstates" in notes[0]
    else:
        assert notes == []
    assert roofline.host_bound(rec) is marked


def test_blank_details_name_the_particulars() -> None:
    p = price(make_record(device_name="Mystery GPU"), None)
    assert "Mystery GPU" in p.blank_detail
    p = price(make_record(roof_key="tensor_core.fp8"), PROFILE)
    assert "tensor_core.fp8" in p.blank_detail and PROFILE.name in p.blank_detail


def test_latency_bound_is_checked_before_the_other_verdicts() -> None:
    prof = make_profile(latency_floor_s=1e-5)
    # sol 2e-6 s, measured 1.5e-6 s: 133 % would be an anomaly, but launch overhead dominates.
    p = price(make_record(bytes=2000, flops=1, median_s=1.5e-6), prof)
    assert p.verdict == "latency-bound"
    assert p.efficiency == pytest.approx(2e-6 / 1.5e-6)
    # measured time above the floor: judged normally.
    p = price(make_record(bytes=2000, flops=1, median_s=2e-5), prof)
    assert p.verdict == "below"
    # sol above the floor, measured below: not latency-bound (an anomaly here).
    p = price(make_record(bytes=20_000, flops=1, median_s=9e-6), prof)
    assert p.verdict == "anomaly"
    # no floor in the profile: no latency-bound verdict.
    p = price(make_record(bytes=2000, flops=1, median_s=1e-5), make_profile())
    assert p.verdict == "below"


def test_inflated_bytes_breach_the_physics_check() -> None:
    honest = make_record(bytes=900_000_000, median_s=1.0)  # 0.9e9 B/s < theoretical 2e9
    inflated = make_record(bytes=9_000_000_000, median_s=1.0, label="inflated")  # 9e9 B/s > 2e9
    ok, bad = price_all([honest, inflated], ProfileChooser.only(PROFILE))
    assert ok.breaches == ()
    assert bad.verdict == "anomaly"  # never "at ceiling"
    assert bad.breaches == (Breach("memory", 9e9, 2e9),)
    assert bad.breaches[0].ratio == pytest.approx(4.5)
    text = bad.breaches[0].describe(bad.record)
    assert text.startswith("FORMULA ERROR") and "inflated" in text and "fast" not in text
    h = health([ok, bad])
    assert not h.ok and h.breaches == 1
    assert health([ok]).ok


def test_compute_breach_names_the_resolved_roof() -> None:
    # 1e11 FLOP/s implied > cpu.fp32 theoretical 4e10
    p = price(make_record(flops=100_000_000_000, bytes=1000, median_s=1.0), PROFILE)
    assert [b.ceiling for b in p.breaches] == ["cpu.fp32"]
    assert not health([p]).ok


def test_physics_check_runs_on_blank_rows_that_still_have_time() -> None:
    # memory calibrated to 80 % of its theoretical: a bound nothing puts in doubt (above 95 % it would be suspect)
    gpu = make_profile(name="gpu", kind="gpu", bw_calibration=0.8, roofs={"cuda_core.fp32": (1e12, 0.9)}, aliases={})
    p = price(make_record(device_kind="cuda", timer="cuda-events", bytes=9_000_000_000), gpu)
    assert p.verdict == "blank" and p.blank_reason == roofline.BLANK_NO_CUPTI
    assert p.breaches and not health([p]).ok


def test_a_cuda_events_row_says_why_it_fell_back_and_what_fixes_it() -> None:
    gpu = make_profile(name="gpu", kind="gpu", roofs={"cuda_core.fp32": (1e12, 0.9)}, aliases={})
    rec = make_record(device_kind="cuda", timer="cuda-events", bytes=1000)
    why = "CUPTI attribution failed (records were dropped); re-timed with CUDA events. Fix: run without nsys"
    fell_back = dataclasses.replace(rec, timing=dataclasses.replace(rec.timing, fallback_reason=why))
    p = price(fell_back, gpu)
    assert p.blank_reason == roofline.BLANK_NO_CUPTI and why in p.blank_detail
    asked = price(rec, gpu)  # no fallback: the run asked for CUDA events, and the detail says how to get CUPTI
    assert asked.blank_reason == roofline.BLANK_NO_CUPTI and "--timer auto or cupti" in asked.blank_detail
    assert "cupti-python" not in asked.blank_detail + p.blank_detail


def test_nominal_unknown_prices_on_measured_envelope_with_a_note_and_no_bandwidth_breach() -> None:
    prof = make_profile(bw_theoretical=None, bw_calibration=None, measured={"triad": 1e9, "copy": 8e8})
    p = price(make_record(bytes=900_000_000, median_s=1.0), prof)
    assert p.effective_bandwidth == 1e9  # the envelope over the measured mixes
    assert p.verdict == "at-ceiling"
    assert roofline.NOTE_NOMINAL_UNKNOWN in p.notes
    # Above the measured envelope: an anomaly, but bandwidth cannot breach an unknown nominal.
    p = price(make_record(bytes=5_000_000_000, median_s=1.0), prof)
    assert p.verdict == "anomaly" and p.breaches == ()
    assert roofline.NOTE_NOMINAL_UNKNOWN in p.notes


def test_repricing_old_records_under_an_updated_profile_gives_new_numbers() -> None:
    # formula-guard: allow synthetic records with made-up byte counts to test re-pricing; no op is priced
    records = [make_record(label=f"r{i}", bytes=(i + 1) * 100_000_000, median_s=1.0) for i in range(5)]
    before = [to_data(r) for r in records]
    old = price_all(records, ProfileChooser.only(make_profile(bw_theoretical=2e9, bw_calibration=0.5)))
    new = price_all(records, ProfileChooser.only(make_profile(bw_theoretical=2e9, bw_calibration=0.25)))
    for o, n in zip(old, new, strict=True):
        assert n.effective_bandwidth == pytest.approx(o.effective_bandwidth / 2)
        assert n.efficiency == pytest.approx(o.efficiency * 2)
    assert [o.verdict for o in old] == ["below", "below", "below", "below", "below"]
    assert [n.verdict for n in new] == ["below", "below", "below", "at-ceiling", "at-ceiling"]
    assert [to_data(r) for r in records] == before  # the records are untouched


def test_price_all_selects_a_profile_per_device() -> None:
    a = make_profile(name="a", match=("CPU A",))
    b = make_profile(name="b", match=("CPU B", "cpu-b-alias"), bw_calibration=0.25)
    recs = [make_record(device_name="CPU A", bytes=100), make_record(device_name="cpu b", bytes=100),
            make_record(device_name="CPU C", bytes=100)]
    got = price_all(recs, ProfileChooser([a, b]))
    assert [p.profile for p in got] == ["a", "b", None]
    assert got[2].blank_reason == roofline.BLANK_NO_PROFILE
    assert [p.profile for p in price_all(recs, ProfileChooser.only(b))] == ["b", "b", "b"]
    assert [p.verdict for p in price_all(recs, ProfileChooser.only(None))] == ["blank"] * 3
    assert select_profile("CPU-B-ALIAS", [a, b]) is b
    assert select_profile("nothing", [a, b]) is None


def test_health_counts() -> None:
    priced = price_all([
        make_record(bytes=900_000_000), make_record(bytes=100_000_000), make_record(bytes=0),
        make_record(status="error"), make_record(status="skipped"), make_record(bytes=0),
    ], ProfileChooser.only(PROFILE))
    h = health(priced)
    assert h.rows == 6
    assert h.by_verdict == {"at-ceiling": 1, "below": 1, "blank": 2, "error": 2}
    assert h.blanks_by_reason == {roofline.BLANK_BYTES_ZERO: 2}
    assert h.errors == 1  # a skipped row is not an error
    assert h.ok and h.at_ceiling == 1 and h.anomalies == 0


@pytest.mark.parametrize("case, ceiling, reason", [
    ("nominal-unknown", "memory", roofline.NOT_JUDGED_NOMINAL_UNKNOWN),
    ("no-memory-roof", "memory", roofline.NOT_JUDGED_THEORETICAL_MISSING),
    ("roof-absent", "tensor_core.fp8", roofline.NOT_JUDGED_ROOF_ABSENT),
    ("roof-key-missing", "compute", roofline.NOT_JUDGED_ROOF_ABSENT),
    ("no-profile", "memory", roofline.NOT_JUDGED_NO_PROFILE),
    ("no-timing", "memory", roofline.NOT_JUDGED_NO_TIMING),
    ("no-roofline", "memory", roofline.NOT_JUDGED_NO_ROOFLINE),
])
def test_each_ceiling_that_cannot_be_judged_says_why(case: str, ceiling: str, reason: str) -> None:
    """A ceiling without a theoretical figure (or a row without an implied rate) is not judged, with the
    reason; a 1000x inflated formula there is not a breach, and it is not a pass either."""
    prof: object = PROFILE
    rec = make_record(bytes=1000 * 2_000_000_000, flops=1000 * 4 * 10**10)  # 1000x both theoretical ceilings
    if case == "nominal-unknown":
        prof = make_profile(bw_theoretical=None, bw_calibration=None, measured={"triad": 1e9})
    elif case == "no-memory-roof":
        prof = make_profile(memory=False)
    elif case == "roof-absent":
        rec = dataclasses.replace(rec, roof_key="tensor_core.fp8")
    elif case == "roof-key-missing":
        rec = dataclasses.replace(rec, roof_key=None)
    elif case == "no-profile":
        prof = None
    elif case == "no-timing":
        rec = make_record(median_s=None)
    elif case == "no-roofline":
        rec = make_record(bytes=None, flops=None)
    p = price(rec, prof)  # type: ignore[arg-type]
    (check,) = [c for c in p.checks if c.ceiling == ceiling]
    assert not check.judged and check.not_judged == reason and not check.breached
    assert p.physics == "not-judged" or p.physics == "breach"  # the other ceiling may still catch it
    h = health([p])
    (ch,) = [c for c in h.ceilings if c.ceiling == ceiling]
    assert ch.state == "not-judged" and ch.not_judged == {reason: 1} and ch.reason == reason
    assert h.state in ("partial", "not-judged", "breached")  # never "held"
    assert reason in roofline.NOT_JUDGED_REASONS


def test_health_states_held_partial_not_judged_breached() -> None:
    honest = make_record(bytes=900_000_000, flops=1000, median_s=1.0)
    h = health(price_all([honest], ProfileChooser.only(PROFILE)))
    assert h.state == "held" and h.ok
    assert [(c.ceiling, c.state, c.judged) for c in h.ceilings] == [("memory", "held", 1), ("cpu.fp32", "held", 1)]
    assert h.ceilings[0].max_ratio == pytest.approx(0.45)  # 0.9e9 of the 2e9 theoretical
    inflated = dataclasses.replace(honest, bytes=1000 * 900_000_000, label="inflated")
    h = health(price_all([honest, inflated], ProfileChooser.only(PROFILE)))
    assert h.state == "breached" and not h.ok
    assert (h.ceilings[0].state, h.ceilings[0].judged, h.ceilings[0].breached) == ("breached", 2, 1)
    # the same inflated formula on a CPU whose nominal bandwidth is unknown: not judged, never "held"
    blind = make_profile(bw_theoretical=None, bw_calibration=None, measured={"triad": 1e9},
                         roofs={"cpu.fp32": (4e10, 0.25)})
    h = health(price_all([honest, inflated], ProfileChooser.only(blind)))
    assert h.ok and h.state == "partial"
    assert {c.ceiling: c.state for c in h.ceilings} == {"memory": "not-judged", "cpu.fp32": "held"}
    assert h.not_judged_reasons == {roofline.NOT_JUDGED_NOMINAL_UNKNOWN: 2}
    # a roof the profile does not have (fp8 on a CPU): listed as not judged, its rows blank, the run still held
    fp8 = dataclasses.replace(honest, roof_key="tensor_core.fp8", label="fp8")
    h = health(price_all([honest, fp8], ProfileChooser.only(PROFILE)))
    assert h.state == "held" and [c.ceiling for c in h.unjudged()] == ["tensor_core.fp8"]
    assert h.unjudged(significant=True) == []
    memory_only = dataclasses.replace(inflated, flops=0)
    h = health(price_all([memory_only], ProfileChooser.only(blind)))
    assert h.ok and h.state == "not-judged"
    assert health(price_all([honest], ProfileChooser.only(None))).state == "not-judged"
    assert health([]).state == "not-judged"
    assert health(price_all([make_record(status="error")], ProfileChooser.only(PROFILE))).state == "not-judged"
    doc = health(price_all([honest, inflated], ProfileChooser.only(blind))).as_dict()
    assert doc["state"] == "partial" and doc["ceilings"][0]["not_judged"] == {"nominal-unknown": 2}
    assert doc["ceilings"][0]["rows_judged"] == 0 and doc["ceilings"][1]["state"] == "held"


def test_zero_work_involves_no_ceiling() -> None:
    p = price(make_record(flops=0, bytes=900_000_000), PROFILE)
    assert [c.ceiling for c in p.checks] == ["memory"]
    assert [c.ceiling for c in price(make_record(bytes=0, flops=10), PROFILE).checks] == ["cpu.fp32"]
    assert price(make_record(status="error"), PROFILE).checks == ()


def test_importing_the_roofline_tool_and_reports_imports_no_op_code() -> None:
    code = (
        "import sys, tileops.roofline, tileops.report, tileops.report.plot, tileops.commands.roofline\n"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'tileops.ops')))\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"imported op code or torch: {res.stdout} {res.stderr}"
