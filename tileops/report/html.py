"""The run report a person opens in a browser: one self-contained HTML file (``tileops report``, a bench's
``report.html``).

Why a page of its own. The terminal table and the PNG each show part of a
run; a person deciding whether to trust one wants the point on the roofline
and the row behind it together, the rows sorted and filtered by what they
are looking for, and beside them what the numbers rest on: the health, the
host's noise, the calibration, the device. The page holds all of it, and
nothing it needs is fetched when it is opened (a cluster's browser may have
no network): its style, its script and its data are inlined, and the plot is
SVG drawn from the priced rows (``tileops.report.svgplot``), not a picture.

What it reuses. Every cell is the table formats' (``tileops.report.columns``),
every row's data the JSON report's (``columns.raw``, what ``tileops roofline
--format json`` writes), the summary and health lines ``RunFacts``', the
baseline decision ``tileops.report.baseline``'s. Nothing is priced or decided
here.

Escaping. Every string of a record (an op, a label, a host name) is escaped
where the page holds it: in the markup by ``html.escape``, in the embedded JSON
with ``<``, ``>`` and ``&`` as ``\\u`` escapes so no record can end the script
element; the script writes rows into the page with ``textContent`` only. The
style and the script live in ``html_page.html`` beside this module (shipped in
the wheel); this module is the standard library and the report package only.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tileops import __version__
from tileops.profiles import Profile
from tileops.report import columns
from tileops.report.baseline import Comparison, RowChange
from tileops.report.encode import finite
from tileops.report.summary import RunFacts, shown_verdict
from tileops.report.svgplot import placed, plot_svg, unplaced_reason, verdict_class
from tileops.report.tables import comparison_lines  # the comparison's summary, as the table prints it
from tileops.roofline import Health, Priced, disturbances, race_key, si

#: The page around the report: its style and script, with ``@@TITLE@@``, ``@@BODY@@`` and ``@@DATA@@`` to fill.
TEMPLATE = Path(__file__).with_name("html_page.html")
#: The id of the script element holding the report's data (JSON), which the page's script reads.
DATA_ID = "tileops-data"


def _e(value: object) -> str:
    """Text or an attribute's value as markup: every ``<``, ``>``, ``&`` and quote escaped."""
    return html.escape(str(value), quote=True)


@dataclass(frozen=True)
class ReportInput:
    """What one report shows: the priced rows and what was decided about them, and what they rest on."""

    priced: Sequence[Priced]
    health: Health
    facts: RunFacts
    profiles: Sequence[Profile] = ()  # the profiles the rows are priced on (their ceilings and calibration)
    comparison: Comparison | None = None
    run: Mapping[str, Any] | None = None  # run.json as data; None: the records came without one
    source: str = ""  # where the records were read, as the page names it


def render_report(inp: ReportInput) -> str:
    """The whole page, one string: markup, style, script and data."""
    races = inp.facts.races()
    cells = [columns.display(p, races.get(race_key(p.record))) for p in inp.priced]
    body = "".join((
        _header(inp),
        _health(inp),
        _plots(inp),
        _table(inp, cells),
        _baseline(inp.comparison) if inp.comparison is not None else "",
        _summary(inp),
        _host(inp.run),
        _calibration(inp.profiles),
        _device(inp),
        f'<footer>Every row and field: <code>roofline.json</code>, or <code>tileops roofline {_e(inp.source or "RUN")} '
        f"--format csv</code>. Written by tileops {_e(__version__)}.</footer>",
    ))
    data = {"rows": [finite(columns.raw(p, races.get(race_key(p.record)))) for p in inp.priced],
            "changes": _changes(inp),
            "extra": [_extra(p) for p in inp.priced]}
    run_id = (inp.run or {}).get("run_id") or next((p.record.run_id for p in inp.priced), "")
    return _page(f"TileOps run report {run_id}".strip(), body, data)


def _page(title: str, body: str, data: Mapping[str, Any]) -> str:
    parts = {"TITLE": _e(title), "BODY": body, "DATA": script_json(data)}
    template = TEMPLATE.read_text(encoding="utf-8")
    return re.sub(r"@@(TITLE|BODY|DATA)@@", lambda m: parts[m.group(1)], template)  # one pass: nothing rescanned


def script_json(data: Any) -> str:
    """``data`` as JSON that may sit inside a ``<script>`` element: no ``<``, ``>`` or ``&`` in it (escaped as
    ``\\u003c`` and so on, which JSON reads back as the same characters), so no string of a record can close
    the element or open a comment; no NaN or infinity (null, which JSON has)."""
    text = json.dumps(finite(data), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")



def _extra(p: Priced) -> dict[str, Any]:
    """What the hover adds to a row's cells: what disturbed it (contention, throttling) apart from the rest of
    why it is unstable."""
    return {"conditions": list(disturbances(p.record))}


def _changes(inp: ReportInput) -> list[dict[str, Any] | None]:
    """Each row's baseline change, as the JSON report's baseline rows hold it (None: no baseline, or no row)."""
    c = inp.comparison
    if c is None:
        return []
    by_key = {r.key: r for r in c.rows}
    out: list[dict[str, Any] | None] = []
    for p in inp.priced:
        r = by_key.get(p.record.key)
        out.append(None if r is None else {"change": r.change, "reason": r.reason, "message": r.message,
                                           "ratio": r.ratio, "ratio_interval": r.ratio_interval,
                                           "baseline_time_s": r.old_time_s})
    return out


# --------------------------------------------------------------------------- the sections


def _section(ident: str, title: str, inner: str) -> str:
    return f'<section id="{ident}"><h2>{_e(title)}</h2>{inner}</section>'


def _lines(lines: Iterable[str], cls: str = "") -> str:
    items = "".join(f"<li>{_e(line)}</li>" for line in lines)
    return f'<ul class="{cls}">{items}</ul>' if cls else f"<ul>{items}</ul>"


def _dl(pairs: Iterable[tuple[str, object]]) -> str:
    items = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in pairs if v not in (None, "", [], {}))
    return f"<dl>{items}</dl>" if items else ""


def _header(inp: ReportInput) -> str:
    run = inp.run or {}
    first = inp.priced[0].record if inp.priced else None
    device = f"{first.env.device.name} ({first.env.device.kind})" if first is not None else None
    facts = [("device", device), ("host", first.env.device.hostname if first is not None else None),
             ("profile", inp.facts.profile_names()), ("rows", f"{len(inp.priced):,}"),
             ("run", run.get("run_id")), ("status", run.get("status")), ("exit code", run.get("exit_code")),
             ("started", run.get("started_at")), ("finished", run.get("finished_at")),
             ("command", " ".join(["tileops", *run.get("argv", [])]) if run.get("argv") else None),
             ("records", inp.source)]
    title = f"TileOps run report {run.get('run_id') or ''}".strip()
    return f'<header><h1>{_e(title)}</h1>{_dl(facts)}</header>'


def _health_class(line: str) -> str:
    if line.startswith(("health: FAILED", "physics check BREACHED", "FORMULA ERROR")):
        return "bad"
    if line.startswith("health: OK"):
        return "good"
    return "warn" if line.startswith(("health: PARTLY", "health: NOT", "physics check NOT")) else ""


def _health(inp: ReportInput) -> str:
    lines = inp.facts.lines(inp.health)
    health = next((line for line in reversed(lines) if line.startswith("health:")), "")
    physics = [line for line in lines if line.startswith(("physics check", "FORMULA ERROR"))]
    inner = f'<p class="health {_health_class(health)}" id="health-line">{_e(health)}</p>'
    inner += "".join(f'<p class="physics {_health_class(line)}">{_e(line)}</p>' for line in physics)
    inner += f"<p>{_e(lines[0])}; {_e(lines[1])}</p>" if len(lines) > 1 else ""
    return _section("health", "Health", inner)


def _summary(inp: ReportInput) -> str:
    return _section("summary", "Summary", _lines(inp.facts.lines(inp.health), "summary"))


# --------------------------------------------------------------------------- the table


#: The table's columns: (header, the display cell's key or a computed one, sorts as a number).
_BASE_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("#", "#", True), ("op", "op", False), ("label", "label", False), ("dtype", "dtype", False),
    ("backend", "backend", False), ("time", "time", True), ("FLOP/s", "FLOP/s", True), ("B/s", "B/s", True),
    ("roof", "roof", False), ("bound", "bound", False), ("efficiency", "efficiency", True),
    (columns.SOL_CI_COLUMN, columns.SOL_CI_COLUMN, True), ("verdict", "verdict", False),
    ("conditions", "conditions", False),
)


def _columns(inp: ReportInput) -> list[tuple[str, str, bool]]:
    cols = list(_BASE_COLUMNS)
    if inp.facts.compiled:
        cols.append(("compile time", "compile time", True))
    if inp.facts.races():
        cols.append(("vs best", "vs best", False))
    if inp.comparison is not None:
        cols += [("baseline", "baseline", True), ("ratio", "ratio", True), ("ratio (95 % CI)", "ratio CI", True),
                 ("change", "change", False)]
    return cols


def _sort_values(p: Priced, change: RowChange | None) -> dict[str, float | None]:
    """The number each number column sorts by (base units; None sorts last)."""
    flops, nbytes = columns.achieved(p)
    ci = p.sol_ci
    return {"time": p.actual_time_s, "FLOP/s": flops, "B/s": nbytes, "efficiency": p.efficiency,
            columns.SOL_CI_COLUMN: ci[0] if ci is not None else None, "compile time": columns.compile_seconds(p),
            "baseline": change.old_time_s if change is not None else None,
            "ratio": change.ratio if change is not None else None,
            "ratio CI": change.ratio_interval[0] if change is not None and change.ratio_interval else None}


def conditions_text(p: Priced) -> str:
    """The conditions cell: what surrounded the row, in a word each (contended, throttled, host-bound, a power
    cap); the hover has the sentences."""
    words = [d.split(":", 1)[0] for d in disturbances(p.record)]
    if p.host_bound:
        words.append(columns.HOST_BOUND_MARK)
    mark = columns.power_mark(p)
    if mark:
        words.append(mark)
    return ", ".join(dict.fromkeys(words))


def _change_cells(change: RowChange | None) -> dict[str, str]:
    if change is None:
        return {"baseline": columns.DASH, "ratio": columns.DASH, "ratio CI": columns.DASH, "change": "new"}
    ratio = f"{change.ratio:.2f}x" if change.ratio else columns.DASH
    ci = columns.ratio_interval_text(*change.ratio_interval) if change.ratio_interval else columns.DASH
    return {"baseline": columns.seconds(change.old_time_s), "ratio": ratio, "ratio CI": ci, "change": change.change}


def _row(i: int, p: Priced, cells: dict[str, str], cols: list[tuple[str, str, bool]],
         change: RowChange | None, baseline: bool) -> str:
    r = p.record
    shown = {**cells, "#": str(i + 1), "conditions": conditions_text(p)}
    if baseline:
        shown.update(_change_cells(change))
    sort = _sort_values(p, change)
    sort["#"] = float(i + 1)
    tds = []
    for _, key, numeric in cols:
        v = sort.get(key) if numeric else None
        attr = f' data-v="{v!r}"' if v is not None and math.isfinite(v) else ""
        cls = _cell_class(key, p, change)
        tds.append(f"<td{attr}{cls}>{_e(shown.get(key) or '')}</td>")
    verdict = shown_verdict(p)
    return (f'<tr data-i="{i}" data-op="{_e(r.op)}" data-dtype="{_e(r.dtype)}" data-backend="{_e(r.backend)}" '
            f'data-verdict="{_e(verdict)}">{"".join(tds)}</tr>')


def _cell_class(key: str, p: Priced, change: RowChange | None) -> str:
    if key == "verdict":
        return f' class="v v-{verdict_class(shown_verdict(p))}{" breach" if p.breaches else ""}"'
    if key == "change" and change is not None:
        return f' class="c-{_e(change.change)}"'
    return ""


def _filter(name: str, values: Iterable[str]) -> str:
    options = "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in sorted(set(values)))
    return (f'<label>{_e(name)} <select data-filter="{_e(name)}"><option value="">all</option>{options}'
            "</select></label>")


def _table(inp: ReportInput, cells: list[dict[str, str]]) -> str:
    cols = _columns(inp)
    by_key = {r.key: r for r in inp.comparison.rows} if inp.comparison is not None else {}
    head = "".join(f'<th data-col="{n}" data-type="{"num" if numeric else "text"}" tabindex="0" '
                   f'title="sort by {_e(name)}">{_e(name)}</th>' for n, (name, _, numeric) in enumerate(cols))
    rows = "".join(_row(i, p, cells[i], cols, by_key.get(p.record.key), inp.comparison is not None)
                   for i, p in enumerate(inp.priced))
    filters = (_filter("op", (p.record.op for p in inp.priced)) + _filter("dtype", (p.record.dtype for p in inp.priced))
               + _filter("backend", (p.record.backend for p in inp.priced))
               + _filter("verdict", (shown_verdict(p) for p in inp.priced)))
    controls = (f'<div class="filters">{filters}<button type="button" id="reset">show all</button>'
                f'<span id="shown">{len(inp.priced):,} of {len(inp.priced):,} rows</span></div>')
    table = (f'<div class="scroll"><table id="rows"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'
             '<p class="hint">Click a header to sort (again: the other way); click a row for every field of it.</p>'
             '<pre id="details" hidden></pre>')
    return _section("table", "Rows", controls + table)


# --------------------------------------------------------------------------- the baseline


def _baseline(c: Comparison) -> str:
    inner = _lines(comparison_lines(c), "summary")
    gone = [r for r in c.rows if r.change == "gone"]
    if gone:
        rows = "".join(f"<tr><td>{_e(r.key[0])}</td><td>{_e(r.key[1])}</td><td>{_e(r.key[2])}</td>"
                       f"<td>{_e(r.key[3])}</td><td>{_e(columns.seconds(r.old_time_s))}</td></tr>" for r in gone)
        inner += ("<h3>In the baseline, not in this run</h3><table class=\"plain\"><thead><tr><th>op</th><th>label</th>"
                  f"<th>dtype</th><th>backend</th><th>baseline</th></tr></thead><tbody>{rows}</tbody></table>")
    inner += ('<p class="hint">Each row\'s change, its time ratio (now / baseline) and the ratio\'s 95 % interval are '
              "in the table's last columns; the hover gives the reason.</p>")
    return _section("baseline", f"Against the baseline (threshold {c.threshold:.0%})", inner)


# --------------------------------------------------------------------------- host, calibration, device


def _pct(x: Any) -> str | None:
    return f"±{x * 100:.1f} %" if isinstance(x, (int, float)) and math.isfinite(x) else None


def _host(run: Mapping[str, Any] | None) -> str:
    if run is None:
        return _section("host", "Host", "<p>No run.json beside the records: the host's look and noise are not "
                                         "known to this report.</p>")
    quiet = run.get("quiet") or {}
    inner = "<h3>Before the rows</h3>" + _dl([
        ("quiet", quiet.get("quiet")), ("cores", quiet.get("cores")), ("load (1 min)", quiet.get("load1")),
        ("steal", quiet.get("steal")), ("other GPU processes", quiet.get("gpu_other_processes")),
        ("warnings", "; ".join(quiet.get("warnings") or [])),
        ("not read", "; ".join(f"{k}: {v}" for k, v in (quiet.get("blank") or {}).items()))])
    noise = run.get("host_noise") or {}
    inner += "<h3>Host noise (run.json: host_noise)</h3>" + (_noise_table(noise) if noise else
                                                              "<p>No second pass measured the host's noise.</p>")
    drift = run.get("host_drift") or {}
    if drift:
        inner += "<h3>Host drift (run.json: host_drift, an older run's)</h3>" + _dl(
            (k, json.dumps(v)) for k, v in drift.items())
    rule = run.get("stopping_rule") or {}
    if rule:
        inner += "<h3>Stopping rule</h3>" + _dl(rule.items())
    return _section("host", "Host", inner)


def _noise_table(noise: Mapping[str, Any]) -> str:
    kinds = sorted({*(noise.get("between_visits") or {}), *(noise.get("within_visit") or {})})
    head = ("<tr><th>rows bound by</th><th>rows</th><th>within a visit</th><th>between visits</th><th>from</th>"
            "<th>host shift of a pass</th><th>second pass shift</th><th>reruns</th></tr>")
    body = ""
    for kind in kinds:
        between = (noise.get("between_visits") or {}).get(kind) or {}
        host = (noise.get("host") or {}).get(kind) or {}
        shift = (noise.get("second_pass_shift") or {}).get(kind)
        rerun = (noise.get("reruns") or {}).get(kind) or {}
        reruns = (f"x{rerun['factor']:.2f} over {rerun.get('runs')} rerun(s)" if "factor" in rerun
                  else "not calibrated" if rerun else "")
        within = (noise.get("within_visit") or {}).get(kind)
        cells = (kind, (noise.get("rows_by_kind") or {}).get(kind, 0), _pct(within), _pct(between.get("sigma")),
                 between.get("source"), _pct(host.get("sigma")),
                 f"{math.expm1(shift) * 100:+.1f} %" if isinstance(shift, (int, float)) else None, reruns)
        body += "<tr>" + "".join(f"<td>{_e(c if c is not None else columns.DASH)}</td>" for c in cells) + "</tr>"
    notes = [*(noise.get("notes") or []), *([noise["why"]] if noise.get("why") else [])]
    kept = noise.get("kept_first") or []
    if kept:
        notes.append(f"{len(kept)} row(s) keep their first visit alone (run.json: host_noise.kept_first)")
    return (f'<table class="plain"><thead>{head}</thead><tbody>{body}</tbody></table>'
            + (_lines(notes) if notes else ""))


def _source(src: Any) -> str | None:
    if src is None:
        return None
    parts = [src.source, src.ref, f"run {src.run_id}" if src.run_id else None,
             str(src.date) if src.date else None, f"tileops {src.tool_version}" if src.tool_version else None,
             src.note]
    return ", ".join(str(p) for p in parts if p)


def _calibration(profiles: Sequence[Profile]) -> str:
    if not profiles:
        return _section("calibration", "Calibration", "<p>No row is priced on a profile: SOL is blank.</p>")
    inner = ""
    for prof in profiles:
        head = ("<tr><th>ceiling</th><th>theoretical</th><th>calibrated fraction</th><th>effective</th>"
                "<th>theoretical from</th><th>calibration from</th></tr>")
        rows = ""
        mem = prof.memory
        if mem is not None:
            rows += _roof_row("memory", mem.theoretical, mem.calibration, mem.effective, "B/s",
                              mem.theoretical_source, mem.calibration_source)
        for key, roof in prof.compute.items():
            rows += _roof_row(key, roof.theoretical, roof.calibration, roof.effective, "FLOP/s",
                              roof.theoretical_source, roof.calibration_source)
        path = prof.source_path
        inner += f"<h3>Profile {_e(prof.name)} ({_e(prof.kind)})</h3>" + _dl([
            ("file", str(path) if path else None), ("note", prof.memory_note),
            ("measured bandwidth per mix", ", ".join(f"{k} {si(v, 'B/s')}" for k, v in
                                                     (mem.measured if mem else {}).items())),
            ("latency floor", columns.seconds(prof.latency_floor_s) if prof.latency_floor_s else None)])
        inner += f'<table class="plain"><thead>{head}</thead><tbody>{rows}</tbody></table>'
    return _section("calibration", "Calibration", inner)


def _roof_row(name: str, theoretical: float | None, fraction: float | None, effective: float | None, unit: str,
              theo_src: Any, cal_src: Any) -> str:
    cells = (name, si(theoretical, unit) if theoretical else "not known",
             f"{fraction * 100:.1f} %" if fraction is not None else columns.DASH,
             si(effective, unit) if effective else "uncalibrated", _source(theo_src) or columns.DASH,
             _source(cal_src) or columns.DASH)
    return "<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>"


def _device(inp: ReportInput) -> str:
    seen: dict[str, Any] = {}
    for p in inp.priced:
        env = p.record.env
        seen.setdefault(json.dumps([env.device.name, env.device.hostname, env.device.index]), env)
    inner = ""
    for env in list(seen.values())[:8]:
        d = env.device
        inner += f"<h3>{_e(d.name)} ({_e(d.kind)})</h3>" + _dl([
            ("host", d.hostname), ("index", d.index), ("uuid", d.uuid), ("CPU", env.cpu_model),
            ("threads", env.threads), ("L2", si(env.l2_bytes, "B") if env.l2_bytes else None),
            ("driver", env.driver), ("CUDA", env.cuda), ("torch", env.torch_version),
            ("tileops", env.tileops_version), ("revision", env.git_revision),
            ("clocks before", json.dumps(env.clocks_before) if env.clocks_before else None),
            ("clocks after", json.dumps(env.clocks_after) if env.clocks_after else None)])
    if len(seen) > 8:
        inner += f"<p>… and {len(seen) - 8} more device(s).</p>"
    checked = ((inp.run or {}).get("health") or {}).get("device_facts") or {}
    if checked:
        inner += "<h3>The device against its profile</h3>" + _dl([
            ("state", checked.get("state")), ("why", checked.get("reason")), ("note", checked.get("note")),
            ("mismatches", "; ".join(map(str, checked.get("mismatches") or [])))])
    return _section("device", "Device", inner or "<p>No rows.</p>")


def _plots(inp: ReportInput) -> str:
    if not inp.profiles:
        return _section("plot", "Roofline", "<p>No row is priced on a profile, so there is no roofline to draw.</p>")
    inner = ""
    for uid, prof in enumerate(inp.profiles):
        svg, legend = plot_svg(inp.priced, prof, uid)
        missing: dict[str, int] = {}
        for p in inp.priced:
            if placed(p, prof) is None:
                why = unplaced_reason(p, prof)
                missing[why] = missing.get(why, 0) + 1
        off = ("<p>Not on this plot: " + _e("; ".join(f"{n} row(s) {why}" for why, n in missing.items()))
               + " (they are in the table).</p>") if missing else ""
        legend_html = "".join(f"<li>{item}</li>" for item in legend)
        inner += (f"<h3>Profile {_e(prof.name)}</h3><figure>{svg}"
                  f'<figcaption><ul class="legend">{legend_html}</ul>{off}</figcaption></figure>')
    inner += '<div id="tooltip" role="tooltip" hidden></div>'
    return _section("plot", "Roofline", inner)
