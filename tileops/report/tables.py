"""The roofline report in four formats, built row by row: a terminal table, markdown, CSV, JSON.

All four read their cells from ``tileops.report.columns`` so the columns agree.
The human formats group rows by op; the machine formats are flat, one row per
record, base units.

A report is filled one priced row at a time (:meth:`Report.add`) and keeps
only what its output needs: the rendered text of each row (about the size of
the output), or for a table of more than :data:`SUMMARISE_ABOVE` rows only the
digest a person reads (per-op counts, the rows that need attention, the
lowest-efficiency rows). So a run of any size streams through and the records
themselves are never all held. Reports of consecutive parts of a run merge
(:meth:`Report.merge`), which lets ``tileops roofline`` read a large file in
parallel. The summary under each report is `tileops.report.summary`.
"""

from __future__ import annotations

import csv
import heapq
import json
from typing import Any, TextIO
from collections.abc import Callable, Iterable, Sequence

import tileops.report.columns as columns
from tileops.report.encode import Lines, csv_line, json_row
from tileops.report.baseline import Comparison, RowChange
from tileops.report.conditions import GAP_COLUMNS, GAP_RIGHT
from tileops.report.summary import EVERYTHING_HINT, ITEM, VERDICT_ORDER, RunFacts, shown_verdict
from tileops.report.texttable import TextTable, ansi, fold
from tileops.roofline import BLANK_ERROR, BackendRace, Health, Priced, RaceKey, race_key

VERDICT_STYLE = {
    "at-ceiling": "bold green",
    "below": "",
    "anomaly": "bold magenta",
    "latency-bound": "yellow",
    "unstable": "yellow",
    "blank": "dim",
    "error": "red",
}
#: The table format prints every row up to this many; above it, a digest (``--full-table`` prints all).
SUMMARISE_ABOVE = 500
#: Rows that need attention (breaches, anomalies, errors) listed in a digest; the rest are counted.
ATTENTION_SHOWN = 50
#: Lowest-efficiency rows listed per op in a digest.
WORST_PER_OP = 3
#: FORMULA ERROR sentences in a digest's summary; the rest are counted (every row is in --format csv).
BREACH_LINES_SHOWN = 10


def comparison_lines(c: Comparison) -> list[str]:
    """A baseline comparison's summary lines, one wording for the table, Markdown and the HTML page."""
    counts = c.counts()
    lines = [f"baseline: {len(c.regressions)} row(s) more than {c.threshold:.0%} slower; "
             + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))]
    ambiguous = counts.get("ambiguous", 0)
    if ambiguous:
        lines.append(f"baseline: {ambiguous} row(s) ambiguous: their intervals neither show a change of "
                     f"{c.threshold:.0%} nor rule one out (or a side was disturbed); counted, never a failure; "
                     "re-run both on a quieter host or with more time (--max-time)")
    common = c.common_ratio
    if common is not None and abs(common - 1) >= 0.005:
        moved = sum(1 for r in c.rows if r.reason == "moved-with-the-run")
        lines.append(f"baseline: the rows moved {(common - 1) * 100:+.1f} % together (the median change)"
                     + (f"; {moved} row(s) that moved with them are ambiguous (moved-with-the-run): the host or a "
                        "change touching every row, which two runs cannot tell apart" if moved else ""))
    unjudged = counts.get("unjudged", 0)
    if unjudged:
        lines.append(f"baseline: {unjudged} row(s) unjudged: a side has no interval (recorded before intervals, or "
                     "not by tileops bench), so no change is called on its medians alone; counted, never a failure; "
                     "re-run the bench for intervals")
    lines += _split_lines(c)
    lines += [f"note: {n}" for n in c.notes]
    return lines


#: Rows whose device/kernel split the table prints (every row's is in the JSON report).
SPLIT_LINES_SHOWN = 20


def _split_lines(c: Comparison) -> list[str]:
    """Each row whose time, device or kernel moved: its change split into the device's and the kernel's own
    (issue 39, ``tileops.report.statesplit``), slower rows first."""
    moved = [r for r in _changed_or_split(c) if r.split is not None]
    lines = [f"baseline split: {r.key[0]} [{' '.join(r.key[1:])}] time {(r.ratio or 1) - 1:+.1%}: "
             f"{r.split.describe()}" for r in moved[:SPLIT_LINES_SHOWN] if r.split is not None]
    if len(moved) > SPLIT_LINES_SHOWN:
        lines.append(f"baseline split: {len(moved) - SPLIT_LINES_SHOWN} more row(s) in --format json")
    return lines


def _changed_or_split(c: Comparison) -> list[RowChange]:
    """Rows whose time changed, or whose device or kernel part is anything but the same, regressions first."""
    def moved(r: RowChange) -> bool:
        s = r.split
        return r.change != "same" or (s is not None and (s.device.status != "same" or s.kernel.status != "same"))
    return sorted((r for r in c.rows if moved(r)), key=lambda r: _CHANGE_ORDER.get(r.change, 7))


_CHANGE_ORDER = {"slower": 0, "untimed": 1, "ambiguous": 2, "unjudged": 3, "faster": 4, "new": 5, "gone": 6}


def _changed(c: Comparison) -> list[RowChange]:
    """Rows that changed, regressions first."""
    return sorted((r for r in c.rows if r.change != "same"), key=lambda r: _CHANGE_ORDER[r.change])


def _change_cells(r: RowChange) -> tuple[str, ...]:
    ratio = f"{r.ratio:.2f}x" if r.ratio else columns.DASH
    allowed = columns.ratio_interval_text(*r.ratio_interval) if r.ratio_interval is not None else columns.DASH
    return (*r.key, columns.seconds(r.old_time_s), columns.seconds(r.new_time_s), ratio, allowed, r.change,
            r.reason or "")


_CHANGE_COLUMNS = ("op", "label", "dtype", "backend", "baseline", "now", "ratio", "ratio (95 % CI)", "change", "why")


# --------------------------------------------------------------------------- the reports


class Report:
    """A report filled row by row; :meth:`write` prints it once every row has been added."""

    def add(self, p: Priced) -> None:
        raise NotImplementedError

    def merge(self, later: Report) -> None:
        """Append the rows of a report of the next part of the same run."""
        raise NotImplementedError

    def write(self, out: TextIO, facts: RunFacts, comparison: Comparison | None = None,
              health: Health | None = None, *, colour: bool = False, width: int | None = None) -> None:
        """The report on ``out``; ``width``: a terminal's columns, to fold the table report's sentences at
        (None: each stays one line, as a log and grep want)."""
        raise NotImplementedError


class _RaceCells:
    """Each row's place among the run's backends, kept until the run is read: the race-dependent cells
    (``vs best``, :data:`columns.RACE_COLUMNS`) need every backend of the row, which may come much later or
    from another part of the run. Device names and ops repeat, so one copy of each is kept."""

    __slots__ = ("keys", "_names")

    def __init__(self) -> None:
        self.keys: list[tuple[RaceKey, str]] = []  # ((device, op, label, dtype), backend) per row
        self._names: dict[str, str] = {}

    def add(self, p: Priced) -> None:
        device, op, label, dtype = race_key(p.record)
        names = self._names
        self.keys.append(((names.setdefault(device, device), names.setdefault(op, op), label, dtype),
                          p.record.backend))

    def merge(self, later: _RaceCells) -> None:
        self.keys += later.keys

    def __getstate__(self) -> list:
        return self.keys

    def __setstate__(self, keys: list) -> None:
        self.keys = keys
        self._names = {}


#: What the race columns of a row on one backend hold in a JSON row (after :func:`tileops.report.encode.json_row`).
_JSON_NO_RACE = ',"best_backend":null,"best_margin":null,"behind_best":null,"best_within_noise":null}'


def _json_race_tail(backend: str, race: BackendRace | None) -> str:
    if race is None:
        return _JSON_NO_RACE
    cells = columns.race_cells(backend, race)
    return "".join(f',"{name}":{json.dumps(v)}' for name, v in zip(columns.RACE_COLUMNS, cells)) + "}"


def _csv_intervals(values: list[Any]) -> None:
    """The interval columns of a CSV line as text: each interval ``[lo, hi]`` (JSON, so it reads back with
    one call), the unstable reasons joined by "; "."""
    for at in columns.INTERVALS_AT:
        if values[at] is not None:
            values[at] = json.dumps(values[at])
    values[columns.UNSTABLE_AT] = "; ".join(values[columns.UNSTABLE_AT])


class CsvReport(Report):
    """One line per record, base units. With a baseline, three more columns (and the gone rows)."""

    def __init__(self, *, baseline: bool = False) -> None:
        self.baseline = baseline
        self._sink = Lines()
        self.keys: list[tuple[str, str, str, str]] = []  # with a baseline: each line's row key
        self.races = _RaceCells()  # each line ends before its race columns

    def __getstate__(self) -> dict:
        return {"baseline": self.baseline, "lines": self._sink.items, "keys": self.keys, "races": self.races}

    def __setstate__(self, state: dict) -> None:
        self.baseline = state["baseline"]
        self._sink = Lines()
        self._sink.items += state["lines"]
        self.keys = state["keys"]
        self.races = state["races"]

    @property
    def lines(self) -> list[str]:
        return self._sink.items

    def add(self, p: Priced) -> None:
        values = columns.raw_values(p)
        breaches, notes, terms = values[columns.BREACHES_AT], values[columns.NOTES_AT], values[columns.DATA_TERMS_AT]
        values[columns.BREACHES_AT] = "; ".join(b["message"] for b in breaches) if breaches else ""
        values[columns.NOTES_AT] = "; ".join(notes) if notes else ""
        values[columns.DATA_TERMS_AT] = columns.data_terms_text(terms) if terms else ""
        _csv_intervals(values)
        values[columns.CLOCK_EVENTS_AT] = ",".join(values[columns.CLOCK_EVENTS_AT])
        self._sink.items.append(csv_line(values))
        self.races.add(p)
        if self.baseline:
            self.keys.append(p.record.key)

    def merge(self, later: Report) -> None:
        assert isinstance(later, CsvReport)
        self.lines.extend(later.lines)
        self.keys += later.keys
        self.races.merge(later.races)

    def write(self, out: TextIO, facts: RunFacts, comparison: Comparison | None = None,
              health: Health | None = None, *, colour: bool = False, width: int | None = None) -> None:
        extra = ["baseline_time_s", "time_ratio", "change", "change_reason"] if self.baseline else []
        tail = Lines()
        w = csv.writer(tail, lineterminator="\n")
        w.writerow(list(columns.RAW_COLUMNS) + extra)
        out.write(tail.items.pop())
        races = facts.races()
        no_race = "," * (len(columns.RACE_COLUMNS) - 1) + ("\n" if comparison is None else "")  # one backend
        idx = {r.key: r for r in comparison.rows} if comparison is not None else None
        for i, (line, (key, backend)) in enumerate(zip(self.lines, self.races.keys)):
            race = races.get(key) if races else None
            if race is None:
                cells = no_race
            else:
                w.writerow(columns.race_cells(backend, race))
                cells = tail.items.pop()
                if comparison is not None:
                    cells = cells[:-1]
            if idx is not None:
                rc = idx.get(self.keys[i])
                w.writerow([rc.old_time_s, rc.ratio, rc.change, rc.reason] if rc else [None, None, None, None])
                cells += "," + tail.items.pop()
            out.write(line[:-1] + "," + cells)
        if comparison is None:
            return
        empty = [None] * len(columns.RAW_COLUMNS)
        at = {c: i for i, c in enumerate(columns.RAW_COLUMNS)}
        for rc in comparison.rows:
            if rc.change == "gone":
                gone: list[object] = list(empty)
                for col, value in zip(("op", "label", "dtype", "backend"), rc.key):
                    gone[at[col]] = value
                w.writerow([*gone, rc.old_time_s, None, "gone", None])
                out.write(tail.items.pop())


def _indented(value: Any) -> str:
    """A JSON value as it sits one level down in a document indented by 2."""
    return json.dumps(value, indent=2).replace("\n", "\n  ")


class JsonReport(Report):
    """The health, the summary, one object per record (one per line), base units, and the rows run on
    several backends."""

    def __init__(self) -> None:
        self.rows: list[str] = []  # each row's object, up to its race columns
        self.races = _RaceCells()

    def add(self, p: Priced) -> None:
        self.rows.append(json_row(columns.raw_values(p)))
        self.races.add(p)

    def merge(self, later: Report) -> None:
        assert isinstance(later, JsonReport)
        self.rows += later.rows
        self.races.merge(later.races)

    def write(self, out: TextIO, facts: RunFacts, comparison: Comparison | None = None,
              health: Health | None = None, *, colour: bool = False, width: int | None = None) -> None:
        h = health or facts.health()
        races = facts.races()
        out.write(f'{{\n  "health": {_indented(h.as_dict())},\n  "profiles": {_indented(sorted(facts.profiles))},\n'
                  f'  "summary": {_indented(facts.lines(h))},\n  "rows": [')
        if self.rows:
            out.write("\n    ")
            last = len(self.rows) - 1
            if races:
                out.writelines(row + _json_race_tail(backend, races.get(key)) + (",\n    " if i != last else "\n  ")
                               for i, (row, (key, backend)) in enumerate(zip(self.rows, self.races.keys)))
            else:
                end = _JSON_NO_RACE + ",\n    "
                out.writelines(row + end for row in self.rows[:-1])
                out.write(self.rows[-1] + _JSON_NO_RACE + "\n  ")
        out.write("],\n")
        # every row run on several backends: each backend's SOL ratio, the best and its margin over the next
        out.write('  "backends": ' + _indented([race.as_dict() for race in races.values()]))
        if comparison is not None:
            out.write(',\n  "baseline": ' + _indented(baseline_doc(comparison)))
        out.write("\n}\n")


def baseline_doc(comparison: Comparison) -> dict[str, Any]:
    """The comparison as the JSON report carries it."""
    return {
        "threshold": comparison.threshold,
        "regressions": len(comparison.regressions),
        "counts": comparison.counts(),
        "notes": list(comparison.notes),
        "common_ratio": comparison.common_ratio,
        "rows": [{"op": r.key[0], "label": r.key[1], "dtype": r.key[2], "backend": r.key[3],
                  "change": r.change, "baseline_time_s": r.old_time_s, "time_s": r.new_time_s,
                  "time_ratio": r.ratio, "baseline_efficiency": r.old_efficiency,
                  "efficiency": r.new_efficiency, "reason": r.reason, "message": r.message,
                  "ratio_interval": list(r.ratio_interval) if r.ratio_interval is not None else None,
                  "basis": r.basis, "p_value": r.p_value,
                  "split": r.split.as_dict() if r.split is not None else None} for r in comparison.rows],
    }


def _md(s: str) -> str:
    return s.replace("|", "\\|")


class MarkdownReport(Report):
    """A section per op (ops in the order they first appear), then the summary and the baseline."""

    def __init__(self) -> None:
        # op -> [(the row's cells: text, and the number columns as numbers; data terms)]
        self.groups: dict[str, list[tuple[tuple, str]]] = {}
        self.races: dict[str, _RaceCells] = {}  # op -> each row's place among the run's backends

    def add(self, p: Priced) -> None:
        cells = columns.display_cells(p)
        terms = p.record.data_terms
        op = p.record.op
        group = self.groups.get(op)
        if group is None:
            group = self.groups[op] = []
            self.races[op] = _RaceCells()
        if any("|" in c for c in cells if isinstance(c, str)):  # rarely: a cell holds a pipe, escaped
            cells = tuple(_md(c) if isinstance(c, str) else c for c in cells)
        group.append((cells, columns.data_terms_text(terms) if terms else ""))
        self.races[op].add(p)

    def merge(self, later: Report) -> None:
        assert isinstance(later, MarkdownReport)
        for op, lines in later.groups.items():
            if op in self.groups:
                self.groups[op].extend(lines)
                self.races[op].merge(later.races[op])
            else:
                self.groups[op] = lines
                self.races[op] = later.races[op]

    def write(self, out: TextIO, facts: RunFacts, comparison: Comparison | None = None,
              health: Health | None = None, *, colour: bool = False, width: int | None = None) -> None:
        out.write(f"# Roofline — profile {facts.profile_names()}\n\n")
        compiled, races = facts.compiled, facts.races()
        shown = facts.columns()
        units = _units(shown, (cells for group in self.groups.values() for cells, _ in group))
        headers = tuple(units[c][0] if c in units else c for c in shown)
        for op, group in self.groups.items():
            with_terms = any(terms for _, terms in group)
            cols = headers + (("data terms",) if with_terms else ())
            out.write(f"## {_md(op)}\n\n| " + " | ".join(cols) + " |\n|"
                      + "|".join("---:" if c in _RIGHT or c in units else "---" for c in shown + (("data terms",)
                                 if with_terms else ())) + "|\n")
            for (cells, terms), (key, backend) in zip(group, self.races[op].keys):
                versus = _md(columns.versus_best_of(backend, races.get(key))) if races else None
                line = "| " + " | ".join(_drawn(cells, units, compiled, versus, facts.intervals))
                out.write(f"{line} | {_md(terms)} |\n" if with_terms else line + " |\n")
            out.write("\n")
        gaps = facts.conditions.gap_rows  # the audited rows' SOL gap split (issue 28)
        if gaps:
            out.write("## SOL gap, split by the audit's DRAM traffic\n\n| " + " | ".join(GAP_COLUMNS) + " |\n|"
                      + "|".join("---:" if c in GAP_RIGHT else "---" for c in GAP_COLUMNS) + "|\n")
            out.writelines("| " + " | ".join(map(_md, cells)) + " |\n" for cells in gaps)
            out.write("\n")
        out.write("## Summary\n\n")
        out.writelines(f"  - {_md(line[len(ITEM):])}\n" if line.startswith(ITEM) else f"- {_md(line)}\n"
                       for line in facts.lines(health))
        if comparison is not None:
            out.write("\n## Against the baseline\n\n")
            changed = _changed(comparison)
            if changed:
                out.write("| " + " | ".join(_CHANGE_COLUMNS) + " |\n|---|---|---|---|---:|---:|---:|---:|---|---|\n")
                out.writelines("| " + " | ".join(map(_md, _change_cells(r))) + " |\n" for r in changed)
                out.write("\n")
            out.writelines(f"- {_md(line)}\n" for line in comparison_lines(comparison))


# --------------------------------------------------------------------------- the terminal table


def _style(p: Priced) -> str:
    return "bold red" if p.breaches else VERDICT_STYLE.get(p.verdict, "")


#: The human columns shown right-aligned (and every number column, :data:`columns.NUMBER_COLUMNS`).
_RIGHT = frozenset({"efficiency", *columns.NUMBER_COLUMNS})

_Units = dict[str, tuple[str, Callable[[Any], str]]]


def _units(shown: tuple[str, ...], kept: Iterable[tuple]) -> _Units:
    """Each number column of ``shown`` drawn in one unit over the rows ``kept`` (their display cells):
    column -> (its header, the cell of a value)."""
    at = {"time": columns.TIME_AT, "FLOP/s": columns.FLOPS_AT, "B/s": columns.BYTES_AT,
          "compile time": columns.COMPILE_AT}
    wanted = [c for c in shown if c in at]
    values: dict[str, list] = {c: [] for c in wanted}
    for cells in kept:
        for c in wanted:
            values[c].append(cells[at[c]])
    return {c: columns.column_unit(c, values[c]) for c in wanted}


def _drawn(cells: tuple, units: _Units, compiled: bool, vs_best: str | None, intervals: bool = False
           ) -> tuple[str, ...]:
    """A kept row's cells as drawn in the run's columns (:meth:`RunFacts.columns`): numbers in their column's
    unit, the SOL interval where the run has one, then the compile time and ``vs best`` where the run has them,
    then the verdict."""
    out: tuple[str, ...] = (cells[0], cells[1], cells[2], units["time"][1](cells[columns.TIME_AT]),
                            units["FLOP/s"][1](cells[columns.FLOPS_AT]), units["B/s"][1](cells[columns.BYTES_AT]),
                            cells[6], cells[7], cells[8])
    if intervals:
        out += (cells[columns.SOL_CI_AT],)
    if compiled:
        out += (units["compile time"][1](cells[columns.COMPILE_AT]),)
    if vs_best is not None:
        out += (vs_best,)
    return out + (cells[9],)


#: Where :func:`_row_cells` keeps the row's device: after its display cells.
_DEVICE_AT = columns.SOL_CI_AT + 1


def _row_cells(p: Priced) -> tuple:
    """What the table keeps of a row: its display cells (:func:`columns.display_cells`), then its device (the
    ``vs best`` cell is decided when the run has been read)."""
    return columns.display_cells(p) + (race_key(p.record)[0],)


def _shown(op: str, cells: tuple, units: _Units, compiled: bool, races: dict[RaceKey, BackendRace],
           intervals: bool = False) -> tuple[str, ...]:
    """A kept row's cells in the run's columns (:meth:`RunFacts.columns`)."""
    key = (cells[_DEVICE_AT], op, cells[0], cells[1])
    vs_best = columns.versus_best_of(cells[2], races.get(key)) if races else None
    return _drawn(cells, units, compiled, vs_best, intervals)


class _OpDigest:
    """One op's share of a digest: counts by verdict, judged efficiencies, the lowest rows."""

    __slots__ = ("counts", "efficiencies", "worst")

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.efficiencies: list[float] = []  # rows judged against a roof (at-ceiling, below)
        # The WORST_PER_OP rows lowest by (efficiency, row number): a heap keyed (-efficiency, -row number),
        # so the same rows are kept whichever order the parts of a run are merged in.
        self.worst: list[tuple[float, int, tuple[str, ...], str]] = []

    def add(self, p: Priced, seq: int) -> None:
        v = shown_verdict(p)
        self.counts[v] = self.counts.get(v, 0) + 1
        eff = p.efficiency
        if eff is not None and (p.verdict == "below" or p.verdict == "at-ceiling"):
            self.efficiencies.append(eff)
            self._keep(-eff, -seq, p)

    def _keep(self, key: float, nseq: int, p: Priced | tuple[tuple[str, ...], str]) -> None:
        heap = self.worst
        if len(heap) < WORST_PER_OP or (key, nseq) > heap[0][:2]:
            cells, style = p if isinstance(p, tuple) else (_row_cells(p), _style(p))
            (heapq.heappush if len(heap) < WORST_PER_OP else heapq.heapreplace)(heap, (key, nseq, cells, style))

    def merge(self, later: _OpDigest, offset: int) -> None:
        for v, n in later.counts.items():
            self.counts[v] = self.counts.get(v, 0) + n
        self.efficiencies += later.efficiencies
        for key, nseq, cells, style in later.worst:
            self._keep(key, nseq - offset, (cells, style))

    def median(self) -> float | None:
        effs = sorted(self.efficiencies)
        if not effs:
            return None
        mid = len(effs) // 2
        return effs[mid] if len(effs) % 2 else (effs[mid - 1] + effs[mid]) / 2

    def lowest(self) -> list[tuple[tuple[str, ...], str]]:
        """The kept rows, lowest efficiency first."""
        return [(cells, style) for _, _, cells, style in sorted(self.worst, reverse=True)]


def _needs_attention(p: Priced) -> bool:
    return bool(p.breaches) or p.verdict == "anomaly" or (p.verdict == "error" and p.blank_reason == BLANK_ERROR)


class TableReport(Report):
    """The table a person reads: every row grouped by op, or above :data:`SUMMARISE_ABOVE` rows a digest.

    The digest shows per op the row count by verdict and the median efficiency,
    every row that needs attention (physics breaches, anomalies, error records;
    past :data:`ATTENTION_SHOWN` they are counted), the lowest-efficiency rows
    of each op, and the summary; it says how to get every row.
    """

    def __init__(self, *, title: str | None = None, full: bool = False, limit: int | None = None) -> None:
        self.title = title
        self.full = full
        self.limit = SUMMARISE_ABOVE if limit is None else limit
        self.count = 0
        self.all: list[tuple[str, tuple[str, ...], str]] | None = []  # every row, while the table is small
        self.ops: dict[str, _OpDigest] = {}
        self.attention: list[tuple[str, tuple[str, ...], str]] = []
        self.attention_counts = {"breach": 0, "anomaly": 0, "error": 0}
        self.attention_total = 0  # rows needing attention (a breach that is also an anomaly counts once)

    def add(self, p: Priced) -> None:
        op = p.record.op
        digest = self.ops.get(op)
        if digest is None:
            digest = self.ops[op] = _OpDigest()
        digest.add(p, self.count)
        self.count += 1
        cells = None
        if self.all is not None:
            cells = _row_cells(p)
            self.all.append((op, cells, _style(p)))
            if not self.full and len(self.all) > self.limit:
                self.all = None
        if _needs_attention(p):
            counts = self.attention_counts
            counts["breach"] += bool(p.breaches)
            counts["anomaly"] += p.verdict == "anomaly"
            counts["error"] += p.verdict == "error"
            self.attention_total += 1
            if len(self.attention) < ATTENTION_SHOWN:
                self.attention.append((op, cells or _row_cells(p), _style(p)))

    def merge(self, later: Report) -> None:
        assert isinstance(later, TableReport)
        for op, digest in later.ops.items():
            mine = self.ops.get(op)
            if mine is None:
                mine = self.ops[op] = _OpDigest()
            mine.merge(digest, self.count)
        self.count += later.count
        if self.all is None or later.all is None or (not self.full and len(self.all) + len(later.all) > self.limit):
            self.all = None
        else:
            self.all += later.all
        self.attention += later.attention[:ATTENTION_SHOWN - len(self.attention)]
        for k, n in later.attention_counts.items():
            self.attention_counts[k] += n
        self.attention_total += later.attention_total

    def _title(self, facts: RunFacts) -> str:
        return self.title or f"Roofline — profile {facts.profile_names()}"

    def write(self, out: TextIO, facts: RunFacts, comparison: Comparison | None = None,
              health: Health | None = None, *, colour: bool = False, width: int | None = None) -> None:
        h = health or facts.health()
        digest = self.all is None
        lines = self._digest(facts, colour) if digest else self._rows_table(facts, colour)
        gaps = facts.conditions.gap_table()  # the audited rows' SOL gap split (issue 28)
        if gaps is not None:
            lines += [""] + gaps.lines(colour)
        out.write("\n".join(lines) + "\n")
        reset = "\x1b[0m" if colour else ""

        def say(line: str, style: str = "") -> None:
            for part in fold(line, width):
                out.write((ansi(style) + part + reset if colour and style else part) + "\n")

        for line in facts.lines(h, breach_limit=BREACH_LINES_SHOWN if digest else None):
            say(line, "bold red" if line.startswith(("FORMULA ERROR", "health: FAILED", "physics check BREACHED"))
                else "green" if line.startswith("health: OK")
                else "yellow" if line.startswith(("health: PARTLY", "health: NOT", "physics check NOT")) else "")
        if comparison is not None:
            changed = _changed(comparison)
            if changed:
                shown = changed[:ATTENTION_SHOWN] if digest else changed
                t = TextTable(_CHANGE_COLUMNS, right=frozenset({"baseline", "now", "ratio", "ratio (95 % CI)"}),
                              title=f"Against the baseline (threshold {comparison.threshold:.0%})")
                for r in shown:
                    style = ("bold red" if r.change == "slower" else "green" if r.change == "faster"
                             else "yellow" if r.change == "ambiguous" else "dim")
                    t.add(*_change_cells(r), styles=[""] * 8 + [style, ""])
                out.write("\n".join(t.lines(colour)) + "\n")
                if len(shown) < len(changed):
                    say(f"… {len(changed) - len(shown):,} more changed row(s) not listed ({EVERYTHING_HINT})")
            for line in comparison_lines(comparison):
                say(line, "bold red" if comparison.regressions and "slower" in line else "")
        if digest:
            say(f"{self.count:,} rows, more than {self.limit:,}: summarised above; {EVERYTHING_HINT}", "dim")

    @staticmethod
    def _row_table(title: str | None, facts: RunFacts, items: Iterable[tuple[str, tuple, str]]) -> TextTable:
        """The rows ``items`` grouped under their op (ops in first-seen order), the op named on its first row,
        a rule after its last; each number column in one unit over these rows, named in its header."""
        items = list(items)
        shown = facts.columns()
        units = _units(shown, (cells for _, cells, _ in items))
        t = TextTable(("op",) + tuple(units[c][0] if c in units else c for c in shown),
                      right=_RIGHT | {h for h, _ in units.values()}, title=title)
        groups: dict[str, list[tuple[tuple, str]]] = {}
        for op, cells, style in items:
            groups.setdefault(op, []).append((cells, style))
        compiled, races = facts.compiled, facts.races()
        plain = [""] * (len(shown) - 1)
        for op, group in groups.items():
            last = len(group) - 1
            for i, (cells, style) in enumerate(group):
                t.add(op if i == 0 else "", *_shown(op, cells, units, compiled, races, facts.intervals),
                      styles=["bold", *plain, style], end_section=i == last)
        return t

    def _rows_table(self, facts: RunFacts, colour: bool) -> list[str]:
        return self._row_table(self._title(facts), facts, self.all or ()).lines(colour)

    def _digest(self, facts: RunFacts, colour: bool) -> list[str]:
        per_op = TextTable(("op", "rows") + VERDICT_ORDER + ("median efficiency",),
                           right=frozenset(("rows",) + VERDICT_ORDER + ("median efficiency",)),
                           title=f"{self._title(facts)}: {self.count:,} rows, per op")
        for op, d in self.ops.items():
            per_op.add(op, f"{sum(d.counts.values()):,}", *(f"{d.counts.get(v, 0):,}" for v in VERDICT_ORDER),
                       columns.percent(d.median()), styles=["bold"] + [""] * (len(VERDICT_ORDER) + 2))
        out = per_op.lines(colour)
        c = self.attention_counts
        if self.attention:
            t = self._row_table(f"Rows that need attention: {c['breach']:,} physics breach(es) (FORMULA ERROR), "
                                f"{c['anomaly']:,} anomaly(ies), {c['error']:,} error record(s)", facts,
                                self.attention)
            out += [""] + t.lines(colour)
            unlisted = self.attention_total - len(self.attention)
            if unlisted:
                out.append(f"… {unlisted:,} more not listed here; {EVERYTHING_HINT}")
        lowest = ((op, cells, style) for op, d in self.ops.items() for cells, style in d.lowest())
        worst = self._row_table(f"Lowest efficiency, up to {WORST_PER_OP} per op (at-ceiling and below rows)",
                                facts, lowest)
        if worst.rows:
            out += [""] + worst.lines(colour)
        return out + [""]


# --------------------------------------------------------------------------- whole lists of rows


def new_report(fmt: str, *, baseline: bool = False, title: str | None = None, full_table: bool = False) -> Report:
    """An empty report of format ``fmt`` (``table``, ``md``, ``csv``, ``json``)."""
    if fmt == "table":
        return TableReport(title=title, full=full_table)
    if fmt == "md":
        return MarkdownReport()
    if fmt == "csv":
        return CsvReport(baseline=baseline)
    if fmt == "json":
        return JsonReport()
    raise ValueError(f"unknown format {fmt!r}; formats are table, json, md, csv")


def render_text(priced: Sequence[Priced], fmt: str, *, comparison: Comparison | None = None,
                health: Health | None = None, title: str | None = None, full_table: bool = False,
                colour: bool = False, width: int | None = None) -> str:
    """One report of these rows as text (what ``tileops roofline`` prints for the same rows); ``width``: a
    terminal's columns, to fold the table report's sentences at."""
    import io

    report = new_report(fmt, baseline=comparison is not None, title=title, full_table=full_table)
    facts = RunFacts()
    for p in priced:
        report.add(p)
        facts.add(p)
    buf = io.StringIO()
    report.write(buf, facts, comparison, health, colour=colour, width=width)
    return buf.getvalue()


def render_markdown(priced: Sequence[Priced], *, comparison: Comparison | None = None) -> str:
    return render_text(priced, "md", comparison=comparison)


def render_csv(priced: Sequence[Priced], *, comparison: Comparison | None = None) -> str:
    """One line per record, base units. With a baseline, three more columns (and the gone rows)."""
    return render_text(priced, "csv", comparison=comparison)


def render_json(priced: Sequence[Priced], *, comparison: Comparison | None = None,
                health: Health | None = None) -> str:
    return render_text(priced, "json", comparison=comparison, health=health)


def as_json(priced: Sequence[Priced], *, comparison: Comparison | None = None,
            health: Health | None = None) -> dict[str, Any]:
    """The JSON report as data."""
    return json.loads(render_json(priced, comparison=comparison, health=health))
