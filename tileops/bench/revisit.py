"""The sweep's second pass: each eager row visited again, its interval pooled from both visits and widened by
the host's drift over the sweep.

Why. A row's blocks span its own second or so; a rerun comes minutes later, in
another process. On this project's quiet 2-core VM, with the allocator fixed
(``tileops.bench.allocator``), quick rows whose blocks agreed to ±4.5 % still
read 1.21x slower in the next run, and the same inputs measured four times in a
row in one process moved 10-20 %: the host's speed wanders on a time scale no
single visit sees (docs/roofline.md, "Reproducibility"). Two visits half a
sweep apart see it, and the rows' pairs, pooled, measure it for every row
(``interval.visit_drift``); each row's interval is then widened by it
(``interval.widen``). ``benchmarks/interval_coverage.py`` shows what each plan
covers on simulated hosts (two passes plus drift is the only one near 90 % on
a drifting host).

Which rows. Eager (``torch``) rows: a second visit rebuilds the row's inputs
and repeats its checked call, cheap next to its timing. A compiled backend's
row would compile again in the worker (seconds to minutes): it is visited once
and widened by the drift the eager rows measured, since the drift is the
host's. The time budget is split (``interval.visit_rules``), so a sweep takes
about as long as with one pass.

What is written. The first pass appends each row's record as it finishes, as
always; the second pass replaces them in one atomic rewrite at its end
(``records.replace_records``). A sweep stopped during the second pass keeps the
first pass's records, every one whole. Standard library only (spec §5.2).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any
from collections.abc import Mapping, Sequence

from tileops.bench.execute import within_contract
from tileops.bench.interval import BlockRule, MedianInterval, visit_drift, visit_rules, widen
from tileops.bench.select import Planned
from tileops.records import Record

Key = tuple[str, str, str, str]
Blocks = Sequence[Sequence[float]]


def revisited(p: Planned, passes: int) -> bool:
    """Whether the second pass visits this row again (an eager row that is run, in a two-pass sweep)."""
    return passes == 2 and p.backend == "torch" and not p.skip_reason


def first_visit_rule(rule: BlockRule, p: Planned, passes: int) -> BlockRule:
    """The rule of a row's first visit: half the budget when it will be revisited, else all of it."""
    return visit_rules(rule)[0] if revisited(p, passes) else rule


def second_visit_rule(rule: BlockRule) -> BlockRule:
    """The rule of a row's second visit: the other half, stopping on the interval of both visits' blocks."""
    return visit_rules(rule)[1]


@dataclass(frozen=True)
class HostDrift:
    """The host's drift between the two passes, and what it did (run.json's ``host_drift``)."""

    sigma: float | None  # sigma of ln(speed) over half a sweep, pooled over the revisited rows; None: not known
    rows: int  # rows revisited (pairs of visits it is pooled over)
    widened: int  # rows whose interval it widened
    why: str | None = None  # why sigma is None or nothing was widened

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def same_timer(first: Record, second: Record) -> bool:
    """Whether both visits were timed alike (the same timer, the same fallback): only then are their blocks
    one row's samples. A GPU row whose CUPTI attribution failed in one visit and not the other would mix
    device-busy times with CUDA events' (which the roofline prices blank): its first record then stands."""
    a, b = first.timing, second.timing
    return a is not None and b is not None and (a.timer, a.fallback_reason) == (b.timer, b.fallback_reason)


def merge_visits(first: Record, second: Record) -> Record:
    """The second visit's record (its timing pools both visits) with what surrounded *both* visits: a row
    contended, throttled or capped in either visit is so in the record (the first visit's reasons marked as
    such), so the roofline never judges a pooled time the first visit's neighbour stretched. The readings,
    the window, its calls and its energy stay the second visit's, which share one window."""
    a, b = first.conditions, second.conditions
    if a is None or b is None:
        return second
    merged = dataclasses.replace(
        b, contended=a.contended or b.contended, throttled=a.throttled or b.throttled,
        power_capped=a.power_capped or b.power_capped, thermal=a.thermal or b.thermal,
        contention=[*b.contention, *(f"first visit: {x}" for x in a.contention)])
    return dataclasses.replace(second, conditions=merged)


def widen_record(rec: Record, sigma: float) -> Record:
    """The record with its interval widened by the host's drift; a record without one is returned as it is."""
    t = rec.timing
    if rec.status != "ok" or t is None or t.median_ci_s is None:
        return rec
    lo, hi = t.median_ci_s
    if not lo <= t.median_s <= hi:  # held to the contract's bounds: nothing to widen around
        return rec
    wide = widen(MedianInterval(median_s=t.median_s, lo_s=lo, hi_s=hi, blocks=0, n=t.n), sigma)
    return dataclasses.replace(rec, timing=dataclasses.replace(t, median_ci_s=within_contract(wide.pair)))


def settle(first: Mapping[Key, Record], second: Mapping[Key, tuple[Record, Blocks, Blocks]]
           ) -> tuple[dict[Key, Record], HostDrift]:
    """The records that replace the first pass's, and the drift they were widened by.

    ``first``: the ok records the first pass wrote; ``second``: per revisited row, its second visit's record
    (over both visits' blocks) with the first and the second visit's own blocks. Every ok row of ``first``
    is widened by the drift, revisited or not; with fewer than three pairs the drift is not known, and the
    second visits' records stand as they are.
    """
    updated = {k: rec for k, (rec, _, _) in second.items()}
    sigma = visit_drift([(b1, b2) for _, b1, b2 in second.values()])
    if sigma is None:
        return updated, HostDrift(None, len(second), 0, f"{len(second)} row(s) revisited: the drift is pooled "
                                                        "over 3 or more; the intervals are each row's own")
    widened = {k: widen_record(updated.get(k, rec), sigma) for k, rec in first.items()}
    return widened, HostDrift(sigma, len(second), sum(1 for r in widened.values() if r.timing is not None
                                                      and r.timing.median_ci_s is not None))
