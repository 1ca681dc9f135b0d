"""An interleaved race: one row's backends timed in one worker, their blocks alternating (A B A B ...).

Why. A row run on several backends was timed one backend after another, each
in a visit of its own. The host drifts between those visits (issue 39 measured
relu move 130-151 µs across five processes on the 2-core VM), and that drift
entered the verdict "best backend". Blocks that alternate share the host's
state round by round: a slow stretch slows both backends' blocks of that
round, and the ratio of their block medians cancels it. So the race pairs the
blocks of each round and judges the backends on the median of the per-pair
ratios, with the house interval (``tileops.stats.ratio_interval``, a visit's
statistic over the ratios: the median of their logs, the biweight scale, the
median's variance factor, Student's t with pairs - 1 degrees of freedom).

What stays each backend's own. Every backend is prepared first, each compile
charged to its own compile allowance (the worker reports each one,
``tileops.bench.worker``); each keeps its own timer, stopping rule (the row's
budget per backend), blocks, timing and interval, and gets one record as a
sequential race gives it, with the race's pairing added (``Record.race``). The
backends stop together, once each one's own rule would stop it (its precision
or its time cap, counted on its own blocks), so that every round stays paired:
one whose rule stopped first goes on while another has not (an eager row
visited twice has half the budget of a compiled one, ``revisit``); only its
sample cap stops one alone. The sensors'
window covers the whole race: its contention is every backend's, its energy
cannot be shared out by call (it is left blank, saying why).

What fails alone. A backend whose preparation or one of whose blocks fails
leaves the race; the others race on. One that failed in a block is then
timed alone (``execute.measure_row``: a timer that can fall back does), and
its record, or its error, is written without a pairing. A crash that kills the
worker is the sweep's to handle (``tileops.bench.sweep``): it times the
backends one by one, so the crash falls on the one that caused it.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from dataclasses import dataclass, field
from collections.abc import Callable, Sequence

from tileops.bench.execute import (Entrant, Task, bind, error_record, ok_record, prepare, row_fields, row_sensors,
                                   time_alone, visit_probe, visit_timing, warm_up)
from tileops.bench.interval import BlockRule
from tileops.bench.stopping import SAMPLE_CAP
from tileops.bench.timers import Timer
from tileops.records import RacePairing, Record, RowConditions, Timing, utcnow
from tileops.stats import ratio_interval

#: What the worker tells its parent as a race goes: ("preparing", backend) before each backend's first call (its
#: compile allowance starts), ("prepared", backend) after it, ("timing", None) once the blocks start alternating.
Notify = Callable[[str, str | None], None]
#: The stopping reason that ends one backend's part of a race before the others: it holds all it may.
CAPS = (SAMPLE_CAP,)
ENERGY_SHARED = ("an interleaved race: the sensors' window holds every backend's calls, so its energy cannot be "
                 "shared out by call")


@dataclass(frozen=True)
class RaceTask:
    """One row on several backends, raced interleaved: a task per backend, the first the reference."""

    tasks: tuple[Task, ...]

    def __post_init__(self) -> None:
        if len(self.tasks) < 2:
            raise ValueError(f"a race needs two backends at least, got {len(self.tasks)}")
        if len({(t.op, t.label, t.case_name) for t in self.tasks}) != 1:
            raise ValueError("a race's tasks must be one row (op, label, dtype) on several backends")
        if len({t.backend for t in self.tasks}) != len(self.tasks):
            raise ValueError("a race's backends must differ")

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(t.backend for t in self.tasks)


# -- the paired statistic ---------------------------------------------------------------------------------------


def block_ratios(blocks: Sequence[Sequence[float]], reference: Sequence[Sequence[float]]) -> list[float]:
    """Per round of the race, this backend's block median over the reference's: the rounds both took."""
    return [statistics.median(a) / statistics.median(b) for a, b in zip(blocks, reference)]


def pairings(blocks: dict[str, list[list[float]]]) -> dict[str, RacePairing]:
    """Each raced backend's pairing (``blocks``: every backend's blocks, in race order; the first the reference)."""
    names = list(blocks)
    ref = names[0]
    out = {ref: RacePairing(backends=names, reference=ref)}
    for name in names[1:]:
        ratios = block_ratios(blocks[name], blocks[ref])
        centre, ci = ratio_interval(ratios)
        out[name] = RacePairing(backends=names, reference=ref, ratios=ratios, ratio=centre,
                                ratio_ci=[min(ci[0], centre), max(ci[1], centre)] if ci else None)
    return out


# -- alternating blocks ------------------------------------------------------------------------------------------


@dataclass
class Lane:
    """One backend's part of the race: its call, timer and rule, and what it took."""

    name: str
    fn: Callable[[], object]
    timer: Timer
    rule: BlockRule
    blocks: list[list[float]] = field(default_factory=list)
    warm: int = 0
    warm_s: float = 0.0
    elapsed_s: float = 0.0  # its own blocks, pauses and re-warm calls: what its rule's caps count
    next_k: int = 1
    stop_reason: str = ""
    failed: BaseException | None = None

    def start(self) -> None:
        """Warm up (untimed) and size the first block, as a visit of its own does (``execute._measure``)."""
        t0 = time.perf_counter()
        self.warm = warm_up(self.fn, self.timer, self.rule)
        self.warm_s = time.perf_counter() - t0
        if self.timer.first_batch > self.rule.least_block_samples:
            self.rule = dataclasses.replace(
                self.rule, min_block_samples=max(self.timer.first_batch, self.rule.min_block_samples),
                least_block_samples=self.timer.first_batch,
                max_block_samples=max(self.timer.first_batch, self.rule.max_block_samples))
        self.next_k = self.rule.first_block_size(self.warm_s / self.warm)

    def block(self, sleep: Callable[[float], None]) -> None:
        """One block: after the first, a pause and an untimed re-warm call, as ``interval.sample_blocks``."""
        t0 = time.perf_counter()
        if self.blocks:
            if self.rule.pause_s > 0:
                sleep(self.rule.pause_s)
            self.fn()
            self.timer.sync()
        b0 = time.perf_counter()
        got = list(self.timer.sample(self.fn, self.next_k))
        block_s = time.perf_counter() - b0
        if not got or not all(isinstance(x, float) and math.isfinite(x) and x > 0 for x in got):
            raise ValueError(f"the timer returned no usable sample for a block of {self.next_k}: {got[:4]!r}")
        self.blocks.append(got)
        self.elapsed_s += time.perf_counter() - t0
        self.next_k = self.rule.next_block_size(block_s, len(got), sum(len(b) for b in self.blocks),
                                                blocks=len(self.blocks), elapsed_s=self.elapsed_s)

    def timing(self) -> Timing:
        spans = self.timer.spans
        return visit_timing(self.blocks, timer=self.timer.kind, warmup=self.warm,
                            total_s=self.warm_s + self.elapsed_s, stop_reason=self.stop_reason,
                            fallback_reason=self.timer.fallback_reason,
                            span_s=statistics.median(spans) if spans else None)

    @property
    def calls(self) -> int:
        """Its calls in the race: warm-up, samples, and a re-warm call before each block but the first."""
        return self.warm + sum(len(b) for b in self.blocks) + max(0, len(self.blocks) - 1)


def alternate(lanes: Sequence[Lane], sleep: Callable[[float], None] = time.sleep,
              between: Callable[[], None] | None = None) -> None:
    """Time the lanes' blocks in rounds, one block of each running lane per round, in lane order, until every
    running lane's rule would stop (its precision, or its own time cap): then all stop together, so every round
    is paired; a lane whose rule stopped first keeps pace with the others. Only a lane's sample cap stops it
    alone. A lane whose block raises leaves the race (``Lane.failed``); the others go on. ``between``: called
    after each round but the last (the reference probe, ``tileops.bench.probe``), so one probe reading sees the
    device in the same moments as every backend."""
    for lane in lanes:
        try:
            lane.start()
        except Exception as exc:
            lane.failed = exc
    running = [lane for lane in lanes if lane.failed is None]
    while running:
        for lane in running:
            try:
                lane.block(sleep)
            except Exception as exc:
                lane.failed = exc
        running = [lane for lane in running if lane.failed is None]
        reasons = [lane.rule.decide(lane.blocks, lane.elapsed_s) for lane in running]
        every = all(reasons)
        for lane, why in zip(running, reasons):
            if why and (every or why in CAPS):
                lane.stop_reason = why
        running = [lane for lane in running if not lane.stop_reason]
        if running and between is not None:
            between()


# -- the race in the worker ------------------------------------------------------------------------------------


def _shared_window(conditions: RowConditions, calls: int) -> RowConditions:
    """The race's sensor window as one backend's record gives it: its own calls, the energy blank (shared)."""
    cpu, gpu = conditions.cpu, conditions.gpu
    if cpu is not None:
        cpu = dataclasses.replace(cpu, energy_j=None, blank={**cpu.blank, "energy_j": ENERGY_SHARED})
    if gpu is not None:
        gpu = dataclasses.replace(gpu, energy_j=None, blank={**gpu.blank, "energy_j": ENERGY_SHARED})
    return dataclasses.replace(conditions, calls=calls, cpu=cpu, gpu=gpu)


def prepare_all(race: RaceTask, cache_bytes: int | None, notify: Notify
                ) -> tuple[list[Entrant], dict[str, tuple[Record, list[list[float]]]]]:
    """Prepare every backend in turn (each one's first call, compilation included, reported to the parent, whose
    compile allowance is per backend); the prepared ones, and an error record for each that failed."""
    from tileops.device import read_clocks

    ready: list[Entrant] = []
    failed: dict[str, tuple[Record, list[list[float]]]] = {}
    for task in race.tasks:
        notify("preparing", task.backend)
        started, base = utcnow(), None
        try:
            bound = bind(task)
            base = row_fields(task, bound)
            ready.append(prepare(task, bound, base, cache_bytes, utcnow(), read_clocks(task.device)))
        except Exception as exc:
            failed[task.backend] = (error_record(task, exc, started, None, base), [])
        notify("prepared", task.backend)
    return ready, failed


def run_race(race: RaceTask, cache_bytes: int | None = None, notify: Notify | None = None
             ) -> list[tuple[Record, list[list[float]]]]:
    """Race the row's backends interleaved; one record per backend, in race order, each with the blocks it took
    (none for an error). Every failure of one backend becomes its error record (never an exception)."""
    say: Notify = notify or (lambda _what, _backend: None)
    ready, done = prepare_all(race, cache_bytes, say)
    say("timing", None)
    if len(ready) == 1:
        done[ready[0].task.backend] = time_alone(ready[0])
    elif ready:
        first = ready[0].task
        lanes = [Lane(e.task.backend, e.prepared.run, e.timer, e.task.rule) for e in ready]
        sensors = row_sensors(first.device, first.parent_pids, first.parent_pids_unknown)
        probe = visit_probe(first, ready[0].op)  # the device's state, one reading for every backend of the race
        sensors.start()
        try:
            alternate(lanes, between=probe.between if probe is not None else None)
        finally:
            conditions = sensors.stop()
        reading = probe.reading(sum(lane.warm_s + lane.elapsed_s for lane in lanes)) if probe is not None else None
        raced = {lane.name: lane.blocks for lane in lanes if lane.failed is None}
        paired = pairings(raced) if len(raced) >= 2 else {}
        for e, lane in zip(ready, lanes):
            if lane.failed is not None:
                done[lane.name] = time_alone(e)
                continue
            try:
                done[lane.name] = (ok_record(e, lane.timing(), _shared_window(conditions, lane.calls),
                                             paired.get(lane.name), reading), lane.blocks)
            except Exception as exc:
                done[lane.name] = (error_record(e.task, exc, e.started, e.clocks_before, e.base), [])
    return [done[b] for b in race.backends]
