"""`tileops report`: the HTML page of a run, read as text (tests/test_report_browser.py opens it in chromium).

What a page must hold whatever its rows: every row, each string of a record
escaped (an op or label holding markup shows as text and cannot end the data's
script element), the data the script reads being the JSON report's rows, the
plot's points and ceilings as issue 37 asked (an error bar cut at the axes ends
in an arrow, coincident ceilings are one line named for both), the size bound
for a large run, and the command's exit codes (roofline's).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from roofline_fixtures import make_profile, make_record, write_profile, write_records

from tileops import exitcodes
from tileops.cli import main
from tileops.profiles import ProfileChooser
from tileops.report import columns
from tileops.report.baseline import compare
from tileops.report.html import DATA_ID, ReportInput, render_report
from tileops.report.summary import RunFacts
from tileops.report.svgplot import SAME_CEILING, ceilings, plot_svg
from tileops.roofline import price, price_all

PROFILE = make_profile(name="html-test-cpu", match=("Test CPU",), bw_theoretical=40e9, bw_calibration=0.5,
                       roofs={"cpu.fp32": (200e9, 0.5)})
HOSTILE = '<img src=x onerror="window.pwned=1"></script><!--&amp;'
#: a size and a time, as the bench records them for a memory-bound row (made-up counts: nothing is priced by hand)
FLOPS, BYTES = 1 << 20, 1 << 23


def _rows(n: int, *, op: str = "relu", label: str = "row", spread: float = 1.02) -> list:
    """``n`` records of one op, their levels known to about ±2 % (``spread``), as the bench writes them."""
    out = []
    for i in range(n):
        t = 1e-3 * (1 + i / max(n, 1))
        out.append(make_record(op=op, label=f"{label}-{i}", flops=FLOPS, bytes=BYTES, median_s=t,
                               level_ci_s=(t / spread, t * spread), median_ci_s=(t / spread ** 2, t * spread ** 2),
                               ci_df=30.0, dtype="float32" if i % 2 else "bfloat16"))
    return out


def _page(records: list, *, profile=PROFILE, baseline: list | None = None, run: dict | None = None) -> str:
    priced = price_all(records, ProfileChooser.only(profile))
    facts = RunFacts.of(priced)
    comparison = None
    if baseline is not None:
        comparison = compare(priced, price_all(baseline, ProfileChooser.only(profile)))
    return render_report(ReportInput(priced, facts.health(), facts, [profile], comparison, run, "RUN"))


def _data(page: str) -> dict:
    m = re.search(rf'<script type="application/json" id="{DATA_ID}">(.*?)</script>', page, re.S)
    assert m is not None
    return json.loads(m.group(1))


def test_every_row_is_in_the_table_and_the_data_is_the_json_reports_rows() -> None:
    records = _rows(7) + _rows(3, op="add")
    page = _page(records)
    assert page.count('<tr data-i="') == 10
    data = _data(page)
    priced = price_all(records, ProfileChooser.only(PROFILE))
    assert [r["label"] for r in data["rows"]] == [r.label for r in records]
    assert list(data["rows"][0]) == list(columns.RAW_COLUMNS)  # the JSON report's columns, in its order
    assert data["rows"][4]["efficiency"] == pytest.approx(priced[4].efficiency)
    assert page.count('class="pt ') == 10  # every row placed on the plot, each point knowing its row
    assert {int(i) for i in re.findall(r'class="pt [^"]*" data-i="(\d+)"', page)} == set(range(10))
    assert "health: OK" in page and "PARTLY" not in page
    assert not re.search(r"\b(src|href)=|https?://|@import", page)  # nothing fetched when it is opened
    # the filters offer what the rows hold
    assert re.search(r'data-filter="op">.*<option value="add">add</option><option value="relu">relu</option>', page)


def test_every_string_of_a_record_is_escaped() -> None:
    """An op, a label, a dtype and a device name holding markup show as text: no element, no end of the data's
    script element, no comment, nothing a browser would run."""
    records = [make_record(op=HOSTILE, label=HOSTILE, device_name=HOSTILE, flops=FLOPS, bytes=BYTES, median_s=1e-3)]
    hostile_profile = make_profile(name="html-test-cpu", match=(HOSTILE,), bw_theoretical=40e9)
    page = _page(records, profile=hostile_profile, run={"run_id": HOSTILE, "argv": ["bench", HOSTILE]})
    assert "<img" not in page
    assert page.count("</script>") == 2 and page.count("<script") == 2  # the data's element and the script's
    assert "<!--&" not in page
    assert "&lt;img src=x onerror=&quot;window.pwned=1&quot;&gt;" in page  # shown, as text
    data = _data(page)  # and the data reads back to the very strings
    assert data["rows"][0]["op"] == HOSTILE and data["rows"][0]["label"] == HOSTILE


def test_a_page_of_500_rows_stays_under_5_mb() -> None:
    """Issue 37's bound; the size of a page is a function of its rows (no time or host in it), so this holds it
    where a timing could not (benchmarks/report_html.py prints the size and the write time)."""
    records = _rows(250, label="a-long-label-of-a-sweep-row-m4096-n4096-k4096") + _rows(250, op="add")
    page = _page(records, baseline=records)
    assert page.count('<tr data-i="') == 500
    assert len(page.encode("utf-8")) <= 5_000_000


def test_an_error_bar_cut_at_the_axes_ends_in_an_arrow() -> None:
    """A row whose interval reaches ten decades is drawn to the frame with an arrow, never past it."""
    t = 1e-3
    wild = make_record(label="wild", flops=FLOPS, bytes=BYTES, median_s=t, level_ci_s=(t * 1e-5, t * 1e5),
                       ci_df=30.0)
    tight = make_record(label="tight", flops=FLOPS, bytes=BYTES, median_s=t, level_ci_s=(t * 0.99, t * 1.01),
                        ci_df=30.0)
    svg, _ = plot_svg(price_all([wild, tight], ProfileChooser.only(PROFILE)), PROFILE)
    bars = dict(re.findall(r'<line class="eb" data-i="(\d)"([^>]*)/>', svg))
    assert 'marker-start="url(#arrow-0)"' in bars["0"] and 'marker-end="url(#arrow-0)"' in bars["0"]
    assert "marker" not in bars["1"]
    ys = [float(y) for y in re.findall(r'y[12]="([\d.]+)"', bars["0"])]
    assert min(ys) >= 14 and max(ys) <= 540 - 52  # inside the frame


def test_coincident_ceilings_are_one_line_named_for_each() -> None:
    prof = make_profile(name="twins", roofs={"cpu.fp32": (238e9, 0.8), "cpu.fp32_matmul": (238e9, 0.8 * (1 - SAME_CEILING / 2)),
                                             "tensor_core.bf16": (900e9, 0.5)})
    _, compute = ceilings(prof)
    effective = [c for c in compute if c.effective]
    assert [c.names for c in effective] == [("tensor_core.bf16",), ("cpu.fp32", "cpu.fp32_matmul")]
    theoretical = [c for c in compute if not c.effective]
    assert theoretical[1].names == ("cpu.fp32", "cpu.fp32_matmul")
    assert "cpu.fp32 190 GFLOP/s, cpu.fp32_matmul" in effective[1].label("FLOP/s")
    apart = make_profile(name="apart", roofs={"cpu.fp32": (238e9, 0.8), "cpu.fp32_matmul": (238e9, 0.6)})
    assert len([c for c in ceilings(apart)[1] if c.effective]) == 2


def test_rows_the_plot_cannot_place_are_named_with_why() -> None:
    records = _rows(2) + [make_record(label="no-flops", flops=0, bytes=BYTES, median_s=1e-3),
                          make_record(label="failed", status="error")]
    page = _page(records)
    assert page.count('class="pt ') == 2 and page.count('<tr data-i="') == 4
    assert "1 row(s) 0 FLOPs (off a log axis)" in page and "1 row(s) error" in page


def test_the_baseline_adds_each_rows_change_ratio_and_interval() -> None:
    new = _rows(4)
    old = _rows(4, spread=1.02)[:3] + [make_record(label="gone-row", flops=FLOPS, bytes=BYTES, median_s=1e-3)]
    page = _page(new, baseline=old)
    assert "Against the baseline (threshold 10%)" in page
    assert ">ratio (95 % CI)</th>" in page and ">change</th>" in page
    assert page.count('class="c-same"') == 3  # the same code, the same times
    assert "In the baseline, not in this run" in page and "gone-row" in page
    data = _data(page)
    assert [c["change"] if c else None for c in data["changes"]] == ["same", "same", "same", "new"]


# --------------------------------------------------------------------------- the command


@pytest.fixture()
def profile_file(tmp_path: Path) -> Path:
    return write_profile(tmp_path / "html-test-cpu.yaml", PROFILE)


def test_the_command_writes_report_html_beside_the_records(tmp_path: Path, profile_file: Path, capsys) -> None:
    run = write_records(tmp_path / "run" / "records.jsonl", _rows(3)).parent
    assert main(["report", str(run), "--profile", str(profile_file)]) == exitcodes.OK
    assert f"report: {run / 'report.html'} (3 row(s)" in capsys.readouterr().out
    page = (run / "report.html").read_text(encoding="utf-8")
    assert page.count('<tr data-i="') == 3 and "No run.json beside the records" in page
    out = tmp_path / "elsewhere" / "page.html"
    assert main(["report", str(run / "records.jsonl"), "--profile", str(profile_file), "-o", str(out),
                 "--baseline", str(run)]) == exitcodes.OK
    assert "Against the baseline" in out.read_text(encoding="utf-8")


def test_unreadable_input_exits_2_naming_the_file(tmp_path: Path, profile_file: Path, capsys) -> None:
    missing = tmp_path / "missing"
    assert main(["report", str(missing), "--profile", str(profile_file)]) == exitcodes.USAGE
    assert f"{missing}: no records file" in capsys.readouterr().err
    run = write_records(tmp_path / "run" / "records.jsonl", _rows(2)).parent
    (run / "run.json").write_text("{not json")
    assert main(["report", str(run), "--profile", str(profile_file)]) == exitcodes.USAGE
    assert f"{run / 'run.json'}" in capsys.readouterr().err
    assert not (run / "report.html").exists()  # nothing written on unreadable input
    (run / "run.json").unlink()
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert main(["report", str(run), "--profile", str(profile_file), "-o", str(blocked / "x.html")]) == exitcodes.USAGE
    assert "cannot write the report" in capsys.readouterr().err
    empty = tmp_path / "empty" / "records.jsonl"
    empty.parent.mkdir()
    empty.write_text("")
    assert main(["report", str(empty.parent), "--profile", str(profile_file)]) == exitcodes.USAGE
    assert "no records" in capsys.readouterr().err


def test_a_physics_breach_is_exit_3_and_still_written(tmp_path: Path, profile_file: Path, capsys) -> None:
    """As roofline: the page of a failing run is the one a person most needs."""
    impossible = make_record(label="too-fast", flops=FLOPS, bytes=BYTES, median_s=1e-9)  # far above 40 GB/s
    run = write_records(tmp_path / "run" / "records.jsonl", [impossible, *_rows(1)]).parent
    assert main(["report", str(run), "--profile", str(profile_file)]) == exitcodes.PHYSICS
    assert "a physics breach" in capsys.readouterr().err
    page = (run / "report.html").read_text(encoding="utf-8")
    assert "health: FAILED" in page and 'class="pt v-anomaly breach"' in page


def test_an_unstable_point_shows_what_it_reads_hollow() -> None:
    """Issue 37: on a busy host every point was the same orange. As in the PNG, an unstable row's point is
    coloured by what its median reads (an anomaly's magenta above 105 %, else below or at-ceiling), hollow."""
    from tileops.report.svgplot import _look

    prof = make_profile(name="p", bw_theoretical=50e9, bw_calibration=1.0)
    slow = price(make_record(bytes=1 << 20, median_s=1e-3, level_ci_s=(0.5e-3, 3e-3), ci_df=20.0), prof)
    hot = price(make_record(bytes=67_000_000, median_s=1e-3, level_ci_s=(0.5e-3, 3e-3), ci_df=20.0), prof)
    steady = price(make_record(bytes=1 << 20, median_s=1e-3, level_ci_s=(0.999e-3, 1.001e-3), ci_df=20.0), prof)
    assert slow.verdict == hot.verdict == "unstable" and steady.verdict == "below"
    assert _look(slow) == ("below", True) and _look(hot) == ("anomaly", True) and _look(steady) == ("below", False)
