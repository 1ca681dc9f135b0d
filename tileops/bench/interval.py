"""One visit of a row: samples taken in blocks spread over the visit, where its time sits, how well the visit knows
it, and the fastest time its blocks allow.

Why blocks. Samples taken back to back share the machine's state: its clocks,
the other jobs on the host, the pages the inputs landed on, the state of the
thread pool. An interval over them says how well *this stretch of time* knows
its own median and shrinks as 1/sqrt(n) however little the stretch says about
the next one (issue 26: rows that stopped at ±1 % moved 25–37 % between
repeats). So a visit is sampled in *blocks*: a few samples each, separated by a
pause (the machine moves on) and an untimed call that re-warms what the pause
let go cold (a CPU's sleeping pool threads). Each block's median is one
observation of the visit.

A visit (:class:`Visit`). In log space (timing noise is multiplicative and a
time must stay positive), the visit's centre is the median of its blocks' log
medians, and its spread the robust scale of those about the centre
(``tileops.stats.robust_scale``): one block that a neighbour slowed
threefold moves neither (issue 34 measured the old mean and standard deviation
move the interval from ±1.7 % to ±18.2 % on one such block in twenty). The
centre's standard error is the spread times the median's variance factor over
the blocks. That is all a visit can know: variation slower than a visit (the
process's page placement, the host's drift over minutes) looks constant to
every one of its blocks. The sweep visits each row twice, each visit in its own
worker process, and ``tileops.bench.hostnoise`` turns the visits of all rows
into each row's interval.

The stopping rule (:class:`BlockRule`) stops a visit when its centre's 95 %
half-width is under ``target_precision``, after ``min_blocks`` blocks,
``min_samples`` samples and ``min_time_s``; otherwise at ``max_time_s`` or
``max_samples`` (both counted per visit: :func:`visit_rule` gives each of a
row's two visits half of the row's budget, the same for both).

The fast end (:func:`fast_interval`). Contention, throttling and page faults
only ever make a timed call slower. So the fastest blocks say the most about
the call's own speed, and noise cannot make them faster than the call can run.
Each block's median is an upper bound of the call's noise-free time up to the
call's own symmetric jitter (the spread of samples within blocks, pooled);
the fastest block's median plus that jitter's one-sided bound (Bonferroni over
the blocks) is a time the noise-free call is at most, with 99 % confidence,
whatever the host did: what the physics check judges a breach on.

From nvbench (github.com/NVIDIA/nvbench at 66212f1, ``nvbench/detail/stdrel_criterion.cxx``)
the knobs carry over (a minimum time before any stop, a noise target) and its
"cold" measurement, a cache flush before every sample (our timers do it); its
statistic on back-to-back samples does not. Standard library only (spec §5.2).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field, replace
from collections.abc import Callable, Sequence
from typing import Any

from tileops.defaults import STOPPING
from tileops.stats import median_variance_factor, robust_scale, t_quantile, two_sided_t
from tileops.bench.stopping import NOISE_REACHED, SAMPLE_CAP, TIME_CAP

#: The intervals' level: a rerun's level falls inside the prediction this often; the level inside its interval.
CONFIDENCE = 0.95
#: The fast end's error rate: the noise-free time is above :func:`fast_interval`'s top this rarely (one-sided).
FAST_ALPHA = 0.01


def checked_blocks(blocks: Sequence[Sequence[float]]) -> list[list[float]]:
    """The blocks as lists; ValueError naming the block with no sample or a sample that is no time."""
    out = []
    for i, block in enumerate(blocks):
        if not block:
            raise ValueError(f"block {i} holds no sample")
        for x in block:
            if not (isinstance(x, (int, float)) and math.isfinite(x) and x > 0):
                raise ValueError(f"block {i}: a sample must be a positive finite number of seconds, got {x!r}")
        out.append(list(block))
    return out


# -- one visit ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Visit:
    """Where one visit's time sits and how well the visit alone knows it (log space, natural log)."""

    centre_s: float  # exp(median of the blocks' ln medians)
    spread: float | None  # robust sd of the blocks' ln medians about the centre; None with one block
    blocks: int
    n: int

    @property
    def log_centre(self) -> float:
        return math.log(self.centre_s)

    @property
    def se(self) -> float | None:
        """The standard error of ``ln centre`` from the visit's own blocks; None with one block."""
        if self.spread is None:
            return None
        return self.spread * math.sqrt(median_variance_factor(self.blocks))

    def half_width(self, confidence: float = CONFIDENCE) -> float | None:
        """The relative 95 % half-width of the centre from the visit's own blocks (t with blocks - 1 df)."""
        se = self.se
        if se is None:
            return None
        return math.expm1(two_sided_t(confidence, self.blocks - 1) * se)


def visit_of(blocks: Sequence[Sequence[float]]) -> Visit:
    """A visit's statistics from its blocks (ValueError on no block, an empty one or a sample that is no time)."""
    checked = checked_blocks(blocks)
    if not checked:
        raise ValueError("a visit needs at least one block of samples")
    logs = [math.log(statistics.median(b)) for b in checked]
    centre = statistics.median(logs)
    spread = robust_scale(logs, centre) if len(logs) >= 2 else None
    if spread is not None and spread < 1e-12:
        spread = 0.0  # blocks that agree exactly (a mean's rounding is no spread)
    return Visit(centre_s=math.exp(centre), spread=spread, blocks=len(logs), n=sum(len(b) for b in checked))


# -- the fast end ---------------------------------------------------------------------------------------------


def within_block_noise(blocks: Sequence[Sequence[float]]) -> tuple[float, float] | None:
    """The call's own jitter and the degrees of freedom it is known to: the sd of ln samples within a block,
    from the differences of consecutive samples (each has twice the variance, and needs no centre, whose
    estimate would bias a small block's spread low), pooled robustly over the faster half of the blocks of two
    samples or more (a neighbour's slices inflate a block's spread with its median: the cleanest blocks show
    the call's own), about half as many degrees of freedom as differences (each sample is in two); None when
    no block has two."""
    multi = [b for b in blocks if len(b) >= 2]
    if len(multi) >= 4:
        cut = statistics.median(statistics.median(b) for b in multi)
        multi = [b for b in multi if statistics.median(b) <= cut]
    diffs = [math.log(b) - math.log(a) for block in multi for a, b in zip(block, block[1:])]
    if not diffs:
        return None
    return robust_scale(diffs, 0.0) / math.sqrt(2.0), max(1.0, len(diffs) / 2.0)


def fast_interval(blocks: Sequence[Sequence[float]], alpha: float = FAST_ALPHA) -> tuple[float, float] | None:
    """``(lo, hi)`` around the fastest block's median, seconds: the noise-free call takes at most ``hi`` (with
    probability 1 - ``alpha``, however much the host slowed the blocks), and ``lo`` is the fastest its readings
    allow. Each block's median is widened by the call's own jitter (:func:`within_block_noise`) at the
    one-sided Bonferroni quantile over the blocks (Student's, for the jitter's own uncertainty). None when the
    jitter cannot be told (no block of two samples) and there is a single block."""
    checked = checked_blocks(blocks)
    if not checked:
        return None
    jitter = within_block_noise(checked)
    meds = [(statistics.median(b), len(b)) for b in checked]
    if jitter is None:  # blocks of one sample: the spread of the blocks themselves (slowdowns included: wider)
        if len(meds) < 2:
            return None
        logs = [math.log(m) for m, _ in meds]
        jitter = robust_scale(logs, min(logs)), len(logs) - 1.0
    noise, df = jitter
    z = t_quantile(1.0 - alpha / len(meds), df)
    hi = min(m * math.exp(z * noise * math.sqrt(median_variance_factor(k))) for m, k in meds)
    lo = min(m * math.exp(-z * noise * math.sqrt(median_variance_factor(k))) for m, k in meds)
    return lo, hi


# -- the plan and its stopping rule ------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockRule:
    """How a visit is sampled in blocks, and when it stops. The first six knobs mean what ``StoppingRule``'s do
    (``target_precision`` bounds the visit centre's relative 95 % half-width); ``max_time_s`` and
    ``max_samples`` are the visit's (:func:`visit_rule` halves a row's)."""

    target_precision: float = 0.02
    min_time_s: float = 0.1
    max_time_s: float = 1.0
    min_samples: int = 10
    max_samples: int = 2000
    warmup_s: float = 0.01
    min_blocks: int = 8  # below this the t quantile (df = blocks - 1) makes any interval wide
    block_time_s: float = 0.02  # each block's sampling time: blocks are sized to it from the last one
    pause_s: float = 0.01  # between blocks (the machine moves on); counts towards the visit's time
    min_block_samples: int = 3  # a block's median needs a few samples (a GPU timer: its batch)
    max_block_samples: int = 64
    confidence: float = CONFIDENCE
    #: the smallest block a slow row's first ``min_blocks`` blocks shrink to so that they fit before the time cap
    #: (:meth:`fitting`): one sample on a CPU, a GPU timer's batch
    least_block_samples: int = 1

    def __post_init__(self) -> None:
        if self.min_blocks < 2:
            raise ValueError(f"min_blocks must be at least 2 (an interval needs two blocks), got {self.min_blocks}")
        if not 1 <= self.least_block_samples <= self.min_block_samples <= self.max_block_samples:
            raise ValueError(f"need 1 <= least_block_samples <= min_block_samples <= max_block_samples, got "
                             f"{self.least_block_samples}, {self.min_block_samples} and {self.max_block_samples}")
        if self.target_precision <= 0 or self.max_time_s <= 0 or self.pause_s < 0 or self.block_time_s <= 0:
            raise ValueError("target_precision, max_time_s and block_time_s must be > 0, pause_s >= 0")

    def decide(self, blocks: Sequence[Sequence[float]], elapsed_s: float) -> str | None:
        """The reason to stop the visit now, or None to take another block (``blocks``: this visit's)."""
        n = sum(len(b) for b in blocks)
        if n >= self.max_samples:
            return SAMPLE_CAP
        # A slow row's first block shrinks to fewer than min_block_samples (:meth:`fitting`): its second block
        # then waits for no cap, and the two cost the calls the one block of min_block_samples would have.
        if elapsed_s >= self.max_time_s and n >= 1 and (len(blocks) >= 2 or n >= self.min_block_samples):
            return TIME_CAP
        if len(blocks) >= self.min_blocks and n >= self.min_samples and elapsed_s >= self.min_time_s:
            h = visit_of(blocks).half_width(self.confidence)
            if h is not None and h <= self.target_precision:
                return NOISE_REACHED
        return None

    def next_block_size(self, last_block_s: float, last_block_n: int, taken: int, *, blocks: int,
                        elapsed_s: float) -> int:
        """Samples in the next block: as many as fill ``block_time_s`` at the last block's pace, within bounds;
        while the visit has fewer than ``min_blocks`` (``blocks`` taken, ``elapsed_s`` spent), no more than
        lets them all fit before the time cap (:meth:`fitting`)."""
        per_sample = last_block_s / last_block_n if last_block_n else 0.0
        k = round(self.block_time_s / per_sample) if per_sample > 0 else self.max_block_samples
        k = max(self.min_block_samples, min(k, self.max_block_samples, max(1, self.max_samples - taken)))
        return min(k, self.fitting(per_sample, blocks, elapsed_s))

    def first_block_size(self, pace_s: float | None) -> int:
        """The visit's first block: ``min_block_samples``, fewer for a row whose calls (``pace_s`` each, from its
        warm-up) would leave no room for its other blocks before the time cap (:meth:`fitting`)."""
        return min(self.min_block_samples, self.fitting(pace_s or 0.0, 0, 0.0))

    def fitting(self, per_sample_s: float, blocks: int, elapsed_s: float) -> int:
        """The largest block that still lets the visit take ``min_blocks`` blocks before its time cap, each block
        after the first behind a pause and a re-warm call; never below ``least_block_samples`` (where even blocks
        of that size cannot fit, the cap ends the visit with fewer and its record says how many it has).

        Why: a row slower than the block time was sampled in blocks of ``min_block_samples``, so a call of a
        third of the cap made one block, and its visit no interval of its own (issue 37: ``--quick`` gemm,
        ``n=3``). Single samples cost no more time and make as many blocks as the cap holds."""
        need = self.min_blocks - blocks
        if need <= 0 or per_sample_s <= 0:
            return self.max_block_samples
        gaps = need if blocks else need - 1  # a pause and a re-warm call before every block but the first
        room = self.max_time_s - elapsed_s - gaps * (self.pause_s + per_sample_s)
        fit = math.floor(room / (need * per_sample_s)) if room > 0 else 0
        return max(self.least_block_samples, min(fit, self.max_block_samples))


def visit_rule(rule: BlockRule, visits: int = 2) -> BlockRule:
    """The rule of each of a row's ``visits`` visits: the row's time and sample budgets split equally (its
    minimum time too, and at least half its minimum blocks), so the visits weigh alike in the row's level."""
    if visits <= 1:
        return rule
    return replace(rule, max_time_s=rule.max_time_s / visits, min_time_s=rule.min_time_s / visits,
                   max_samples=max(rule.min_samples, rule.max_samples // visits),
                   min_blocks=max(2, rule.min_blocks // visits))


def _settable(rule: str) -> dict[str, Any]:
    """The settings of ``rule`` a person may change, as the command line shows them (``tileops.defaults``)."""
    got = dict(STOPPING[rule])
    got["min_samples"] = int(got["min_samples"])
    return got


CPU_BLOCKS = BlockRule(**_settable("cpu"), warmup_s=0.01, min_blocks=8, block_time_s=0.02, pause_s=0.01)
GPU_BLOCKS = BlockRule(**_settable("cuda"), warmup_s=0.025, min_blocks=8, block_time_s=0.05, pause_s=0.02,
                       min_block_samples=10)
QUICK_BLOCKS = BlockRule(**_settable("quick"), warmup_s=0.002, min_blocks=5, block_time_s=0.01, pause_s=0.005)


@dataclass
class BlockSampling:
    """What one visit of a row collected: its blocks, why it stopped, how long it took, its statistics."""

    blocks: list[list[float]] = field(default_factory=list)
    stop_reason: str = ""
    elapsed_s: float = 0.0

    @property
    def samples(self) -> list[float]:
        return [x for block in self.blocks for x in block]

    @property
    def visit(self) -> Visit:
        return visit_of(self.blocks)


def sample_blocks(sample: Callable[[int], Sequence[float]], rule: BlockRule, *,
                  rewarm: Callable[[], None] | None = None, between: Callable[[], None] | None = None,
                  sleep: Callable[[float], None] = time.sleep,
                  clock: Callable[[], float] = time.perf_counter, pace_s: float | None = None) -> BlockSampling:
    """Sample one visit block by block until ``rule`` stops; ``sample(k)`` times ``k`` repetitions (a timer's).

    Between blocks: ``between()`` (e.g. rebuild the inputs), a pause of ``rule.pause_s``, then ``rewarm()``
    (one untimed call, synchronised), so the pause costs the next block nothing. ``pace_s``: a call's time as
    the warm-up saw it, which sizes the first block of a slow row (:meth:`BlockRule.first_block_size`).
    ``sleep`` and ``clock`` are injectable for tests and simulations.
    """
    out = BlockSampling()
    t0 = clock()
    k = rule.first_block_size(pace_s)
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
        out.blocks.append(checked_blocks([block])[0])
        out.elapsed_s = clock() - t0
        reason = rule.decide(out.blocks, out.elapsed_s)
        if reason:
            out.stop_reason = reason
            break
        k = rule.next_block_size(block_s, len(block), sum(len(b) for b in out.blocks), blocks=len(out.blocks),
                                 elapsed_s=out.elapsed_s)
    return out
