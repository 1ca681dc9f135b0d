"""When to stop timing a row: a noise-based rule, as nvbench uses.

Stop when the relative standard deviation of the samples is under a target
and both a minimum time and a minimum sample count have passed; otherwise stop
at a time cap or a sample cap. The achieved noise is recorded either way, so a
row that hit the cap says how noisy it was instead of pretending to precision.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

NOISE_REACHED = "noise target reached"
TIME_CAP = "time cap"
SAMPLE_CAP = "sample cap"


@dataclass(frozen=True)
class StoppingRule:
    target_rel_noise: float = 0.02
    min_time_s: float = 0.2
    max_time_s: float = 2.0
    min_samples: int = 5
    max_samples: int = 2000

    def decide(self, samples: Sequence[float], elapsed_s: float) -> str | None:
        """The reason to stop now, or None to keep sampling."""
        n = len(samples)
        if n >= self.max_samples:
            return SAMPLE_CAP
        if elapsed_s >= self.max_time_s and n >= 1:
            return TIME_CAP
        if n >= max(2, self.min_samples) and elapsed_s >= self.min_time_s \
                and rel_noise(samples) <= self.target_rel_noise:
            return NOISE_REACHED
        return None


def rel_noise(samples: Sequence[float]) -> float:
    """Relative standard deviation (stdev / mean); 0 for fewer than two samples."""
    if len(samples) < 2:
        return 0.0
    mean = statistics.fmean(samples)
    return statistics.stdev(samples) / mean if mean > 0 else 0.0


CPU_RULE = StoppingRule(target_rel_noise=0.03, min_time_s=0.15, max_time_s=1.5, min_samples=5)
GPU_RULE = StoppingRule(target_rel_noise=0.005, min_time_s=0.5, max_time_s=10.0, min_samples=10)
QUICK_RULE = StoppingRule(target_rel_noise=0.10, min_time_s=0.02, max_time_s=0.3, min_samples=3)


def quantile(sorted_samples: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted samples."""
    if not sorted_samples:
        raise ValueError("no samples")
    pos = (len(sorted_samples) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_samples) - 1)
    return sorted_samples[lo] + (sorted_samples[hi] - sorted_samples[lo]) * (pos - lo)
