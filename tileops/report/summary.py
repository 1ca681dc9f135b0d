"""The summary under a report, counted row by row: verdict counts, blanks by reason, breaches, backends,
and what the physics check judged (the health line).

:class:`RunFacts` is filled one priced row at a time, like a report, and merges with the facts of a later
part of the run, so a run read in parallel says the same as one read in a single pass. Every format prints
these lines: the table under its rows, markdown in its "Summary", JSON under ``summary``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

import tileops.report.columns as columns
from tileops.report.conditions import ConditionFacts
from tileops.roofline import (BLANK_REASONS, BLANK_SKIPPED, HOST_BOUND_RATIO, NOT_JUDGED_NOISE, NOT_JUDGED_REASONS,
                              BackendRace, CeilingHealth, Health, HealthTally, Priced,
                              RaceKey, RaceTally, race_key, si)

#: Where a person finds every row when a report shows only some.
EVERYTHING_HINT = "every row: `tileops roofline RESULTS --full-table`, or `--format csv|json|md`"

# A skipped record's verdict is "error" (it has no time); people read it as what it is, apart from failures.
VERDICT_ORDER = ("at-ceiling", "below", "unstable", "latency-bound", "anomaly", "blank", "error", "skipped")


#: Host-bound rows named in the summary line; the rest are counted (each row's note is in roofline.json).
HOST_BOUND_SHOWN = 5
#: How a host-bound row's note begins (tileops.roofline.host_bound_note).
HOST_BOUND_NOTE = "host-bound:"


def _host_bound_row(p: Priced) -> str:
    r, t = p.record, p.record.timing
    assert t is not None and t.span_s is not None
    return f"{r.op} [{r.label} {r.dtype} {r.backend}] {t.span_s / t.median_s:.2f}x"


#: Unstable rows named in the summary line; the rest are counted (each row's reasons are in roofline.json).
UNSTABLE_SHOWN = 5


def _unstable_row(p: Priced) -> str:
    r = p.record
    return f"{r.op} [{r.label} {r.dtype} {r.backend}]: {p.unstable[0]}"


#: How a line's items sit under it (the rows it names, the clauses of its reason): the text report prints them
#: as they are, markdown as a list nested under the line's bullet. One idea per line, each line short enough to
#: read, and still whole for grep.
ITEM = "  "


def _listed(n: int, shown: list[str], where: str) -> list[str]:
    """The rows a line names, one per item line, and how many more there are (``where``: what roofline.json
    keeps of each)."""
    more = [f"{ITEM}and {n - len(shown)} more ({where}: roofline.json)"] if n > len(shown) else []
    return [ITEM + row for row in shown] + more


def clauses(text: str) -> list[str]:
    """A reason's clauses, split at each ``; `` outside parentheses: one item line each."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "(["
        depth -= ch in ")]"
        if depth == 0 and text.startswith("; ", i):
            out.append(text[start:i])
            start = i + 2
    return out + [text[start:]]


def shown_verdict(p: Priced) -> str:
    return "skipped" if p.verdict == "error" and p.blank_reason == BLANK_SKIPPED else p.verdict


class BackendTally:
    """What a run on several backends adds to the summary, counted row by row (mergeable): rows per
    backend, compile times, skip reasons, and every row's backends side by side (:class:`RaceTally`)."""

    __slots__ = ("rows_of", "compiled", "slowest", "skipped", "races")

    def __init__(self) -> None:
        self.rows_of: dict[str, int] = {}
        self.compiled: dict[str, list[float]] = {}
        self.slowest: dict[str, tuple[float, str, str, str]] = {}  # backend -> (compile_s, op, label, dtype)
        self.skipped: dict[str, dict[str, int]] = {}
        self.races = RaceTally()

    def add(self, p: Priced) -> None:
        r = p.record
        b = r.backend
        self.rows_of[b] = self.rows_of.get(b, 0) + 1
        self.races.add(race_key(r), b, p.efficiency, p.sol_ci, r.race)
        t = r.timing
        if t is not None and t.compile_s is not None:
            self.compiled.setdefault(b, []).append(t.compile_s)
            if b not in self.slowest or t.compile_s > self.slowest[b][0]:
                self.slowest[b] = (t.compile_s, r.op, r.label, r.dtype)
        elif r.status == "skipped" and b != "torch":
            why = self.skipped.setdefault(b, {})
            reason = r.skip_reason or "no reason given"
            why[reason] = why.get(reason, 0) + 1

    def merge(self, later: BackendTally) -> None:
        for b, n in later.rows_of.items():
            self.rows_of[b] = self.rows_of.get(b, 0) + n
        for b, secs in later.compiled.items():
            self.compiled.setdefault(b, []).extend(secs)
        for b, slow in later.slowest.items():
            if b not in self.slowest or slow[0] > self.slowest[b][0]:  # the first of the slowest, as row by row
                self.slowest[b] = slow
        for b, reasons in later.skipped.items():
            mine = self.skipped.setdefault(b, {})
            for why, n in reasons.items():
                mine[why] = mine.get(why, 0) + n
        self.races.merge(later.races)

    def lines(self, races: dict[RaceKey, BackendRace]) -> list[str]:
        """The summary's backend lines (:func:`backend_lines`)."""
        if set(self.rows_of) <= {"torch"} and not self.compiled:
            return []
        lines = ["backends: " + "; ".join(f"{b} {n} row(s)" for b, n in self.rows_of.items())]
        for b, secs in self.compiled.items():
            secs = sorted(secs)
            _, op, label, dtype = self.slowest[b]
            lines.append(f"compile time, reported apart (a {b} row's first call, compilation included; never in "
                         f"its time): {len(secs)} row(s), median {columns.seconds(secs[len(secs) // 2])}, "
                         f"{columns.seconds(sum(secs))} in all")
            lines.append(f"{ITEM}slowest: {op} [{label} {dtype}] {columns.seconds(secs[-1])}")
        lines += race_lines(races)
        for b, reasons in self.skipped.items():
            ranked = sorted(reasons.items(), key=lambda kv: -kv[1])
            for why, n in ranked[:SKIP_REASONS_SHOWN]:
                lines.append(f"{b} skipped on {n} row(s): {why}")
            if len(ranked) > SKIP_REASONS_SHOWN:
                rest = sum(n for _, n in ranked[SKIP_REASONS_SHOWN:])
                lines.append(f"{b} skipped on {rest} more row(s) for {len(ranked) - SKIP_REASONS_SHOWN} other "
                             "reason(s) (each row's skip_reason is in roofline.json)")
        return lines


def race_lines(races: dict[RaceKey, BackendRace]) -> list[str]:
    """The summary's verdict on the rows run on several backends: the best of each, and the rows whose best is
    ahead within noise (judged on the paired ratio where the row was raced interleaved)."""
    lines: list[str] = []
    wins: dict[str, int] = {}
    margins: list[float] = []
    tied = 0
    paired = sum(race.paired for race in races.values())
    for race in races.values():
        if race.best is not None and race.within_noise:
            tied += 1
        elif race.best is not None:
            wins[race.best] = wins.get(race.best, 0) + 1
            if race.margin is not None:
                margins.append(race.margin)
    if wins:
        margins.sort()
        median = f"; median margin over the next {columns.points(margins[len(margins) // 2])}" if margins else ""
        lines.append(f"best backend (highest SOL) of {sum(wins.values())} row(s) run on several backends: "
                     + ", ".join(f"{b} {n}" for b, n in sorted(wins.items(), key=lambda kv: -kv[1])) + median)
    if tied:
        lines.append(f"no best backend within noise on {tied} row(s): the best's SOL interval reaches the "
                     "runner-up's (raced interleaved: their paired ratio's interval reaches 1), so a rerun may rank "
                     "them the other way (vs best says 'within noise')")
    if paired:
        lines.append(f"raced interleaved: {paired} row(s) judged on the paired ratio of their backends' "
                     "alternating blocks (the best's time over the runner-up's, block pair by block pair), not "
                     "on their own intervals")
    return lines


#: The most distinct skip reasons of one backend the summary names (kernel limits can vary by row).
SKIP_REASONS_SHOWN = 4


class RunFacts:
    """What the summary under a report says about a run, counted row by row (mergeable)."""

    __slots__ = ("tally", "skipped", "breach_lines", "notes", "profiles", "backends", "host_bound", "unstable",
                 "intervals", "_races", "conditions", "state")

    def __init__(self) -> None:
        self.tally = HealthTally()
        self.skipped = 0
        self.breach_lines: list[str] = []
        self.notes: dict[str, None] = {}
        #: host-bound rows: how many, and the first few as "op [label dtype backend] span/busy"
        self.host_bound: list = [0, []]
        #: unstable rows: how many, and the first few as "op [label dtype backend]: the first reason"
        self.unstable: list = [0, []]
        self.intervals = False  # whether a row has a SOL interval (the human table then shows its column)
        self.profiles: set[str] = set()
        self.backends = BackendTally()
        self._races: dict[RaceKey, BackendRace] | None = None
        self.conditions = ConditionFacts()  # the gap split, power states, energy (issue 28)
        self.state = StateFacts()  # the reference probe: the device's state during the rows (issue 39)

    @classmethod
    def of(cls, priced: Iterable[Priced]) -> RunFacts:
        facts = cls()
        for p in priced:
            facts.add(p)
        return facts

    def add(self, p: Priced) -> None:
        self._races = None
        self.tally.add(p)
        self.backends.add(p)
        if p.verdict == "error" and p.blank_reason == BLANK_SKIPPED:
            self.skipped += 1
        if p.breaches:
            self.breach_lines += columns.breach_sentences(p)
        hb = p.host_bound and p.efficiency is not None
        for note in p.notes:
            if not (hb and note.startswith(HOST_BOUND_NOTE)):  # counted below, one line for every such row
                self.notes.setdefault(note)
        if hb:
            self._host_bound(1, [_host_bound_row(p)])
        if p.unstable:
            self._unstable(1, [_unstable_row(p)])
        if p.sol_ci is not None:
            self.intervals = True
        if p.profile:
            self.profiles.add(p.profile)
        self.conditions.add(p)
        self.state.add(p)

    def _host_bound(self, n: int, shown: list[str]) -> None:
        self.host_bound[0] += n
        self.host_bound[1] = (self.host_bound[1] + shown)[:HOST_BOUND_SHOWN]

    def _unstable(self, n: int, shown: list[str]) -> None:
        self.unstable[0] += n
        self.unstable[1] = (self.unstable[1] + shown)[:UNSTABLE_SHOWN]

    def merge(self, later: RunFacts) -> None:
        self._races = None
        self.tally.merge(later.tally)
        self.backends.merge(later.backends)
        self.skipped += later.skipped
        self.breach_lines += later.breach_lines
        for note in later.notes:
            self.notes.setdefault(note)
        self._host_bound(*later.host_bound)
        self._unstable(*later.unstable)
        self.intervals = self.intervals or later.intervals
        self.profiles |= later.profiles
        self.conditions.merge(later.conditions)
        self.state.merge(later.state)

    @property
    def rows(self) -> int:
        return self.tally.rows

    @property
    def compiled(self) -> bool:
        """Whether a row of the run was compiled (the human table then shows ``compile time``)."""
        return bool(self.backends.compiled)

    def races(self) -> dict[RaceKey, BackendRace]:
        """Every row of the run that ran on several backends (decided once every row is in)."""
        if self._races is None:
            self._races = self.backends.races.races()
        return self._races

    def columns(self) -> tuple[str, ...]:
        """The human table's columns for this run."""
        return columns.columns_for(self.compiled, bool(self.races()), self.intervals)

    def health(self) -> Health:
        return self.tally.health()

    def lines(self, h: Health | None = None, *, breach_limit: int | None = None) -> list[str]:
        """The summary a person reads under the table: counts, blanks by reason, breaches, backends, health.

        ``breach_limit``: at most this many FORMULA ERROR sentences, then a count of the rest.
        """
        h = h or self.health()
        shown = {**h.by_verdict, "skipped": self.skipped}
        shown["error"] = shown.get("error", 0) - self.skipped
        counts = ", ".join(f"{shown.get(v, 0)} {v}" for v in VERDICT_ORDER if shown.get(v, 0))
        lines = [f"{h.rows} row(s): {counts or 'none'}",
                 f"at ceiling (>= 80 %): {h.at_ceiling}; anomalies (> 105 %, formula or calibration wrong): "
                 f"{h.anomalies}"]
        for reason, n in sorted(h.blanks_by_reason.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"blank {reason}: {n} ({BLANK_REASONS.get(reason, reason)})")
        if h.errors:
            lines.append(f"failed rows: {h.errors} error(s)")
        if self.skipped:
            lines.append(f"skipped rows: {self.skipped} (not failures: each record says why)")
        listed = self.breach_lines if breach_limit is None else self.breach_lines[:breach_limit]
        lines += listed
        if len(listed) < len(self.breach_lines):
            lines.append(f"FORMULA ERROR: {len(self.breach_lines) - len(listed):,} more breach(es) not listed here "
                         f"({EVERYTHING_HINT})")
        lines += [f"note: {note}" for note in self.notes]
        n, shown_rows = self.host_bound
        if n:
            lines.append(f"host-bound: {n} row(s) whose calls span more than {HOST_BOUND_RATIO:.1f}x their device-busy "
                         "time (the device waits on the host between kernels), so their SOL of busy time overstates "
                         "them:")
            lines += _listed(n, shown_rows, "each row's note")
        n, shown_rows = self.unstable
        if n:
            lines.append(f"unstable: {n} row(s) whose SOL is shown, not judged; re-run them on a quieter host or with "
                         "more time (--max-time):")
            lines += _listed(n, shown_rows, "each row's reasons")
        lines += self.conditions.lines()
        lines += self.state.lines()
        return lines + self.backends.lines(self.races()) + physics_lines(h)

    def profile_names(self) -> str:
        return ", ".join(sorted(self.profiles)) or "none"

    def __getstate__(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__ if k != "_races"}

    def __setstate__(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, v)
        self._races = None


class StateFacts:
    """The reference probe over a run (issue 39): each probe kind's ratios to its calibrated rate, how many rows
    have SOL against the device's state, and the most a row's probing cost."""

    __slots__ = ("ratios", "state_rows", "probed", "max_cost")

    def __init__(self) -> None:
        self.ratios: dict[str, list[float]] = {}
        self.state_rows = 0
        self.probed = 0
        self.max_cost: float | None = None

    def add(self, p: Priced) -> None:
        probe = p.record.probe
        if probe is None:
            return
        self.probed += 1
        if probe.cost_share is not None:
            self.max_cost = max(self.max_cost or 0.0, probe.cost_share)
        if p.probe_kind is not None and p.probe_ratio is not None:
            self.ratios.setdefault(p.probe_kind, []).append(p.probe_ratio)
        if p.state_efficiency is not None:
            self.state_rows += 1

    def merge(self, later: StateFacts) -> None:
        for kind, values in later.ratios.items():
            self.ratios.setdefault(kind, []).extend(values)
        self.state_rows += later.state_rows
        self.probed += later.probed
        if later.max_cost is not None:
            self.max_cost = max(self.max_cost or 0.0, later.max_cost)

    def lines(self) -> list[str]:
        if not self.probed:
            return []
        kinds = "; ".join(f"{kind} probe at {_percent(statistics.median(v))} of its calibrated rate (median of "
                          f"{len(v)} row(s), {_percent(min(v))}–{_percent(max(v))})"
                          for kind, v in sorted(self.ratios.items()))
        cost = f"; probing took at most {_percent(self.max_cost)} of a row's time" if self.max_cost is not None else ""
        return [f"device state: {self.probed} row(s) probed{cost}" + (f"; {kinds}" if kinds else ""),
                f"device state: {self.state_rows} row(s) with SOL against the device's state (state_efficiency in "
                "--format json or csv; docs/roofline.md, \"Two SOLs\")"]


def summary_lines(priced: Sequence[Priced], h: Health | None = None) -> list[str]:
    """The summary a person reads under the table: counts, blanks by reason, breaches, backends, health."""
    return RunFacts.of(priced).lines(h)


#: The highest implied rate the within-noise line writes as a number (10x the ceiling): beyond it a fast end
#: rests on too few blocks to mean anything, and is said in words (issue 34: no absurd bounds).
NOISE_RANGE_SAID_UP_TO = 10.0


def _percent(ratio: float) -> str:
    """45%, 2.5%, 0.041%: two significant figures below 10 %, so a small margin does not read as 0.0%."""
    pct = ratio * 100
    if pct >= 100:
        return f"{pct:.0f}%"  # 105%, 1000%: never 1e+03%
    return f"{pct:.3g}%" if pct >= 10 else f"{pct:.1f}%" if pct >= 1 else f"{pct:.2g}%"


def _ceiling_name(c: CeilingHealth, several_profiles: bool) -> str:
    return f"{c.ceiling} ({c.profile or 'no profile'})" if several_profiles else c.ceiling


def physics_lines(h: Health) -> list[str]:
    """What the physics check judged, ceiling by ceiling, and the health line: "passed" is said only of a
    ceiling that was judged, and a run whose ceilings could not be judged is never called OK."""
    several = len({c.profile for c in h.ceilings}) > 1
    lines: list[str] = []
    for c in h.ceilings:
        name = _ceiling_name(c, several)
        theo = f"theoretical {si(c.theoretical_per_s, c.unit)}"
        if c.state == "breached":
            lines.append(f"physics check BREACHED on {name}: {c.breached} of {c.judged} row(s) above the {theo} "
                         "(FORMULA ERROR)")
        elif c.state == "held":
            top = f"; highest implied rate {_percent(c.max_ratio)} of it" if c.max_ratio is not None else ""
            lines.append(f"physics check passed on {name}: {c.judged} row(s) judged against the {theo}{top}")
        for reason, n in sorted(c.not_judged.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"physics check NOT JUDGED on {name}: {n} row(s), {reason}")
            lines += [ITEM + clause for clause in clauses(NOT_JUDGED_REASONS.get(reason, reason))]
            if reason == NOT_JUDGED_NOISE and c.noise_range is not None:
                lo, hi = c.noise_range
                top = _percent(hi) if hi <= NOISE_RANGE_SAID_UP_TO else (
                    f"over {_percent(NOISE_RANGE_SAID_UP_TO)} (too few blocks to bound the fast end within 10x)")
                lines.append(f"{ITEM}their fastest blocks imply {_percent(lo)}–{top} of it: a breach needs "
                             "the slow end above 100 %, a pass the fast end at most 100 %")
        if c.suspect:
            lines.append(f"physics check: ceiling {name} SUSPECT ({theo}):")
            lines += [ITEM + clause for clause in clauses(c.suspect)]
    passed = [_ceiling_name(c, several) for c in h.ceilings if c.state == "held"]
    unjudged = [f"{_ceiling_name(c, several)} ({', '.join(sorted(c.not_judged))})" for c in h.unjudged()]
    state = h.state
    if state == "breached":
        lines.append(f"health: FAILED — physics check: {h.breaches} row(s) imply a rate above a theoretical "
                     "ceiling (FORMULA ERROR)")
    elif state == "held" and unjudged:  # only roofs the profile does not have, whose rows are blank
        lines.append(f"health: OK (physics check passed on {', '.join(passed)}; not in the profile, so not "
                     f"judged and left blank: {'; '.join(unjudged)})")
    elif state == "held":
        lines.append(f"health: OK (physics check passed on every ceiling: {', '.join(passed)})")
    elif state == "partial":
        lines.append(f"health: PARTLY JUDGED — physics check passed on {', '.join(passed) or 'no ceiling'}; "
                     f"NOT JUDGED: {'; '.join(unjudged)}")
    elif h.ceilings:
        lines.append(f"health: NOT JUDGED — the physics check could judge no ceiling ({'; '.join(unjudged)}): an "
                     "inflated formula would go unseen")
    else:
        lines.append("health: NOT JUDGED — no measured row to check")
    return lines
