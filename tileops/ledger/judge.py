"""Whether a new calibration may replace its device's stored one: measured on a quiet host, and no ceiling below
the stored calibration's by more than their noise.

Why. A calibration is the ceiling every later row of its device is priced against, so a low one is not a
figure among others: it makes every row read too well. Issue 37 saw it: a calibration taken while other work
ran gave a memory envelope of 37 GB/s where 51.6 GB/s was stored, and every row then read 124-161 % of it and
stayed ``unstable``, with nothing tying either to the calibration. So before a calibration is stored it is
judged here, and one that fails is refused (nothing stored, the stored one stands) or, when the person says so,
stored marked (:class:`~tileops.ledger.model.CalibrationMark`), and every row priced on it says why.

Two findings, either enough:

- **contended**: the calibration's own look at the host (``DeviceCalibration.host``: the bench's rules, before,
  per step and over the whole measurement) found other work competing with it;
- **a drop**: a ceiling (a memory mix or a compute roof) measured below the same ceiling of the stored
  calibration of the same mode (quick with quick, full with full: they measure different sizes; the newest
  kept that is not itself marked; none once the device's current result was removed, which is how a device is
  calibrated afresh) by more than its noise. A ceiling's noise is the largest of (a) the two
  calibrations' own spreads (each measurement's median repetition over its best: how far this one and the
  stored one wandered, ``spread``), combined, (b) ``HISTORY_SDS`` robust standard deviations of the ceiling
  over the device's own kept history of that mode (at least ``MIN_HISTORY`` results), and (c) the documented
  floor of its device kind (``DROP_FLOOR``): repeated quiet calibrations of one CPU host spread by up to about
  10 % with turbo and page placement (the same figure the CPU intake floors' 15 % margin rests on), a GPU's by
  a few percent (the ``TileOpsCalibrationDrop`` alert fires at 10 %). A rise is never refused: noise only ever
  slows a measurement down.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from tileops.ledger.model import CONTENDED_REASON, CalibrationMark, DeviceCalibration
from tileops.ledger.store import devices_dir, load_device_history, read_device_result
from tileops.profiles import ProfileError
from tileops.stats import robust_scale

#: The least relative drop that counts, by device kind (docs/profiles.md, "A calibration looks at its host").
DROP_FLOOR = {"cpu": 0.15, "cuda": 0.10}
#: How many of the history's robust standard deviations a drop must exceed.
HISTORY_SDS = 3.0
#: The fewest earlier results of the same mode the history's spread is taken from.
MIN_HISTORY = 3


@dataclass(frozen=True)
class Drop:
    """One ceiling measured below the stored calibration's by more than its noise."""

    ceiling: str  # ``memory.<mix>`` or a roof key
    measured: float  # bytes/s or FLOP/s
    stored: float
    tolerance: float  # the relative drop its noise allows
    noise: str  # which of the three set the tolerance, in words

    @property
    def fall(self) -> float:
        return 1.0 - self.measured / self.stored

    def describe(self, reference: str) -> str:
        return (f"{self.ceiling} measured {_rate(self.measured, self.ceiling)}, {self.fall:.0%} below the stored "
                f"{_rate(self.stored, self.ceiling)} ({reference}), beyond its noise of {self.tolerance:.0%} "
                f"({self.noise})")


@dataclass(frozen=True)
class Judgement:
    """What :func:`judge_calibration` found: the host's contention reasons and the ceilings that dropped."""

    contended: list[str] = field(default_factory=list)
    drops: list[Drop] = field(default_factory=list)
    reference: str | None = None  # the stored calibration's run id the ceilings were compared with
    reference_at: str = ""  # when it finished, for a person

    @property
    def ok(self) -> bool:
        return not self.contended and not self.drops

    def reasons(self) -> list[str]:
        """One phrase per finding, for a person (and for the mark a forced store carries)."""
        out = [CONTENDED_REASON + "; ".join(self.contended)] if self.contended else []
        ref = f"calibration {self.reference}, {self.reference_at}" if self.reference else "the stored calibration"
        return out + [d.describe(ref) for d in self.drops]

    def mark(self, by: str) -> CalibrationMark:
        return CalibrationMark(reasons=self.reasons(), by=by, compared_with=self.reference if self.drops else None)


def _rate(value: float, ceiling: str) -> str:
    unit = "B/s" if ceiling.startswith("memory.") else "FLOP/s"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _ceilings(run: DeviceCalibration) -> dict[str, tuple[float, float | None]]:
    """Every ceiling ``run`` measured: rate and own spread."""
    out: dict[str, tuple[float, float | None]] = {f"memory.{m}": (x.bytes_per_s, x.spread)
                                                  for m, x in run.mixes.items()}
    out.update({k: (x.flops_per_s, x.spread) for k, x in run.roofs.items()})
    return out


def stored_results(device_key: str, store: Path | None = None) -> list[DeviceCalibration]:
    """The device's kept results, newest first: its current file and its history (a store written before
    history existed has only the former). None at all when the current file is gone: removing it is how a
    device is calibrated afresh (docs/deploy.md, after a driver or firmware roll-out), so nothing older is held
    against it. Unreadable files are skipped: they cannot be compared with."""
    current = devices_dir(store) / f"{device_key}.yaml"
    if not current.is_file():
        return []
    runs = {r.run_id: r for r in load_device_history(device_key, store)}
    try:
        cur = read_device_result(current)
        runs.setdefault(cur.run_id, cur)
    except ProfileError:
        pass
    return sorted(runs.values(), key=lambda r: r.finished_at, reverse=True)


def comparable(run: DeviceCalibration, stored: list[DeviceCalibration]) -> list[DeviceCalibration]:
    """The stored results ``run`` is compared with: same mode, not marked, not ``run`` itself, newest first."""
    return [s for s in stored if s.run_id != run.run_id and s.quick == run.quick and s.marked is None]


def _tolerance(kind: str, ceiling: str, spread: float | None, ref_spread: float | None,
               history: list[DeviceCalibration]) -> tuple[float, str]:
    floor = DROP_FLOOR.get(kind, DROP_FLOOR["cpu"])
    options = [(floor, f"the {kind} floor")]
    if spread is not None or ref_spread is not None:
        both = 1.0 - 1.0 / ((1.0 + (spread or 0.0)) * (1.0 + (ref_spread or 0.0)))
        options.append((both, "the two calibrations' own spreads"))
    past = [math.log(c[0]) for h in history if (c := _ceilings(h).get(ceiling)) is not None]
    if len(past) >= MIN_HISTORY:
        sd = robust_scale(past)
        options.append((1.0 - math.exp(-HISTORY_SDS * sd), f"{HISTORY_SDS:g} sd of its last {len(past)} results"))
    return max(options)


def judge_calibration(run: DeviceCalibration, store: Path | None = None,
                      stored: list[DeviceCalibration] | None = None) -> Judgement:
    """``run`` before it is stored: its host's contention (``run.host``) and each ceiling against the device's
    stored calibration of the same mode (``stored``: the device's kept results, default read from ``store``)."""
    contended = list(run.host.reasons) if run.host is not None and run.host.contended else []
    history = comparable(run, stored if stored is not None else stored_results(run.device_key, store))
    if not history:
        return Judgement(contended)
    ref = history[0]
    theirs = _ceilings(ref)
    drops = []
    for ceiling, (rate, spread) in _ceilings(run).items():
        if ceiling not in theirs:
            continue
        stored_rate, ref_spread = theirs[ceiling]
        tolerance, why = _tolerance(run.kind, ceiling, spread, ref_spread, history)
        if rate < stored_rate * (1.0 - tolerance):
            drops.append(Drop(ceiling, rate, stored_rate, tolerance, why))
    return Judgement(contended, drops, ref.run_id, f"{ref.finished_at:%Y-%m-%d %H:%M} UTC")
