"""What a report says about the SOL gap split, the power states and the energy of a run, counted row by row.

Why here. Each row's fields (``gap``, ``power_state``, ``energy_j_per_call``, ...)
are in the machine formats (``tileops.report.columns``); a person reading the
table needs the audited rows' split in words, and one line each for how many
rows ran under a power or thermal cap (and which ceiling priced them) and how
many have an energy reading, with the reason the rest have none. Like
:class:`~tileops.report.summary.RunFacts`, which holds one of these, it is
filled one priced row at a time and merges with a later part of the run.
"""

from __future__ import annotations

import tileops.report.columns as columns
from tileops.report.texttable import TextTable
from tileops.roofline import GapSplit, Priced, power_state, row_energy
from tileops.roofline.power import POWER_CAPPED, POWER_CAPPED_THERMAL, THERMAL

#: Audited rows the table shows with their split; the rest are counted (each row's split is in roofline.json).
GAP_ROWS_SHOWN = 50
#: The gap table's columns.
GAP_COLUMNS = ("op", "label", "dtype", "backend", "SOL", "bytes moved / minimum", "at the bytes moved",
               "bound there", "note")
GAP_RIGHT = frozenset({"SOL", "bytes moved / minimum", "at the bytes moved"})


def _count(into: dict[str, int], key: str, n: int = 1) -> None:
    into[key] = into.get(key, 0) + n


class ConditionFacts:
    """The gap split's rows and blanks, the power states, and the energy readings of a run (mergeable)."""

    __slots__ = ("gap_rows", "gap_split", "gap_blank", "power", "capped_basis", "energy", "energy_blank")

    def __init__(self) -> None:
        self.gap_rows: list[tuple[str, ...]] = []  # the first GAP_ROWS_SHOWN split rows, as the table shows them
        self.gap_split = 0
        self.gap_blank: dict[str, int] = {}  # why a row of an audited run has no split -> rows
        self.power: dict[str, int] = {}  # power state -> GPU rows
        self.capped_basis: dict[str, int] = {}  # basis (burst, sustained) -> power-capped rows priced on it
        self.energy = 0  # rows with joules per call
        self.energy_blank: dict[str, int] = {}  # why a row has no joules per call (its head, energy_head) -> rows

    def add(self, p: Priced) -> None:
        r = p.record
        g = p.gap
        if isinstance(g, GapSplit):
            self.gap_split += 1
            if len(self.gap_rows) < GAP_ROWS_SHOWN:
                self.gap_rows.append(gap_cells(p, g))
        elif g is not None:
            _count(self.gap_blank, g.why)
        state = power_state(r)
        if state is not None:
            _count(self.power, state)
            if state == POWER_CAPPED and p.ceiling_basis is not None:
                _count(self.capped_basis, p.ceiling_basis)
        if r.status == "ok" and r.timing is not None and r.conditions is not None:  # older records: no line
            e = row_energy(r)
            if e.joules_per_call is not None:
                self.energy += 1
            else:
                _count(self.energy_blank, energy_head(e.blank.get("joules_per_call", "no energy reading")))

    def merge(self, later: ConditionFacts) -> None:
        self.gap_rows = (self.gap_rows + later.gap_rows)[:GAP_ROWS_SHOWN]
        self.gap_split += later.gap_split
        self.energy += later.energy
        for mine, theirs in ((self.gap_blank, later.gap_blank), (self.power, later.power),
                             (self.capped_basis, later.capped_basis), (self.energy_blank, later.energy_blank)):
            for k, n in theirs.items():
                _count(mine, k, n)

    def gap_table(self) -> TextTable | None:
        """The audited rows' split, as the table report draws it under the rows (None: no row was split)."""
        if not self.gap_rows:
            return None
        more = self.gap_split - len(self.gap_rows)
        t = TextTable(GAP_COLUMNS, right=GAP_RIGHT,
                      title="SOL gap, split by the audit's DRAM traffic (SOL = at the bytes moved / traffic cost)"
                      + (f": the first {len(self.gap_rows)} of {self.gap_split} rows" if more > 0 else ""))
        for cells in self.gap_rows:
            t.add(*cells)
        return t

    def lines(self) -> list[str]:
        """The summary's lines: the gap split, the power states, the energy readings (none where nothing of
        the kind is in the run)."""
        out: list[str] = []
        if self.gap_split or self.gap_blank:
            out.append(f"SOL gap split by the audit's DRAM traffic: {self.gap_split} row(s) (each row's `gap` in "
                       "--format json|csv)")
            for why, n in sorted(self.gap_blank.items(), key=lambda kv: (-kv[1], kv[0])):
                out.append(f"SOL gap not split: {n} row(s): {why}")
        if self.power:
            capped = self.power.get(POWER_CAPPED, 0)
            basis = ", ".join(f"{n} against the {b} ceiling" for b, n in sorted(self.capped_basis.items()))
            parts = [f"{capped} under a power cap" + (f" ({basis})" if basis else "")] if capped else []
            for state, words in ((THERMAL, "under a thermal cap (priced on the burst ceiling: a cooling fault, "
                                           "not a steady state)"),
                                 (POWER_CAPPED_THERMAL, "under both caps (priced on the burst ceiling)")):
                if self.power.get(state):
                    parts.append(f"{self.power[state]} {words}")
            if parts:
                out.append("power: " + "; ".join(parts) + f", of {sum(self.power.values())} GPU row(s) read")
        if self.energy or self.energy_blank:
            line = f"energy: {self.energy} row(s) with joules per call"
            if self.energy_blank:
                line += "; none for " + "; ".join(f"{n} row(s): {why}" for why, n in
                                                 sorted(self.energy_blank.items(), key=lambda kv: (-kv[1], kv[0])))
            out.append(line)
        return out


def energy_head(why: str) -> str:
    """What a reason for no energy reading says before its parentheses: ``no RAPL energy counter``. The whole
    sentence, where it is and what to do, is each row's ``energy_blank``; the bench says it once per host
    (tileops.pipeline.hostnotes), not under every run."""
    return why.split(" (", 1)[0]


def gap_cells(p: Priced, g: GapSplit) -> tuple[str, ...]:
    """One split row as the gap table shows it."""
    r = p.record
    return (r.op, r.label, r.dtype, r.backend, columns.percent(g.efficiency), f"{g.traffic_ratio:.2f}x",
            columns.percent(g.achieved), g.bound_at_moved, g.note)
