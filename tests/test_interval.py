"""The median's rerun interval (tileops.bench.interval): its arithmetic, its stopping rule, its sampling plan,
its coverage of a rerun beside the back-to-back interval's (a cheap run of benchmarks/interval_coverage.py),
and one real CPU row measured twice."""

from __future__ import annotations

import importlib.util
import math
import random
import statistics
import sys
from pathlib import Path

import pytest

from tileops.bench.interval import (CPU_BLOCKS, GPU_BLOCKS, QUICK_BLOCKS, BlockRule, effective_blocks,
                                    rerun_interval, sample_blocks, t_quantile, visit_drift, visit_rules, widen)
from tileops.bench.stopping import NOISE_REACHED, SAMPLE_CAP, TIME_CAP, median_precision

ROOT = Path(__file__).resolve().parents[1]


# -- Student's t ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("df, expected", [(1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (9, 2.2622),
                                          (30, 2.0423), (1000, 1.9623)])
def test_t_quantile_matches_the_table(df: int, expected: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=2e-4)
    assert t_quantile(0.025, df) == pytest.approx(-expected, abs=2e-4)


def test_t_quantile_tends_to_the_normal_and_refuses_nonsense() -> None:
    assert t_quantile(0.975, 1e6) == pytest.approx(statistics.NormalDist().inv_cdf(0.975), abs=1e-4)
    assert t_quantile(0.5, 7) == pytest.approx(0.0, abs=1e-9)
    # a fractional df (an effective block count), checked against the density integrated by Simpson's rule
    df, q = 2.5, t_quantile(0.975, 2.5)
    pdf = lambda t: math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi) * (
        1 + t * t / df) ** (-(df + 1) / 2)
    n, h = 2000, q / 2000
    area = (pdf(0) + pdf(q) + sum((4 if i % 2 else 2) * pdf(i * h) for i in range(1, n))) * h / 3
    assert 0.5 + area == pytest.approx(0.975, abs=1e-6)
    for p, df in ((0.0, 3), (1.0, 3), (0.9, 0)):
        with pytest.raises(ValueError):
            t_quantile(p, df)


# -- the interval -----------------------------------------------------------------------------------------


def test_fewer_than_two_blocks_give_no_interval_and_bad_samples_are_refused() -> None:
    assert rerun_interval([]) is None
    assert rerun_interval([[1e-3, 2e-3, 3e-3]]) is None
    for bad in ([[1e-3], []], [[1e-3], [0.0]], [[1e-3], [-1e-3]], [[1e-3], [math.nan]], [[1e-3], [math.inf]]):
        with pytest.raises(ValueError, match="block 1"):
            rerun_interval(bad)
    with pytest.raises(ValueError, match="confidence"):
        rerun_interval([[1.0], [1.0]], confidence=1.0)
    with pytest.raises(ValueError, match="rerun_blocks"):
        rerun_interval([[1.0], [1.1]], rerun_blocks=0)


def test_the_interval_by_hand() -> None:
    """Four one-sample blocks, ln medians 0, 0.1, 0, 0.1 (alternating: no positive correlation, four blocks):
    h = t(0.975, 3) * stdev * sqrt(1/4 + 1/4), around the median of all samples."""
    e = math.exp(0.1)
    iv = rerun_interval([[1.0], [e], [1.0], [e]])
    assert iv is not None
    h = 3.18245 * statistics.stdev([0.0, 0.1, 0.0, 0.1]) * math.sqrt(0.5)
    med = (1.0 + e) / 2
    assert iv.median_s == pytest.approx(med)
    assert iv.pair == pytest.approx((med * math.exp(-h), med * math.exp(h)), rel=1e-4)
    assert iv.precision == pytest.approx(math.exp(h) - 1, rel=1e-4)
    assert (iv.blocks, iv.n, iv.confidence) == (4, 4, 0.95)
    # a rerun that averages more blocks moves less: a narrower interval; a lower level: narrower too
    assert rerun_interval([[1.0], [e], [1.0], [e]], rerun_blocks=400).precision < iv.precision
    assert rerun_interval([[1.0], [e], [1.0], [e]], confidence=0.8).precision < iv.precision


def test_blocks_that_agree_exactly_give_a_zero_width_interval() -> None:
    iv = rerun_interval([[2e-6, 2e-6, 2e-6]] * 5)
    assert iv is not None and iv.pair == (2e-6, 2e-6) and iv.precision == 0.0


def _lognormal_blocks(rng: random.Random, blocks: int, per: int, level: list[float], noise: float = 0.05
                      ) -> list[list[float]]:
    return [[level[i] * math.exp(rng.gauss(0, noise)) for _ in range(per)] for i in range(blocks)]


def test_a_stationary_stream_gives_a_narrow_interval_around_its_median() -> None:
    rng = random.Random(7)
    blocks = _lognormal_blocks(rng, 20, 10, [1e-3] * 20)
    iv = rerun_interval(blocks)
    assert iv is not None
    assert iv.lo_s <= 1e-3 <= iv.hi_s  # the stream's own median
    assert 0.002 < iv.precision < 0.03
    assert effective_blocks([math.log(statistics.median(b)) for b in blocks]) > 10  # nearly independent blocks


def test_a_drifting_stream_is_worth_fewer_blocks_than_the_same_blocks_shuffled() -> None:
    """A host slowing by 30 % over the row: consecutive blocks agree with each other more than with a rerun,
    so the interval is wider than that of the very same blocks in random order (order is the evidence)."""
    rng = random.Random(3)
    blocks = _lognormal_blocks(rng, 20, 8, [1e-3 * (1 + 0.3 * i / 19) for i in range(20)], noise=0.02)
    logs = [math.log(statistics.median(b)) for b in blocks]
    assert effective_blocks(logs) == pytest.approx(2.0)  # the correlation is clamped: two blocks' worth
    drifting = rerun_interval(blocks)
    shuffled = rerun_interval(random.Random(1).sample(blocks, len(blocks)))
    assert drifting is not None and shuffled is not None
    assert drifting.median_s == shuffled.median_s
    assert drifting.precision > 2 * shuffled.precision
    assert drifting.lo_s < 1e-3 and drifting.hi_s > 1.3e-3  # it spans the drift


def test_a_bimodal_stream_is_wide_where_the_back_to_back_interval_claims_a_few_percent() -> None:
    """Blocks in one of two regimes (a neighbour's job comes and goes): a rerun's median may land in either,
    and the interval says so; the order-statistic interval of the same samples taken back to back does not."""
    rng = random.Random(11)
    levels = [2e-3 if i in (2, 5, 6, 11, 14) else 1e-3 for i in range(16)]  # the neighbour runs 5 blocks in 16
    blocks = _lognormal_blocks(rng, 16, 12, levels, noise=0.02)
    iv = rerun_interval(blocks)
    assert iv is not None and iv.lo_s <= iv.median_s <= iv.hi_s
    assert iv.median_s < 1.1e-3 and iv.hi_s > 1.25e-3 and iv.precision > 0.2
    back_to_back = median_precision([x for b in blocks for x in b])
    assert back_to_back < 0.03 and iv.precision > 5 * back_to_back


# -- the stopping rule ------------------------------------------------------------------------------------


def test_the_rule_stops_on_the_interval_after_its_minimums() -> None:
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
    assert rule.next_block_size(0.003, 3, 3) == 20  # 1 ms a sample
    assert rule.next_block_size(0.3, 3, 3) == 3  # a slow op: the minimum
    assert rule.next_block_size(3e-5, 3, 3) == 64  # a fast op: the maximum
    assert rule.next_block_size(0.003, 3, 90) == 10  # never past the sample cap
    assert rule.next_block_size(0.0, 3, 3) == 64


def test_the_shipped_rules_are_consistent() -> None:
    for rule in (CPU_BLOCKS, GPU_BLOCKS, QUICK_BLOCKS):
        assert rule.min_time_s < rule.max_time_s and rule.min_blocks >= 5
        assert rule.min_blocks * rule.block_time_s <= rule.max_time_s  # the minimum fits in the cap
    assert GPU_BLOCKS.min_block_samples >= 10  # a GPU timer's batch (one profiler session per block)


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
    assert got.interval is not None and got.interval.pair == (1e-3, 1e-3) and got.interval.blocks == nblocks


def test_sample_blocks_stops_at_the_time_cap_with_a_wide_interval() -> None:
    row = FakeRow([1e-3, 1e-3, 1e-3, 3e-3, 3e-3, 3e-3], per_s=1e-3)  # blocks of 3 alternate 1 ms and 3 ms
    rule = BlockRule(target_precision=0.01, min_time_s=0.01, max_time_s=0.05, min_samples=3, min_blocks=3,
                     block_time_s=0.003, pause_s=0.0, min_block_samples=3, max_block_samples=3)
    got = sample_blocks(row.sample, rule, sleep=row.sleep, clock=lambda: row.t)
    assert got.stop_reason == TIME_CAP
    assert got.interval is not None and got.interval.precision > 0.3
    assert "pause" not in row.log  # no pause asked, none taken


def test_an_earlier_visit_counts_towards_the_interval_not_the_time() -> None:
    first = [[1e-3] * 5] * 3
    row = FakeRow([1e-3])
    rule = BlockRule(target_precision=0.01, min_time_s=0.0, max_time_s=1.0, min_samples=3, min_blocks=4,
                     block_time_s=0.003, pause_s=0.001, min_block_samples=3)
    got = sample_blocks(row.sample, rule, prior=first, sleep=row.sleep, clock=lambda: row.t)
    assert got.blocks[:3] == first and len(got.blocks) == 4  # one new block completes the minimum
    assert got.elapsed_s == pytest.approx(0.003)
    assert got.interval is not None and got.interval.n == 18
    with pytest.raises(ValueError, match="block 0"):
        sample_blocks(row.sample, rule, prior=[[]], sleep=row.sleep, clock=lambda: row.t)


def test_two_visits_share_the_budget_and_the_second_stops_on_both() -> None:
    first_rule, second_rule = visit_rules(CPU_BLOCKS)
    assert first_rule.max_time_s + second_rule.max_time_s == pytest.approx(CPU_BLOCKS.max_time_s)
    assert first_rule.min_blocks == CPU_BLOCKS.min_blocks // 2 and second_rule.min_blocks == CPU_BLOCKS.min_blocks
    row = FakeRow([1e-3])
    first = sample_blocks(row.sample, first_rule, sleep=row.sleep, clock=lambda: row.t)
    assert first.stop_reason == TIME_CAP  # the first visit never stops early, however tight
    second = sample_blocks(row.sample, second_rule, prior=first.blocks, sleep=row.sleep, clock=lambda: row.t)
    assert second.stop_reason == NOISE_REACHED and second.blocks[:len(first.blocks)] == first.blocks
    assert second.interval is not None and second.interval.blocks == len(second.blocks)


# -- the host's drift between a sweep's passes ------------------------------------------------------------


def test_a_host_that_slowed_between_passes_shows_its_drift() -> None:
    """Every row's second visit 10 % slower, no noise: the pooled drift is 1.4826 ln(1.1) / sqrt(2)."""
    rows = [([[t] * 4] * 4, [[t * 1.1] * 4] * 4) for t in (1e-4, 2e-4, 5e-4, 1e-3)]
    assert visit_drift(rows) == pytest.approx(1.4826 * math.log(1.1) / math.sqrt(2))
    assert visit_drift(rows[:2]) is None  # two rows are no pool


def test_the_drift_is_robust_to_a_burst_and_net_of_the_rows_own_noise() -> None:
    rng = random.Random(4)

    def visit(level: float) -> list[list[float]]:
        return _lognormal_blocks(rng, 6, 8, [level] * 6, noise=0.03)

    steady = [(visit(1e-3), visit(1e-3)) for _ in range(20)]
    burst = [([[1e-3] * 8] * 6, [[4e-2] * 8] * 6) for _ in range(3)]  # a neighbour ran during three rows
    got = visit_drift(steady + burst)
    assert got is not None and got < 0.01  # the blocks' own noise explains the visits' differences
    drifting = [(visit(1e-3), visit(1e-3 * math.exp(rng.gauss(0, 0.1)))) for _ in range(40)]
    got = visit_drift(drifting)
    assert got is not None and 0.03 < got < 0.12  # a drift of sigma 0.1 between the visits: 0.07 per visit


def test_widen_adds_the_drift_in_quadrature() -> None:
    iv = rerun_interval([[1.0], [1.02], [0.99], [1.01], [1.0]])
    assert iv is not None
    assert widen(iv, 0.0).pair == pytest.approx(iv.pair)
    w = widen(iv, 0.05)
    h = math.hypot(math.log(iv.hi_s / iv.median_s), statistics.NormalDist().inv_cdf(0.975) * math.sqrt(2) * 0.05)
    assert w.pair == pytest.approx((iv.median_s * math.exp(-h), iv.median_s * math.exp(h)))
    assert w.median_s == iv.median_s and (w.blocks, w.n) == (iv.blocks, iv.n)
    for bad in (-0.1, math.nan, math.inf):
        with pytest.raises(ValueError, match="drift_sigma"):
            widen(iv, bad)


def test_a_timer_that_returns_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="no sample"):
        sample_blocks(lambda k: [], QUICK_BLOCKS, sleep=lambda s: None)


# -- coverage of a rerun: the benchmark's simulation, small ----------------------------------------------


def _coverage_module():
    name = "benchmarks_interval_coverage"
    if name not in sys.modules:  # registered first: its dataclasses look their module up while being built
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "interval_coverage.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def test_blocks_cover_a_rerun_far_better_than_back_to_back_samples() -> None:
    """The simulated host of benchmarks/interval_coverage.py (seeded): where its speed drifts on the row's time
    scale, the back-to-back interval covers a rerun's median about one time in ten, the blocks' most times;
    on a stationary host both are near their level and the blocks' reaches it."""
    cov = _coverage_module()
    drift = next(s for s in cov.SCENARIOS if s.name == "drift")
    b2b = cov.simulate(drift, cov.PLANS["back to back"], rows=24)
    blk = cov.simulate(drift, cov.PLANS["blocks"], rows=24)
    assert b2b.share < 0.3 and blk.share > 0.55 and blk.share > b2b.share + 0.35
    stationary = cov.SCENARIOS[0]
    assert cov.simulate(stationary, cov.PLANS["blocks"], rows=24).share >= 0.8


# -- a real CPU row, measured twice ----------------------------------------------------------------------


def test_a_real_cpu_row_measured_twice_by_the_block_plan() -> None:
    import torch

    from tileops.bench.timers import CacheFlusher, CpuWallTimer

    x = torch.randn(512, 1024)
    fn = lambda: torch.relu(x)
    timer = CpuWallTimer(CacheFlusher("cpu", 4 * 2**20))
    rule = BlockRule(target_precision=0.02, min_time_s=0.02, max_time_s=0.25, min_samples=6, min_blocks=4,
                     block_time_s=0.01, pause_s=0.002, min_block_samples=2)
    fn()
    runs = []
    for _ in range(2):
        rewarms = []
        got = sample_blocks(lambda k: timer.sample(fn, k), rule, rewarm=lambda: rewarms.append(fn()))
        runs.append(got)
        iv = got.interval
        assert iv is not None
        assert got.stop_reason in (NOISE_REACHED, TIME_CAP)
        assert len(got.blocks) >= rule.min_blocks or got.stop_reason == TIME_CAP
        assert len(rewarms) == len(got.blocks) - 1
        assert all(len(b) >= rule.min_block_samples and all(s > 0 for s in b) for b in got.blocks)
        assert iv.lo_s <= iv.median_s <= iv.hi_s and iv.median_s == statistics.median(got.samples)
        assert iv.blocks == len(got.blocks) and iv.n == len(got.samples)
        assert got.elapsed_s >= (len(got.blocks) - 1) * rule.pause_s
        assert got.elapsed_s < rule.max_time_s + 0.5  # one block past the cap at most (a loaded host: slack)
    pooled = rerun_interval(runs[0].blocks + runs[1].blocks)
    assert pooled is not None and pooled.blocks == len(runs[0].blocks) + len(runs[1].blocks)
