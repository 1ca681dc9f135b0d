"""Reports of priced rows: the four formats, the baseline comparison, the roofline plot."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
from rich.console import Console
from roofline_fixtures import make_profile, make_record

from tileops.report import compare, render_summary, render_text
from tileops.report.summary import summary_lines
from tileops.report.plot import write_plot
from tileops.profiles import ProfileChooser
from tileops.roofline import health, price_all

PROFILE = make_profile(name="cpu-test", bw_theoretical=40e9, bw_calibration=0.5,
                       roofs={"cpu.fp32": (200e9, 0.5), "cpu.fp32_matmul": (200e9, None)}, latency_floor_s=5e-6)


def _rows() -> list:
    return [
        make_record(op="relu", label="n=1M", flops=1 << 20, bytes=8 << 20, median_s=(8 << 20) / 18e9),  # 90 %
        make_record(op="relu", label="n=16M", flops=1 << 24, bytes=8 << 24, median_s=(8 << 24) / 10e9),  # 50 %
        make_record(op="relu", label="tiny", flops=16, bytes=128, median_s=2e-6),  # latency-bound
        make_record(op="gemm", label="M=N=K=512", flops=2 * 512 ** 3, bytes=12 * 512 * 512, median_s=0.01,
                    roof_key="cpu.fp32"),
        make_record(op="gemm", label="matmul roof", flops=2 * 512 ** 3, bytes=12 * 512 * 512, median_s=0.01,
                    roof_key="cpu.fp32_matmul"),  # uncalibrated roof: blank
        make_record(op="cast", label="identity", flops=0, bytes=8 << 20, median_s=1e-3),  # 0 FLOPs: not placed
        make_record(op="add", label="inflated", flops=1 << 20, bytes=800 << 20, median_s=1e-3),  # breach
        make_record(op="mul", label="broken", status="error"),
    ]


def test_render_summary_prints_the_grouped_table_and_summary() -> None:
    console = Console(record=True, width=200, file=io.StringIO())
    priced = price_all(_rows(), ProfileChooser.only(PROFILE))
    h = health(priced)
    render_summary(priced, console, health=h)
    text = console.export_text()
    for needle in ("relu", "gemm", "n=16M", "at-ceiling", "latency-bound", "blank: roof-uncalibrated",
                   "FORMULA ERROR", "health: FAILED", "memory 20 GB/s", "cpu.fp32 100 GFLOP/s"):
        assert needle in text, needle
    assert text.count("relu") >= 1 and "inflated" in text
    assert not h.ok and h.breaches == 1 and h.errors == 1


def test_memory_bound_row_shows_bytes_per_second_against_the_memory_roof() -> None:
    md = render_text(price_all(_rows()[:1], ProfileChooser.only(PROFILE)), "md")
    assert "| n=1M | float32 | torch |" in md
    assert "| time (µs) | GFLOP/s | GB/s | roof |" in md  # each number column's unit is in its header
    assert "| 2.25 | 18.0 | memory 20 GB/s | memory | 90.0 % | at-ceiling |" in md  # both achieved rates
    assert "## relu" in md and "health: OK (physics check passed on every ceiling: memory, cpu.fp32)" in md
    assert "physics check passed on memory: 1 row(s) judged against the theoretical 40 GB/s" in md


@pytest.mark.parametrize("fmt", ["table", "md"])
def test_both_achieved_rates_side_by_side_each_column_in_one_unit(fmt: str) -> None:
    """A memory-bound row and a compute-bound row each show FLOP/s and bytes/s; a column holds one unit,
    named in its header, chosen by its typical row (a 2 µs row and a 10 ms row in one ms column)."""
    priced = price_all(_rows()[:4], ProfileChooser.only(PROFILE))
    text = render_text(priced, fmt)
    header = next(line for line in text.splitlines() if "label" in line and "dtype" in line)
    assert "time (ms)" in header and "GFLOP/s" in header and "GB/s" in header and "achieved" not in header
    cells = {line.split("|" if fmt == "md" else "│")[2 if fmt == "table" else 1].strip(): line
             for line in text.splitlines() if "|" in line or "│" in line}
    assert " 0.00200 " in cells["tiny"] and " 10.0 " in cells["M=N=K=512"]  # both in ms
    gemm = [c.strip() for c in cells["M=N=K=512"].split("|" if fmt == "md" else "│")]
    assert "26.8" in gemm and "0.315" in gemm  # 268 MFLOP in 10 ms is 26.8 GFLOP/s; 3.1 MB in 10 ms 0.315 GB/s
    assert not any(u in cells["n=16M"] for u in ("µs", " ms", "GFLOP/s"))  # units in headers, not in cells


def test_passed_is_said_only_of_what_was_judged() -> None:
    """A CPU whose nominal bandwidth is unknown: a 1000x inflated bytes formula is not judged, and the
    summary says so instead of "physics check passed"."""
    blind = make_profile(name="cpu-blind", bw_theoretical=None, bw_calibration=None, measured={"triad": 20e9},
                         roofs={"cpu.fp32": (200e9, 0.5)})
    # formula-guard: allow a synthetic record whose bytes are inflated 1000x on purpose (a physics-check test)
    inflated = make_record(op="add", label="inflated", flops=1 << 20, bytes=1000 * (12 << 20), median_s=1e-3)
    lines = summary_lines(price_all([inflated], ProfileChooser.only(blind)))
    text = "\n".join(lines)
    assert "physics check NOT JUDGED on memory: 1 row(s), nominal-unknown" in text
    assert "TILEOPS_DRAM_BANDWIDTH" in text  # how to make it judged
    assert "physics check passed on cpu.fp32" in text and "passed on memory" not in text
    assert lines[-1].startswith("health: PARTLY JUDGED") and "NOT JUDGED: memory (nominal-unknown)" in lines[-1]
    assert not any(line.startswith("health: OK") for line in lines)
    # formula-guard: allow a synthetic record whose bytes are inflated 1000x on purpose (a physics-check test)
    memory_only = make_record(op="cast", label="identity", flops=0, bytes=1000 * (8 << 20), median_s=1e-3)
    last = summary_lines(price_all([memory_only], ProfileChooser.only(blind)))[-1]
    assert last.startswith("health: NOT JUDGED") and "memory (nominal-unknown)" in last and "passed" not in last
    last = summary_lines(price_all([memory_only], ProfileChooser.only(None)))[-1]
    assert last.startswith("health: NOT JUDGED") and "no-profile" in last
    fp8 = make_record(op="scaled_mm", label="fp8", flops=1 << 20, bytes=12 << 20, median_s=1e-3,
                      roof_key="tensor_core.fp8")
    honest = make_record(op="relu", label="n=1M", flops=1 << 20, bytes=8 << 20, median_s=1e-3)
    last = summary_lines(price_all([honest, fp8], ProfileChooser.only(PROFILE)))[-1]
    assert last == ("health: OK (physics check passed on memory, cpu.fp32; not in the profile, so not judged "
                    "and left blank: tensor_core.fp8 (roof-absent))")
    doc = json.loads(render_text(price_all([inflated], ProfileChooser.only(blind)), "json"))
    assert doc["health"]["state"] == "partial" and doc["summary"][-1] == lines[-1]


def test_csv_and_json_are_flat_in_base_units() -> None:
    priced = price_all(_rows(), ProfileChooser.only(PROFILE))
    rows = list(csv.DictReader(io.StringIO(render_text(priced, "csv"))))
    assert len(rows) == len(priced)
    first = rows[0]
    assert float(first["efficiency"]) == pytest.approx(0.9)
    assert float(first["effective_bandwidth"]) == pytest.approx(20e9)
    assert first["verdict"] == "at-ceiling" and first["bound"] == "memory"
    assert rows[-2]["formula_error"] == "True" and "FORMULA ERROR" in rows[-2]["breaches"]
    doc = json.loads(render_text(priced, "json"))
    assert doc["health"]["ok"] is False and doc["health"]["breaches"] == 1
    assert doc["health"]["blanks_by_reason"] == {"roof-uncalibrated": 1}
    assert [r["verdict"] for r in doc["rows"]] == [p.verdict for p in priced]
    assert doc["rows"][6]["breaches"][0]["ceiling"] == "memory"


@pytest.mark.parametrize("encoder", ["msgspec", "standard library"])
def test_json_rows_hold_every_value_exactly(encoder: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows are encoded by msgspec where it is installed, else by the standard library (msgspec is optional:
    the device machine has none): either way each row reads back to exactly the values of ``columns.raw``, a
    whole number beyond 64 bits in a row's data terms, a time of eight digits and a non-ASCII label
    included, and a number JSON cannot hold (NaN) as null."""
    from tileops.report import columns as row_cells
    from tileops.report import encode, tables

    if encoder == "msgspec":
        pytest.importorskip("msgspec")
    else:  # where msgspec is not installed, json_row is the standard library's
        monkeypatch.setattr(tables, "json_row", encode._json_std)
    recs = [make_record(label="small", data_terms={"experts_hit": 3, "rows": [1, 2]}),
            make_record(label="huge", data_terms={"tokens": 2**70}), make_record(label="t", median_s=1.2345678e-7),
            make_record(label="µ-naïve", data_terms={"ratio": float("nan"), "x": [float("inf"), 1.5]})]
    priced = price_all(recs, ProfileChooser.only(PROFILE))
    doc = json.loads(render_text(priced, "json"))
    assert [r["data_terms"] for r in doc["rows"]] == [{"experts_hit": 3, "rows": [1, 2]}, {"tokens": 2**70}, {},
                                                      {"ratio": None, "x": [None, 1.5]}]
    want = [row_cells.raw(p) for p in priced]
    want[-1]["data_terms"] = {"ratio": None, "x": [None, 1.5]}
    assert doc["rows"] == want and doc["rows"][-1]["label"] == "µ-naïve"


def test_the_standard_encoder_writes_what_msgspec_writes() -> None:
    """Row for row, the two JSON encoders' texts read back to the same values."""
    pytest.importorskip("msgspec")
    from tileops.report.columns import raw_values
    from tileops.report.encode import _json_msgspec, _json_std

    recs = [make_record(label=f"r{i}", bytes=(i + 1) << 20, median_s=1e-4 * (i + 1), data_terms={"k": [i, 2.5]})
            for i in range(5)] + [make_record(label="err", status="error")]
    for p in price_all(recs, ProfileChooser.only(PROFILE)):
        assert json.loads(_json_std(raw_values(p)) + "}") == json.loads(_json_msgspec(raw_values(p)) + "}")


def test_baseline_flags_rows_more_than_the_threshold_slower() -> None:
    def run(times: dict[str, float]) -> list:
        recs = [make_record(label=k, bytes=8 << 20, median_s=v, level_ci_s=(v * 0.995, v * 1.005), ci_df=30.0)
                for k, v in times.items()]
        return price_all(recs, ProfileChooser.only(PROFILE))

    old = run({"a": 1e-3, "b": 1e-3, "c": 1e-3, "d": 1e-3, "gone": 1e-3})
    new = run({"a": 1.11e-3, "b": 1.09e-3, "c": 0.8e-3, "d": 1e-3, "new": 1e-3})
    c = compare(new, old, threshold=0.10)
    change = {r.key[1]: r.change for r in c.rows}
    assert change == {"a": "slower", "b": "same", "c": "faster", "d": "same", "new": "new", "gone": "gone"}
    assert [r.key[1] for r in c.regressions] == ["a"]
    assert c.regressions[0].ratio == pytest.approx(1.11)
    # the threshold is a flag: at 5 % row b is slower too
    assert [r.key[1] for r in compare(new, old, threshold=0.05).regressions] == ["a", "b"]
    md = render_text(new, "md", comparison=c)
    assert "| relu | a | float32 | torch |" in md and "slower" in md
    doc = json.loads(render_text(new, "json", comparison=c))
    assert doc["baseline"]["regressions"] == 1
    rows = list(csv.DictReader(io.StringIO(render_text(new, "csv", comparison=c))))
    assert {r["label"]: r["change"] for r in rows}["a"] == "slower"
    assert any(r["change"] == "gone" for r in rows)


def test_baseline_notes_a_device_change() -> None:
    old = price_all([make_record(device_name="Other CPU", bytes=8)], ProfileChooser.only(PROFILE))
    new = price_all([make_record(bytes=8)], ProfileChooser.only(PROFILE))
    assert "different devices" in compare(new, old).notes[0]


def test_plot_is_written_as_png_and_svg(tmp_path: Path) -> None:
    priced = price_all(_rows(), ProfileChooser.only(PROFILE))
    paths = write_plot(priced, PROFILE, tmp_path / "out")
    assert [p.name for p in paths] == ["roofline.png", "roofline.svg"]
    png, svg = paths
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    text = svg.read_text(encoding="utf-8")
    assert "<svg" in text
    # every row is listed in the legend table, placed or not, with its verdict
    for needle in ("inflated", "identity", "not placed: 0 FLOPs", "FORMULA ERROR", "cpu.fp32_matmul"):
        assert needle in text, needle


def test_plot_ticks_are_plain_numbers_and_a_skipped_row_is_not_drawn_as_an_error(tmp_path: Path) -> None:
    """The intensity axis read "10m" for a hundredth; a skipped Triton row (a backend the CPU does not run, by
    design) was marked in the error's red."""
    import re

    rows = [_rows()[0], _rows()[2], make_record(op="relu", label="n=1M", backend="triton", status="skipped")]
    svg = write_plot(price_all(rows, ProfileChooser.only(PROFILE)), PROFILE, tmp_path)[1].read_text(encoding="utf-8")
    ticks = re.findall(r'<g id="xtick_\d+">.*?<text[^>]*>([^<]*)</text>', svg, flags=re.S)
    assert "0.1" in ticks and "1" in ticks and not any(t.endswith("m") for t in ticks), ticks
    assert "#d9d9d9" in svg and "#d73027" not in svg  # grey for the skip, no error red anywhere


def test_plot_with_nominal_bandwidth_unknown_and_no_rows_placed(tmp_path: Path) -> None:
    prof = make_profile(bw_theoretical=None, bw_calibration=None, measured={"triad": 1e10})
    priced = price_all([make_record(status="error")], ProfileChooser.only(prof))
    paths = write_plot(priced, prof, tmp_path, stem="x")
    assert [p.name for p in paths] == ["x.png", "x.svg"]
    svg = paths[1].read_text(encoding="utf-8")
    assert "nominal unknown" in svg and "0 of 1 row(s) placed" in svg


def test_a_row_has_every_machine_column_in_order() -> None:
    from tileops.report import columns

    for p in price_all(_rows(), ProfileChooser.only(PROFILE)):
        assert tuple(columns.raw(p)) == columns.RAW_COLUMNS


def _on(profile):  # every row on ``profile``, whatever its device
    return ProfileChooser.only(profile)


def _many(n: int) -> list:
    """``n`` rows cycling through every verdict and every reason a row cannot be placed."""
    kinds = [
        lambda i: make_record(label=f"r{i}", flops=1 << 20, bytes=8 << 20, median_s=(8 << 20) / (1e9 + 1e7 * (i % 90))),
        lambda i: make_record(label=f"r{i}", flops=1 << 20, bytes=8 << 20, median_s=(8 << 20) / 19e9),  # at-ceiling
        lambda i: make_record(label=f"r{i}", flops=16, bytes=128, median_s=2e-6),  # latency-bound
        lambda i: make_record(label=f"r{i}", flops=1 << 20, bytes=800 << 20, median_s=1e-3),  # breach
        lambda i: make_record(label=f"r{i}", flops=0, bytes=8 << 20, median_s=1e-3),  # 0 FLOPs
        lambda i: make_record(label=f"r{i}", status="error"),
        lambda i: make_record(label=f"r{i}", bytes=0, median_s=1e-3),  # no bytes
        lambda i: make_record(label=f"r{i}", status="skipped"),
    ]
    weights = [60, 12, 10, 1, 4, 4, 4, 4]  # per 99 rows
    pattern = [k for k, w in zip(kinds, weights) for _ in range(w)]
    return [pattern[(i * 37) % len(pattern)](i) for i in range(n)]


def test_plot_layout_places_or_explains_every_row_and_labels_what_matters() -> None:
    from tileops.report.plot import LABEL_CAP, TABLE_CAP, plot_layout

    priced = price_all(_many(2000), _on(PROFILE))
    lay = plot_layout(priced, PROFILE)
    placed = {int(q.ident) for q in lay.points}
    unplaced = {int(i): why for i, _, why in lay.unplaced}
    assert placed.isdisjoint(unplaced) and placed | set(unplaced) == set(range(1, 2001))
    assert all(why for why in unplaced.values())
    assert set(unplaced.values()) == {"0 FLOPs (off a log axis)", "error", "no bytes", "skipped"}
    # labels: capped; every formula error and anomaly first, then the worst and the best of the rest
    assert len(lay.labelled) == LABEL_CAP and len(lay.listed) <= TABLE_CAP
    breached = sorted((q for q in lay.points if q.priced.breaches), key=lambda q: -(q.priced.efficiency or 0))
    labelled = {q.ident for q in lay.labelled}
    assert {q.ident for q in breached[:LABEL_CAP]} <= labelled
    assert 0 < len(breached) < LABEL_CAP  # room left for the worst and the best rows
    below = sorted((q for q in lay.points if q.priced.verdict == "below"), key=lambda q: q.priced.efficiency or 0)
    best = max((q for q in lay.points if q.priced.verdict == "at-ceiling"), key=lambda q: q.priced.efficiency or 0)
    assert below[0].ident in labelled and best.ident in labelled
    assert below[-1].ident not in labelled  # an unremarkable row is summarised, not labelled
    # the table lists the labelled rows, then unplaced ones, in id order; the summary counts the rest
    ids = [int(i) for i, _, _ in lay.listed]
    assert ids == sorted(ids) and labelled <= {str(i) for i in ids}
    listed_unplaced = [i for i, _, why in lay.listed if why is not None]
    assert len(lay.listed) == TABLE_CAP and listed_unplaced
    # rows that failed or cannot be drawn take the table's room before skipped ones
    listed_why = [why for _, _, why in lay.listed if why is not None]
    assert "skipped" not in listed_why or all(why == "skipped" for why in unplaced.values())
    assert {"error", "no bytes"} <= set(listed_why)
    rest_placed, rest_unplaced = lay.summary[0], lay.summary[1]
    assert rest_placed.startswith(f"{len(placed) - LABEL_CAP:,} more placed row(s) drawn without an id: ")
    assert rest_unplaced.startswith(f"{len(unplaced) - len(listed_unplaced):,} more row(s) not placed: ")
    counted = sum(int(part.rsplit(" ", 1)[1].replace(",", "")) for part in rest_unplaced.split(": ", 1)[1].split(", "))
    assert counted == len(unplaced) - len(listed_unplaced)


def test_a_small_run_labels_and_lists_every_row() -> None:
    from tileops.report.plot import plot_layout

    priced = price_all(_rows(), _on(PROFILE))
    lay = plot_layout(priced, PROFILE)
    assert [q.ident for q in lay.labelled] == [q.ident for q in lay.points]
    assert [i for i, _, _ in lay.listed] == [str(i) for i in range(1, len(priced) + 1)] and not lay.summary


def test_a_large_plot_stays_small_and_keeps_its_ceilings_labelled(tmp_path: Path) -> None:
    from tileops.report.plot import plot_layout

    priced = price_all(_many(400), _on(PROFILE))
    png, svg = write_plot(priced, PROFILE, tmp_path)
    assert png.stat().st_size < 2 << 20 and svg.stat().st_size < 2 << 20
    text = svg.read_text(encoding="utf-8")
    for ceiling in ("memory theoretical 40 GB/s", "memory effective 20 GB/s",
                    "cpu.fp32 = cpu.fp32_matmul theoretical 200 GFLOP/s",
                    "cpu.fp32 effective 100 GFLOP/s", "cpu.fp32_matmul: uncalibrated"):
        assert ceiling in text, ceiling
    lay = plot_layout(priced, PROFILE)
    assert f"({len(lay.points)} of 400 row(s) placed)" in text
    for line in lay.summary:
        assert line.replace("`", "") in text.replace("`", ""), line
    for ident, p, _ in lay.listed:  # each listed row's line is in the table
        assert f">{ident}  " in text or f">{ident} " in text, ident


_CSV_CELLS = [None, True, False, 0, -1, 2**70, 1.5, 1e-06, 1e16, -0.0, float("inf"), float("nan"), 5e-324, "",
              "plain", "a,b", 'say "hi"', "two\nlines", "cr\rhere", "  padded ", "µs · ümlaut", "tab\there",
              "semi;colon", "'single'", "\x00nul", "=SUM(A1)", "back\\slash", "null", "True", "1e16", "0.00001",
              "x[1e5]", "[null", "x]", "1.5e-7]"]


def _same_csv_cells(line: str, cells: list) -> None:
    """``line`` reads back to the cells ``csv.writer`` writes for ``cells``: the same text, or for a float
    another text of the same float (``1e-5`` for ``1e-05``)."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(cells)
    (want,) = csv.reader(io.StringIO(buf.getvalue()))
    (got,) = csv.reader(io.StringIO(line))
    assert len(got) == len(want), (line, buf.getvalue())
    for g, w, c in zip(got, want, cells):
        assert g == w or (type(c) is float and float(g) == float(w) and str(float(g)) == str(c)), (g, w, c)


@pytest.mark.parametrize("cells", [[c] * 3 for c in _CSV_CELLS] + [list(_CSV_CELLS), ["x", "y,z"], ["only"]])
def test_a_csv_line_reads_back_as_the_csv_writers_line(cells: list) -> None:
    """The CSV report writes a row's line from msgspec's JSON text where no cell needs escaping, and the fast
    path declines exactly the lines with a cell JSON escapes or a number that is not finite, which the csv
    module writes: whichever writes it, the line reads back to the cells ``csv.writer`` writes."""
    pytest.importorskip("msgspec")
    from tileops.report.encode import _csv_fast, csv_line

    fast = _csv_fast(list(cells))
    if fast is not None:
        assert fast.endswith("\n") and fast.count("\n") == 1
        _same_csv_cells(fast, cells)
    escaped = any(isinstance(c, str) and not all(ch.isprintable() and ch not in '"\\' for ch in c) for c in cells)
    not_finite = any(isinstance(c, float) and not math.isfinite(c) for c in cells)
    assert (fast is None) == (escaped or not_finite)
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(cells)
    # the one interface: the fast line, or exactly the csv module's where the fast path declines
    assert csv_line(list(cells)) == (fast if fast is not None else buf.getvalue())


def test_a_csv_line_writes_floats_of_every_size_readably() -> None:
    """Over floats of every exponent (random bits) and the edges of the fixed and exponent forms, next to
    cells holding commas, each line reads back to the same floats as the csv module's line."""
    import random
    import struct

    pytest.importorskip("msgspec")
    from tileops.report.encode import _csv_fast

    rng = random.Random(18)
    floats = [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(20_000)]
    floats += [float(f"{m}e{k}") for k in range(-330, 310) for m in (1, 1.2345, -9.999999999999999)]
    floats += [1e-4, 9.999999999999999e-5, 1e-5, 1e16, 9999999999999998.0, 1e15, 0.1, 1 / 3, 2.0**-1074, -0.0]
    floats = [x for x in floats if math.isfinite(x)]
    for i in range(0, len(floats), 30):
        cells = ["x", *floats[i:i + 30], None, "a, b", True]
        line = _csv_fast(cells)
        assert line is not None
        _same_csv_cells(line, cells)


def test_markdown_escapes_a_pipe_in_any_cell_and_only_there() -> None:
    """A cell holding ``|`` would split a markdown row: it is escaped, in the label and the dtype alike,
    and a row without one is written as it is."""
    recs = [make_record(label="a|b"), make_record(label="plain"), make_record(label="c", dtype="x|y")]
    text = render_text(price_all(recs, ProfileChooser.only(PROFILE)), "md")
    rows_of = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| ")}
    assert "| a\\|b" in rows_of and "| plain" in rows_of and "x\\|y" in rows_of["| c"]
    assert all(line.count(" | ") == rows_of["| plain"].count(" | ") for line in rows_of.values())


def test_a_host_bound_row_is_marked_in_every_format_and_its_sol_says_so(tmp_path: Path) -> None:
    """A row whose calls span 2.5x their busy time: the efficiency cell, the machine columns, the note, the
    summary and the plot's legend all say host-bound; a row with a span within 20 % of busy time says nothing."""
    recs = [make_record(op="fused_experts", label="prefill", flops=1 << 20, bytes=8 << 20,
                        median_s=(8 << 20) / 18e9, span_s=2.5 * (8 << 20) / 18e9),
            make_record(op="relu", label="tight", flops=1 << 20, bytes=8 << 20, median_s=(8 << 20) / 18e9,
                        span_s=1.1 * (8 << 20) / 18e9)]
    priced = price_all(recs, ProfileChooser.only(PROFILE))
    md = render_text(priced, "md")
    assert "| 90.0 % host-bound | at-ceiling |" in md and "| 90.0 % | at-ceiling |" in md
    assert "host-bound: 1 row(s)" in md and "fused_experts [prefill float32 torch] 2.50x" in md
    table = Console(record=True, width=250, file=io.StringIO())
    render_summary(priced, table)
    assert "90.0 % host-bound" in table.export_text()
    doc = json.loads(render_text(priced, "json"))
    bound, tight = doc["rows"]
    assert bound["host_bound"] is True and bound["span_s"] == pytest.approx(2.5 * bound["actual_time_s"])
    assert any(n.startswith("host-bound:") and "2.50x" in n for n in bound["notes"])
    assert tight["host_bound"] is False and not any("host-bound" in n for n in tight["notes"])
    rows_csv = list(csv.DictReader(io.StringIO(render_text(priced, "csv"))))
    assert [r["host_bound"] for r in rows_csv] == ["True", "False"]
    untimed = price_all([make_record()], ProfileChooser.only(PROFILE))  # CPU wall time: no span
    assert json.loads(render_text(untimed, "json"))["rows"][0]["host_bound"] is None
    _, svg = write_plot(priced, PROFILE, tmp_path)
    assert "host-bound" in svg.read_text(encoding="utf-8")


# -- issue 37: one idea per line -----------------------------------------------------------------------------


def _unstable_run(n: int) -> list:
    """``n`` CPU rows known to +20 %/-10 % (wider than a CPU verdict's ±5 %) and one without energy: no RAPL."""
    from tileops.records import CpuConditions, RowConditions

    no_rapl = "no RAPL energy counter (/sys/class/powercap/intel-rapl:* absent: a VM or container that hides it)"
    cond = RowConditions(window_s=1.0, cpu=CpuConditions(blank={"energy_j": no_rapl}))
    return [make_record(label=f"noisy-{i}", median_s=1e-6, median_ci_s=(0.9e-6, 1.2e-6), conditions=cond)
            for i in range(n)]


def test_a_summary_line_names_its_rows_one_per_item_line_and_counts_the_rest() -> None:
    """The unstable line was one 900-character sentence: now a head line, one indented line per row (the first
    five), and how many more; the energy line counts without the sensor's whole sentence."""
    from tileops.report.summary import UNSTABLE_SHOWN

    from roofline_fixtures import make_profile as cpu_profile

    lines = summary_lines(price_all(_unstable_run(UNSTABLE_SHOWN + 2), ProfileChooser.only(cpu_profile())))
    head = next(i for i, x in enumerate(lines) if x.startswith("unstable: "))
    assert lines[head] == ("unstable: 7 row(s) whose SOL is shown, not judged; re-run them on a quieter host or with "
                           "more time (--max-time):")
    items = lines[head + 1:head + 1 + UNSTABLE_SHOWN + 1]
    assert [x.split(":")[0] for x in items[:-1]] == [f"  relu [noisy-{i} float32 torch]" for i in range(5)]
    assert all("known to +20.0 %/-10.0 %, wider than the ±5 % a verdict needs on a CPU" in x for x in items[:-1])
    assert items[-1] == "  and 2 more (each row's reasons: roofline.json)"
    assert "energy: 0 row(s) with joules per call; none for 7 row(s): no RAPL energy counter" in lines
    assert not any("/sys/class/powercap" in x for x in lines)  # its whole sentence: once per host, by the bench
    assert max(map(len, lines)) < 160


def test_markdown_nests_a_lines_items_and_json_keeps_them_as_lines() -> None:
    from roofline_fixtures import make_profile as cpu_profile

    priced = price_all(_unstable_run(2), ProfileChooser.only(cpu_profile()))
    md = render_text(priced, "md").splitlines()
    head = md.index("- unstable: 2 row(s) whose SOL is shown, not judged; re-run them on a quieter host or with more "
                    "time (--max-time):")
    assert md[head + 1].startswith("  - relu [noisy-0 float32 torch]: its time is known to")
    assert md[head + 2].startswith("  - relu [noisy-1 float32 torch]: ") and md[head + 3].startswith("- ")
    summary = json.loads(render_text(priced, "json"))["summary"]
    assert summary[summary.index(md[head][2:]) + 1].startswith("  relu [noisy-0 float32 torch]: ")


def test_a_reason_is_said_clause_by_clause_under_its_head() -> None:
    from tileops.report.summary import clauses

    assert clauses("a (b; c); d; e (f)") == ["a (b; c)", "d", "e (f)"]
    text = summary_lines(price_all(_rows()[:1], ProfileChooser.only(make_profile(bw_theoretical=None))))
    head = text.index("physics check NOT JUDGED on memory: 1 row(s), nominal-unknown")
    assert text[head + 1] == "  the nominal memory bandwidth is unknown (no DMI/SMBIOS data, none given)"
    assert text[head + 2].startswith("  give it with TILEOPS_DRAM_BANDWIDTH")


def test_the_table_report_folds_its_sentences_only_at_a_terminals_width() -> None:
    """A terminal of 72 columns: each summary sentence folds at a space, its continuation indented under it; a
    pipe (no width) keeps every sentence on one line for grep."""
    from roofline_fixtures import make_profile as cpu_profile

    from tileops.report.texttable import HANG

    priced = price_all(_unstable_run(2), ProfileChooser.only(cpu_profile()))
    whole = render_text(priced, "table").splitlines()
    folded = render_text(priced, "table", width=72).splitlines()
    sentences = [x for x in whole if x and x[0] not in "┏┃┡│├└" and not x.startswith("Roofline")]
    assert any(len(x) > 72 for x in sentences)
    table = [x for x in folded if x and x[0] in "┏┃┡│├└"]
    assert table == [x for x in whole if x and x[0] in "┏┃┡│├└"]  # a table is never folded
    rest = [x for x in folded if x and x not in table and not x.startswith("Roofline")]
    assert all(len(x) <= 72 for x in rest)
    assert " ".join(" ".join(rest).split()) == " ".join(" ".join(sentences).split())  # the same words, in order
    item = next(i for i, x in enumerate(folded) if x.startswith("  relu [noisy-0"))
    assert folded[item + 1].startswith("  " + HANG) and not folded[item + 1].startswith("  " + HANG + " ")
