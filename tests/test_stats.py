"""The statistics the bench and the comparator judge with (tileops.stats), against published tables and
independent computations."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from tileops.stats import (benjamini_hochberg, median_variance_factor, robust_scale, satterthwaite, t_cdf,
                                 t_p_value, t_quantile, two_sided_t)


@pytest.mark.parametrize("df, expected", [(1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (9, 2.2622),
                                          (30, 2.0423), (1000, 1.9623)])
def test_t_quantile_matches_the_table(df: int, expected: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=2e-4)
    assert t_quantile(0.025, df) == pytest.approx(-expected, abs=2e-4)
    assert two_sided_t(0.95, df) == pytest.approx(expected, abs=2e-4)


def test_t_quantile_tends_to_the_normal_and_refuses_nonsense() -> None:
    assert t_quantile(0.975, 1e6) == pytest.approx(statistics.NormalDist().inv_cdf(0.975), abs=1e-4)
    assert t_quantile(0.975, math.inf) == pytest.approx(1.959964, abs=1e-6)
    assert t_quantile(0.5, 7) == pytest.approx(0.0, abs=1e-9)
    # a fractional df, checked against the density integrated by Simpson's rule
    df, q = 2.5, t_quantile(0.975, 2.5)
    pdf = lambda t: math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi) * (
        1 + t * t / df) ** (-(df + 1) / 2)
    n, h = 2000, q / 2000
    area = (pdf(0) + pdf(q) + sum((4 if i % 2 else 2) * pdf(i * h) for i in range(1, n))) * h / 3
    assert 0.5 + area == pytest.approx(0.975, abs=1e-6)
    for p, df in ((0.0, 3), (1.0, 3), (0.9, 0)):
        with pytest.raises(ValueError):
            t_quantile(p, df)


def test_p_values_invert_the_quantiles() -> None:
    for df in (1, 4, 30, math.inf):
        assert t_p_value(two_sided_t(0.95, df), df) == pytest.approx(0.05, abs=1e-6)
        assert t_p_value(-two_sided_t(0.99, df), df) == pytest.approx(0.01, abs=1e-6)
    assert t_cdf(0.0, 5) == pytest.approx(0.5)


def test_robust_scale_is_the_sd_for_normal_values_and_ignores_a_far_one() -> None:
    rng = random.Random(3)
    xs = [rng.gauss(10.0, 2.0) for _ in range(4000)]
    assert robust_scale(xs) == pytest.approx(2.0, rel=0.05)
    small = [rng.gauss(0.0, 1.0) for _ in range(20)]
    with_far = small + [1e6]
    assert robust_scale(with_far) == pytest.approx(robust_scale(small), rel=0.25)  # statistics.stdev: ~2e5
    assert robust_scale([1.0]) == 0.0
    assert robust_scale([1.0, 3.0]) == pytest.approx(statistics.stdev([1.0, 3.0]), rel=0.06)  # the biweight: 5 % over
    # more than half the values at the centre (a timer's resolution): the plain sd about it, never 0
    assert robust_scale([5.0, 5.0, 5.0, 6.0]) == pytest.approx(math.sqrt(1 / 3))


def test_robust_scale_moves_smoothly_as_a_value_nears_the_edge() -> None:
    """No hard cut: a value drifting outwards changes the scale by small steps (a jump would make a row's width
    leap when one block crosses a line)."""
    base = [-1.0, -0.5, 0.0, 0.5, 1.0]
    scales = [robust_scale(base + [x]) for x in [i * 0.05 for i in range(0, 200)]]
    steps = [abs(b - a) for a, b in zip(scales, scales[1:])]
    assert max(steps) < 0.05 * max(scales)


def test_median_variance_factor() -> None:
    assert median_variance_factor(1) == pytest.approx(1.0)
    assert median_variance_factor(3) == pytest.approx(0.449, rel=0.03)  # the exact value for n = 3
    assert median_variance_factor(1000) * 1000 == pytest.approx(math.pi / 2, rel=0.01)
    assert all(median_variance_factor(n) > 1 / n for n in range(2, 50))
    rng = random.Random(5)
    meds = [statistics.median(rng.gauss(0, 1) for _ in range(9)) for _ in range(20000)]
    assert statistics.pvariance(meds) == pytest.approx(median_variance_factor(9), rel=0.05)
    with pytest.raises(ValueError):
        median_variance_factor(0)


def test_satterthwaite() -> None:
    assert satterthwaite([(1.0, 10.0)]) == pytest.approx(10.0)
    assert satterthwaite([(1.0, 10.0), (1.0, 10.0)]) == pytest.approx(20.0)
    assert satterthwaite([(1.0, 10.0), (1.0, 1.0)]) == pytest.approx(4 / 1.1)  # the poorly known part dominates
    assert satterthwaite([(1.0, math.inf)]) == math.inf
    assert satterthwaite([(0.0, 3.0)]) == math.inf
    assert satterthwaite([(1.0, 0.5)]) == 1.0  # held to one


def test_benjamini_hochberg() -> None:
    # the textbook example: m = 5, q = 0.05: thresholds 0.01, 0.02, 0.03, 0.04, 0.05
    assert benjamini_hochberg([0.001, 0.015, 0.9, 0.028, 0.5]) == [True, True, False, True, False]
    assert benjamini_hochberg([0.02, 0.03]) == [True, True]  # 0.03 <= 2 * 0.05 / 2 lifts both
    assert benjamini_hochberg([0.04, 0.9]) == [False, False]  # 0.04 > 0.05 / 2
    assert benjamini_hochberg([]) == []
    with pytest.raises(ValueError):
        benjamini_hochberg([0.1], q=0.0)
    # under the global null it rejects anything at all in about q of the runs, however many rows
    rng = random.Random(11)
    any_rejected = sum(any(benjamini_hochberg([rng.random() for _ in range(50)])) for _ in range(4000))
    assert any_rejected / 4000 == pytest.approx(0.05, abs=0.015)
