"""Backends side by side: a row (op, label, dtype on one device) run on several backends, its best and by
how much (the SOL ratios of one call compare implementations directly).

Whether the best is ahead beyond noise is judged, where the row was raced
interleaved (``Record.race``: its backends' blocks alternated in one worker,
issue 39), on the paired ratio: the best's time over the runner-up's, block
pair by block pair, whose interval the host's drift does not widen (it slowed
both blocks of a pair alike). A row raced sequentially (older records, or
``--race sequential``) is judged on its backends' own intervals, as before."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterable

from tileops.records import RacePairing, Record
from tileops.stats import ratio_interval
from tileops.roofline.price import Priced

RaceKey = tuple[str, str, str, str]  # (device, op, label, dtype)


@dataclass(frozen=True)
class BackendRace:
    """The backends one row (op, label, dtype on one device) ran on, side by side.

    Every backend of a row makes the same call, so the formula prices the same
    minimum traffic and the same SOL time for each: their SOL ratios compare the
    implementations directly (the higher, the faster). Only priced rows take part
    (a blank, error or skipped backend has no SOL, and its verdict says why);
    ``best`` is the highest SOL and ``margin`` how far ahead of the next it is,
    in SOL points (0.25 = 25 points), None when no other backend was priced.
    ``within_noise`` says when the intervals cannot tell the best from the
    runner-up: the ranking is then a point's, and a rerun may swap them.
    """

    key: RaceKey
    efficiency: dict[str, float | None]  # every backend of the row, in run order: its SOL ratio or None
    best: str | None  # None when no backend of the row was priced
    runner_up: str | None = None
    #: each priced backend's SOL interval (``Priced.sol_ci``), None where its record has none
    intervals: dict[str, tuple[float, float] | None] = field(default_factory=dict)
    #: each backend's pairing where the row was raced interleaved (``Record.race``)
    pairings: dict[str, RacePairing] = field(default_factory=dict)

    @property
    def within_noise(self) -> bool:
        """Whether the best is ahead of the runner-up only within noise (a rerun may rank them the other way):
        raced interleaved, the paired interval of the best's time over the runner-up's reaches 1; else the low
        end of the best's SOL interval is not above the top of the runner-up's. False when neither can be told
        (older records: ranked on the points, as before)."""
        return self.best is not None and self.runner_up is not None and self.overlaps_best(self.runner_up)

    def overlaps_best(self, backend: str) -> bool:
        """Whether ``backend`` may be as fast as the best: the paired interval of the best's time over its time
        reaches 1 where both were raced interleaved, else its SOL interval reaches the best's; False without
        either."""
        if backend == self.best or self.best is None:
            return False
        paired = self.paired_ci(backend)
        if paired is not None:
            return paired[1] >= 1.0
        mine, best = self.intervals.get(backend), self.intervals.get(self.best)
        return mine is not None and best is not None and mine[1] >= best[0]

    def paired_ci(self, backend: str) -> tuple[float, float] | None:
        """The 95 % interval of the best's time over ``backend``'s, from the block pairs of their interleaved
        race (below 1: the best is faster); None where they were not raced together or paired fewer than two
        blocks."""
        if self.best is None:
            return None
        return paired_interval(self.pairings.get(self.best), self.pairings.get(backend))

    @property
    def paired(self) -> bool:
        """Whether the best and the runner-up are judged on their paired interval (an interleaved race)."""
        return self.runner_up is not None and self.paired_ci(self.runner_up) is not None

    @property
    def margin(self) -> float | None:
        """Best SOL minus the runner-up's, as a ratio (None without a runner-up)."""
        best, runner_up = self._priced(self.best), self._priced(self.runner_up)
        if best is None or runner_up is None:
            return None
        return best - runner_up

    @property
    def speedup(self) -> float | None:
        """How many times faster the best runs than the runner-up (their SOL ratio; same SOL time)."""
        best, runner_up = self._priced(self.best), self._priced(self.runner_up)
        if best is None or not runner_up:
            return None
        return best / runner_up

    def behind(self, backend: str) -> float | None:
        """How far ``backend`` is behind the best, in SOL points (0 for the best; None when not priced)."""
        eff, best = self.efficiency.get(backend), self._priced(self.best)
        if eff is None or best is None:
            return None
        return best - eff

    def _priced(self, backend: str | None) -> float | None:
        """A ranked backend's SOL ratio (the best and the runner-up are priced by construction)."""
        return None if backend is None else self.efficiency[backend]

    def as_dict(self) -> dict[str, Any]:
        device, op, label, dtype = self.key
        return {"device": device, "op": op, "label": label, "dtype": dtype, "efficiency": dict(self.efficiency),
                "best": self.best, "runner_up": self.runner_up, "margin": self.margin, "speedup": self.speedup,
                "within_noise": self.within_noise, "paired_ci": self._paired_list()}

    def _paired_list(self) -> list[float] | None:
        ci = self.paired_ci(self.runner_up) if self.runner_up is not None else None
        return list(ci) if ci is not None else None


def paired_interval(a: RacePairing | None, b: RacePairing | None) -> tuple[float, float] | None:
    """The interval of backend ``a``'s time over backend ``b``'s from one interleaved race's block pairs (each
    pairing holds its ratios over the race's reference; the reference's own are ones); None where they are not of
    one race or pair fewer than two blocks."""
    if a is None or b is None or (a.backends, a.reference) != (b.backends, b.reference):
        return None
    ra, rb = a.ratios, b.ratios
    n = max(len(ra), len(rb)) if not (ra and rb) else min(len(ra), len(rb))  # the reference's ratios are ones
    if n < 2:
        return None
    ratios = [(ra[i] if ra else 1.0) / (rb[i] if rb else 1.0) for i in range(n)]
    return ratio_interval(ratios)[1]


def race_key(record: Record) -> RaceKey:
    """The row a record is one backend of: its device, op, label and dtype."""
    return (record.env.device.uuid or record.env.device.name, record.op, record.label, record.dtype)


def compare_backends(priced: Iterable[Priced]) -> dict[RaceKey, BackendRace]:
    """Every row that ran on more than one backend, by :func:`race_key`, with its best backend and margin.

    A tie keeps the backend that ran first. Rows on one backend are left out: there is nothing to compare.
    """
    return backend_races(priced)[0]


class RaceTally:
    """Every row's backends and their SOL ratios, gathered row by row (:func:`backend_races` over a
    stream), mergeable across consecutive parts of a run; :meth:`races` decides once all are in."""

    __slots__ = ("groups", "intervals", "pairings")

    def __init__(self) -> None:
        self.groups: dict[RaceKey, dict[str, float | None]] = {}  # row -> {backend: SOL ratio}, in run order
        self.intervals: dict[RaceKey, dict[str, tuple[float, float] | None]] = {}  # row -> {backend: sol_ci}
        self.pairings: dict[RaceKey, dict[str, RacePairing]] = {}  # row -> {backend: its interleaved race}

    def add(self, key: RaceKey, backend: str, efficiency: float | None,
            interval: tuple[float, float] | None = None, race: RacePairing | None = None) -> None:
        effs = self.groups.get(key)
        if effs is None:
            self.groups[key] = {backend: efficiency}
        else:
            effs[backend] = efficiency
        if interval is not None:
            self.intervals.setdefault(key, {})[backend] = interval
        if race is not None:
            self.pairings.setdefault(key, {})[backend] = race

    def merge(self, later: RaceTally) -> None:
        """Add the rows of the next part of the run (the same as adding them here one by one)."""
        groups = self.groups
        for key, theirs in later.groups.items():
            effs = groups.get(key)
            if effs is None:
                groups[key] = theirs
            else:
                effs.update(theirs)
        for key, ivs in later.intervals.items():
            self.intervals.setdefault(key, {}).update(ivs)
        for key, races in later.pairings.items():
            self.pairings.setdefault(key, {}).update(races)

    def races(self) -> dict[RaceKey, BackendRace]:
        """Every row that ran on more than one backend: its best backend (a tie keeps the first) and margin."""
        races: dict[RaceKey, BackendRace] = {}
        for key, effs in self.groups.items():
            if len(effs) < 2:
                continue
            ranked = sorted((e, -i, b) for i, (b, e) in enumerate(effs.items()) if e is not None)  # ties: first
            best = ranked[-1][2] if ranked else None
            races[key] = BackendRace(key, effs, best, ranked[-2][2] if len(ranked) > 1 else None,
                                     dict(self.intervals.get(key, {})), dict(self.pairings.get(key, {})))
        return races


def backend_races(priced: Iterable[Priced]) -> tuple[dict[RaceKey, BackendRace], list[BackendRace | None]]:
    """:func:`compare_backends`, and each priced row's race in the same order (None for a row on one
    backend): one pass for a renderer that shows both."""
    tally = RaceTally()
    keys: list[RaceKey] = []
    for p in priced:
        key = race_key(p.record)
        keys.append(key)
        tally.add(key, p.record.backend, p.efficiency, p.sol_ci, p.record.race)
    races = tally.races()
    return races, [races.get(k) for k in keys]
