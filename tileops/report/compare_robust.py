"""Did a row get slower? Decide from both runs' median intervals: ``same``, ``faster``, ``slower`` or ``ambiguous``.

Why intervals. A comparison of two medians at a fixed 10 % calls every row of a
busy host "slower" (issue 26 saw 1.26–2.87x on rows whose code had not
changed), and a fleet that pages on it learns to ignore it. Each side now
carries the interval a rerun of it falls in (``tileops.bench.interval``): two
runs of the same code overlap, so a change must show as a gap between them.

The anchor is nvbench's ``nvbench-compare-robust`` (github.com/NVIDIA/nvbench at
66212f1: ``python/scripts/nvbench_compare_robust.py``, ``docs/nvbench_compare_robust.md``),
whose logic this follows:

* start from *ambiguous* and upgrade only on evidence;
* *faster*/*slower* only on a **clear gap**: the intervals do not overlap and the
  gap is at least ``clear_gap`` of the nearer end (its
  ``compare_intervals_for_clear_gap``: ``(cmp.lower - ref.upper) / ref.upper >=
  clear_gap.relative``, default 0.005);
* a gap is **confirmed in cycle space** where both sides know their SM clock (its
  ``confirm_clear_gap_with_clock_rate``: each interval scaled by its clock; the
  same decision must come out, or the clocks explain the gap and it is
  ambiguous);
* an interval that is missing makes the row ambiguous (its ``missing_interval``).

Where this differs, and why:

* **The threshold is materiality.** ``threshold`` (the ``--threshold`` of
  ``tileops roofline --baseline``, default 10 %) is the smallest change that
  matters. *slower* needs a clear gap **and** even the least ratio the intervals
  allow (``new.lo / old.hi``) at least ``1 + threshold``; *faster* the same the
  other way (symmetric in ratio): the dual of *same* below. A gap whose near
  ends allow a change under the threshold is ambiguous (a same-code rerun on a
  shared VM showed 1.21x at the medians and 1.06x at the near ends). nvbench has no such knob (its
  ``--threshold-diff`` filters the display only): a fleet does not page on a
  real 2 % change.
* **same is an equivalence, not an overlap.** nvbench's summary *SAME* needs
  centres within 0.5 %, intervals overlapping by half the narrower, and noise
  under 2 %; its intervals are the observed range ``[min, q3]``. Ours cover a
  rerun, so the question is what change they still allow: the ratio
  new / old lies in ``[new.lo / old.hi, new.hi / old.lo]``, and the row is *same*
  when that whole range lies within ``[1 / (1 + threshold), 1 + threshold]``:
  whatever changed, it changed by less than the threshold. Intervals too wide to
  rule that out leave the row *ambiguous*, never *same*.
* **A disturbed side cannot be blamed on the code.** Where the slower side's
  row was contended or throttled (``tileops.bench.sensors``), a clear gap is
  *ambiguous*: the neighbour or the power cap may be the cause (the same reason
  nvbench confirms gaps in cycles).
* **Clocks where both sides have them.** CPU rows and older records have none;
  nvbench calls such a gap ambiguous, which would make every CPU comparison
  ambiguous, so without clocks on both sides the timing decides.
* **Records without intervals** (written before intervals existed):
  ``missing="point"`` (the default) applies the old point rule on the medians
  (slower above ``1 + threshold``, faster below ``1 - threshold``) and says so
  (``basis="point"``), so an old baseline still compares; ``missing="ambiguous"``
  is nvbench's choice.

Pure functions over numbers, standard library only: the baseline comparison and
the alert rules' documentation read the same decision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Status = Literal["same", "faster", "slower", "ambiguous"]
STATUSES: tuple[Status, ...] = ("same", "faster", "slower", "ambiguous")

#: Every reason a decision gives: faster/slower on ``clear-gap``(``-in-cycles``); same on ``within-threshold``;
#: ambiguous on the rest; ``point-rule`` (any of same, faster, slower) where a side has no interval.
REASONS = ("clear-gap", "clear-gap-in-cycles", "within-threshold", "point-rule", "missing-interval", "disturbed",
           "clocks-explain-gap", "change-under-threshold", "no-clear-gap")

DEFAULT_THRESHOLD = 0.10
#: nvbench-compare-robust's default ``clear_gap.relative``.
DEFAULT_CLEAR_GAP = 0.005


@dataclass(frozen=True)
class Side:
    """One run's row: its median, the interval a rerun's median falls in, its SM clock, what disturbed it."""

    median_s: float
    ci_s: tuple[float, float] | None = None
    sm_mhz: float | None = None  # the SM clock during the row (GPU rows; None on a CPU or when unknown)
    disturbed: str | None = None  # why the row's time is not the device's own (contended, throttled), or None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.median_s) and self.median_s > 0):
            raise ValueError(f"a median must be a positive finite time, got {self.median_s!r}")
        if self.ci_s is not None:
            lo, hi = self.ci_s
            if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= self.median_s <= hi):
                raise ValueError(f"an interval must hold its median within positive finite bounds, got {self.ci_s!r} "
                                 f"around {self.median_s!r}")
        if self.sm_mhz is not None and not (math.isfinite(self.sm_mhz) and self.sm_mhz > 0):
            raise ValueError(f"an SM clock must be a positive number of MHz, got {self.sm_mhz!r}")


@dataclass(frozen=True)
class Thresholds:
    threshold: float = DEFAULT_THRESHOLD  # the smallest change that matters (0.10 = 10 %)
    clear_gap: float = DEFAULT_CLEAR_GAP  # the least gap between non-overlapping intervals that counts
    missing: Literal["point", "ambiguous"] = "point"  # a side without an interval: the old point rule, or ambiguous

    def __post_init__(self) -> None:
        if not (self.threshold >= 0 and self.clear_gap >= 0):
            raise ValueError(f"threshold and clear_gap must be >= 0 (fractions: 0.10 = 10 %), got "
                             f"{self.threshold} and {self.clear_gap}")
        if self.missing not in ("point", "ambiguous"):
            raise ValueError(f"missing must be 'point' or 'ambiguous', got {self.missing!r}")


@dataclass(frozen=True)
class Decision:
    status: Status
    reason: str  # a short code (REASONS)
    message: str  # the same for a person, with the numbers
    ratio: float  # new median / old median (> 1: slower)
    ratio_interval: tuple[float, float] | None  # what the intervals allow the ratio to be; None on the point rule
    basis: Literal["interval", "point"] = "interval"


def _gap(lower_side_hi: float, upper_side_lo: float, clear_gap: float) -> bool:
    """The upper interval starts at least ``clear_gap`` above the lower one's end (nvbench's symmetric ratio)."""
    return upper_side_lo > lower_side_hi and (upper_side_lo - lower_side_hi) / lower_side_hi >= clear_gap


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def classify(old: Side, new: Side, thresholds: Thresholds = Thresholds()) -> Decision:
    """``new`` against ``old`` (the baseline)."""
    t = thresholds
    ratio = new.median_s / old.median_s
    if old.ci_s is None or new.ci_s is None:
        which = "baseline" if old.ci_s is None else "new run"
        if t.missing == "ambiguous":
            return Decision("ambiguous", "missing-interval", f"the {which} has no interval (recorded before "
                            "intervals existed): re-run it", ratio, None)
        status: Status = "slower" if ratio > 1 + t.threshold else "faster" if ratio < 1 - t.threshold else "same"
        return Decision(status, "point-rule", f"{_pct(ratio - 1)} on the medians alone: the {which} has no interval "
                        f"(the point rule at {t.threshold:.0%})", ratio, None, basis="point")
    (olo, ohi), (nlo, nhi) = old.ci_s, new.ci_s
    allowed = (nlo / ohi, nhi / olo)
    material = 1 + t.threshold
    direction: Status | None = None
    # A change is shown when the intervals are apart and even the least change they allow is material: a gap
    # whose ratio could still be under the threshold (1.21x at the medians, 1.06x at the near ends) is not.
    if _gap(ohi, nlo, t.clear_gap) and allowed[0] >= material:
        direction = "slower"
    elif _gap(nhi, olo, t.clear_gap) and 1 / allowed[1] >= material:
        direction = "faster"
    if direction is not None:
        worse = new if direction == "slower" else old
        if worse.disturbed:
            which = "new run" if direction == "slower" else "baseline"
            return Decision("ambiguous", "disturbed", f"{_pct(ratio - 1)}, but the slower side (the {which}) was "
                            f"disturbed ({worse.disturbed}): the cause may be that, not the code", ratio, allowed)
        if old.sm_mhz is not None and new.sm_mhz is not None:
            so, sn = old.sm_mhz, new.sm_mhz
            in_cycles = (_gap(ohi * so, nlo * sn, t.clear_gap) if direction == "slower"
                         else _gap(nhi * sn, olo * so, t.clear_gap))
            if not in_cycles or (ratio * sn / so if direction == "slower" else so / (ratio * sn)) < material:
                return Decision("ambiguous", "clocks-explain-gap", f"{_pct(ratio - 1)} in time, but the SM clock went "
                                f"from {so:.0f} to {sn:.0f} MHz: in cycles the change is "
                                f"{_pct(ratio * sn / so - 1)}, not a clear {t.threshold:.0%}", ratio, allowed)
            return Decision(direction, "clear-gap-in-cycles", f"{_pct(ratio - 1)}: the intervals are apart, in time "
                            f"and in cycles ({so:.0f} and {sn:.0f} MHz)", ratio, allowed)
        return Decision(direction, "clear-gap", f"{_pct(ratio - 1)}: the intervals are apart (the ratio lies in "
                        f"{allowed[0]:.3f}–{allowed[1]:.3f})", ratio, allowed)
    if allowed[0] >= 1 / material and allowed[1] <= material:
        return Decision("same", "within-threshold", f"{_pct(ratio - 1)}; the intervals allow "
                        f"{_pct(allowed[0] - 1)} to {_pct(allowed[1] - 1)}, inside ±{t.threshold:.0%}", ratio, allowed)
    apart = _gap(ohi, nlo, t.clear_gap) or _gap(nhi, olo, t.clear_gap)
    if apart:
        return Decision("ambiguous", "change-under-threshold", f"{_pct(ratio - 1)}: the intervals are apart, but "
                        f"they allow {_pct(allowed[0] - 1)} to {_pct(allowed[1] - 1)}: a change, not shown to reach "
                        f"{t.threshold:.0%}", ratio, allowed)
    return Decision("ambiguous", "no-clear-gap", f"{_pct(ratio - 1)}: the intervals are not apart, and allow "
                    f"{_pct(allowed[0] - 1)} to {_pct(allowed[1] - 1)}: neither a change of {t.threshold:.0%} nor "
                    "its absence is shown; re-run both with more time (--max-time) or on a quieter host", ratio,
                    allowed)
