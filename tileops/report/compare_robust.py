"""Did a row get slower? Decide from both runs' levels and their intervals: ``same``, ``faster``, ``slower``,
``ambiguous`` or ``unjudged``.

The test. Each side is a run's *level* of the row (the mean of its visits' log
centres, ``tileops.bench.hostnoise``) with the interval of that level, not the
wider prediction of a rerun: the question is whether the two levels differ, and
each level's own uncertainty is what that question is made of. In log space the
difference D = ln(new / old) has the standard error sqrt(se_new^2 + se_old^2)
with Welch–Satterthwaite's degrees of freedom, which gives the ratio's 95 %
interval and a two-sided p-value. (Issue 34 measured the earlier rule, which
read the ratio's interval from two prediction intervals added end to end, twice
too wide: 4 % power to call a 20 % CPU regression slower.)

The decision, per row:

* **slower / faster** when the change is both *significant* (its p-value passes
  the Benjamini–Hochberg step-up rule over every row of the comparison at a
  false discovery rate of ``fdr``, 5 %: same code on a hundred rows is called
  changed on any of them at most 5 % of the time, where a per-row 5 % test would
  call five) and *material* (the ratio beyond ``1 + threshold``, or under its
  reciprocal: a fleet does not page on a real 2 % change);
* **same** when the ratio's whole 95 % interval lies within
  ``[1 / (1 + threshold), 1 + threshold]``: whatever changed, it changed by less
  than the threshold (an equivalence, not an overlap);
* **ambiguous** otherwise: a significant change under the threshold, no
  significant change but intervals too wide to rule one out, a slower side that
  was disturbed (contended, throttled: the neighbour may be the cause, not the
  code), or on a GPU a change the SM clocks explain;
* **unjudged** when either side has no interval (a record from before
  intervals, or not written by the bench): never slower, whatever its medians say;
  the reason says which side and what to do;
* **moved with the run**: where (nearly) every row of the comparison moved the
  same way by the threshold or more (their median change), a row that moved with them is
  called only when its own change beyond theirs is significant; else it is
  ambiguous, and the message names the common shift (:func:`classify_all`).

**Cycles on a GPU**, as nvbench's ``nvbench-compare-robust`` confirms a gap
(github.com/NVIDIA/nvbench at 66212f1, ``python/scripts/nvbench_compare_robust.py``):
where both sides know their SM clock, the ratio in cycles (time x clock) must
be significant and material too, or the clocks explain the change and the row is
ambiguous. CPU rows carry no clock; the timing decides.

Pure functions over numbers, standard library only: the baseline comparison and
``benchmarks/interval_sim.py`` read the same decision.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Literal
from collections.abc import Sequence

from tileops.defaults import BASELINE_THRESHOLD as DEFAULT_THRESHOLD
from tileops.stats import benjamini_hochberg, satterthwaite, t_p_value, two_sided_t

Status = Literal["same", "faster", "slower", "ambiguous", "unjudged"]
STATUSES: tuple[Status, ...] = ("same", "faster", "slower", "ambiguous", "unjudged")

#: Every reason a decision gives: faster/slower on ``significant`` (``-in-cycles``); same on
#: ``within-threshold``; unjudged on ``missing-interval``; ambiguous on the rest.
REASONS = ("significant", "significant-in-cycles", "within-threshold", "missing-interval", "disturbed",
           "clocks-explain-change", "change-under-threshold", "not-shown", "moved-with-the-run")

#: The false discovery rate the Benjamini–Hochberg rule holds over a comparison's rows.
DEFAULT_FDR = 0.05
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Side:
    """One run's row: its level, the level's interval and that interval's degrees of freedom, its SM clock,
    what disturbed it."""

    level_s: float
    ci_s: tuple[float, float] | None = None  # the level's 95 % interval; None: not known
    df: float = math.inf  # the interval's t quantile's degrees of freedom
    sm_mhz: float | None = None  # the SM clock during the row (GPU rows; None on a CPU or when unknown)
    disturbed: str | None = None  # why the row's time is not the device's own (contended, throttled), or None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.level_s) and self.level_s > 0):
            raise ValueError(f"a level must be a positive finite time, got {self.level_s!r}")
        if self.ci_s is not None:
            lo, hi = self.ci_s
            if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= self.level_s <= hi):
                raise ValueError(f"an interval must hold its level within positive finite bounds, got {self.ci_s!r} "
                                 f"around {self.level_s!r}")
        if not self.df > 0:
            raise ValueError(f"degrees of freedom must be > 0, got {self.df!r}")
        if self.sm_mhz is not None and not (math.isfinite(self.sm_mhz) and self.sm_mhz > 0):
            raise ValueError(f"an SM clock must be a positive number of MHz, got {self.sm_mhz!r}")

    @property
    def log_se(self) -> float | None:
        """The level's standard error in log space, from its interval's wider side; None without one."""
        if self.ci_s is None:
            return None
        lo, hi = self.ci_s
        half = max(math.log(hi / self.level_s), math.log(self.level_s / lo))
        return half / two_sided_t(CONFIDENCE, self.df)


@dataclass(frozen=True)
class Thresholds:
    threshold: float = DEFAULT_THRESHOLD  # the smallest change that matters (0.10 = 10 %)
    fdr: float = DEFAULT_FDR  # the false discovery rate over a comparison's rows

    def __post_init__(self) -> None:
        if not self.threshold >= 0:
            raise ValueError(f"threshold must be >= 0 (a fraction: 0.10 = 10 %), got {self.threshold}")
        if not 0 < self.fdr < 1:
            raise ValueError(f"fdr must be between 0 and 1 (a fraction: 0.05 = 5 %), got {self.fdr}")


@dataclass(frozen=True)
class Decision:
    status: Status
    reason: str  # a short code (REASONS)
    message: str  # the same for a person, with the numbers
    ratio: float  # new level / old level (> 1: slower)
    ratio_interval: tuple[float, float] | None  # the ratio's 95 % interval; None when unjudged
    p_value: float | None = None  # the change's two-sided p-value, before the run-wide correction
    basis: Literal["interval", "none"] = "interval"


@dataclass(frozen=True)
class _Test:
    ratio: float
    log_ratio: float
    se: float
    df: float
    p: float
    ratio_interval: tuple[float, float]


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def _test(old: Side, new: Side) -> _Test | Decision:
    """The ratio's test, or the unjudged decision when a side has no interval."""
    ratio = new.level_s / old.level_s
    so, sn = old.log_se, new.log_se
    if so is None or sn is None:
        which = "baseline" if so is None else "new run"
        return Decision("unjudged", "missing-interval", f"{_pct(ratio - 1)} on the levels, unjudged: the {which} "
                        "has no interval (a record from before intervals, or not written by tileops bench); re-run it "
                        "with the bench for an interval", ratio, None, basis="none")
    d = math.log(ratio)
    se = math.hypot(so, sn)
    df = satterthwaite([(so * so, old.df), (sn * sn, new.df)])
    if se <= 0:
        p = 0.0 if d != 0 else 1.0
        ci = (ratio, ratio)
    else:
        p = t_p_value(d / se, df)
        h = two_sided_t(CONFIDENCE, df) * se
        ci = (math.exp(d - h), math.exp(d + h))
    return _Test(ratio, d, se, df, p, ci)


def _decide(old: Side, new: Side, t: _Test, cutoff: float | None, th: Thresholds) -> Decision:
    """One row's decision given the run-wide significance ``cutoff`` (the largest p-value Benjamini–Hochberg
    rejects; None: none)."""
    material = 1 + th.threshold
    ratio, (lo, hi) = t.ratio, t.ratio_interval
    significant = cutoff is not None and t.p <= cutoff
    direction: Status | None = None
    if significant and ratio >= material:
        direction = "slower"
    elif significant and ratio <= 1 / material:
        direction = "faster"
    allows = f"the ratio's 95 % interval is {lo:.3f}–{hi:.3f}x (p = {t.p:.2g})"
    if direction is not None:
        worse = new if direction == "slower" else old
        if worse.disturbed:
            which = "new run" if direction == "slower" else "baseline"
            return Decision("ambiguous", "disturbed", f"{_pct(ratio - 1)}, but the slower side (the {which}) was "
                            f"disturbed ({worse.disturbed}): the cause may be that, not the code", ratio,
                            t.ratio_interval, t.p)
        if old.sm_mhz is not None and new.sm_mhz is not None:
            so, sn = old.sm_mhz, new.sm_mhz
            cycles = ratio * sn / so
            p_cycles = t_p_value(math.log(cycles) / t.se, t.df) if t.se > 0 else (0.0 if cycles != 1 else 1.0)
            moved = cycles >= material if direction == "slower" else cycles <= 1 / material
            if not (moved and cutoff is not None and p_cycles <= cutoff):
                return Decision("ambiguous", "clocks-explain-change", f"{_pct(ratio - 1)} in time, but the SM clock "
                                f"went from {so:.0f} to {sn:.0f} MHz: in cycles the change is {_pct(cycles - 1)}, not "
                                f"a significant {th.threshold:.0%}", ratio, t.ratio_interval, t.p)
            return Decision(direction, "significant-in-cycles", f"{_pct(ratio - 1)}, in time and in cycles "
                            f"({so:.0f} and {sn:.0f} MHz); {allows}", ratio, t.ratio_interval, t.p)
        return Decision(direction, "significant", f"{_pct(ratio - 1)}: {allows}, significant over the "
                        f"comparison's rows at a {th.fdr:.0%} false discovery rate", ratio, t.ratio_interval, t.p)
    if lo >= 1 / material and hi <= material:
        return Decision("same", "within-threshold", f"{_pct(ratio - 1)}; {allows}, inside ±{th.threshold:.0%}",
                        ratio, t.ratio_interval, t.p)
    if significant:
        return Decision("ambiguous", "change-under-threshold", f"{_pct(ratio - 1)}: a significant change, under "
                        f"the {th.threshold:.0%} that matters; {allows}", ratio, t.ratio_interval, t.p)
    return Decision("ambiguous", "not-shown", f"{_pct(ratio - 1)}: {allows}: neither a change of "
                    f"{th.threshold:.0%} nor its absence is shown; re-run both with more time (--max-time) or on a "
                    "quieter host", ratio, t.ratio_interval, t.p)


#: The fewest compared rows whose shared change is read as the run's common shift.
MIN_COMMON_ROWS = 5
#: ... and the share of them that must have moved that way, by half that much or more: every row, near enough.
COMMON_SHARE = 0.8


def common_shift(pairs: Sequence[tuple[Side, Side]]) -> float | None:
    """The change every row of a comparison shares: the median of the rows' ln(new / old), where at least
    MIN_COMMON_ROWS rows have intervals on both sides and COMMON_SHARE of them moved the same way by half that
    or more (a regression of some rows is no common shift); else None."""
    d = [math.log(new.level_s / old.level_s) for old, new in pairs if old.ci_s is not None and new.ci_s is not None]
    if len(d) < MIN_COMMON_ROWS:
        return None
    c = statistics.median(d)
    alike = sum(1 for x in d if x * c > 0 and abs(x) >= abs(c) / 2)
    return c if c != 0 and alike >= COMMON_SHARE * len(d) else None


def classify_all(pairs: Sequence[tuple[Side, Side]], thresholds: Thresholds = Thresholds(), *,
                 shared_shift: bool = True) -> list[Decision]:
    """Each ``(old, new)`` pair decided, with significance corrected over all of them (Benjamini–Hochberg at
    ``thresholds.fdr``): the rows of one comparison.

    A change every row shares is the host as much as the code: on the development VM a whole run read 1.4x
    the one before it, every row alike, minutes apart and with nothing changed. Where a row is slower (or
    faster) and :func:`common_shift` moved the same way by the threshold or more, the row is called only when
    its own change beyond the common one is significant too (Benjamini–Hochberg over those); otherwise it is
    ``ambiguous`` (``moved-with-the-run``), and the message names the shift. A regression of every row alike
    is then reported, not failed: telling the device from the code is the device's own measurement's work.
    ``shared_shift=False`` skips that step: for a measurement of the device itself (its reference probe,
    ``tileops.report.statesplit``), every row moving together is what it measures."""
    tests = [_test(old, new) for old, new in pairs]
    judged = [t for t in tests if isinstance(t, _Test)]
    rejected = benjamini_hochberg([t.p for t in judged], thresholds.fdr) if judged else []
    cutoff = max((t.p for t, r in zip(judged, rejected) if r), default=None)
    decisions = [t if isinstance(t, Decision) else _decide(old, new, t, cutoff, thresholds)
                 for (old, new), t in zip(pairs, tests)]
    common = common_shift(pairs) if shared_shift else None
    if common is None or abs(common) < math.log1p(thresholds.threshold):
        return decisions
    own_p = [t_p_value((t.log_ratio - common) / t.se, t.df) if t.se > 0 else 1.0 for t in judged]
    own_rejected = benjamini_hochberg(own_p, thresholds.fdr)
    own_cut = max((p for p, r in zip(own_p, own_rejected) if r), default=None)
    out, j = [], 0
    for t, d in zip(tests, decisions):
        if isinstance(t, _Test):
            p_own = own_p[j]
            j += 1
            with_run = (d.status == "slower" and common > 0) or (d.status == "faster" and common < 0)
            if with_run and (own_cut is None or p_own > own_cut):
                d = Decision("ambiguous", "moved-with-the-run", f"{_pct(d.ratio - 1)}, but every row of the "
                             f"comparison moved {_pct(math.expm1(common))} together (the median) and this row's "
                             f"own change beyond that, {_pct(math.exp(t.log_ratio - common) - 1)}, is not "
                             "significant: the host or a change touching every row, which two runs cannot tell "
                             "apart", d.ratio, d.ratio_interval, d.p_value)
        out.append(d)
    return out


def classify(old: Side, new: Side, thresholds: Thresholds = Thresholds()) -> Decision:
    """``new`` against ``old`` (the baseline), one row alone (no correction over other rows)."""
    return classify_all([(old, new)], thresholds)[0]
