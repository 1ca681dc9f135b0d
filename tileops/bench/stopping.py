"""The stop reasons every rule reports, the sample statistics a record keeps, and the back-to-back rule.

The bench stops a visit of a row on how well its blocks of samples, spread over
the visit, know its level (``tileops.bench.interval.BlockRule``). Before blocks,
the bench used :class:`StoppingRule`: the relative half-width of a
distribution-free ~95 % confidence interval of the median over samples taken
back to back (order statistics, so a few preempted repetitions do not inflate
it). That interval says how well one stretch of time knows its own median and
shrinks as 1/sqrt(n) however little it says about a rerun (issue 26: rows that
stopped at ±1 % moved 25–37 % between repeats). It stays here as the baseline
the development of the block plan compared the blocks with; nothing in the
bench uses it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from collections.abc import Sequence

NOISE_REACHED = "median precision reached"
TIME_CAP = "time cap"
SAMPLE_CAP = "sample cap"


@dataclass(frozen=True)
class StoppingRule:
    target_precision: float = 0.01  # relative half-width of the median's ~95 % confidence interval
    min_time_s: float = 0.05
    max_time_s: float = 1.0
    min_samples: int = 10
    max_samples: int = 2000
    warmup_s: float = 0.01  # untimed calls after the first (checked) one, stopped by time

    def decide(self, samples: Sequence[float], elapsed_s: float) -> str | None:
        """The reason to stop now, or None to keep sampling."""
        n = len(samples)
        if n >= self.max_samples:
            return SAMPLE_CAP
        if elapsed_s >= self.max_time_s and n >= 1:
            return TIME_CAP
        if n >= max(2, self.min_samples) and elapsed_s >= self.min_time_s \
                and median_precision(samples) <= self.target_precision:
            return NOISE_REACHED
        return None


def median_precision(samples: Sequence[float]) -> float:
    """Relative half-width of a distribution-free ~95 % confidence interval of the median.

    The interval runs between the order statistics of ranks n/2 -+ 0.98 sqrt(n)
    (the binomial bound with z = 1.96); infinite below two samples.
    """
    n = len(samples)
    if n < 2:
        return math.inf
    s = sorted(samples)
    half = 0.98 * math.sqrt(n)
    lo = max(0, math.floor(n / 2 - half) - 1)
    hi = min(n - 1, math.ceil(n / 2 + half))
    med = statistics.median(s)
    return (s[hi] - s[lo]) / (2 * med) if med > 0 else math.inf


def rel_noise(samples: Sequence[float]) -> float:
    """Relative standard deviation (stdev / mean); 0 for fewer than two samples."""
    if len(samples) < 2:
        return 0.0
    mean = statistics.fmean(samples)
    return statistics.stdev(samples) / mean if mean > 0 else 0.0


#: The CPU preset the bench used before blocks (the benchmark's baseline).
CPU_RULE = StoppingRule(target_precision=0.01, min_time_s=0.05, max_time_s=0.75, min_samples=10, warmup_s=0.01)


def quantile(sorted_samples: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted samples."""
    if not sorted_samples:
        raise ValueError("no samples")
    pos = (len(sorted_samples) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_samples) - 1)
    return sorted_samples[lo] + (sorted_samples[hi] - sorted_samples[lo]) * (pos - lo)
