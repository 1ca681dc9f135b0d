"""Issue 26 items 2-3 in the roofline: every SOL carries its interval, a row whose time is not known well enough
(or was disturbed) is ``unstable``, and the physics check judges the conservative end of the interval.

The records are built as data (tests/roofline_fixtures.py): a record with ``timing.median_ci_s`` and
``conditions`` is exactly what the bench writes once it measures them.
"""

from __future__ import annotations

import pytest

from tileops.records import CpuConditions, GpuConditions, RowConditions
from tileops.roofline import (CI_NO_INTERVAL, NOT_JUDGED_NOISE, health, price, sol_interval, throttle_unsettles,
                              unstable_reasons)
from roofline_fixtures import make_profile, make_record

# The profile's memory roof: 1e9 B/s theoretical and effective; 800 bytes take 0.8 µs at the ceiling.
CPU = make_profile()
GPU = make_profile(name="gpu", kind="gpu", match=("Test GPU",), bw_theoretical=1e12, bw_calibration=0.9, roofs={"cuda_core.fp32": (1e12, 0.9)}, aliases={})


def _cpu(median: float = 1e-6, ci: tuple[float, float] | None = None, **kw):
    return make_record(median_s=median, median_ci_s=ci, **kw)


def _gpu(median: float = 1e-6, ci: tuple[float, float] | None = None, **kw):
    return make_record(median_s=median, median_ci_s=ci, device_kind="cuda", device_name="Test GPU", timer="cupti",
                       **kw)


def test_the_sol_interval_is_the_sol_time_over_each_end_of_the_time_interval() -> None:
    p = price(_cpu(1e-6, (0.98e-6, 1.03e-6)), CPU)
    assert p.sol_time_s == pytest.approx(0.8e-6)
    lo, hi = p.sol_ci
    assert lo == pytest.approx(0.8 / 1.03) and hi == pytest.approx(0.8 / 0.98)
    assert lo < p.efficiency < hi
    assert p.sol_ci_blank is None


def test_device_copies_excluded_from_the_median_are_added_to_both_ends_as_to_the_median() -> None:
    from tileops.records import Timing

    t = Timing(timer="cupti", median_s=1.0, min_s=1.0, mean_s=1.0, p10_s=1.0, p90_s=1.0, n=5, rel_noise=0.0,
               warmup=1, total_s=5.0, stop_reason="x", excluded_copies_s=1.0, median_ci_s=[0.5, 2.0])
    assert sol_interval(1.0, t) == pytest.approx((1.0 / 3.0, 1.0 / 1.5))


def test_a_record_without_an_interval_prices_as_before_with_its_sol_interval_blank_and_why() -> None:
    p = price(_cpu(1e-6), CPU)
    assert p.verdict == "at-ceiling" and p.efficiency == pytest.approx(0.8)
    assert p.sol_ci is None and p.sol_ci_blank == CI_NO_INTERVAL
    assert not p.unstable


def test_a_blank_row_has_no_sol_interval_and_no_interval_reason_of_its_own() -> None:
    p = price(_cpu(1e-6, (0.9e-6, 1.1e-6), bytes=None), CPU)
    assert p.verdict == "blank" and p.sol_ci is None and p.sol_ci_blank is None


@pytest.mark.parametrize("half, verdict", [(0.049, "at-ceiling"), (0.051, "unstable")])
def test_a_cpu_row_is_unstable_above_five_percent(half: float, verdict: str) -> None:
    p = price(_cpu(1e-6, (1e-6 * (1 - half / 2), 1e-6 * (1 + half))), CPU)
    assert p.verdict == verdict
    assert p.efficiency == pytest.approx(0.8)  # its SOL is shown either way
    assert bool(p.unstable) == (verdict == "unstable")
    if p.unstable:
        assert "±5 %" in p.unstable[0] and "CPU" in p.unstable[0]


@pytest.mark.parametrize("half, verdict", [(0.019, "at-ceiling"), (0.021, "unstable")])
def test_a_gpu_row_is_unstable_above_two_percent(half: float, verdict: str) -> None:
    nbytes = 900_000  # 1 µs at 0.9 TB/s: 100 %
    p = price(_gpu(1.1e-6, (1.1e-6 * (1 - half), 1.1e-6 * 1.001), bytes=nbytes), GPU)
    assert p.verdict == verdict


def test_the_wider_side_decides() -> None:
    """A lopsided interval (a slow block pulls the top up) is as unknown as its wider side."""
    p = price(_cpu(1e-6, (0.999e-6, 1.2e-6)), CPU)
    assert p.verdict == "unstable" and "+20.0 %/-0.1 %" in p.unstable[0]


def test_a_contended_row_is_unstable_whatever_its_interval_with_the_contention_named() -> None:
    cond = RowConditions(window_s=0.5, contended=True, contention=["steal 12 % of the CPUs"],
                         cpu=CpuConditions(cores=2, steal=0.12))
    p = price(_cpu(1e-6, (0.999e-6, 1.001e-6), conditions=cond), CPU)
    assert p.verdict == "unstable"
    assert p.unstable == ("contended: steal 12 % of the CPUs",)


def test_a_throttled_gpu_row_is_unstable_and_a_quiet_one_is_not() -> None:
    nbytes = 900_000
    quiet = RowConditions(window_s=0.2, gpu=GpuConditions(sm_mhz_min=1980, sm_mhz_max=1980))
    hot = RowConditions(window_s=0.2, throttled=True, thermal=True,
                        gpu=GpuConditions(sm_mhz_min=1400, sm_mhz_max=1980, clock_events=["sw_thermal_slowdown"]))
    assert price(_gpu(1.1e-6, (1.099e-6, 1.101e-6), bytes=nbytes, conditions=quiet), GPU).verdict == "at-ceiling"
    p = price(_gpu(1.1e-6, (1.099e-6, 1.101e-6), bytes=nbytes, conditions=hot), GPU)
    assert p.verdict == "unstable" and p.unstable[0].startswith("throttled (thermal)")


def test_a_power_capped_row_priced_on_a_sustained_ceiling_is_not_unstable_for_its_cap() -> None:
    """The exemption issue 28 needs: a power cap (not heat) measured against a ceiling taken under that cap."""
    capped = RowConditions(window_s=0.2, throttled=True, power_capped=True)
    hot = RowConditions(window_s=0.2, throttled=True, power_capped=True, thermal=True)
    assert throttle_unsettles(capped) and not throttle_unsettles(capped, sustained=True)
    assert throttle_unsettles(hot, sustained=True)
    assert not throttle_unsettles(RowConditions(window_s=0.2), sustained=False)
    rec = _gpu(1.1e-6, (1.099e-6, 1.101e-6), bytes=900_000, conditions=capped)
    assert unstable_reasons(rec) and not unstable_reasons(rec, sustained=True)


def test_an_unstable_row_is_an_anomaly_only_when_even_its_low_end_is_above_105_percent() -> None:
    # sol 0.8 µs; median 0.7 µs: 114 %
    certain = price(_cpu(0.7e-6, (0.69e-6, 0.74e-6)), CPU)  # low end 0.8 / 0.74 = 108 %
    assert certain.verdict == "anomaly"
    maybe = price(_cpu(0.7e-6, (0.69e-6, 0.8e-6)), CPU)  # low end 100 %
    assert maybe.verdict == "unstable"
    assert price(_cpu(0.7e-6, (0.695e-6, 0.705e-6)), CPU).verdict == "anomaly"  # a stable row: as before


def test_a_latency_bound_row_stays_latency_bound() -> None:
    prof = make_profile(latency_floor_s=1e-5)
    assert price(_cpu(1e-6, (0.5e-6, 2e-6)), prof).verdict == "latency-bound"


# ---- the physics check on the conservative end: noise can neither invent a breach nor hide one

#: The memory ceiling: 1e9 B/s theoretical (800 bytes imply it at 0.8 µs), calibrated at 80 % so it is no
#: ceiling in doubt (a calibration above 95 % of it would make a row above it "ceiling-suspect").
PHYS = make_profile(bw_calibration=0.8)


def _memory_check(p):
    (check,) = [c for c in p.checks if c.ceiling == "memory"]
    return check


def test_a_breach_carries_the_least_rate_the_row_may_imply() -> None:
    p = price(_cpu(0.5e-6, (0.45e-6, 0.6e-6)), PHYS)  # slow end 0.6 µs: 1.33e9 B/s; the level 0.5 µs: 1.6e9
    assert p.physics == "breach"
    (b,) = p.breaches
    assert b.implied_per_s == pytest.approx(800 / 0.5e-6)  # the least its tops allow: the measured level's
    assert health([p]).state == "breached"


def test_a_measured_level_above_the_ceiling_is_a_breach_whatever_a_rerun_might_read() -> None:
    """Noise only slows a call, so a level that implies 1.07x the ceiling means half the calls ran faster than
    the ceiling allows: a breach, though a rerun's level may read 0.89x (the slow end of its interval). A level
    under the ceiling whose interval reaches above it is what noise can leave undecided."""
    p = price(_cpu(0.75e-6, (0.7e-6, 0.9e-6)), PHYS)
    assert p.physics == "breach" and p.breaches[0].implied_per_s == pytest.approx(800 / 0.75e-6)
    under = price(_cpu(0.85e-6, (0.7e-6, 0.9e-6)), PHYS)  # the level 0.94x, its fast end 1.14x
    check = _memory_check(under)
    assert check.not_judged == NOT_JUDGED_NOISE and not check.breached
    h = health([under])
    assert h.ok and h.state != "held"  # not a pass either


def test_a_median_under_the_ceiling_whose_fast_end_is_above_it_is_not_a_pass() -> None:
    """Noise cannot hide a breach: the median implies 0.94x, but a rerun at the fast end would imply 1.14x."""
    p = price(_cpu(0.85e-6, (0.7e-6, 0.9e-6)), PHYS)
    assert _memory_check(p).not_judged == NOT_JUDGED_NOISE
    h = health([p])
    (memory,) = [c for c in h.ceilings if c.ceiling == "memory"]
    assert memory.state == "not-judged" and memory.not_judged == {NOT_JUDGED_NOISE: 1}
    assert h.state == "partial"  # the compute ceiling was judged and held; memory was not


def test_an_interval_wholly_under_the_ceiling_holds_and_one_without_an_interval_is_judged_on_its_median() -> None:
    assert price(_cpu(1e-6, (0.9e-6, 1.1e-6)), PHYS).physics == "held"
    assert price(_cpu(0.75e-6), PHYS).physics == "breach"  # no interval: the point rule, as before


# ---- issue 34: the fast end, which noise cannot make faster


def test_a_breach_is_judged_on_the_fast_end_however_slow_the_level() -> None:
    """Issue 34: a x1000 formula on a noisy host read NOT JUDGED (within-noise). A host that slowed most blocks
    3x leaves the level's interval straddling the ceiling, but the fastest block (0.5 µs at most, noise aside)
    implies 1.6x the ceiling: a breach, carrying the least rate the fast end implies."""
    p = price(_cpu(1.5e-6, (0.6e-6, 3e-6), level_ci_s=(0.7e-6, 2.5e-6), fast_ci_s=(0.45e-6, 0.5e-6)), PHYS)
    assert p.physics == "breach"
    (b,) = p.breaches
    assert b.implied_per_s == pytest.approx(800 / 0.5e-6)
    assert price(_cpu(1.5e-6, (0.6e-6, 3e-6), level_ci_s=(0.7e-6, 2.5e-6)), PHYS).physics == "not-judged"  # older


def test_the_fast_end_holds_a_correct_row_and_leaves_the_straddling_one_with_its_numbers() -> None:
    held = price(_cpu(1.2e-6, (1e-6, 1.5e-6), level_ci_s=(1.1e-6, 1.3e-6), fast_ci_s=(0.95e-6, 1.0e-6)), PHYS)
    assert held.physics == "held"  # even the fastest its readings allow implies 0.84x
    near = price(_cpu(1.2e-6, (1e-6, 1.5e-6), level_ci_s=(1.1e-6, 1.3e-6), fast_ci_s=(0.76e-6, 0.82e-6)), PHYS)
    check = _memory_check(near)
    assert check.not_judged == NOT_JUDGED_NOISE
    assert check.implied_per_s == pytest.approx(800 / 0.82e-6) and check.implied_most_per_s == pytest.approx(800 / 0.76e-6)
    (memory,) = [c for c in health([near]).ceilings if c.ceiling == "memory"]
    assert memory.noise_range == pytest.approx((0.8 / 0.82, 0.8 / 0.76))
    from tileops.report.summary import physics_lines

    lines = physics_lines(health([near]))
    head = next(i for i, x in enumerate(lines) if "NOT JUDGED on memory" in x)
    assert lines[head] == "physics check NOT JUDGED on memory: 1 row(s), within-noise"  # its reason on its items
    items = lines[head + 1:next(i for i in range(head + 1, len(lines)) if not lines[i].startswith("  "))]
    assert "  their fastest blocks imply 97.6%–105% of it: a breach needs the slow end above 100 %, a pass the fast " \
           "end at most 100 %" in items and any("straddle the ceiling" in x for x in items)


def test_a_fast_end_beyond_ten_times_the_ceiling_is_said_in_words() -> None:
    """Issue 34 (no absurd bounds): two blocks on a busy host gave a fast end implying 3.26e+07 % of the ceiling;
    beyond 10x the line says why in words instead of printing the number."""
    from tileops.report.summary import physics_lines

    wild = price(_cpu(1.2e-6, (1e-9, 1.5e-6), level_ci_s=(1.1e-6, 1.3e-6), fast_ci_s=(1e-12, 0.82e-6)), PHYS)
    assert _memory_check(wild).not_judged == NOT_JUDGED_NOISE
    (memory,) = [c for c in health([wild]).ceilings if c.ceiling == "memory"]
    assert memory.noise_range is not None and memory.noise_range[1] > 10
    lines = [x for x in physics_lines(health([wild])) if "their fastest blocks imply" in x]
    assert "  their fastest blocks imply 97.6%–over 1000% (too few blocks to bound the fast end within 10x) of it: " \
           "a breach needs the slow end above 100 %, a pass the fast end at most 100 %" in lines
    assert lines and not any("e+" in x for x in lines)


def test_a_compute_peak_on_a_measured_clock_needs_a_breach_to_clear_its_tolerance() -> None:
    """A peak built on a measured clock is a bound to within MEASURED_CLOCK_TOLERANCE (2 %): a row 1 % above it
    is not a formula error, 5 % above it is."""
    from tileops.profiles.model import PeakBasis
    from tileops.roofline.price import MEASURED_CLOCK_TOLERANCE

    prof = make_profile(roofs={"cpu.fp32": (1e10, 0.5)})
    basis = PeakBasis(cores=1, lanes=5, isa="x", fma_units=1, fma_table="t", fma_table_units=1, ghz=1.0,
                      ghz_source="measured", measured_ghz=1.0)
    roof = prof.compute["cpu.fp32"].model_copy(update={"peak": basis})
    prof = prof.model_copy(update={"compute": {"cpu.fp32": roof}})
    assert MEASURED_CLOCK_TOLERANCE == 0.02

    def gemm(fast: float):
        return price(_cpu(2e-6, (1.9e-6, 2.1e-6), flops=10_000, bytes=8, fast_ci_s=(fast * 0.99, fast)), prof)
    assert gemm(10_000 / 1.01e10).physics == "not-judged"  # 1 % over: within the clock's own uncertainty
    assert gemm(10_000 / 1.05e10).physics == "breach"


# ---- the interval in every output of `tileops roofline`


def _run_of(tmp_path):
    from roofline_fixtures import write_profile, write_records

    rows = [_cpu(1e-6, (0.98e-6, 1.03e-6), label="steady"), _cpu(1e-6, (0.9e-6, 1.2e-6), label="noisy"),
            _cpu(1e-6, label="old")]
    run = write_records(tmp_path / "run" / "records.jsonl", rows)
    return run.parent, write_profile(tmp_path / "p.yaml", CPU)


def _roofline(tmp_path, capsys, fmt: str) -> str:
    from tileops.cli import main

    run, prof = _run_of(tmp_path)
    assert main(["roofline", str(run), "--profile", str(prof), "--format", fmt]) == 0
    return capsys.readouterr().out


def test_json_rows_carry_sol_ci_and_why_a_row_has_none(tmp_path, capsys) -> None:
    import json

    rows = {r["label"]: r for r in json.loads(_roofline(tmp_path, capsys, "json"))["rows"]}
    assert rows["steady"]["sol_ci"] == pytest.approx([0.8 / 1.03, 0.8 / 0.98])
    assert rows["steady"]["time_ci_s"] == pytest.approx([0.98e-6, 1.03e-6])
    assert rows["steady"]["time_precision"] == pytest.approx(0.03)
    assert rows["steady"]["verdict"] == "at-ceiling" and rows["steady"]["unstable"] == []
    assert rows["noisy"]["verdict"] == "unstable" and "+20.0 %/-10.0 %" in rows["noisy"]["unstable"][0]
    assert rows["old"]["sol_ci"] is None and rows["old"]["sol_ci_blank"] == "no-interval"


def test_csv_rows_carry_sol_ci_as_json_text(tmp_path, capsys) -> None:
    import csv
    import io
    import json

    rows = {r["label"]: r for r in csv.DictReader(io.StringIO(_roofline(tmp_path, capsys, "csv")))}
    assert json.loads(rows["steady"]["sol_ci"]) == pytest.approx([0.8 / 1.03, 0.8 / 0.98])
    assert rows["old"]["sol_ci"] == "" and rows["old"]["sol_ci_blank"] == "no-interval"
    assert rows["noisy"]["unstable"].startswith("its time is known to +20.0 %/-10.0 %")


def test_the_table_and_markdown_show_the_sol_interval_and_the_summary_counts_unstable_rows(tmp_path, capsys) -> None:
    table = _roofline(tmp_path, capsys, "table")
    assert "SOL (95 % CI)" in table
    assert "77.7–81.6 %" in table  # steady: 0.8 / 1.03 .. 0.8 / 0.98
    assert "1 unstable" in table and "unstable: 1 row(s)" in table and "relu [noisy float32 torch]" in table
    md = _roofline(tmp_path, capsys, "md")
    assert "| efficiency | SOL (95 % CI) | verdict |" in md
    assert "| 80.0 % | 77.7–81.6 % | at-ceiling |" in md and "| 80.0 % | — | at-ceiling |" in md


def test_a_run_without_intervals_has_no_interval_column() -> None:
    from tileops.report import render_text

    text = render_text([price(_cpu(1e-6), CPU)], "md")
    assert "SOL (95 % CI)" not in text


def test_the_plot_draws_an_error_bar_for_each_row_with_an_interval(tmp_path) -> None:
    """Issue 26: error bars on the plot. The bar spans the achieved rate at the slow and the fast end of the
    time's interval (the SOL interval on the plot's scale); a row without an interval has none."""
    import re

    from tileops.report.plot import plot_layout, write_plot

    rows = [price(_cpu(1e-6, (0.98e-6, 1.03e-6), label="steady"), CPU),
            price(_cpu(1e-6, (0.9e-6, 1.2e-6), label="noisy"), CPU), price(_cpu(1e-6, label="old"), CPU)]
    layout = plot_layout(rows, CPU)
    bars = {q.priced.record.label: q.y_ci for q in layout.points}
    assert bars["steady"] == pytest.approx((100 / 1.03e-6, 100 / 0.98e-6))
    assert bars["noisy"][0] < bars["steady"][0] and bars["old"] is None
    svg = write_plot(rows, CPU, tmp_path)[1].read_text(encoding="utf-8")
    group = re.search(r'<g id="sol-ci">(.*?)</g>\s*</g>', svg, flags=re.S)
    assert group is not None, "no error bars drawn"
    assert re.search(r'id="points-torch-[\w-]+-unstable"', svg)  # the unstable row: hollow, its own group
    # two bars (steady, noisy), each a vertical line plus two caps
    assert len(re.findall(r"<path ", group.group(1))) + len(re.findall(r"<use ", group.group(1))) >= 2


def test_a_row_known_to_no_useful_precision_is_worded_not_bounded_by_absurd_numbers() -> None:
    """Issue 34: `a rerun within 0.001 ns–1e+09 s` and `SOL 0.0–>1000 %`. A bound further than 10x from the level
    is written in words with the reason (the JSON keeps the values); an asymmetric interval shows both sides."""
    from tileops.report.columns import ratio_interval_text, sol_ci_text
    from tileops.roofline import interval_words

    p = price(_cpu(1e-6, (1e-9, 2e-3)), CPU)
    assert p.verdict == "unstable"
    assert p.unstable[0].startswith("its time is not known to within 10x (its blocks or visits disagree by that "
                                    "much: a busy host)")
    assert sol_ci_text(p) == "not known" and p.sol_ci[1] == pytest.approx(800.0)
    few = price(_cpu(1e-6, None, level_ci_s=(0.05e-6, 20e-6), ci_df=1.4), CPU)
    assert "rests on 1 degree(s) of freedom: too few blocks" in few.unstable[0]
    assert sol_ci_text(price(_cpu(1e-6, (0.9e-6, 1.1e-6)), CPU)) == "72.7–88.9 %"
    # far above 100 % but narrow (a formula error): its numbers, not a bound
    assert sol_ci_text(price(_cpu(1e-9, (0.9e-9, 1.1e-9)), CPU)) == "72727.3–88888.9 %"
    assert interval_words(1.0, 0.9, 1.2) == "known to +20.0 %/-10.0 %"
    assert interval_words(1.0, 0.97, 1.03) == "known to ±3.0 %"
    assert interval_words(1.0, 0.97, 1.0 / 0.97) == "known to +3.1 %/-3.0 %"  # log-symmetric: wider above
    assert interval_words(1.0, 0.5, 11.0).startswith("not known to within 10x")
    assert ratio_interval_text(0.001, 2500.0) == "<0.01–>100x"
    assert ratio_interval_text(0.91, 1.08) == "0.91–1.08x"


def test_the_plots_side_table_shows_each_rows_sol_interval_beside_its_efficiency() -> None:
    from tileops.report.columns import sol_ci_text
    from tileops.report.plot import CI_HEADER, _table_lines

    noisy, old = price(_cpu(1e-6, (0.9e-6, 1.2e-6), label="noisy"), CPU), price(_cpu(1e-6, label="old"), CPU)
    lines = [text for text, _ in _table_lines([("1", noisy, None), ("2", old, None)])]
    head = lines[0].split()
    assert head[head.index("eff") + 1:head.index("eff") + 5] == CI_HEADER.split() + ["verdict"]
    assert sol_ci_text(noisy) in lines[1] and sol_ci_text(noisy) == "66.7–88.9 %"
    assert "66.7" not in lines[2]  # a row without an interval: its cell is blank
    # no row with an interval: no column
    assert CI_HEADER not in _table_lines([("2", old, None)])[0][0]


def test_the_lowest_top_judges_a_breach() -> None:
    """A row of six samples on a busy host: its jitter cannot be told, so its fast end is wide; the top of its
    level's interval and the measured level bound the noise-free time too (noise only slows a call), and the
    lowest counts. Seen on the development VM: a x1000 bytes formula, 10x the nominal at the median, read
    within-noise on its fast end alone."""
    p = price(_cpu(0.5e-6, (0.4e-6, 0.7e-6), level_ci_s=(0.45e-6, 0.6e-6), fast_ci_s=(1e-9, 5e-6)), PHYS)
    assert p.physics == "breach" and p.breaches[0].implied_per_s == pytest.approx(800 / 0.5e-6)
    # without the level interval's top, the fast end alone would have read within-noise: the level decides
    only_fast = price(_cpu(0.5e-6, level_ci_s=None, fast_ci_s=(1e-9, 5e-6)), PHYS)
    assert only_fast.physics == "breach" and only_fast.breaches[0].implied_per_s == pytest.approx(800 / 0.5e-6)


def test_intervals_on_one_degree_of_freedom_cannot_blind_the_check_and_noise_cannot_invent_a_breach() -> None:
    """Seen with another process busy on the 2-core VM: a 4 MiB copy under a x1000 bytes formula, at 303x the
    nominal by its measured level, read within-noise: two blocks left its intervals on one degree of freedom,
    the fast end's top at 1.3 s and the level's at 648599 s for a 1.4 ms call. The level itself bounds the
    noise-free time (at least half the calls ran that fast): a breach. And a slow level (noise) never makes one:
    a correct row whose level a busy host tripled is held or within-noise, never a breach."""
    wide = dict(level_ci_s=(3e-12, 648599.0), fast_ci_s=(3e-8, 1.3))
    inflated = price(_cpu(0.8e-6 / 303, (1e-12, 1e9), **wide), PHYS)
    assert inflated.physics == "breach" and inflated.breaches[0].implied_per_s == pytest.approx(800 / (0.8e-6 / 303))
    slowed = price(_cpu(3 * 0.8e-6, (1e-12, 1e9), **wide), PHYS)  # honest at 1x, measured 3x slower: no breach, however wide
    assert slowed.physics != "breach" and not slowed.breaches
