"""The few statistics the bench and the comparator judge with: Student's t, a robust scale, the variance of a
median, Welch–Satterthwaite degrees of freedom and Benjamini–Hochberg.

Why here and hand-written: the benchmark layer uses the standard library only
(spec §5.2), which has the normal distribution (``statistics.NormalDist``) but
not Student's t; scipy would be a large dependency for four functions. Each is
checked against published tables or an independent computation in
``tests/test_stats.py``.

Robust throughout. A timing's noise is one-sided and bursty (a neighbour's
slice, a page fault): a spread taken as the standard deviation is blown up by
one disturbed block, and a spread of zero hides a real one. :func:`robust_scale`
is Tukey's biweight midvariance about a centre: it starts from the MAD (50 %
breakdown) and weighs each value down smoothly with its distance, so a far
value does not move it and a value near the edge cannot make it jump.
"""

from __future__ import annotations

import math
import statistics
from functools import lru_cache
from collections.abc import Sequence

#: The MAD of a normal sample times this estimates its standard deviation.
MAD_TO_SD = 1.482602218505602
#: The biweight's tuning constant: deviations beyond this many MADs (about six standard deviations) weigh nothing.
BIWEIGHT_C = 9.0
NORMAL = statistics.NormalDist()


# -- Student's t ------------------------------------------------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom (``df`` = inf: the normal)."""
    if math.isinf(df):
        return NORMAL.cdf(t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


@lru_cache(maxsize=512)
def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`; cached,
    since a stopping rule asks for the same few after every block). ``df`` = inf: the normal's."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if math.isinf(df):
        return NORMAL.inv_cdf(p)
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def two_sided_t(confidence: float, df: float) -> float:
    """The t quantile of a two-sided interval at ``confidence``; ``df`` rounded to 0.01 (few distinct ones
    reach the cache) and held to at least 1."""
    return t_quantile(0.5 + confidence / 2.0, max(1.0, round(df, 2)) if math.isfinite(df) else df)


def t_p_value(t: float, df: float) -> float:
    """The two-sided p-value of a t statistic."""
    return 2.0 * (1.0 - t_cdf(abs(t), max(1.0, df)))


# -- robust location and scale ----------------------------------------------------------------------------


def robust_scale(values: Sequence[float], centre: float | None = None) -> float:
    """A robust standard deviation of ``values`` about ``centre`` (default: their median): Tukey's biweight
    midvariance.

    Each deviation is weighed by (1 - u^2)^2, u = deviation / (9 MAD), so values beyond about six standard
    deviations count for nothing and those between fade smoothly (a hard cut would make the scale jump as one
    value crosses it); near the standard deviation's efficiency for normal values (about 85 % at 20), with a
    finite-sample factor k / (k - 1) over the k values weighed. Fewer than two values: 0. More than half the
    values at the centre exactly (a timer's resolution): the plain standard deviation about it, since the MAD
    is zero and says nothing.
    """
    n = len(values)
    if n < 2:
        return 0.0
    c = statistics.median(values) if centre is None else centre
    dev = [v - c for v in values]
    mad = statistics.median(abs(d) for d in dev)
    if mad <= 0.0:
        return math.sqrt(sum(d * d for d in dev) / (n - 1))
    num = den = 0.0
    k = 0
    for d in dev:
        u = d / (BIWEIGHT_C * mad)
        if abs(u) < 1.0:
            w = 1.0 - u * u
            k += 1
            num += d * d * w ** 4
            den += w * (1.0 - 5.0 * u * u)
    if k < 2 or den <= 0.0:
        return MAD_TO_SD * mad
    return math.sqrt(k * num / (den * den) * k / (k - 1))


def median_variance_factor(n: int) -> float:
    """Var(median of n normal values) / sigma^2: pi / (2n + pi - 2), exact at n = 1, within 2 % for odd n >= 3
    and tending to the asymptotic pi / 2n (the median's 64 % efficiency); above the mean's 1/n, as it must be."""
    if n < 1:
        raise ValueError(f"a median needs at least one value, got {n}")
    return math.pi / (2 * n + math.pi - 2)


def ratio_interval(ratios: Sequence[float], confidence: float = 0.95) -> tuple[float, tuple[float, float] | None]:
    """The centre of positive ratios and its two-sided interval, as a visit's level is (``bench.interval``): the
    median of their logs, the biweight spread about it, the median's variance factor, Student's t with
    ``len - 1`` df; the centre and bounds back in ratio space. The paired statistic of an interleaved race (a
    ratio per block pair). The interval is None with one ratio; ValueError with none or a ratio not positive."""
    if not ratios or not all(math.isfinite(r) and r > 0 for r in ratios):
        raise ValueError(f"ratios must be one or more positive finite numbers, got {list(ratios)[:4]!r}")
    logs = [math.log(r) for r in ratios]
    centre = statistics.median(logs)
    if len(logs) < 2:
        return math.exp(centre), None
    spread = robust_scale(logs, centre)
    h = two_sided_t(confidence, len(logs) - 1) * spread * math.sqrt(median_variance_factor(len(logs)))
    return math.exp(centre), (math.exp(centre - h), math.exp(centre + h))


# -- combining and judging --------------------------------------------------------------------------------


def satterthwaite(parts: Sequence[tuple[float, float]]) -> float:
    """The Welch–Satterthwaite degrees of freedom of a sum of variance estimates ``(variance, df)``: a variance
    known with few degrees of freedom makes the sum's t quantile wide in proportion to its share. inf when every
    part with a variance is exact (inf df); 1 at least."""
    total = sum(v for v, _ in parts)
    if total <= 0:
        return math.inf
    denom = sum(v * v / df for v, df in parts if v > 0 and math.isfinite(df))
    if denom <= 0:
        return math.inf
    return max(1.0, total * total / denom)


def benjamini_hochberg(p_values: Sequence[float], q: float = 0.05) -> list[bool]:
    """Which hypotheses the Benjamini–Hochberg step-up rule rejects at false discovery rate ``q``: sort the m
    p-values, find the largest k with p_(k) <= k q / m, reject the k smallest. Under the global null (same
    code everywhere) it rejects anything at all with probability at most q."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"q must be between 0 and 1, got {q}")
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    cut = 0
    for rank, i in enumerate(order, 1):
        if p_values[i] <= rank * q / m:
            cut = rank
    out = [False] * m
    for i in order[:cut]:
        out[i] = True
    return out
