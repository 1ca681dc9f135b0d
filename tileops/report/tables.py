"""The roofline table and its summary in four formats: rich (a terminal), markdown, CSV, JSON.

All four read their cells from ``tileops.report.rows`` so the columns agree.
The human formats group rows by op; the machine formats are flat, one row per
record, base units.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tileops.report import rows
from tileops.report.baseline import Comparison
from tileops.roofline import (BLANK_REASONS, NOT_JUDGED_REASONS, BackendRace, CeilingHealth, Health, Priced,
                              backend_races, compare_backends, si)
from tileops.roofline import health as compute_health

VERDICT_STYLE = {
    "at-ceiling": "bold green",
    "below": "",
    "anomaly": "bold magenta",
    "latency-bound": "yellow",
    "blank": "dim",
    "error": "red",
}
_ORDER = ("at-ceiling", "below", "latency-bound", "anomaly", "blank", "error")


def summary_lines(priced: Sequence[Priced], h: Health | None = None,
                  races: dict[tuple, BackendRace] | None = None) -> list[str]:
    """The summary a person reads under the table: counts, blanks by reason, breaches, backends, health."""
    h = h or compute_health(priced)
    counts = ", ".join(f"{h.by_verdict.get(v, 0)} {v}" for v in _ORDER if h.by_verdict.get(v, 0))
    lines = [f"{h.rows} row(s): {counts or 'none'}",
             f"at ceiling (>= 80 %): {h.at_ceiling}; anomalies (> 105 %, formula or calibration wrong): "
             f"{h.anomalies}"]
    for reason, n in sorted(h.blanks_by_reason.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"blank {reason}: {n} ({BLANK_REASONS.get(reason, reason)})")
    skipped = sum(1 for p in priced if p.verdict == "error" and p.blank_reason == "skipped")
    if h.errors or skipped:
        lines.append(f"failed rows: {h.errors} error(s), {skipped} skipped")
    for p in priced:
        for b in p.breaches:
            lines.append(b.describe(p.record))
    for note in dict.fromkeys(n for p in priced for n in p.notes):
        lines.append(f"note: {note}")
    return lines + backend_lines(priced, races) + physics_lines(h)


#: The most distinct skip reasons of one backend the summary names (kernel limits can vary by row).
SKIP_REASONS_SHOWN = 4


def backend_lines(priced: Sequence[Priced], races: dict | None = None) -> list[str]:
    """What a run on several backends adds to the summary: rows per backend, compile time (reported apart
    from every timing), the best backend per row and its margin, and why a backend was skipped."""
    rows_of: dict[str, int] = {}
    compiled: dict[str, list[float]] = {}
    slowest: dict[str, Priced] = {}
    skipped: dict[str, dict[str, int]] = {}
    for p in priced:  # one pass: a run can hold 100,000 rows
        r = p.record
        b = r.backend
        rows_of[b] = rows_of.get(b, 0) + 1
        t = r.timing
        if t is not None and t.compile_s is not None:
            compiled.setdefault(b, []).append(t.compile_s)
            if b not in slowest or t.compile_s > slowest[b].record.timing.compile_s:  # type: ignore[union-attr, operator]
                slowest[b] = p
        elif r.status == "skipped" and b != "torch":
            why = skipped.setdefault(b, {})
            reason = r.skip_reason or "no reason given"
            why[reason] = why.get(reason, 0) + 1
    if set(rows_of) <= {"torch"} and not compiled:
        return []
    lines = ["backends: " + "; ".join(f"{b} {n} row(s)" for b, n in rows_of.items())]
    for b, secs in compiled.items():
        secs.sort()
        r = slowest[b].record
        lines.append(f"compile time, reported apart (a {b} row's first call, compilation included; never in its "
                     f"time): {len(secs)} row(s), median {rows.seconds(secs[len(secs) // 2])}, "
                     f"{rows.seconds(sum(secs))} in all; slowest {r.op} [{r.label} {r.dtype}] {rows.seconds(secs[-1])}")
    races = compare_backends(priced) if races is None else races
    wins: dict[str, int] = {}
    margins: list[float] = []
    for race in races.values():
        if race.best is not None:
            wins[race.best] = wins.get(race.best, 0) + 1
            if race.margin is not None:
                margins.append(race.margin)
    if wins:
        margins.sort()
        median = f"; median margin over the next {rows.points(margins[len(margins) // 2])}" if margins else ""
        lines.append(f"best backend (highest SOL) of {sum(wins.values())} row(s) run on several backends: "
                     + ", ".join(f"{b} {n}" for b, n in sorted(wins.items(), key=lambda kv: -kv[1])) + median)
    for b, reasons in skipped.items():
        ranked = sorted(reasons.items(), key=lambda kv: -kv[1])
        for why, n in ranked[:SKIP_REASONS_SHOWN]:
            lines.append(f"{b} skipped on {n} row(s): {why}")
        if len(ranked) > SKIP_REASONS_SHOWN:
            rest = sum(n for _, n in ranked[SKIP_REASONS_SHOWN:])
            lines.append(f"{b} skipped on {rest} more row(s) for {len(ranked) - SKIP_REASONS_SHOWN} other reason(s) "
                         "(each row's skip_reason is in roofline.json)")
    return lines


def _percent(ratio: float) -> str:
    """45%, 2.5%, 0.041%: two significant figures below 10 %, so a small margin does not read as 0.0%."""
    pct = ratio * 100
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
            lines.append(f"physics check NOT JUDGED on {name}: {n} row(s), {reason} "
                         f"({NOT_JUDGED_REASONS.get(reason, reason)})")
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


def _comparison_lines(c: Comparison) -> list[str]:
    counts = c.counts()
    lines = [f"baseline: {len(c.regressions)} row(s) more than {c.threshold:.0%} slower; "
             + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))]
    lines += [f"note: {n}" for n in c.notes]
    return lines


_CHANGE_ORDER = {"slower": 0, "untimed": 1, "faster": 2, "new": 3, "gone": 4}


def _changed(c: Comparison) -> list:
    """Rows that changed, regressions first."""
    return sorted((r for r in c.rows if r.change != "same"), key=lambda r: _CHANGE_ORDER[r.change])


def render_table(priced: Sequence[Priced], console: Console, *, comparison: Comparison | None = None,
                 title: str | None = None, health: Health | None = None) -> None:
    """Print the grouped table and the summary with rich (``health`` as the roofline tool decided it)."""
    h = health or compute_health(priced)
    profiles = sorted({p.profile for p in priced if p.profile})
    table = Table(title=title or f"Roofline — profile {', '.join(profiles) or 'none'}",
                  title_justify="left", show_lines=False)
    table.add_column("op", style="bold")
    races, of_row = backend_races(priced)
    race_of = {id(p): race for p, race in zip(priced, of_row) if race is not None}
    columns = rows.display_columns(priced, races)
    for col in columns:
        table.add_column(col, justify="right" if col in ("time", "achieved", "efficiency", "compile time") else "left")
    for op, group in rows.grouped(priced).items():
        for i, p in enumerate(group):
            d = rows.display(p, race_of.get(id(p)))
            style = "bold red" if p.breaches else VERDICT_STYLE.get(p.verdict, "")
            cells = [op if i == 0 else ""] + [d[c] for c in columns[:-1]]
            table.add_row(*cells, Text(d["verdict"], style=style), end_section=(i == len(group) - 1))
    console.print(table)
    for line in summary_lines(priced, h, races):
        style = "bold red" if line.startswith(("FORMULA ERROR", "health: FAILED", "physics check BREACHED")) else \
            "green" if line.startswith("health: OK") else \
            "yellow" if line.startswith(("health: PARTLY", "health: NOT", "physics check NOT")) else ""
        console.print(Text(line, style=style))
    if comparison is not None:
        changed = _changed(comparison)
        if changed:
            t = Table(title=f"Against the baseline (threshold {comparison.threshold:.0%})", title_justify="left")
            for col in ("op", "label", "dtype", "backend", "baseline", "now", "ratio", "change"):
                t.add_column(col, justify="right" if col in ("baseline", "now", "ratio") else "left")
            for r in changed:
                ratio = f"{r.ratio:.2f}x" if r.ratio else rows.DASH
                style = "bold red" if r.change == "slower" else "green" if r.change == "faster" else "dim"
                t.add_row(*r.key, rows.seconds(r.old_time_s), rows.seconds(r.new_time_s), ratio,
                          Text(r.change, style=style))
            console.print(t)
        for line in _comparison_lines(comparison):
            console.print(Text(line, style="bold red" if comparison.regressions and "slower" in line else ""))


def render_markdown(priced: Sequence[Priced], *, comparison: Comparison | None = None) -> str:
    def esc(s: str) -> str:
        return s.replace("|", "\\|")

    out: list[str] = []
    profiles = sorted({p.profile for p in priced if p.profile})
    out.append(f"# Roofline — profile {', '.join(profiles) or 'none'}\n")
    races, of_row = backend_races(priced)
    race_of = {id(p): race for p, race in zip(priced, of_row) if race is not None}
    columns = rows.display_columns(priced, races)
    for op, group in rows.grouped(priced).items():
        cols = columns + (("data terms",) if any(p.record.data_terms for p in group) else ())
        out.append(f"## {esc(op)}\n")
        out.append("| " + " | ".join(cols) + " |")
        out.append("|" + "|".join("---:" if c in ("time", "achieved", "efficiency", "compile time") else "---"
                                  for c in cols) + "|")
        for p in group:
            d = rows.display(p, race_of.get(id(p)))
            d["data terms"] = rows.data_terms_text(p.record.data_terms)
            out.append("| " + " | ".join(esc(d[c]) for c in cols) + " |")
        out.append("")
    out.append("## Summary\n")
    out += [f"- {esc(line)}" for line in summary_lines(priced, races=races)]
    if comparison is not None:
        out.append("\n## Against the baseline\n")
        changed = _changed(comparison)
        if changed:
            out.append("| op | label | dtype | backend | baseline | now | ratio | change |")
            out.append("|---|---|---|---|---:|---:|---:|---|")
            for r in changed:
                ratio = f"{r.ratio:.2f}x" if r.ratio else rows.DASH
                out.append("| " + " | ".join(esc(x) for x in (*r.key, rows.seconds(r.old_time_s),
                                                               rows.seconds(r.new_time_s), ratio, r.change)) + " |")
            out.append("")
        out += [f"- {esc(line)}" for line in _comparison_lines(comparison)]
    return "\n".join(out) + "\n"


def _comparison_index(c: Comparison | None) -> dict:
    return {} if c is None else {r.key: r for r in c.rows}


def render_csv(priced: Sequence[Priced], *, comparison: Comparison | None = None) -> str:
    """One line per record, base units. With a baseline, three more columns (and the gone rows)."""
    cols = list(rows.RAW_COLUMNS) + (["baseline_time_s", "time_ratio", "change"] if comparison else [])
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    idx = _comparison_index(comparison)
    _, of_row = backend_races(priced)
    for p, race in zip(priced, of_row):
        row: dict[str, Any] = rows.raw(p, race)
        row["breaches"] = "; ".join(b["message"] for b in row["breaches"])
        row["notes"] = "; ".join(row["notes"])
        row["data_terms"] = rows.data_terms_text(row["data_terms"])
        if comparison is not None:
            rc = idx.get(p.record.key)
            row.update(baseline_time_s=rc.old_time_s if rc else None, time_ratio=rc.ratio if rc else None,
                       change=rc.change if rc else None)
        w.writerow(row)
    if comparison is not None:
        for rc in comparison.rows:
            if rc.change == "gone":
                op, label, dtype, backend = rc.key
                w.writerow({"op": op, "label": label, "dtype": dtype, "backend": backend,
                            "baseline_time_s": rc.old_time_s, "change": "gone"})
    return buf.getvalue()


def as_json(priced: Sequence[Priced], *, comparison: Comparison | None = None,
            health: Health | None = None) -> dict[str, Any]:
    h = health or compute_health(priced)
    races, of_row = backend_races(priced)
    doc: dict[str, Any] = {
        "health": h.as_dict(),
        "profiles": sorted({p.profile for p in priced if p.profile}),
        "summary": summary_lines(priced, h, races),
        "rows": [rows.raw(p, race) for p, race in zip(priced, of_row)],
        # every row run on several backends: each backend's SOL ratio, the best and its margin over the next
        "backends": [race.as_dict() for race in races.values()],
    }
    if comparison is not None:
        doc["baseline"] = {
            "threshold": comparison.threshold,
            "regressions": len(comparison.regressions),
            "counts": comparison.counts(),
            "notes": list(comparison.notes),
            "rows": [{"op": r.key[0], "label": r.key[1], "dtype": r.key[2], "backend": r.key[3],
                      "change": r.change, "baseline_time_s": r.old_time_s, "time_s": r.new_time_s,
                      "time_ratio": r.ratio, "baseline_efficiency": r.old_efficiency,
                      "efficiency": r.new_efficiency} for r in comparison.rows],
        }
    return doc


def render_json(priced: Sequence[Priced], *, comparison: Comparison | None = None,
                health: Health | None = None) -> str:
    return json.dumps(as_json(priced, comparison=comparison, health=health), indent=2) + "\n"
