"""The median's interval that covers a rerun: samples taken in blocks spread over the row, judged by the blocks.

Why not the back-to-back interval (``stopping.median_precision``). Samples taken
back to back share the machine's state: its clocks, the other jobs on the host,
the pages the inputs landed on, the state of the thread pool. The order-statistic
interval over them says how well *this stretch of time* knows its own median,
and shrinks as 1/sqrt(n) however little the stretch says about the next one.
Issue 26 measured it: rows that stopped at ±1 % had medians 25–37 % apart from
one repeat to the next on a quiet host. The unit of independent evidence is not
a sample but a stretch of time.

The plan. A row is sampled in *blocks*: a few samples each, separated by a pause
(the machine moves on: other jobs run, clocks settle) and an untimed call that
re-warms what the pause let go cold (a CPU's sleeping pool threads: without it
the first sample of each block pays their wake-up and the pause would bias the
row). The caller may also pass ``between``, run at each pause: the executor can
rebuild the inputs there, so allocation (pages, alignment) varies between blocks
as it varies between runs. Each block's median is one observation of the row.

The estimator. A rerun reports the median of its own samples, so the question
is where a rerun's median falls. With B block medians m_i, in log space (timing
noise is multiplicative, and the interval must stay positive), the spread s of
ln m_i estimates how much a block's median moves; a rerun under the same plan
averages B blocks of its own, as this run did, so the difference of the two
runs' centres has variance s^2 (1/B + 1/B). The interval is therefore the
Student-t *prediction* interval for a rerun,
``median * exp(± t(B-1) * s * sqrt(2/B))``, centred on the median of all samples
(the number the record reports, so the interval always contains it). It is
wider than a confidence interval of the true median by sqrt(2): that is what
"covers what a rerun gives" costs, and it is what a comparison of two runs and
an alert on a run's bound need. The t quantile keeps a few blocks honest; a
disturbed block widens the interval rather than being trimmed away, because a
rerun may meet the same disturbance. Blocks of a host whose speed wanders on
the row's own time scale agree with their neighbours more than with a rerun, so
B is replaced by the effective count B (1 - r) / (1 + r), r the lag-1
correlation of the block medians in time order (:func:`effective_blocks`);
without it the interval of a drifting host is far too narrow
(``benchmarks/interval_coverage.py``, scenario ``drift``, shows by how much).

What it cannot see. Variation slower than the row (the machine's state drifting
over seconds to minutes) looks like a constant to every block of the row. So a
sweep visits each row twice (``tileops.bench.revisit``: budgets from
:func:`visit_rules`, the second visit given the first's blocks as ``prior``).
The row's own interval is then the within-visit one (each visit's blocks about
their own mean: ``visit_start``), and the rows' two visits, pooled over the
sweep, measure the host's drift (:func:`visit_drift`), which :func:`widen` adds
to every row's interval. ``benchmarks/interval_coverage.py`` shows the coverage
each plan reaches, and docs/timing.md what the bench measured on a real host.

The stopping rule stops on this interval: when its relative half-width is under
``target_precision``, after ``min_blocks`` blocks, ``min_samples`` samples and
``min_time_s``; otherwise at ``max_time_s`` or ``max_samples``.

From nvbench (github.com/NVIDIA/nvbench at 66212f1, ``nvbench/detail/stdrel_criterion.cxx``,
``entropy_criterion.cxx``): its knobs (a minimum time before any stop, a noise
target) carry over, and so does its "cold" measurement, a cache flush before
every sample (our timers do it). Its stopping statistics do not: ``stdrel``
stops on stdev/mean of the samples, which does not shrink with more samples (so
a noisy row runs to its timeout; nvbench escapes that by stopping when the
noise estimate itself has stopped moving, a 5 % relative stdev over its last 64
estimates), and ``entropy`` stops when the entropy of the sample histogram stops
growing (the slope and r^2 of a regression over a trailing window). Both judge
back-to-back samples, so both share the flaw above; the block plan replaces the
statistic, not the knobs. Standard library only (spec §5.2).
"""

from __future__ import annotations

import math
import statistics
import time
from functools import lru_cache
from dataclasses import dataclass, field, replace
from collections.abc import Callable, Sequence

from tileops.bench.stopping import NOISE_REACHED, SAMPLE_CAP, TIME_CAP
from tileops.records.contract import relative_half_width

#: The interval's default level: a rerun's median falls inside it this often (independent blocks).
CONFIDENCE = 0.95


# -- Student's t, from the standard library ------------------------------------------------------------


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
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


@lru_cache(maxsize=512)
def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`; cached,
    since a stopping rule asks for the same few after every block)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
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


# -- the interval -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MedianInterval:
    """The median of all samples and the interval a rerun's median falls in (seconds)."""

    median_s: float
    lo_s: float
    hi_s: float
    blocks: int
    n: int
    confidence: float = CONFIDENCE

    @property
    def pair(self) -> tuple[float, float]:
        """``(lo, hi)``: what a record's ``timing.median_ci_s`` holds."""
        return (self.lo_s, self.hi_s)

    @property
    def precision(self) -> float:
        """The relative half-width, on the wider side: what ``target_precision`` is compared with and what a
        progress line prints as ``± x %``."""
        return relative_half_width(self.median_s, self.lo_s, self.hi_s)


def _checked(blocks: Sequence[Sequence[float]]) -> list[list[float]]:
    out = []
    for i, block in enumerate(blocks):
        if not block:
            raise ValueError(f"block {i} holds no sample")
        for x in block:
            if not (isinstance(x, (int, float)) and math.isfinite(x) and x > 0):
                raise ValueError(f"block {i}: a sample must be a positive finite number of seconds, got {x!r}")
        out.append(list(block))
    return out


#: The largest lag-1 correlation of block medians the effective count believes (beyond it, two blocks).
MAX_CORRELATION = 0.95


def effective_blocks(logs: Sequence[float]) -> float:
    """How many independent blocks the series is worth: B (1 - r) / (1 + r), r its lag-1 correlation.

    Consecutive blocks of a host whose speed wanders on the row's time scale agree with each other more
    than with a rerun: their spread understates how far the row's median moves. An AR(1) series of B
    values has the variance of its mean of B (1 - r) / (1 + r) independent ones. r is estimated from the
    series in time order, corrected for its small-sample bias (about -(1 + 4 r) / B), and held to
    [0, MAX_CORRELATION]; the count is at least 2.
    """
    b = len(logs)
    if b < 3:
        return float(b)
    mean = statistics.fmean(logs)
    dev = [y - mean for y in logs]
    ss = sum(d * d for d in dev)
    if ss == 0:
        return float(b)
    r = sum(x * y for x, y in zip(dev, dev[1:])) / ss
    r = min(MAX_CORRELATION, max(0.0, r + (1.0 + 4.0 * r) / b))
    return max(2.0, b * (1.0 - r) / (1.0 + r))


def rerun_interval(blocks: Sequence[Sequence[float]], confidence: float = CONFIDENCE,
                   rerun_blocks: int | None = None, visit_start: int = 0) -> MedianInterval | None:
    """The interval a rerun's median falls in, from blocks of samples; None with fewer than two blocks.

    ``rerun_blocks`` is how many blocks the rerun averages (default: as many as here, the same plan).
    ``visit_start``: the blocks before it are an earlier visit's (the sweep's first pass). The interval is then
    the *within-visit* one: each visit's block medians are taken about their own mean, so the shift between the
    visits (the host's drift over half a sweep) is left to :func:`widen`, which prices it from every row's pair
    of visits pooled (:func:`visit_drift`) instead of from this row's one pair (a t quantile of one degree of
    freedom: intervals a hundred times the median). Raises ValueError on an empty block or a sample that is
    not a positive finite number.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    checked = _checked(blocks)
    if len(checked) < 2:
        return None
    if rerun_blocks is not None and rerun_blocks < 1:
        raise ValueError(f"rerun_blocks must be at least 1, got {rerun_blocks}")
    everything = [x for block in checked for x in block]
    median = statistics.median(everything)
    logs = [math.log(statistics.median(block)) for block in checked]
    visits = [logs[:visit_start], logs[visit_start:]] if 0 < visit_start < len(logs) else [logs]
    centred = [y - statistics.fmean(v) for v in visits for y in v]
    b = len(logs)
    df_lost = len(visits)  # one mean per visit
    if b - df_lost < 1:
        return None
    s = math.sqrt(sum(d * d for d in centred) / (b - df_lost))
    s = 0.0 if s < 1e-12 else s  # blocks that agree exactly (a mean's rounding is no spread)
    eff = effective_blocks(centred)
    other = eff if rerun_blocks is None else rerun_blocks * eff / b
    df = max(1.0, round(eff - df_lost, 2))  # rounded: the cached quantile is then asked for few distinct df
    h = t_quantile(0.5 + confidence / 2.0, df) * s * math.sqrt(1.0 / eff + 1.0 / other)
    return MedianInterval(median_s=median, lo_s=median * math.exp(-h), hi_s=median * math.exp(h), blocks=b,
                          n=len(everything), confidence=confidence)


# -- the host's drift between visits -----------------------------------------------------------------------


def visit_drift(rows: Sequence[tuple[Sequence[Sequence[float]], Sequence[Sequence[float]]]]) -> float | None:
    """The host's drift between a sweep's two passes, pooled over its rows: sigma of ln(speed), or None.

    Each row gives ``(first visit's blocks, second visit's blocks)``. Its d = ln(median of the second) -
    ln(median of the first) is the host's drift over half a sweep (twice a visit's variance) plus each visit's
    own noise, which its blocks' spread estimates (s^2 / B per visit). Pooled robustly, so a neighbour's burst
    during a few rows does not widen every row: the spread of d is 1.4826 x the median |d| (a normal d's), the
    noise the rows' median, and sigma^2 = (spread^2 - noise) / 2, at least 0. Memory- and thread-bound rows
    share the host's state (a neighbouring VM's memory traffic moves every one of them and shows in no /proc
    counter), so a sweep's rows, pooled, measure what a single row cannot. None below three rows.
    """
    ds, noise = [], []
    for first, second in rows:
        visits = [_checked(first), _checked(second)]
        if not all(visits):
            continue
        meds = [statistics.median([x for blk in v for x in blk]) for v in visits]
        ds.append(math.log(meds[1] / meds[0]))
        noise.append(sum(statistics.variance([math.log(statistics.median(b)) for b in v]) / len(v)
                         for v in visits if len(v) >= 2))
    if len(ds) < 3:
        return None
    spread = 1.4826 * statistics.median(abs(d) for d in ds)
    return math.sqrt(max(0.0, spread * spread - statistics.median(noise)) / 2.0)


def drift_half_width(drift_sigma: float, confidence: float = CONFIDENCE) -> float:
    """The relative half-width the drift alone gives a row's interval (what :func:`widen` adds, as a share)."""
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2.0)
    return math.exp(z * math.sqrt(2.0) * drift_sigma) - 1.0


def widen(interval: MedianInterval, drift_sigma: float) -> MedianInterval:
    """The interval with the host's drift added: a rerun's level differs from this run's by a drift of variance
    2 sigma^2, independent of the row's own noise, so the log half-widths add in quadrature (the drift's at the
    normal quantile: it is pooled over many rows)."""
    if not (math.isfinite(drift_sigma) and drift_sigma >= 0):
        raise ValueError(f"drift_sigma must be a finite number >= 0, got {drift_sigma!r}")
    h_row = math.log(interval.hi_s / interval.median_s)
    h = math.hypot(h_row, math.log1p(drift_half_width(drift_sigma, interval.confidence)))
    m = interval.median_s
    return MedianInterval(median_s=m, lo_s=m * math.exp(-h), hi_s=m * math.exp(h), blocks=interval.blocks,
                          n=interval.n, confidence=interval.confidence)


# -- the plan and its stopping rule ------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockRule:
    """How a row is sampled in blocks, and when it stops. The first six knobs mean what ``StoppingRule``'s do
    (``target_precision`` now bounds the rerun interval's relative half-width)."""

    target_precision: float = 0.02
    min_time_s: float = 0.1
    max_time_s: float = 1.0
    min_samples: int = 10
    max_samples: int = 2000
    warmup_s: float = 0.01
    min_blocks: int = 8  # below this the t quantile (df = blocks - 1) makes any interval wide
    block_time_s: float = 0.02  # each block's sampling time: blocks are sized to it from the last one
    pause_s: float = 0.01  # between blocks (the machine moves on); counts towards the row's time
    min_block_samples: int = 3  # a block's median needs a few samples (a GPU timer: its batch)
    max_block_samples: int = 64
    confidence: float = CONFIDENCE

    def __post_init__(self) -> None:
        if self.min_blocks < 2:
            raise ValueError(f"min_blocks must be at least 2 (an interval needs two blocks), got {self.min_blocks}")
        if not 1 <= self.min_block_samples <= self.max_block_samples:
            raise ValueError(f"need 1 <= min_block_samples <= max_block_samples, got {self.min_block_samples} "
                             f"and {self.max_block_samples}")
        if self.target_precision <= 0 or self.max_time_s <= 0 or self.pause_s < 0 or self.block_time_s <= 0:
            raise ValueError("target_precision, max_time_s and block_time_s must be > 0, pause_s >= 0")

    def decide(self, blocks: Sequence[Sequence[float]], elapsed_s: float, visit_start: int = 0) -> str | None:
        """The reason to stop now, or None to take another block (``visit_start``: as :func:`rerun_interval`)."""
        n = sum(len(b) for b in blocks)
        if n >= self.max_samples:
            return SAMPLE_CAP
        if elapsed_s >= self.max_time_s and n >= 1:
            return TIME_CAP
        if len(blocks) >= self.min_blocks and n >= self.min_samples and elapsed_s >= self.min_time_s:
            iv = rerun_interval(blocks, self.confidence, visit_start=visit_start)
            if iv is not None and iv.precision <= self.target_precision:
                return NOISE_REACHED
        return None

    def next_block_size(self, last_block_s: float, last_block_n: int, taken: int) -> int:
        """Samples in the next block: as many as fill ``block_time_s`` at the last block's pace, within bounds."""
        per_sample = last_block_s / last_block_n if last_block_n else 0.0
        k = round(self.block_time_s / per_sample) if per_sample > 0 else self.max_block_samples
        return max(self.min_block_samples, min(k, self.max_block_samples, max(1, self.max_samples - taken)))


def visit_rules(rule: BlockRule) -> tuple[BlockRule, BlockRule]:
    """A row's budget split over two visits (a sweep's two passes): the first takes half the time, whatever its
    interval (its minimum time is its cap); the second, given the first's blocks as ``prior``, stops on the
    interval of both within the other half."""
    half = rule.max_time_s / 2
    first = replace(rule, max_time_s=half, min_time_s=half, min_blocks=max(2, rule.min_blocks // 2))
    return first, replace(rule, max_time_s=rule.max_time_s / 2)


CPU_BLOCKS = BlockRule(target_precision=0.02, min_time_s=0.1, max_time_s=1.0, min_samples=10, warmup_s=0.01,
                       min_blocks=8, block_time_s=0.02, pause_s=0.01)
GPU_BLOCKS = BlockRule(target_precision=0.01, min_time_s=0.2, max_time_s=5.0, min_samples=10, warmup_s=0.025,
                       min_blocks=8, block_time_s=0.05, pause_s=0.02, min_block_samples=10)
QUICK_BLOCKS = BlockRule(target_precision=0.05, min_time_s=0.02, max_time_s=0.15, min_samples=6, warmup_s=0.002,
                         min_blocks=5, block_time_s=0.01, pause_s=0.005)


@dataclass
class BlockSampling:
    """What one visit of a row collected: its blocks (earlier visits' first), why it stopped, its interval."""

    blocks: list[list[float]] = field(default_factory=list)
    stop_reason: str = ""
    elapsed_s: float = 0.0
    interval: MedianInterval | None = None

    @property
    def samples(self) -> list[float]:
        return [x for block in self.blocks for x in block]


def sample_blocks(sample: Callable[[int], Sequence[float]], rule: BlockRule, *,
                  rewarm: Callable[[], None] | None = None, between: Callable[[], None] | None = None,
                  prior: Sequence[Sequence[float]] = (), sleep: Callable[[float], None] = time.sleep,
                  clock: Callable[[], float] = time.perf_counter) -> BlockSampling:
    """Sample a row block by block until ``rule`` stops; ``sample(k)`` times ``k`` repetitions (a timer's).

    Between blocks: ``between()`` (e.g. rebuild the inputs), a pause of ``rule.pause_s``, then ``rewarm()``
    (one untimed call, synchronised), so the pause costs the next block nothing. ``prior`` holds the blocks
    of an earlier visit of the same row: they count towards the interval and the block and sample minimums,
    not towards this visit's time. ``sleep`` and ``clock`` are injectable for tests and simulations.
    """
    out = BlockSampling(blocks=[list(b) for b in _checked(prior)])
    t0 = clock()
    k = rule.min_block_samples
    first = True
    while True:
        if not first:
            if between is not None:
                between()
            if rule.pause_s > 0:
                sleep(rule.pause_s)
            if rewarm is not None:
                rewarm()
        first = False
        b0 = clock()
        block = list(sample(k))
        block_s = clock() - b0
        if not block:
            raise ValueError(f"the timer returned no sample for a block of {k}")
        out.blocks.append(block)
        out.elapsed_s = clock() - t0
        reason = rule.decide(out.blocks, out.elapsed_s, visit_start=len(prior))
        if reason:
            out.stop_reason = reason
            break
        k = rule.next_block_size(block_s, len(block), sum(len(b) for b in out.blocks))
    out.interval = rerun_interval(out.blocks, rule.confidence, visit_start=len(prior))
    return out
