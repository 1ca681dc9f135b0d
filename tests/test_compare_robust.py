"""The noise-aware comparison (tileops.report.compare_robust) on deterministic intervals: each status and reason,
the edges (zero-width intervals, a gap under nvbench's clear gap, a side without an interval), its symmetry, and
two runs of the same code (intervals from deterministic sample blocks) that never come out slower or faster."""

from __future__ import annotations

import math
import random

import pytest

from tileops.bench.interval import rerun_interval
from tileops.report.compare_robust import REASONS, STATUSES, Side, Thresholds, classify


def side(median: float, lo: float | None = None, hi: float | None = None, **kw: object) -> Side:
    return Side(median, None if lo is None else (lo, hi), **kw)  # type: ignore[arg-type]


def test_same_code_with_tight_intervals_is_same() -> None:
    d = classify(side(1.0, 0.98, 1.02), side(1.01, 0.99, 1.03))
    assert (d.status, d.reason, d.basis) == ("same", "within-threshold", "interval")
    assert d.ratio == pytest.approx(1.01)
    assert d.ratio_interval == pytest.approx((0.99 / 1.02, 1.03 / 0.98))
    assert "inside ±10%" in d.message


def test_wide_overlapping_intervals_are_ambiguous_not_same() -> None:
    """±8 % each: the ratio may be 0.85 to 1.17, so neither a 10 % change nor its absence is shown."""
    d = classify(side(1.0, 0.92, 1.08), side(1.0, 0.92, 1.08))
    assert (d.status, d.reason) == ("ambiguous", "no-clear-gap")
    assert "re-run both" in d.message


def test_a_clear_material_gap_is_slower_or_faster() -> None:
    slower = classify(side(1.0, 0.98, 1.02), side(1.2, 1.18, 1.22))
    assert (slower.status, slower.reason) == ("slower", "clear-gap") and "+20.0 %" in slower.message
    faster = classify(side(1.2, 1.18, 1.22), side(1.0, 0.98, 1.02))
    assert (faster.status, faster.reason) == ("faster", "clear-gap")


def test_a_real_change_under_the_threshold_is_same_when_the_intervals_bound_it() -> None:
    """5 % apart, both intervals ±1 %: a real change, but the ratio is at most 7 %, under the 10 % threshold."""
    d = classify(side(1.0, 0.99, 1.01), side(1.05, 1.04, 1.06))
    assert (d.status, d.reason) == ("same", "within-threshold")
    assert d.ratio_interval is not None and d.ratio_interval[1] < 1.1


def test_apart_but_under_the_threshold_with_room_beyond_it_is_ambiguous() -> None:
    d = classify(side(0.97, 0.95, 1.0), side(1.05, 1.03, 1.12))
    assert (d.status, d.reason) == ("ambiguous", "change-under-threshold")


def test_a_gap_under_nvbenchs_clear_gap_is_not_a_change() -> None:
    """The new interval starts 0.3 % above the old one's end: nvbench's clear gap is 0.5 %."""
    d = classify(side(0.995, 0.99, 1.0), side(1.15, 1.003, 1.2))
    assert (d.status, d.reason) == ("ambiguous", "no-clear-gap")
    assert classify(side(0.995, 0.99, 1.0), side(1.15, 1.003, 1.2),
                    Thresholds(clear_gap=0.002, threshold=0.0)).status == "slower"


def test_a_gap_whose_near_ends_allow_a_change_under_the_threshold_is_not_shown() -> None:
    """Apart, 21 % at the medians, but the near ends allow 6 %: a change, not shown to be a material one (a
    same-code rerun on a shared VM read so)."""
    d = classify(side(1.0, 0.98, 1.02), side(1.21, 1.08, 1.40))
    assert (d.status, d.reason) == ("ambiguous", "change-under-threshold") and "not shown to reach 10%" in d.message
    assert classify(side(1.0, 0.98, 1.02), side(1.21, 1.13, 1.40)).status == "slower"  # 1.13 / 1.02 >= 1.1
    assert classify(side(1.21, 1.08, 1.40), side(1.0, 0.98, 1.02)).status == "ambiguous"  # and so the other way


@pytest.mark.parametrize("old, new, threshold, status", [
    ((1.0, 1.0, 1.0), (1.0, 1.0, 1.0), 0.10, "same"),
    ((1.0, 1.0, 1.0), (1.2, 1.2, 1.2), 0.10, "slower"),
    ((1.2, 1.2, 1.2), (1.0, 1.0, 1.0), 0.10, "faster"),
    ((1.0, 1.0, 1.0), (1.05, 1.05, 1.05), 0.10, "same"),  # apart, and exactly 5 %: under the threshold
    ((1.0, 1.0, 1.0), (1.0, 1.0, 1.0), 0.0, "same"),  # a zero threshold still calls equal points same
    ((1.0, 1.0, 1.0), (1.01, 1.01, 1.01), 0.0, "slower"),  # ... and any clear gap a change
    ((1.0, 1.0, 1.0), (1.0, 0.9, 1.1), 0.10, "ambiguous"),  # one zero-width side inside a wide one
])
def test_zero_width_intervals(old: tuple, new: tuple, threshold: float, status: str) -> None:
    assert classify(side(*old), side(*new), Thresholds(threshold=threshold)).status == status


def test_a_side_without_an_interval_takes_the_old_point_rule_or_is_ambiguous() -> None:
    for new, status in ((1.2, "slower"), (0.85, "faster"), (1.05, "same"), (0.95, "same")):
        d = classify(side(1.0), side(new, new * 0.99, new * 1.01))
        assert (d.status, d.reason, d.basis, d.ratio_interval) == (status, "point-rule", "point", None)
        assert "baseline has no interval" in d.message
    d = classify(side(1.0, 0.99, 1.01), side(1.2))
    assert d.status == "slower" and "new run has no interval" in d.message
    d = classify(side(1.0), side(1.2), Thresholds(missing="ambiguous"))
    assert (d.status, d.reason) == ("ambiguous", "missing-interval") and "re-run" in d.message


def test_a_disturbed_slower_side_makes_a_gap_ambiguous() -> None:
    busy = "contended: other processes used 40% of the CPUs"
    d = classify(side(1.0, 0.98, 1.02), side(1.3, 1.28, 1.32, disturbed=busy))
    assert (d.status, d.reason) == ("ambiguous", "disturbed") and busy in d.message and "new run" in d.message
    # a disturbed baseline does not explain a slower new run ...
    assert classify(side(1.0, 0.98, 1.02, disturbed=busy), side(1.3, 1.28, 1.32)).status == "slower"
    # ... but may explain a faster one
    d = classify(side(1.3, 1.28, 1.32, disturbed=busy), side(1.0, 0.98, 1.02))
    assert (d.status, d.reason) == ("ambiguous", "disturbed") and "baseline" in d.message


def test_clocks_on_both_sides_must_confirm_the_gap_in_cycles() -> None:
    """20 % slower in time, but the SM clock fell from 1980 to 1600 MHz: in cycles it is 3 % faster."""
    d = classify(side(1.0, 0.98, 1.02, sm_mhz=1980), side(1.2, 1.18, 1.22, sm_mhz=1600))
    assert (d.status, d.reason) == ("ambiguous", "clocks-explain-gap") and "1980 to 1600 MHz" in d.message
    same_clock = classify(side(1.0, 0.98, 1.02, sm_mhz=1980), side(1.2, 1.18, 1.22, sm_mhz=1980))
    assert (same_clock.status, same_clock.reason) == ("slower", "clear-gap-in-cycles")
    faster = classify(side(1.2, 1.18, 1.22, sm_mhz=1600), side(1.0, 0.98, 1.02, sm_mhz=1600))
    assert (faster.status, faster.reason) == ("faster", "clear-gap-in-cycles")
    one_side = classify(side(1.0, 0.98, 1.02), side(1.2, 1.18, 1.22, sm_mhz=1600))
    assert (one_side.status, one_side.reason) == ("slower", "clear-gap")  # a CPU row or an older record


@pytest.mark.parametrize("make", [
    lambda: Side(0.0), lambda: Side(math.nan), lambda: Side(-1.0), lambda: Side(1.0, (1.1, 1.2)),
    lambda: Side(1.0, (0.0, 1.2)), lambda: Side(1.0, (0.9, math.inf)), lambda: Side(1.0, sm_mhz=0.0),
    lambda: Thresholds(threshold=-0.1), lambda: Thresholds(missing="guess")])  # type: ignore[arg-type]
def test_nonsense_is_refused(make: object) -> None:
    with pytest.raises(ValueError):
        make()  # type: ignore[operator]


def test_the_decision_is_symmetric_and_every_reason_is_known() -> None:
    """Swapping baseline and new run swaps slower and faster and keeps same and ambiguous, on a grid of random
    intervals (seeded)."""
    rng = random.Random(5)
    swap = {"slower": "faster", "faster": "slower", "same": "same", "ambiguous": "ambiguous"}
    seen = set()
    for _ in range(400):
        sides = []
        for _ in range(2):
            m = math.exp(rng.uniform(-0.3, 0.3))
            sides.append(side(m, m * math.exp(-rng.uniform(0, 0.1)), m * math.exp(rng.uniform(0, 0.1))))
        a, b = classify(*sides), classify(*reversed(sides))
        assert b.status == swap[a.status] and a.reason == b.reason and a.reason in REASONS and a.status in STATUSES
        seen.add(a.status)
    assert seen == set(STATUSES)


def test_two_runs_of_the_same_code_are_never_slower_or_faster() -> None:
    """Pairs of runs drawn from one stationary row (lognormal samples, 3 % noise, blocks of 10) with their rerun
    intervals: 200 comparisons, none slower or faster; most same."""
    rng = random.Random(2)

    def run() -> Side:
        blocks = [[1e-3 * math.exp(rng.gauss(0, 0.03)) for _ in range(10)] for _ in range(12)]
        iv = rerun_interval(blocks)
        assert iv is not None
        return Side(iv.median_s, iv.pair)

    got = [classify(run(), run()).status for _ in range(200)]
    assert got.count("slower") == got.count("faster") == 0
    assert got.count("same") > 150
