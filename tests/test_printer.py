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


# -- issue 37: folded on a terminal, whole in a pipe ---------------------------------------------------------


def _pty_console(columns: int):  # type: ignore[no-untyped-def]
    """A rich console on a real pseudo-terminal ``columns`` wide, and a reader of what it showed."""
    import os
    import pty
    import select

    from rich.console import Console

    master, slave = pty.openpty()
    file = os.fdopen(slave, "w", encoding="utf-8")

    def shown() -> str:
        file.flush()
        data = b""
        while select.select([master], [], [], 0.2)[0]:
            data += os.read(master, 1 << 16)
        return ANSI.sub("", re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", data).decode()).replace("\r", "")

    return Console(file=file, force_terminal=True, width=columns), shown, (master, file)


def test_a_terminal_folds_a_long_sentence_at_a_space_and_a_pipe_keeps_it_whole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a real terminal 60 columns wide a message and a sweep's lines fold at spaces, each continuation
    indented, a path longer than the width kept whole; the same console on a pipe writes each on one line."""
    import os

    from rich.console import Console

    from tileops.report.printer import ConsolePrinter
    from tileops.report.texttable import HANG

    monkeypatch.setenv("COLUMNS", "60")
    path = "/a/very/long/path/" + "x" * 70
    sentence = f"the second pass ran again (--passes 1 skips the pass) and wrote {path} for you to read"
    console, shown, (master, file) = _pty_console(60)
    try:
        printer = ConsolePrinter(console, console)
        printer.say([("careful", "yellow"), (f": {sentence}", "")], kind="note")
        with printer.rows(1) as rows:
            rows.new_pass(1, f"second pass: 1 row(s) {sentence}\n  an item of it that is long enough to fold at sixty columns too")
        lines = [x for x in shown().split("\n") if x.strip() and "second pass ━" not in x and "━" not in x]
    finally:
        file.close()
        os.close(master)
    assert lines[0].startswith("note: careful: the second pass") and all(
        len(x) <= 60 or x.strip() == path for x in lines)
    assert path in [x.strip() for x in lines]  # a word longer than the width: whole, on a line of its own
    assert all(x.startswith(HANG) for x in lines[1:4])
    item = next(i for i, x in enumerate(lines) if x.startswith("  an item"))
    assert lines[item + 1].startswith("  " + HANG)
    # a pipe: the same events, each sentence whole on one line
    out = io.StringIO()
    piped = ConsolePrinter(Console(file=out, width=80), Console(file=out, width=80))
    piped.say(sentence, kind="note")
    with piped.rows(1) as rows:
        rows.new_pass(1, f"second pass: 1 row(s) {sentence}")
    assert out.getvalue().splitlines() == [f"note: {sentence}", f"second pass: 1 row(s) {sentence}"]


def test_a_host_fact_is_said_once_and_a_new_one_again(tmp_path: Path) -> None:
    """What a host cannot change (no RAPL counter) is said the first time; a later run on the same host says it
    no more, whatever the numbers in it; another fact is said; a memory that cannot be read says everything."""
    from tileops.pipeline.hostnotes import not_yet_said

    memory = tmp_path / "said" / "cpu-host.json"
    rapl = "no RAPL energy counter (/sys/class/powercap/intel-rapl:* absent: a VM or container that hides it)"
    assert not_yet_said(memory, [rapl]) == [rapl] and memory.is_file()
    assert not_yet_said(memory, [rapl]) == []
    other = "NVML's energy counter did not advance over the row's 0.004 s (it counts in steps)"
    assert not_yet_said(memory, [rapl, other]) == [other]
    assert not_yet_said(memory, [other.replace("0.004", "0.010")]) == []  # the same fact, another window
    memory.write_text("{not json")
    assert not_yet_said(memory, [rapl]) == [rapl]


BOX = "┏┃┡│├└"


def _on_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """``tileops ARGS`` with its stdout on a real pseudo-terminal and its stderr on a pipe: (exit, what the
    terminal showed without its escape codes, stderr)."""
    import os
    import pty
    import subprocess
    import threading

    from cli_support import tileops_argv

    master, slave = pty.openpty()
    proc = subprocess.Popen(tileops_argv(*args), stdout=slave, stderr=subprocess.PIPE, env={**os.environ, **env})
    os.close(slave)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # the child closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read)
    reader.start()
    _, err = proc.communicate(timeout=600)
    reader.join(30)
    os.close(master)
    shown = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", b"".join(chunks)).decode().replace("\r", "")
    return proc.returncode, shown, err.decode()


@pytest.mark.slow
def test_a_real_run_keeps_sentences_whole_in_a_pipe_folds_them_on_a_terminal_and_says_a_host_fact_once(
        tmp_path: Path) -> None:
    """Issue 37: a piped run's lines are whole sentences (the second pass's line is one line, no line stops
    inside parentheses); the same run with its stdout on a terminal 100 columns wide folds its summary there;
    the energy line is short, and why a row has no joules is said in full once on this host."""
    from export_support import profile, write_profile_file

    from tileops.device import describe_device

    prof = write_profile_file(tmp_path / "cpu.yaml", profile(name="this-cpu", match=describe_device("cpu").name))
    env = {"TILEOPS_PROFILE_DIR": str(tmp_path / "store"), "COLUMNS": "100"}
    args = ["bench", "--device", "cpu", "--quick", "--op", "relu", "--dtype", "float32", "--no-plot",
            "--profile", str(prof)]
    piped = tileops(*args, "--out", str(tmp_path / "one"), env=env)
    assert piped.returncode in (0, 1), piped.stderr[-3000:]
    err, out = piped.stderr.splitlines(), piped.stdout.splitlines()
    banner = [x for x in err if x.startswith("second pass: ")]
    assert len(banner) == 1 and banner[0].endswith("(--passes 1 skips the pass)"), err
    sentences = [x for x in err + out if x.strip() and x[0] not in BOX]
    assert all(x.count("(") == x.count(")") for x in sentences), sentences
    assert not any(x.startswith("[") and not re.match(r"\[\d+/\d+\] relu ", x) for x in err)  # no row split
    energy = next(x for x in out if x.startswith("energy: "))
    told = [x for x in out if x.startswith("note: energy: ")]
    if "; none for " in energy:  # no joules (a VM hides RAPL, or it is root's): the reason in full, this once
        why = energy.split("; none for ", 1)[1].split(": ", 1)[1].split("; ")[0]
        assert len(told) == 1 and told[0].startswith(f"note: energy: {why}") and len(energy) < 120
    else:
        assert not told

    plan = tileops("bench", "--resume", str(tmp_path / "one"), "--list", env=env, check=True).stdout
    assert "1 row(s): 0 to run, 0 skipped, 1 already done\n" in plan  # not "1 already done ()"
    assert ": no row left to time" in plan and ": no row left to run" in plan and not re.search(r"\b0 s\b", plan)
    quick = tileops(*args[:8], "--list", env=env, check=True).stdout  # one row of --quick: well under a second
    assert ": under 1 s of timing, plus each row's set-up" in quick and not re.search(r"\b0 s\b", quick)

    rc, shown, err2 = _on_a_terminal([*args, "--out", str(tmp_path / "two")], env)
    assert rc in (0, 1), err2[-3000:]
    lines = shown.splitlines()
    start = next(i for i, x in enumerate(lines) if re.match(r"\d+ row\(s\): ", x))  # the summary, under the table
    summary = [x for x in lines[start:] if x.strip()]
    assert all(len(x) <= 100 or " " not in x.strip() for x in summary), summary
    assert any(x.startswith("  ") for x in summary)  # a folded sentence's continuation, or a line's items
    assert not any(x.startswith("note: energy: ") for x in summary)  # said on the first run: not again
    assert banner[0] in err2.splitlines()  # stderr is a pipe still: whole lines there
    # `tileops roofline` on a terminal folds the same summary; piped, it prints each sentence whole
    rc, again, _ = _on_a_terminal(["roofline", str(tmp_path / "one"), "--profile", str(prof)], env)
    folded = again.splitlines()
    folded = [x for x in folded[next(i for i, x in enumerate(folded) if re.match(r"\d+ row\(s\): ", x)):] if x.strip()]
    assert rc in (0, 1) and all(len(x) <= 100 or " " not in x.strip() for x in folded), folded
    whole = tileops("roofline", str(tmp_path / "one"), "--profile", str(prof), env=env).stdout.splitlines()
    assert " ".join(" ".join(folded).split()) in " ".join(" ".join(whole).split())


def test_a_shown_renderables_sentences_stay_whole_in_a_pipe_and_fold_on_a_terminal() -> None:
    """Issue 37: `tileops calibrate | tail` broke "...(a CPU: / no GPU clocks..." at 120 columns. A table keeps
    its width; a sentence beside it is one line in a pipe or a log, and folds only on a terminal."""
    from rich.console import Console, Group
    from rich.table import Table
    from rich.text import Text

    from tileops.report.printer import ConsolePrinter

    sentence = "power state: none (a CPU: no GPU clocks or power to read); " * 4
    table = Table("ceiling", "measured")
    table.add_row("memory", "52.8 GB/s")

    def shown(console: Console, printer_of=lambda c: ConsolePrinter(c, c)) -> str:
        printer_of(console).show(Group(table, Text(sentence.strip())))
        return console.file.getvalue()  # type: ignore[attr-defined]

    piped = shown(Console(file=io.StringIO(), width=80))
    assert sentence.strip() in piped.splitlines() and "┃ ceiling" in piped
    terminal = shown(Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None))
    assert sentence.strip() not in terminal.splitlines() and max(len(x) for x in terminal.splitlines()) <= 80
    log_out = io.StringIO()
    LogPrinter(log_out, io.StringIO()).show(Group(table, Text(sentence.strip())))
    assert sentence.strip() in log_out.getvalue().splitlines()
