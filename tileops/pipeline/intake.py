"""Node intake composed: ``tileops calibrate --check``, the step after a device's calibration.

The calibration has just written (or, under ``--max-age``, kept) each device's result in the ledger; here
each is read against its SKU's floors (``tileops.ledger.floors``, judged by ``tileops.ledger.intake``),
the verdict is said through the printer (the ceiling, the measured value, the floor and the gap of every
ceiling below its floor; one line when every floor is met; why, when no floor holds the SKU) and, with
``--textfile DIR``, exported for node_exporter (``tileops.export.intake``). The exit code follows:
``exitcodes.BELOW_FLOOR`` (6), ``exitcodes.NO_FLOOR`` (7), else 0 (``tileops.pipeline.outcome``).

A calibration refused as contended (or below the stored one beyond noise) was not stored, so there is no new
result of that device to judge: it is said ``NOT JUDGED`` (:func:`say_not_judged`) and the command exits as the
refusal does (5, or 8), neither a reject on a neighbour's load nor a pass; its textfile is left as it was. One
stored marked with ``--force`` is judged as measured, its mark named (``tileops.ledger.intake``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tileops.errors import TileOpsError

if TYPE_CHECKING:
    from tileops.ledger import DeviceCalibration
    from tileops.ledger.intake import CeilingCheck, IntakeVerdict
    from tileops.report.printer import Printer


@dataclass
class IntakeOutcome:
    """Every checked device's verdict, and the textfiles written."""

    verdicts: list[IntakeVerdict] = field(default_factory=list)
    written: list[str] = field(default_factory=list)

    @property
    def below_floor(self) -> bool:
        return any(v.state == "below_floor" for v in self.verdicts)

    @property
    def no_floor(self) -> bool:
        """A device no floor judged, or no device at all (never a silent pass)."""
        return not self.verdicts or any(v.state == "no_floor" for v in self.verdicts)

    def as_json(self) -> list[dict[str, object]]:
        return [{"device": v.device_key, "sku": v.sku, "state": v.state, "reason": v.reason or None,
                 "marked": v.marked or None,
                 "ceilings": [{"ceiling": c.floor.ceiling, "measured": c.measured, "floor": c.floor.rate,
                               "gap": c.gap, "source": c.floor.source} for c in v.checks]}
                for v in self.verdicts]


def _rate(value: float | None, ceiling: str) -> str:
    from tileops.ledger.intake import ceiling_unit

    return "not measured" if value is None else f"{value:.4g} {ceiling_unit(ceiling)}"


def _below(v: IntakeVerdict, c: CeilingCheck) -> str:
    gap = "" if c.gap is None else f", gap {c.gap:+.1%}"
    return (f"intake BELOW FLOOR: {v.device_key} ({v.device_name}) {c.floor.ceiling}: measured "
            f"{_rate(c.measured, c.floor.ceiling)}, floor {_rate(c.floor.rate, c.floor.ceiling)}{gap} "
            f"(floor: {c.floor.source})")


def _say(v: IntakeVerdict, printer: Printer, result: bool) -> None:
    if v.marked:
        printer.say(f"intake: {v.device_key} is judged on a calibration stored marked: {v.marked}", kind="warning",
                    result=result, bare=True)
    if v.state == "no_floor":
        fix = ("add a floors file for it (docs/profiles.md, 'Node intake floors')" if v.sku is None else
               "calibrate it again until its history holds enough results")
        printer.say(f"intake NO FLOOR: {v.device_key} ({v.device_name}): {v.reason}; nothing was judged "
                    f"(exit 7): {fix}", kind="error", result=result, bare=True)
        return
    for c in v.failing:
        printer.say(_below(v, c), kind="error", result=result, bare=True)
    if v.state == "below_floor":
        printer.say(f"intake REJECT: {v.device_key}: {len(v.failing)} of {len(v.checks)} ceilings below the "
                    f"floors of SKU {v.sku} (exit 6)", kind="error", result=result, bare=True)
        return
    nearest = min(v.checks, key=lambda c: c.gap or 0.0)
    printer.say(f"intake PASS: {v.device_key} ({v.device_name}) meets all {len(v.checks)} floors of SKU {v.sku}; "
                f"nearest: {nearest.floor.ceiling} {nearest.gap:+.1%} above its floor", result=result, bare=True)


def say_not_judged(device_key: str, reasons: Sequence[str], code: int, printer: Printer, result: bool) -> None:
    """A device whose calibration was refused (measured contended, or below the stored one beyond noise): it is
    not judged against its floors, since a figure a neighbour lowered is no reject and proves no pass."""
    printer.say(f"intake NOT JUDGED: {device_key}: its calibration was refused and not stored ({'; '.join(reasons)}); "
                f"nothing was judged (exit {code}): calibrate it again on an idle host", kind="error", result=result,
                bare=True)


def judge_runs(runs: Sequence[DeviceCalibration], store: Path | None) -> list[IntakeVerdict]:
    """Each run against its SKU's floors, with the profile its name selects and its stored history."""
    from tileops.ledger import load_device_history
    from tileops.ledger.floors import load_floors
    from tileops.ledger.intake import judge_intake
    from tileops.profiles import load_profiles, select_profile

    floors = load_floors(store)
    profiles = load_profiles(store_path=store)
    return [judge_intake(run, floors, select_profile(run.name, profiles), load_device_history(run.device_key, store))
            for run in runs]


def check_intake(runs: Sequence[DeviceCalibration], store: Path | None, printer: Printer,
                 textfile_dir: Path | None = None, now: dt.datetime | None = None,
                 on_stdout: bool = True) -> IntakeOutcome:
    """Judge, say and (with ``textfile_dir``) export each device's intake. The verdicts are the command's
    result, on stdout, unless stdout carries a JSON summary (``on_stdout`` False: they go to stderr).
    TileOpsError for a floors file that is not one, or a textfile directory that cannot be written."""
    from tileops.export.intake import write_intake_textfile

    outcome = IntakeOutcome(judge_runs(runs, store))
    now = now or dt.datetime.now(dt.timezone.utc)
    for run, verdict in zip(runs, outcome.verdicts):
        _say(verdict, printer, on_stdout)
        if textfile_dir is not None:
            try:
                outcome.written.append(str(write_intake_textfile(textfile_dir, run, verdict, now)))
            except OSError as exc:
                raise TileOpsError(f"cannot write the intake metrics to {textfile_dir}: {exc.strerror or exc}; "
                                   "give a writable --textfile directory") from None
    if not runs:
        printer.say("intake NO FLOOR: no device calibration to judge (exit 7)", kind="error", result=on_stdout,
                    bare=True)
    return outcome
