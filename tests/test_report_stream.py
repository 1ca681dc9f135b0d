"""Reports built row by row: streamed, in parallel, or from a list, the output is the same; a large
table becomes a digest that hides nothing that needs attention."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from roofline_fixtures import make_profile, make_record, write_profile, write_records

from tileops.cli import main
from tileops.profiles import ProfileChooser
from tileops.records import RecordFileError, iter_records, jsonl_spans, load_records, to_json
from tileops.report import compare, render_text
from tileops.report import summary as S
from tileops.report import tables as T
from tileops.report.baseline import TimeIndex
from tileops.report.stream import read_priced
from tileops.roofline import health, price_all, race_key

PROFILE = make_profile(name="stream-cpu", match=("Stream CPU",), bw_theoretical=40e9, bw_calibration=0.5,
                       roofs={"cpu.fp32": (200e9, 0.5)}, latency_floor_s=5e-6)
CHOOSER = ProfileChooser.only(PROFILE)


def _run(n: int, *, slow: float = 1.0, tag: str = "") -> list:
    """n rows over three ops: mostly ordinary, with a breach, an anomaly, an error and a skipped row."""
    out = []
    for i in range(n):
        op = ("relu", "gelu", "linear")[i % 3]
        nbytes = 8 << (10 + i % 8)
        eff = 0.2 + 0.7 * ((i * 37) % 100) / 100  # 20 % to 90 %
        out.append(make_record(op=op, label=f"{tag}row{i}", bytes=nbytes, flops=nbytes // 8,
                               median_s=nbytes / (20e9 * eff) * slow, device_name="Stream CPU",
                               data_terms={"k": i % 4} if op == "linear" and i % 5 == 0 else {}))
    out[n // 2] = make_record(op="gelu", label="inflated", bytes=800 << 20, flops=1, median_s=1e-3,
                              device_name="Stream CPU")  # 839 GB/s > 40 GB/s theoretical: breach
    out[n // 3] = make_record(op="relu", label="too-fast", bytes=8 << 20, median_s=(8 << 20) / 30e9,
                              device_name="Stream CPU")  # 150 %: anomaly
    out[n // 4] = make_record(op="linear", label="broken", status="error", device_name="Stream CPU")
    out[n // 5] = make_record(op="linear", label="unsupported", status="skipped", device_name="Stream CPU")
    return out


@pytest.fixture()
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    new = write_jsonl(tmp_path / "new" / "records.jsonl", _run(60))
    old = write_jsonl(tmp_path / "old" / "records.jsonl", _run(50, slow=0.8) + _run(3, tag="gone-"))
    return new, old, write_profile(tmp_path / "stream-cpu.yaml", PROFILE)


def write_jsonl(path: Path, records: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(to_json(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.mark.parametrize("fmt", ["table", "md", "csv", "json"])
@pytest.mark.parametrize("baseline", [False, True])
def test_the_streamed_command_prints_what_the_in_memory_report_renders(files, fmt: str, baseline: bool,
                                                                       capsys) -> None:
    new, old, prof = files
    argv = ["roofline", str(new), "--profile", str(prof), "--format", fmt] + (["--baseline", str(old)] * baseline)
    main(argv)
    streamed = capsys.readouterr().out
    priced = price_all(load_records([new]), CHOOSER)
    comparison = compare(priced, price_all(load_records([old]), CHOOSER)) if baseline else None
    assert streamed == render_text(priced, fmt, comparison=comparison, health=health(priced))
    if fmt == "json":  # the document parses, with one object per row
        doc = json.loads(streamed)
        assert len(doc["rows"]) == 60 and doc["health"]["breaches"] == 1
        assert ("baseline" in doc) == baseline
    if fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(streamed)))
        gone = sum(r.change == "gone" for r in comparison.rows) if comparison else 0
        assert len(rows) == 60 + gone and (gone > 0) == baseline  # with a baseline, the gone rows too


def _sinks(fmt: str, baseline: bool):
    return lambda: [S.RunFacts(), T.new_report(fmt, baseline=baseline), TimeIndex()]


def _text(sinks: list, comparison=None) -> str:
    facts, report, _ = sinks
    buf = io.StringIO()
    report.write(buf, facts, comparison)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["table", "md", "csv", "json"])
def test_reading_in_parallel_gives_the_output_of_one_pass(files, fmt: str) -> None:
    new, old, _ = files
    two = [new, old]  # two files, each cut into spans
    assert len(jsonl_spans(new, 4, min_bytes=1)) == 4
    one_pass = read_priced(two, CHOOSER, _sinks(fmt, True), jobs=1)
    parallel = read_priced(two, CHOOSER, _sinks(fmt, True), jobs=4, min_span=1)
    assert len(one_pass[2]) == len(parallel[2]) and one_pass[2].rows == parallel[2].rows
    c = compare(price_all(load_records(two), CHOOSER), price_all(load_records([old]), CHOOSER))
    assert _text(parallel, c) == _text(one_pass, c) == render_text(price_all(load_records(two), CHOOSER), fmt,
                                                                comparison=c)


def test_workers_hand_their_parts_back_through_files_or_the_pipe_alike(files, monkeypatch, tmp_path: Path) -> None:
    """A worker writes its part to a file the reader then loads and removes; where it cannot write one
    (no room, no folder), the part comes through the pipe: the same output either way, nothing left behind."""
    import tempfile

    from tileops.report import stream

    new, old, _ = files
    one_pass = _text(read_priced([new, old], CHOOSER, _sinks("json", False), jobs=1))
    made: list[str] = []
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(**kw: str) -> str:
        made.append(real_mkdtemp(dir=tmp_path, **kw))
        return made[-1]

    monkeypatch.setattr(stream.tempfile, "mkdtemp", mkdtemp)
    assert _text(read_priced([new, old], CHOOSER, _sinks("json", False), jobs=3, min_span=1)) == one_pass
    assert made and not any(Path(d).exists() for d in made)
    monkeypatch.setattr(stream.tempfile, "mkdtemp", lambda **kw: str(tmp_path / "gone" / "parts"))
    assert _text(read_priced([new, old], CHOOSER, _sinks("json", False), jobs=3, min_span=1)) == one_pass


def test_a_bad_line_in_a_later_span_is_named_by_its_line_in_the_file(tmp_path: Path) -> None:
    recs = _run(40)
    path = write_jsonl(tmp_path / "records.jsonl", recs)
    lines = path.read_text().splitlines(keepends=True)
    lines[33] = lines[33].replace('"status":"ok"', '"status":"great"')
    path.write_text("".join(lines))
    spans = jsonl_spans(path, 3, min_bytes=1)
    assert spans[0][0] == 0 and spans[-1][1] == path.stat().st_size
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # contiguous, each at a line start
    with pytest.raises(RecordFileError, match=rf"{path}:34: not a valid record \(status"):
        read_priced([path], CHOOSER, _sinks("csv", False), jobs=3, min_span=1)
    # and every span but the bad one reads as the same records a whole read gives
    first = list(iter_records(path, span=spans[0]))
    assert [r.label for r in first] == [r.label for r in recs[:len(first)]]


# --------------------------------------------------------------------------- the digest


def _table(records: list, **kw) -> str:
    report = T.TableReport(**kw)
    facts = S.RunFacts()
    for p in price_all(records, CHOOSER):
        report.add(p)
        facts.add(p)
    buf = io.StringIO()
    report.write(buf, facts)
    return buf.getvalue()


def test_a_table_above_the_limit_is_a_digest_that_lists_every_row_needing_attention() -> None:
    records = _run(300)
    text = _table(records, limit=100)
    # every breach, anomaly and error is listed by name, with its verdict
    for needle in ("inflated", "anomaly · FORMULA ERROR", "too-fast", "broken", "error: exception"):
        assert needle in text, needle
    assert "Rows that need attention: 1 physics breach(es) (FORMULA ERROR), 2 anomaly(ies), 1 error record(s)" \
        in text
    # per op: the counts by verdict, which add up to the run
    per_op = text.split("rows, per op")[1].split("Rows that need attention")[0]
    for op in ("relu", "gelu", "linear"):
        assert f"│ {op}" in per_op
    assert "300 row(s):" in text and "health: FAILED" in text
    # the lowest-efficiency rows of each op, and how to get everything
    assert "Lowest efficiency, up to 3 per op" in text
    assert "--full-table" in text and "--format csv|json|md" in text
    # ordinary rows are not printed one by one: far fewer lines than rows
    assert text.count("\n") < 80 and sum(f"row{i} " in text for i in range(300)) <= 9


def test_the_digest_counts_what_it_does_not_list() -> None:
    records = _run(200)
    for i in range(1, 200, 2):  # a hundred more error rows than the digest lists
        records[i] = make_record(op="relu", label=f"failed{i}", status="error", device_name="Stream CPU")
    text = _table(records, limit=50)
    assert f"… {101 + 2 - T.ATTENTION_SHOWN:,} more not listed here" in text  # 101 errors + a breach + an anomaly
    assert "101 error record(s)" in text and "failed rows: 101 error(s)" in text


def test_full_table_prints_every_row_and_a_small_run_is_printed_whole() -> None:
    records = _run(120)
    full = _table(records, limit=100, full=True)
    assert all(f"row{i} " in full for i in range(120) if records[i].label == f"row{i}")
    assert "summarised" not in full
    assert _table(records[:90], limit=100) == _table(records[:90], limit=100, full=True)


def test_the_digest_caps_formula_error_sentences_but_counts_every_breach() -> None:
    records = [make_record(op="add", label=f"inflated{i}", bytes=800 << 20, median_s=1e-3, device_name="Stream CPU")
               for i in range(30)]
    text = _table(records, limit=10)
    assert text.count("FORMULA ERROR: add [") == T.BREACH_LINES_SHOWN
    assert f"FORMULA ERROR: {30 - T.BREACH_LINES_SHOWN:,} more breach(es) not listed here" in text
    assert "health: FAILED — physics check: 30 row(s)" in text
    assert "30 physics breach(es)" in text


def test_the_command_summarises_a_large_run_and_full_table_prints_it(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(T, "SUMMARISE_ABOVE", 40)
    run = write_records(tmp_path / "run" / "records.jsonl", _run(60))
    prof = write_profile(tmp_path / "p.yaml", PROFILE)
    assert main(["roofline", str(run.parent), "--profile", str(prof)]) == 3
    digest = capsys.readouterr().out
    assert "60 rows, more than 40: summarised above" in digest
    assert main(["roofline", str(run.parent), "--profile", str(prof), "--full-table"]) == 3
    full = capsys.readouterr().out
    assert "summarised" not in full and full.count("│ ") > 60


def test_a_digest_keeps_the_same_rows_however_the_run_is_split() -> None:
    """Equal efficiencies everywhere: the lowest rows kept are the first by row number, split or not."""
    records = [make_record(op="relu", label=f"same{i}", bytes=8 << 20, median_s=(8 << 20) / 5e9,
                           device_name="Stream CPU") for i in range(40)]
    priced = price_all(records, CHOOSER)
    whole = T.TableReport(limit=10)
    for p in priced:
        whole.add(p)
    parts = [T.TableReport(limit=10) for _ in range(3)]
    for i, p in enumerate(priced):
        parts[min(i // 14, 2)].add(p)
    for later in parts[1:]:
        parts[0].merge(later)
    facts = S.RunFacts.of(priced)
    texts = []
    for report in (whole, parts[0]):
        buf = io.StringIO()
        report.write(buf, facts)
        texts.append(buf.getvalue())
    assert texts[0] == texts[1]
    worst = texts[0].split("Lowest efficiency")[1]
    assert [f"same{i} " in worst for i in range(4)] == [True, True, True, False]


def test_the_lowest_rows_are_the_lowest_by_efficiency_then_by_row_order() -> None:
    effs = [0.5, 0.5, 0.3, 0.1] + [0.7] * 20  # 20 GB/s memory roof at 100 %
    records = [make_record(op="relu", label=f"r{i}", bytes=8 << 20, median_s=(8 << 20) / (20e9 * e),
                           device_name="Stream CPU") for i, e in enumerate(effs)]
    text = _table(records, limit=10)
    worst = text.split("Lowest efficiency")[1].split("row(s):")[0]
    assert [label for label in ("r3 ", "r2 ", "r0 ", "r1 ") if label in worst] == ["r3 ", "r2 ", "r0 "]
    assert worst.index("r3 ") < worst.index("r2 ") < worst.index("r0 ")


def _backends_run(n: int) -> list:
    """n rows, each on torch, compile and triton, every backend of a row far from the others in the file
    (all torch rows, then all compile rows, then all triton rows), so the parts of a parallel read each
    hold a different backend of the same row; compile rows carry their compile time, one triton row is
    skipped and one compile row errs."""
    import dataclasses

    out = []
    for b, speed in (("torch", 1.0), ("compile", 1.3), ("triton", 0.9)):
        for i in range(n):
            op = ("relu", "gelu", "linear")[i % 3]
            nbytes = 8 << (10 + i % 8)
            eff = (0.2 + 0.6 * ((i * 37) % 100) / 100) * speed
            rec = make_record(op=op, label=f"row{i}", bytes=nbytes, flops=nbytes // 8, backend=b,
                              median_s=nbytes / (20e9 * eff), device_name="Stream CPU")
            if b == "compile":
                rec = dataclasses.replace(rec, timing=dataclasses.replace(rec.timing, compile_s=0.5 + i / 100))
            out.append(rec)
    out[2 * n + 4] = make_record(op="gelu", label="row4", backend="triton", status="skipped",
                                 device_name="Stream CPU")
    out[n + 7] = make_record(op="gelu", label="row7", backend="compile", status="error", device_name="Stream CPU")
    return out


@pytest.mark.parametrize("fmt", ["table", "md", "csv", "json"])
def test_rows_on_several_backends_read_in_parallel_give_the_output_of_one_pass(tmp_path: Path, fmt: str) -> None:
    from tileops.report import columns
    from tileops.roofline import backend_races

    path = write_jsonl(tmp_path / "records.jsonl", _backends_run(40))
    assert len(jsonl_spans(path, 2, min_bytes=1)) == 2
    one_pass = read_priced([path], CHOOSER, _sinks(fmt, False), jobs=1)
    forked = read_priced([path], CHOOSER, _sinks(fmt, False), jobs=2, min_span=1)  # torch rows in one, the rest
    many = read_priced([path], CHOOSER, _sinks(fmt, False), jobs=4, min_span=1)
    priced = price_all(load_records([path]), CHOOSER)
    text = _text(one_pass)
    assert _text(forked) == _text(many) == text == render_text(priced, fmt)
    races, of_row = backend_races(priced)
    assert len(races) == 40
    summary = S.summary_lines(priced)
    assert any(line.startswith("backends: torch 40 row(s); compile 40 row(s); triton 40 row(s)") for line in summary)
    assert any(line.startswith("compile time, reported apart") for line in summary)
    assert any(line.startswith("best backend (highest SOL) of 40 row(s)") for line in summary)
    assert "triton skipped on 1 row(s): unsupported dtype" in summary
    if fmt == "json":  # every row's race columns and the backends list are those the rows give
        doc = json.loads(text)
        assert doc["rows"] == [json.loads(json.dumps(columns.raw(p, race))) for p, race in zip(priced, of_row)]
        assert doc["backends"] == json.loads(json.dumps([r.as_dict() for r in races.values()]))
        assert doc["summary"] == summary
    elif fmt == "csv":
        got = list(csv.DictReader(io.StringIO(text)))
        assert all(race is not None for race in of_row)
        assert [r["best_backend"] for r in got] == [race.best for race in of_row]
        assert [r["behind_best"] for r in got] == ["" if race.behind(p.record.backend) is None
                                                   else repr(race.behind(p.record.backend))
                                                   for p, race in zip(priced, of_row)]
    else:  # the human formats: the compile time and vs best columns, each row's cell as columns.display gives it
        assert "compile time" in text and "vs best" in text
        cells = [columns.display(p, race)["vs best"] for p, race in zip(priced, of_row)]
        assert sum(bool(c) for c in cells) == len(cells) - 2  # the skipped and the error row have no SOL
        assert all(c in text for c in cells) or fmt == "table"
        assert summary[-1] in text


def test_a_digest_of_rows_on_several_backends_is_the_same_read_in_parallel(tmp_path: Path) -> None:
    from tileops.report import columns
    from tileops.roofline import backend_races

    path = write_jsonl(tmp_path / "records.jsonl", _backends_run(40))
    make = lambda: [S.RunFacts(), T.TableReport(limit=20), TimeIndex()]  # a digest above 20 rows
    one_pass = _text(read_priced([path], CHOOSER, make, jobs=1))
    assert _text(read_priced([path], CHOOSER, make, jobs=2, min_span=1)) == one_pass
    assert "rows, more than 20: summarised above" in one_pass
    header = next(line for line in one_pass.splitlines() if "compile time" in line)
    assert "vs best" in header  # the digest's row tables have the run's backend columns
    priced = price_all(load_records([path]), CHOOSER)
    _, of_row = backend_races(priced)
    error = next((p, r) for p, r in zip(priced, of_row) if p.verdict == "error" and p.blank_reason == "error")
    assert error[1] is not None and columns.display(*error)["vs best"] == ""  # listed as needing attention
    assert "row7" in one_pass


@pytest.mark.parametrize("rows", [0, 1, 7])
def test_the_race_tallies_a_worker_hands_back_survive_pickling(rows: int) -> None:
    """A worker's tallies travel back pickled (``tileops.report.stream``); they load back equal, rows on
    several backends (a dict per row) and rows in their order included."""
    import pickle

    from tileops.roofline import RaceTally

    recs = [make_record(label=f"r{i % 3}", backend=b, median_s=1e-3 * (i + 1))
            for i in range(rows) for b in (("torch",) if i % 2 else ("torch", "compile", "triton"))]
    priced = price_all(recs, ProfileChooser.only(make_profile()))
    tally, cells = RaceTally(), T._RaceCells()
    for p in priced:
        tally.add(race_key(p.record), p.record.backend, p.efficiency)
        cells.add(p)
    back, back_cells = pickle.loads(pickle.dumps((tally, cells)))
    assert back.groups == tally.groups and [list(e) for e in back.groups.values()] == \
        [list(e) for e in tally.groups.values()]
    assert back_cells.keys == cells.keys and len(cells.keys) == len(recs)
    assert back.races() == tally.races()

