"""Backends side by side: a row (op, label, dtype on one device) run on several backends, its best and by
how much (the SOL ratios of one call compare implementations directly)."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Iterable

from tileops.records import Record
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
    """

    key: RaceKey
    efficiency: dict[str, float | None]  # every backend of the row, in run order: its SOL ratio or None
    best: str | None  # None when no backend of the row was priced
    runner_up: str | None = None

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

    def as_dict(self) -> dict:
        device, op, label, dtype = self.key
        return {"device": device, "op": op, "label": label, "dtype": dtype, "efficiency": dict(self.efficiency),
                "best": self.best, "runner_up": self.runner_up, "margin": self.margin, "speedup": self.speedup}


def race_key(record: Record) -> RaceKey:
    """The row a record is one backend of: its device, op, label and dtype."""
    return (record.env.device_uuid or record.env.device_name, record.op, record.label, record.dtype)


def compare_backends(priced: Iterable[Priced]) -> dict[RaceKey, BackendRace]:
    """Every row that ran on more than one backend, by :func:`race_key`, with its best backend and margin.

    A tie keeps the backend that ran first. Rows on one backend are left out: there is nothing to compare.
    """
    return backend_races(priced)[0]


class RaceTally:
    """Every row's backends and their SOL ratios, gathered row by row (:func:`backend_races` over a
    stream), mergeable across consecutive parts of a run; :meth:`races` decides once all are in."""

    __slots__ = ("groups",)

    def __init__(self) -> None:
        self.groups: dict[RaceKey, dict[str, float | None]] = {}  # row -> {backend: SOL ratio}, in run order

    def add(self, key: RaceKey, backend: str, efficiency: float | None) -> None:
        effs = self.groups.get(key)
        if effs is None:
            self.groups[key] = {backend: efficiency}
        else:
            effs[backend] = efficiency

    def merge(self, later: RaceTally) -> None:
        """Add the rows of the next part of the run (the same as adding them here one by one)."""
        groups = self.groups
        for key, theirs in later.groups.items():
            effs = groups.get(key)
            if effs is None:
                groups[key] = theirs
            else:
                effs.update(theirs)

    def races(self) -> dict[RaceKey, BackendRace]:
        """Every row that ran on more than one backend: its best backend (a tie keeps the first) and margin."""
        races: dict[RaceKey, BackendRace] = {}
        for key, effs in self.groups.items():
            if len(effs) < 2:
                continue
            ranked = sorted((e, -i, b) for i, (b, e) in enumerate(effs.items()) if e is not None)  # ties: first
            best = ranked[-1][2] if ranked else None
            races[key] = BackendRace(key, effs, best, ranked[-2][2] if len(ranked) > 1 else None)
        return races


def backend_races(priced: Iterable[Priced]) -> tuple[dict[RaceKey, BackendRace], list[BackendRace | None]]:
    """:func:`compare_backends`, and each priced row's race in the same order (None for a row on one
    backend): one pass for a renderer that shows both."""
    tally = RaceTally()
    keys: list[RaceKey] = []
    for p in priced:
        key = race_key(p.record)
        keys.append(key)
        tally.add(key, p.record.backend, p.efficiency)
    races = tally.races()
    return races, [races.get(k) for k in keys]
