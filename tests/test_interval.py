"""One visit of a row (tileops.bench.interval): its statistics from blocks, its stopping rule, its sampling plan,
the fast end the physics check judges, and one real CPU row measured by the plan."""

from __future__ import annotations

import dataclasses
import functools
import math
import random
import statistics

import pytest

from tileops.bench.interval import (CPU_BLOCKS, GPU_BLOCKS, QUICK_BLOCKS, BlockRule, fast_interval, sample_blocks,
                                    visit_of, visit_rule, within_block_noise)
from tileops.stats import median_variance_factor, robust_scale
from tileops.bench.stopping import NOISE_REACHED, SAMPLE_CAP, TIME_CAP


def _lognormal_blocks(rng: random.Random, blocks: int, per: int, level: list[float], noise: float = 0.05
                      ) -> list[list[float]]:
    return [[level[i] * math.exp(rng.gauss(0, noise)) for _ in range(per)] for i in range(blocks)]


# -- a visit ------------------------------------------------------------------------------------------------


def test_a_visit_by_hand() -> None:
    """Five one-sample blocks: the centre is the median of their logs, the spread the biweight about it, the se
    that times the median's variance factor."""
    e = math.exp
    blocks = [[e(0.0)], [e(0.1)], [e(0.02)], [e(0.05)], [e(-0.03)]]
    v = visit_of(blocks)
    logs = [0.0, 0.1, 0.02, 0.05, -0.03]
    assert v.centre_s == pytest.approx(e(0.02)) and (v.blocks, v.n) == (5, 5)
    assert v.spread == pytest.approx(robust_scale(logs, 0.02))
    assert v.se == pytest.approx(v.spread * math.sqrt(median_variance_factor(5)))
    assert v.half_width() == pytest.approx(math.expm1(2.7764 * v.se), rel=1e-3)  # t(0.975, 4)


def test_bad_blocks_are_refused_and_one_block_has_no_spread() -> None:
    for bad in ([[1e-3], []], [[1e-3], [0.0]], [[1e-3], [-1e-3]], [[1e-3], [math.nan]], [[1e-3], [math.inf]]):
        with pytest.raises(ValueError, match="block 1"):
            visit_of(bad)
    with pytest.raises(ValueError, match="at least one block"):
        visit_of([])
    one = visit_of([[1e-3, 2e-3, 3e-3]])
    assert one.centre_s == pytest.approx(2e-3) and one.spread is None and one.se is None and one.half_width() is None


def test_blocks_that_agree_exactly_have_no_spread() -> None:
    v = visit_of([[2e-6, 2e-6, 2e-6]] * 5)
    assert v.spread == 0.0 and v.half_width() == 0.0 and v.centre_s == pytest.approx(2e-6)


def test_a_stationary_stream_gives_a_narrow_visit_around_its_level() -> None:
    rng = random.Random(7)
    v = visit_of(_lognormal_blocks(rng, 20, 10, [1e-3] * 20))
    assert v.centre_s == pytest.approx(1e-3, rel=0.03)
    assert 0.002 < v.half_width() < 0.03  # type: ignore[operator]


def test_one_block_slowed_threefold_moves_neither_the_centre_nor_the_spread() -> None:
    """Issue 34: one x3 block in twenty moved the old interval from ±1.7 % to ±18.2 %."""
    rng = random.Random(12)
    blocks = _lognormal_blocks(rng, 20, 8, [1e-3] * 20, noise=0.03)
    clean = visit_of(blocks)
    hit = [list(b) for b in blocks]
    hit[7] = [x * 3 for x in hit[7]]
    burst = visit_of(hit)
    assert burst.centre_s == pytest.approx(clean.centre_s, rel=0.01)
    assert burst.half_width() < 1.5 * clean.half_width()  # type: ignore[operator]


def test_a_minority_of_disturbed_blocks_leaves_the_visit_at_the_calls_own_level() -> None:
    """A neighbour's job runs through 5 blocks in 16 (each twice as slow): the visit's centre stays at the call's
    own level, where the mean of all samples moves 30 % (what a visit cannot see, a second visit in another
    process and the host's history measure: tileops.bench.hostnoise)."""
    rng = random.Random(11)
    levels = [2e-3 if i in (2, 5, 6, 11, 14) else 1e-3 for i in range(16)]
    blocks = _lognormal_blocks(rng, 16, 12, levels, noise=0.02)
    v = visit_of(blocks)
    assert v.centre_s == pytest.approx(1e-3, rel=0.02) and v.half_width() < 0.05  # type: ignore[operator]
    assert statistics.fmean(x for b in blocks for x in b) > 1.25e-3


# -- the fast end --------------------------------------------------------------------------------------------


def test_the_fast_end_bounds_the_noise_free_time_however_slow_the_other_blocks() -> None:
    """A call of 1 ms with 3 % jitter, most of its blocks slowed 1.5-4x by a neighbour: the fast end's top is
    at or above 1 ms (noise cannot make a call faster than it runs) and close to it (one clean block shows it)."""
    rng = random.Random(2)
    blocks = []
    for i in range(20):
        slow = 1.0 if i in (4, 13) else rng.uniform(1.5, 4.0)
        blocks.append([1e-3 * slow * math.exp(rng.gauss(0, 0.03)) for _ in range(8)])
    lo, hi = fast_interval(blocks)  # type: ignore[misc]
    assert lo < 1e-3 < hi < 1.1e-3
    noise, df = within_block_noise(blocks)  # type: ignore[misc]
    assert noise == pytest.approx(0.03, rel=0.35) and df == 10 * 7 / 2  # the faster half of the blocks


def test_the_fast_end_is_rarely_below_the_true_time_on_a_quiet_host() -> None:
    """The Bonferroni bound's promise: the noise-free time is above the top in at most 1 % of rows (1.5 % here:
    a thousand rows' own binomial spread)."""
    rng = random.Random(9)
    below = 0
    for _ in range(1000):
        blocks = _lognormal_blocks(rng, 16, 5, [1e-3] * 16, noise=0.05)
        _, hi = fast_interval(blocks)  # type: ignore[misc]
        below += hi < 1e-3
    assert below <= 15


def test_fast_interval_edge_cases() -> None:
    assert fast_interval([]) is None
    assert fast_interval([[1e-3]]) is None  # one sample: no jitter to tell, nothing to bound
    lo, hi = fast_interval([[1e-3], [2e-3], [1.1e-3]])  # type: ignore[misc]  # blocks of one: their own spread
    assert lo < 1e-3 < hi
    assert fast_interval([[1e-3, 1e-3]] * 3) == (1e-3, 1e-3)  # no jitter at all: exactly the block


# -- the stopping rule ------------------------------------------------------------------------------------


def test_the_rule_stops_on_the_visits_precision_after_its_minimums() -> None:
    rule = BlockRule(target_precision=0.02, min_time_s=0.1, max_time_s=1.0, min_samples=10, max_samples=100,
                     min_blocks=4)
    tight = [[1e-3, 1e-3, 1e-3]] * 4
    assert rule.decide(tight[:3], 0.5) is None  # three blocks: under min_blocks
    assert rule.decide(tight, 0.05) is None  # under min_time
    assert rule.decide([[1e-3, 1e-3]] * 4, 0.5) is None  # eight samples: under min_samples
    assert rule.decide(tight, 0.5) == NOISE_REACHED
    wide = [[1e-3] * 3, [2e-3] * 3, [1e-3] * 3, [2e-3] * 3]
    assert rule.decide(wide, 0.5) is None  # precision not reached: another block
    assert rule.decide(wide, 1.0) == TIME_CAP
    assert rule.decide([[1e-3] * 50, [2e-3] * 50], 0.01) == SAMPLE_CAP


@pytest.mark.parametrize("kwargs, words", [
    ({"min_blocks": 1}, "min_blocks"), ({"min_block_samples": 0}, "min_block_samples"),
    ({"min_block_samples": 10, "max_block_samples": 5}, "min_block_samples"), ({"pause_s": -1}, "pause_s"),
    ({"target_precision": 0}, "target_precision")])
def test_a_rule_that_cannot_work_is_refused(kwargs: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        BlockRule(**kwargs)


def test_blocks_are_sized_to_the_block_time_at_the_last_pace() -> None:
    rule = BlockRule(block_time_s=0.02, min_block_samples=3, max_block_samples=64, max_samples=100)
    size = functools.partial(rule.next_block_size, blocks=rule.min_blocks, elapsed_s=0.5)  # its minimum taken
    assert size(0.003, 3, 3) == 20  # 1 ms a sample
    assert size(0.3, 3, 3) == 3  # a slow op: the minimum
    assert size(3e-5, 3, 3) == 64  # a fast op: the maximum
    assert size(0.003, 3, 90) == 10  # never past the sample cap
    assert size(0.0, 3, 3) == 64


def test_a_slow_rows_blocks_shrink_so_its_minimum_blocks_fit_before_the_cap() -> None:
    """Issue 37: a call of a third of the cap made one block of three samples, and its visit no interval of its
    own. Until the visit has its minimum blocks, a block is no bigger than lets the rest fit (one sample at
    least); past them, blocks are sized to the block time as before."""
    rule = BlockRule(max_time_s=1.0, min_blocks=4, pause_s=0.01, block_time_s=0.02, min_block_samples=3)
    assert rule.first_block_size(None) == rule.first_block_size(1e-3) == 3  # a fast call: the minimum
    assert rule.first_block_size(0.05) == 3  # 4 blocks of 3 fit: 0.6 s + 3 gaps of 0.06 s
    assert rule.first_block_size(0.1) == 1  # they do not: 4 x 0.1 + 3 x 0.11 fits one sample a block
    assert rule.fitting(0.1, 2, 0.5) == 1 and rule.fitting(0.013, 2, 0.5) == 17  # (1 - 0.5 - 2 x 0.023) / 0.026
    assert rule.fitting(0.1, 4, 0.5) == rule.max_block_samples  # its minimum taken: no limit
    assert rule.next_block_size(0.3, 1, 3, blocks=1, elapsed_s=0.3) == 1
    assert dataclasses.replace(rule, least_block_samples=3).first_block_size(0.1) == 3  # a GPU timer's batch


@pytest.mark.parametrize(("call_s", "rule"), [(0.03, visit_rule(QUICK_BLOCKS)), (0.5, visit_rule(QUICK_BLOCKS)),
                                              (2.0, visit_rule(CPU_BLOCKS)), (0.05, QUICK_BLOCKS)])
def test_every_cpu_visit_gets_two_blocks_for_no_more_calls_than_its_old_first_block(call_s: float,
                                                                                   rule: BlockRule) -> None:
    """However slow the call, a visit takes two blocks (an interval of its own) before the cap ends it; a slow
    row's two single-sample blocks and the re-warm call between them are the three calls the old first block of
    ``min_block_samples`` made alone."""
    row = FakeRow([call_s], per_s=call_s)
    calls: list[str] = []

    def rewarm() -> None:
        calls.append("rewarm")
        row.t += call_s

    got = sample_blocks(row.sample, rule, rewarm=rewarm, sleep=row.sleep, clock=lambda: row.t, pace_s=call_s)
    assert len(got.blocks) >= 2 and got.visit.se is not None and got.stop_reason == TIME_CAP
    if call_s >= rule.max_time_s:
        assert len(got.samples) + len(calls) == rule.min_block_samples  # 1 + re-warm + 1


def test_the_shipped_rules_are_consistent() -> None:
    for rule in (CPU_BLOCKS, GPU_BLOCKS, QUICK_BLOCKS):
        assert rule.min_time_s < rule.max_time_s and rule.min_blocks >= 5
        assert rule.min_blocks * rule.block_time_s <= rule.max_time_s  # the minimum fits in the cap
        half = visit_rule(rule)
        assert half.min_time_s < half.max_time_s and half.min_blocks * half.block_time_s <= half.max_time_s
    assert GPU_BLOCKS.min_block_samples >= 10  # a GPU timer's batch (one profiler session per block)


def test_two_visits_share_the_budget_equally_and_each_has_its_own_sample_cap() -> None:
    """Issue 34: on a GPU the old second visit was a single block (the sample cap counted the first visit's
    2000 samples); each visit now has half of every budget, the same for both."""
    for rule in (CPU_BLOCKS, GPU_BLOCKS, QUICK_BLOCKS):
        v = visit_rule(rule, 2)
        assert v.max_time_s == pytest.approx(rule.max_time_s / 2) and v.min_time_s == pytest.approx(rule.min_time_s / 2)
        assert v.max_samples == rule.max_samples // 2 and v.min_blocks == max(2, rule.min_blocks // 2)
        assert visit_rule(rule, 1) is rule
    row = FakeRow([1e-3])
    rule = visit_rule(BlockRule(max_samples=40, min_time_s=10.0, max_time_s=100.0, block_time_s=0.01))
    first = sample_blocks(row.sample, rule, sleep=row.sleep, clock=lambda: row.t)
    second = sample_blocks(row.sample, rule, sleep=row.sleep, clock=lambda: row.t)
    assert first.stop_reason == second.stop_reason == SAMPLE_CAP
    assert len(first.samples) == len(second.samples) == 20


# -- the sampling plan, on a fake clock ------------------------------------------------------------------


class FakeRow:
    """A row whose every sample takes ``per_s`` of wall time and reads ``value``; it logs what happens."""

    def __init__(self, values: list[float], per_s: float = 1e-3) -> None:
        self.values = values
        self.per_s = per_s
        self.t = 0.0
        self.log: list[str] = []
        self.i = 0

    def sample(self, k: int) -> list[float]:
        self.log.append(f"block {k}")
        out = []
        for _ in range(k):
            out.append(self.values[self.i % len(self.values)])
            self.i += 1
            self.t += self.per_s
        return out

    def sleep(self, s: float) -> None:
        self.log.append("pause")
        self.t += s


def test_sample_blocks_pauses_and_rewarms_between_blocks_only() -> None:
    row = FakeRow([1e-3])
    rule = BlockRule(target_precision=0.01, min_time_s=0.05, max_time_s=1.0, min_samples=10, min_blocks=4,
                     block_time_s=0.01, pause_s=0.005, min_block_samples=3)
    got = sample_blocks(row.sample, rule, rewarm=lambda: row.log.append("rewarm"),
                        between=lambda: row.log.append("between"), sleep=row.sleep, clock=lambda: row.t)
    assert got.stop_reason == NOISE_REACHED
    assert row.log[0] == "block 3" and row.log[1:5] == ["between", "pause", "rewarm", "block 10"]
    nblocks = len(got.blocks)
    assert row.log.count("pause") == row.log.count("rewarm") == row.log.count("between") == nblocks - 1
    assert got.elapsed_s == pytest.approx(len(got.samples) * 1e-3 + (nblocks - 1) * 0.005)
    assert got.elapsed_s >= rule.min_time_s and nblocks >= rule.min_blocks
    assert got.visit.centre_s == pytest.approx(1e-3) and got.visit.half_width() == 0.0
    assert got.visit.blocks == nblocks


def test_sample_blocks_stops_at_the_time_cap_with_a_wide_visit() -> None:
    row = FakeRow([1e-3, 1e-3, 1e-3, 3e-3, 3e-3, 3e-3], per_s=1e-3)  # blocks of 3 alternate 1 ms and 3 ms
    rule = BlockRule(target_precision=0.01, min_time_s=0.01, max_time_s=0.05, min_samples=3, min_blocks=3,
                     block_time_s=0.003, pause_s=0.0, min_block_samples=3, max_block_samples=3)
    got = sample_blocks(row.sample, rule, sleep=row.sleep, clock=lambda: row.t)
    assert got.stop_reason == TIME_CAP
    assert got.visit.half_width() > 0.3  # type: ignore[operator]
    assert "pause" not in row.log  # no pause asked, none taken


def test_a_timer_that_returns_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="no sample"):
        sample_blocks(lambda k: [], QUICK_BLOCKS, sleep=lambda s: None)


# -- a real CPU row --------------------------------------------------------------------------------------


def test_a_real_cpu_row_measured_by_the_block_plan() -> None:
    import torch

    from tileops.bench.timers import CacheFlusher, CpuWallTimer

    x = torch.randn(512, 1024)
    fn = lambda: torch.relu(x)
    timer = CpuWallTimer(CacheFlusher("cpu", 4 * 2**20))
    rule = BlockRule(target_precision=0.02, min_time_s=0.02, max_time_s=0.25, min_samples=6, min_blocks=4,
                     block_time_s=0.01, pause_s=0.002, min_block_samples=2)
    fn()
    rewarms: list[object] = []
    got = sample_blocks(lambda k: timer.sample(fn, k), rule, rewarm=lambda: rewarms.append(fn()))
    v = got.visit
    assert got.stop_reason in (NOISE_REACHED, TIME_CAP)
    assert len(got.blocks) >= rule.min_blocks or got.stop_reason == TIME_CAP
    assert len(rewarms) == len(got.blocks) - 1
    assert all(len(b) >= rule.least_block_samples and all(s > 0 for s in b) for b in got.blocks)
    # a block below min_block_samples only while the first min_blocks had to fit before the cap (a loaded host)
    assert all(len(b) >= rule.min_block_samples for b in got.blocks[rule.min_blocks:])
    assert min(got.samples) <= v.centre_s <= max(got.samples)
    assert v.centre_s == pytest.approx(math.exp(statistics.median(math.log(statistics.median(b)) for b in got.blocks)))
    assert v.blocks == len(got.blocks) and v.n == len(got.samples)
    fast = fast_interval(got.blocks)
    assert fast is not None and fast[0] <= fast[1] and fast[0] <= min(statistics.median(b) for b in got.blocks)
    assert got.elapsed_s >= (len(got.blocks) - 1) * rule.pause_s
    assert got.elapsed_s < rule.max_time_s + 0.5  # one block past the cap at most (a loaded host: slack)
