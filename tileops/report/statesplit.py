"""Which SOL moved: a row's change against a baseline split into the device's and the kernel's (issue 39).

A row's time ratio between two runs is the product of two factors, exactly in
log space: the device's (its reference probe read slower or faster: the
probe's time per unit of work, ``1 / probe_ratio``) and the kernel's own (its
time on the calibrated device, ``actual_time × probe_ratio``, which moves with
SOL against the device's state, ``tileops.roofline.state``). Each factor is
decided on its own by the W4-A comparator (``tileops.report.compare_robust``):
its level and interval on both sides, Benjamini–Hochberg over the comparison's
rows, the threshold. The device's factor skips the comparator's shared-shift
step: every row moving together is what a slower device looks like, and the
probe measures it. So "the device is slower now (probe −15 %)" and "the kernel's
own efficiency changed (−12 %)" are each a verdict with an interval.

A side's kernel factor has the interval of its time and its probe ratio added
in quadrature in log space (their errors are positively correlated: the sum
overstates it, never hides a change), with Welch–Satterthwaite's degrees of
freedom.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from collections.abc import Sequence

from tileops.roofline import Priced
from tileops.roofline.state import chosen_probe, quotient_interval
from tileops.report.compare_robust import CONFIDENCE, Decision, Side, Thresholds, classify_all
from tileops.stats import satterthwaite, two_sided_t

#: What one run keeps of a row for the split: the probe's kind, the device's side (the probe's time per unit of
#: work, relative to the calibration) and the kernel's (its time on the calibrated device).
StateSides = tuple[str, Side, Side]


def state_sides(p: Priced, time_s: float, time_ci: tuple[float, float] | None, time_df: float,
                disturbed: str | None) -> StateSides | None:
    """A priced row's two factors as comparator sides; None where it has no probe ratio with an interval."""
    ratio, rci = p.probe_ratio, p.probe_ratio_ci
    rate = chosen_probe(p.record, p.bound)
    level = rate.level() if rate is not None else None
    if ratio is None or rci is None or level is None or p.probe_kind is None or not ratio > 0:
        return None
    device = Side(1.0 / ratio, (1.0 / rci[1], 1.0 / rci[0]), level.df)
    kernel_s = time_s * ratio
    if time_ci is None:
        kernel = Side(kernel_s, None, time_df, None, disturbed)
    else:
        lo, hi = quotient_interval(kernel_s, time_ci, 1.0 / ratio, (1.0 / rci[1], 1.0 / rci[0]))
        t = two_sided_t(CONFIDENCE, time_df)
        r = two_sided_t(CONFIDENCE, level.df)
        se_t = max(math.log(time_ci[1] / time_s), math.log(time_s / time_ci[0])) / t
        se_r = max(math.log(rci[1] / ratio), math.log(ratio / rci[0])) / r
        df = satterthwaite([(se_t * se_t, time_df), (se_r * se_r, level.df)])
        kernel = Side(kernel_s, (min(lo, kernel_s), max(hi, kernel_s)), df, None, disturbed)
    return p.probe_kind, device, kernel


@dataclass(frozen=True)
class StateSplit:
    """A row's change split in two: the device's (from its probe) and the kernel's own, each decided."""

    probe_kind: str
    device: Decision  # on the probe's time per unit of work: ``slower`` = the device is slower now
    kernel: Decision  # on the kernel's time on the calibrated device: ``slower`` = its own efficiency fell

    @property
    def probe_change(self) -> float:
        """The probe's rate now over the baseline's, minus 1 (−0.15: the device runs 15 % slower)."""
        return 1.0 / self.device.ratio - 1.0

    @property
    def probe_change_ci(self) -> tuple[float, float] | None:
        ci = self.device.ratio_interval
        return None if ci is None else (1.0 / ci[1] - 1.0, 1.0 / ci[0] - 1.0)

    @property
    def kernel_change(self) -> float:
        """SOL against the device's state now over the baseline's, minus 1 (−0.12: the kernel's own efficiency
        fell 12 %)."""
        return 1.0 / self.kernel.ratio - 1.0

    @property
    def kernel_change_ci(self) -> tuple[float, float] | None:
        ci = self.kernel.ratio_interval
        return None if ci is None else (1.0 / ci[1] - 1.0, 1.0 / ci[0] - 1.0)

    def describe(self) -> str:
        """The split in words, each part with its interval and the comparator's verdict."""
        return (f"{_device_words(self)}; {_kernel_words(self)}")

    def as_dict(self) -> dict[str, Any]:
        return {"probe_kind": self.probe_kind,
                "device": {"change": self.probe_change, "change_ci": _list(self.probe_change_ci),
                           "verdict": self.device.status, "reason": self.device.reason,
                           "p_value": self.device.p_value},
                "kernel": {"change": self.kernel_change, "change_ci": _list(self.kernel_change_ci),
                           "verdict": self.kernel.status, "reason": self.kernel.reason,
                           "p_value": self.kernel.p_value}}


def _list(ci: tuple[float, float] | None) -> list[float] | None:
    return None if ci is None else list(ci)


def _pct_ci(change: float, ci: tuple[float, float] | None) -> str:
    inner = f"{change * 100:+.1f} %"
    if ci is not None:
        inner += f", 95 % CI {ci[0] * 100:+.1f} to {ci[1] * 100:+.1f} %"
    return inner


_DEVICE = {"slower": "the device is slower now", "faster": "the device is faster now",
           "same": "the device is the same", "ambiguous": "the device's change is not decided",
           "unjudged": "the device's change is unjudged"}
_KERNEL = {"slower": "the kernel's own efficiency fell", "faster": "the kernel's own efficiency rose",
           "same": "the kernel's own efficiency is the same", "ambiguous": "the kernel's own change is not decided",
           "unjudged": "the kernel's own change is unjudged"}


def _device_words(s: StateSplit) -> str:
    return f"{_DEVICE[s.device.status]} ({s.probe_kind} probe {_pct_ci(s.probe_change, s.probe_change_ci)}: " \
           f"{s.device.reason})"


def _kernel_words(s: StateSplit) -> str:
    return f"{_KERNEL[s.kernel.status]} ({_pct_ci(s.kernel_change, s.kernel_change_ci)}: {s.kernel.reason})"


def split_all(pairs: Sequence[tuple[StateSides, StateSides]], thresholds: Thresholds) -> list[StateSplit | None]:
    """Each ``(old, new)`` row's split, its significance corrected over the rows: the device's factors over one
    family, the kernel's over another. A row whose two runs read different probe kinds has none."""
    same = [old[0] == new[0] for old, new in pairs]
    kept = [pair for pair, ok in zip(pairs, same) if ok]
    devices = classify_all([(o[1], n[1]) for o, n in kept], thresholds, shared_shift=False) if kept else []
    kernels = classify_all([(o[2], n[2]) for o, n in kept], thresholds) if kept else []
    out: list[StateSplit | None] = []
    it = iter(zip(kept, devices, kernels))
    for ok in same:
        if not ok:
            out.append(None)
            continue
        (old, _), device, kernel = next(it)
        out.append(StateSplit(old[0], device, kernel))
    return out
