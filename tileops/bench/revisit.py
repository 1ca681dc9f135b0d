"""The sweep's second pass: each eager row visited again in a fresh worker process, and every row's record
finished with its own interval (``tileops.bench.hostnoise``).

Why. A row's blocks span its own second or so; a rerun comes minutes later, in
another process. On this project's 2-core VM memory-bound rows move 11–27 %
(sd) from process to process and compute-bound rows 2–9 %, and the host's speed
wanders on a time scale no single visit sees. A second visit, half a sweep
later and in a worker of its own, sees both; the rows' pairs, pooled by kind,
measure them for every row.

Which rows. Eager (``torch``) rows: a second visit rebuilds the row's inputs
and repeats its checked call, cheap next to its timing. A compiled backend's
row would compile again (seconds to minutes): it is visited once, and its
interval takes the between-visit variation its kind's eager rows measured.
The time budget is split equally between the visits (``interval.visit_rule``),
so a sweep takes about as long as with one pass.

What is written. The first pass appends each row's record as it finishes, with
the one-visit interval this host's stored prior gives (:func:`finish` under
``hostnoise.prior_model``); the second pass replaces them all in one atomic
rewrite at its end (``records.replace_records``). A sweep stopped during the
second pass keeps the first pass's records, every one whole and with an
interval. Standard library only (spec §5.2).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence

from tileops.bench.execute import visit_timing, within_contract
from tileops.bench.hostnoise import (ROW_KINDS, HostModel, HostPrior, Level, Pair, RowInterval, pool, row_interval,
                                     with_reruns)
from tileops.bench.interval import BlockRule, Visit, visit_of, visit_rule
from tileops.bench.probe import merge_readings
from tileops.bench.select import Planned
from tileops.records import Record, RowConditions, SchedulerSlices, Timing

Key = tuple[str, str, str, str]
Blocks = Sequence[Sequence[float]]
#: Arithmetic intensity (FLOP per byte) from which a row is pooled with the compute-bound rows when no profile
#: says which ceiling bounds it: about a machine's balance (peak / bandwidth), 5-20 on a CPU, 50-300 on a GPU.
BALANCE = {"cpu": 8.0, "cuda": 64.0}


def revisited(p: Planned, passes: int) -> bool:
    """Whether the second pass visits this row again (an eager row that is run, in a two-pass sweep)."""
    return passes == 2 and p.backend == "torch" and not p.skip_reason


def first_visit_rule(rule: BlockRule, p: Planned, passes: int) -> BlockRule:
    """The rule of a row's first visit: half the budget when it will be revisited, else all of it."""
    return visit_rule(rule, 2) if revisited(p, passes) else rule


def second_visit_rule(rule: BlockRule) -> BlockRule:
    """The rule of a row's second visit: the other half, the same as the first's."""
    return visit_rule(rule, 2)


def kind_by_intensity(rec: Record) -> str:
    """``compute`` for a row whose FLOPs per byte reach its device kind's :data:`BALANCE`, else ``memory``:
    the kind a row is pooled with when no profile tells which ceiling bounds it."""
    flops, nbytes = rec.flops or 0, rec.bytes or 0
    balance = BALANCE.get(rec.env.device.kind, BALANCE["cpu"])
    return "compute" if nbytes == 0 and flops > 0 or nbytes > 0 and flops / nbytes >= balance else "memory"


def same_timer(first: Record, second: Record) -> bool:
    """Whether both visits were timed alike (the same timer, the same fallback): only then are their blocks
    one row's samples. A GPU row whose CUPTI attribution failed in one visit and not the other would mix
    device-busy times with CUDA events' (which the roofline prices blank): its first record then stands."""
    a, b = first.timing, second.timing
    return a is not None and b is not None and (a.timer, a.fallback_reason) == (b.timer, b.fallback_reason)


def merge_conditions(a: RowConditions | None, b: RowConditions | None) -> RowConditions | None:
    """What surrounded *both* visits: contended, throttled or capped if either visit was (the first visit's
    reasons marked as such), so the roofline never judges a pooled time the first visit's neighbour
    stretched. The readings, the window, its calls and its energy stay the second visit's, which share one
    window."""
    if a is None or b is None:
        return b
    return dataclasses.replace(
        b, contended=a.contended or b.contended, throttled=a.throttled or b.throttled,
        power_capped=a.power_capped or b.power_capped, thermal=a.thermal or b.thermal,
        contention=[*b.contention, *(f"first visit: {x}" for x in a.contention)])


def pooled_timing(first: Timing, second: Timing, blocks1: Blocks, blocks2: Blocks) -> Timing:
    """One timing over both visits: the count, minimum, mean and spread over every sample, each visit's centre,
    the fast end over every block; the intervals are :func:`finish`'s to set.

    p10 and p90 are each visit's, combined as the level is (the mean of their logs): the level (the visits'
    centres' geometric mean) then always lies between them, as it lies inside each visit's. Taken over the
    pooled samples instead, a row whose visits differ tenfold (a neighbour's burst in one) would read a level
    above its own p90."""
    spans = [s for s in (first.span_s, second.span_s) if s is not None]
    joint = visit_timing([*blocks1, *blocks2], timer=second.timer, warmup=first.warmup + second.warmup,
                         total_s=first.total_s + second.total_s, stop_reason=second.stop_reason,
                         fallback_reason=second.fallback_reason, excluded_copies_s=second.excluded_copies_s,
                         compile_s=first.compile_s, span_s=statistics.fmean(spans) if spans else None)
    return dataclasses.replace(joint, visits_s=[visit_of(blocks1).centre_s, visit_of(blocks2).centre_s],
                               p10_s=statistics.geometric_mean([first.p10_s, second.p10_s]),
                               p90_s=statistics.geometric_mean([first.p90_s, second.p90_s]))


def merge_visits(first: Record, second: Record, blocks1: Blocks, blocks2: Blocks) -> Record:
    """The row's record over both visits (the second's identity and readings, the pooled timing, the conditions
    of both, the probe's readings of both, the first visit's interleaved race: the second visits the row
    alone); its interval is :func:`finish`'s to set."""
    assert first.timing is not None and second.timing is not None
    timing = pooled_timing(first.timing, second.timing, blocks1, blocks2)
    return dataclasses.replace(second, timing=timing,
                               conditions=merge_conditions(first.conditions, second.conditions),
                               probe=merge_readings(first.probe, second.probe, timing.total_s),
                               started_at=first.started_at, race=first.race)


def finish(rec: Record, visits: Sequence[Visit], kind: str, model: HostModel) -> Record:
    """The record with its level and both intervals from its visits under ``model``
    (``hostnoise.row_interval``, with the row's own reruns; a row timed in scheduler slices: widened over both
    its clusters); a record that is not ok, or has no timing, is returned as it is."""
    return _finished(rec, visits, kind, model)[0]


def _finished(rec: Record, visits: Sequence[Visit], kind: str, model: HostModel
              ) -> tuple[Record, RowInterval | None]:
    t = rec.timing
    if rec.status != "ok" or t is None or not visits:
        return rec, None
    iv = row_interval(visits, kind, model, row=" ".join(rec.key))
    rerun, level_ci = iv.rerun, iv.level_ci
    if t.slices is not None:  # timed in scheduler slices: no precise interval, one over both clusters
        rerun, level_ci = _spanning(rerun, t.slices), _spanning(level_ci, t.slices)
    timing = dataclasses.replace(
        t, median_s=iv.level_s, median_ci_s=_held(rerun, iv.level_s), level_ci_s=_held(level_ci, iv.level_s),
        ci_df=max(1.0, round(iv.df, 2)), visits_s=list(iv.visits))
    return dataclasses.replace(rec, timing=timing), iv


def _spanning(pair: tuple[float, float], sl: SchedulerSlices) -> tuple[float, float]:
    """``pair`` widened to reach both clusters of a row timed in scheduler slices: its time is the op's (the fast
    cluster) or the scheduler's (the slow one) depending on the host's other work, not known any closer."""
    return min(pair[0], sl.fast_s), max(pair[1], sl.slow_s)


def _held(pair: tuple[float, float], level: float) -> list[float]:
    lo, hi = within_contract(pair)
    return [min(lo, level), max(hi, level)]


KindOf = Callable[[Record], str]


def settle(first: Mapping[Key, tuple[Record, Blocks]], second: Mapping[Key, tuple[Record, Blocks]],
           device_kind: str, prior: HostPrior | None = None, kind_of: KindOf = kind_by_intensity
           ) -> tuple[dict[Key, Record], HostModel]:
    """The records that replace the first pass's, and the host model they were finished under.

    ``first``: every ok record the first pass wrote, with its visit's blocks; ``second``: per revisited row,
    its second visit's record and blocks (timed alike: :func:`same_timer`). A row visited twice gets its
    pooled record; every other row its one-visit interval under the pooled model."""
    kinds = {k: row_kind(kind_of, rec) for k, (rec, _) in first.items()}
    visits1 = {k: visit_of(b) for k, (_, b) in first.items()}
    pairs = {k: Pair(kinds[k], visits1[k], visit_of(b)) for k, (_, b) in second.items() if k in first}
    singles: dict[str, list[Visit]] = {}
    for k, v in visits1.items():
        if k not in pairs:
            singles.setdefault(kinds[k], []).append(v)
    model = pool(list(pairs.values()), device_kind, prior, singles)
    out: dict[Key, Record] = {}
    levels: dict[str, Level] = {}
    for k, (rec, blocks) in first.items():
        if k in pairs:
            merged = merge_visits(rec, second[k][0], blocks, second[k][1])
            out[k], iv = _finished(merged, [pairs[k].first, pairs[k].second], kinds[k], model)
        else:
            out[k], iv = _finished(rec, [visits1[k]], kinds[k], model)
        if iv is not None:
            levels[" ".join(k)] = (kinds[k], math.log(iv.level_s), iv.model_var, iv.model_df)
    return out, with_reruns(model, prior, levels, code_of(rec for rec, _ in first.values()))


def code_of(records: Iterable[Record]) -> str:
    """What a run's records ran (tileops' version and revision, torch's): a rerun of the same code is read
    against the one before it; a run of other code is no rerun of it."""
    env = next((r.env for r in records), None)
    return f"tileops {env.tileops_version} {env.git_revision or ''} torch {env.torch_version}" if env else ""


def row_kind(kind_of: KindOf, rec: Record) -> str:
    """The kind ``kind_of`` gives the row, or by its intensity where that is no row kind."""
    kind = kind_of(rec)
    return kind if kind in ROW_KINDS else kind_by_intensity(rec)
