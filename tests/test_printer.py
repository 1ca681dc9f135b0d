"""One printer for what a workflow shows (tileops.report.printer): the same events as a console, a plain log for
``kubectl logs`` and grep, or JSON lines for a machine; chosen by ``tileops bench --output-format``."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from cli_support import tileops
from tileops.defaults import OUTPUT_FORMATS
from tileops.report.printer import JsonLinesPrinter, Listing, LogPrinter, make_printer

ANSI = re.compile(r"\x1b\[")
LONG = ("a warning naming /a/path/that/is/long/" + "x" * 150 + "/records.jsonl; finish with "
        "`tileops bench --resume results/run`")


def test_every_format_the_command_line_offers_makes_a_printer_and_no_other_does() -> None:
    """The choices come from one definition (tileops.defaults); each names a printer the bench can make."""
    for name in OUTPUT_FORMATS:
        assert make_printer(name) is not None
    with pytest.raises(ValueError, match="unknown output format"):
        make_printer("xml")


def test_a_log_line_has_no_escape_codes_no_markup_and_no_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    """A log is read by grep: a styled span is plain text there, and a line longer than any width stays whole."""
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setenv("FORCE_COLOR", "1")  # colour is the console's business, never the log's
    out, err = io.StringIO(), io.StringIO()
    log = LogPrinter(out, err)
    log.say(LONG, kind="warning")
    log.say([("interrupted", "yellow"), (" (stopped by SIGINT)", "")], kind="warning", bare=True)
    log.say("tileops bench run r1", result=True)
    with log.rows(2) as rows:
        rows.started(1, 2, "relu cpu-1 float32 [compile]", "compiling its first call")
        rows.finished(1, 2, "relu cpu-1 float32 [compile]", "134 µs ±2.1 %", {"status": "ok"})
    log.listing(Listing("plan", ("op", "plan"), [(("relu", "run"), ("bold", "")), (("relu", "skip"), ("", "dim"))],
                        lines=[LONG]))
    text = err.getvalue() + out.getvalue()
    assert not ANSI.search(text) and "[yellow]" not in text and "[/]" not in text
    assert err.getvalue().splitlines() == [
        f"warning: {LONG}", "interrupted (stopped by SIGINT)",
        "[1/2] relu cpu-1 float32 [compile]: compiling its first call",
        "[1/2] relu cpu-1 float32 [compile]: 134 µs ±2.1 %"]
    assert out.getvalue().splitlines()[0] == "tileops bench run r1"
    assert LONG in out.getvalue().splitlines()  # the plan's long line, whole
    assert any(line.startswith("│ relu") for line in out.getvalue().splitlines())
    assert any(line.startswith("│      │ skip") for line in out.getvalue().splitlines())  # the op named once


def test_every_json_line_is_one_event_with_its_kind() -> None:
    out = io.StringIO()
    printer = JsonLinesPrinter(out)
    printer.say([("warning: ", "yellow"), ("no profile", "")], kind="warning")
    printer.listing(Listing("plan", ("op", "plan"), [(("relu", "run"), ("bold", "")), (("relu", "skip"), ("", ""))],
                            notes=["a note"], lines=["2 row(s)"]))
    with printer.rows(1) as rows:
        rows.finished(1, 1, "relu cpu-1 float32", "134 µs", {"op": "relu", "median_s": 1.34e-4})
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert events == [
        {"kind": "warning", "text": "warning: no profile"},
        {"kind": "list", "op": "relu", "plan": "run"}, {"kind": "list", "op": "relu", "plan": "skip"},
        {"kind": "note", "text": "a note"}, {"kind": "summary", "lines": ["2 row(s)"]},
        {"kind": "progress", "event": "finished", "index": 1, "total": 1, "row": "relu cpu-1 float32",
         "text": "134 µs", "op": "relu", "median_s": 1.34e-4}]


def test_the_list_in_a_log_and_as_json_lines() -> None:
    """``--list`` through each printer: the log's plan has no escape codes and its long lines whole; the JSON
    lines carry each planned row and the plan's lines."""
    log = tileops("bench", "--device", "cpu", "--op", "relu", "--list", "--output-format", "log",
                  env={"FORCE_COLOR": "1", "COLUMNS": "40"}, check=True)
    assert not ANSI.search(log.stdout + log.stderr)
    assert any(line.startswith("timing: each visit stops") and line.endswith("(--passes 1: once)")
               for line in log.stdout.splitlines())
    jl = tileops("bench", "--device", "cpu", "--op", "relu", "--list", "--output-format", "jsonl", check=True)
    events = [json.loads(line) for line in jl.stdout.splitlines()]
    listed = [e for e in events if e["kind"] == "list"]
    assert listed and all(e["op"] == "relu" and e["plan"] == "run" for e in listed)
    assert events[-1]["kind"] == "summary" and events[-1]["lines"][-1].startswith("nothing was measured")


@pytest.mark.slow
def test_a_quick_run_as_json_lines_carries_its_rows(tmp_path: Path) -> None:
    """A real run: every stdout line is JSON; the rows measured are the progress events and the priced rows, the
    summary holds the run's health, and nothing is left on stderr for a person to miss."""
    run = tileops("bench", "--device", "cpu", "--quick", "--op", "relu", "--passes", "1", "--no-plot",
                  "--calibrate", "never", "--out", str(tmp_path / "run"), "--output-format", "jsonl",
                  env={"TILEOPS_PROFILE_DIR": str(tmp_path / "store")})
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines()]
    assert events[0]["kind"] == "message" and events[0]["text"].startswith("tileops bench run ")
    finished = [e for e in events if e["kind"] == "progress" and e.get("event") == "finished"]
    rows = [e for e in events if e["kind"] == "row"]
    records = [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    assert len(finished) == len(rows) == len(records) >= 2
    assert {(e["op"], e["dtype"], e["status"]) for e in finished} == {(r["op"], r["dtype"], "ok") for r in rows}
    assert all(e["median_s"] > 0 for e in finished)
    summary = [e for e in events if e["kind"] == "summary"]
    assert len(summary) == 1 and "health" in summary[0] and summary[0]["summary"]
    assert run.stderr == ""
