"""`tileops roofline`: formats, profile selection, baseline, plot, and the exit codes."""

from __future__ import annotations

import dataclasses

import json
import os
from pathlib import Path

import pytest
from roofline_fixtures import make_profile, make_record, write_profile, write_records

from tileops import exitcodes
from tileops.cli import main
from cli_support import tileops

PROFILE = make_profile(name="cli-test-cpu", match=("CLI Test CPU",), bw_theoretical=40e9, bw_calibration=0.5,
                       roofs={"cpu.fp32": (200e9, 0.5)})


def _honest(**kw) -> list:
    # formula-guard: allow synthetic records (a made-up 8 bytes per FLOP) for the CLI; no op is priced
    return [make_record(device_name="CLI Test CPU", label=f"n={n}", flops=n, bytes=8 * n,
                        median_s=8 * n / 15e9 * kw.get("slow", 1.0)) for n in (1 << 16, 1 << 20)]


@pytest.fixture()
def profile_file(tmp_path: Path) -> Path:
    return write_profile(tmp_path / "cli-test-cpu.yaml", PROFILE)


def test_table_with_a_profile_file_exits_0(tmp_path: Path, profile_file: Path, capsys) -> None:
    run = write_records(tmp_path / "run" / "records.jsonl", _honest())
    assert main(["roofline", str(run.parent), "--profile", str(profile_file)]) == exitcodes.OK
    out = capsys.readouterr().out
    assert "n=65536" in out and "75.0 %" in out and "health: OK" in out


def test_profile_selected_by_device_name_from_the_store(tmp_path: Path, monkeypatch, capsys) -> None:
    store = tmp_path / "store"
    store.mkdir()
    write_profile(store / "cli-test-cpu.yaml", PROFILE)
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(store))
    run = write_records(tmp_path / "records.jsonl", _honest() + [make_record(device_name="Unknown CPU")])
    assert main(["roofline", str(run), "--format", "json"]) == exitcodes.OK
    doc = json.loads(capsys.readouterr().out)
    assert [r["profile"] for r in doc["rows"]] == ["cli-test-cpu", "cli-test-cpu", None]
    assert doc["rows"][2]["blank_reason"] == "no-profile"
    assert main(["roofline", str(run), "--profile", "cli-test-cpu", "--format", "csv"]) == exitcodes.OK
    assert capsys.readouterr().out.count("cli-test-cpu") == 3


def test_unreadable_input_exits_2(tmp_path: Path, profile_file: Path) -> None:
    assert main(["roofline", str(tmp_path / "missing"), "--profile", str(profile_file)]) == exitcodes.USAGE
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"not": "a record"}\n{"also": "bad"}\n')
    assert main(["roofline", str(bad), "--profile", str(profile_file)]) == exitcodes.USAGE
    run = write_records(tmp_path / "ok.jsonl", _honest())
    assert main(["roofline", str(run), "--profile", "no-such-profile"]) == exitcodes.USAGE
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["roofline", str(empty), "--profile", str(profile_file)]) == exitcodes.USAGE


def _timed(rows: list) -> list:
    """The rows with their levels known to ±1 % (what the bench writes)."""
    out = []
    for r in rows:
        m = r.timing.median_s
        timing = dataclasses.replace(r.timing, level_ci_s=[m * 0.99, m * 1.01], median_ci_s=[m * 0.985, m * 1.015],
                                     ci_df=30.0)
        out.append(dataclasses.replace(r, timing=timing))
    return out


def test_baseline_regression_exits_1(tmp_path: Path, profile_file: Path, capsys) -> None:
    old = write_records(tmp_path / "old.jsonl", _timed(_honest()))
    new = write_records(tmp_path / "new.jsonl", _timed(_honest(slow=1.2)))
    assert main(["roofline", str(new), "--profile", str(profile_file), "--baseline", str(old),
                 "--format", "md"]) == exitcodes.FAILED
    md = capsys.readouterr().out
    assert md.count("| slower |") == 2
    assert main(["roofline", str(new), "--profile", str(profile_file), "--baseline", str(old),
                 "--threshold", "0.25"]) == exitcodes.OK


def test_error_rows_exit_1(tmp_path: Path, profile_file: Path) -> None:
    run = write_records(tmp_path / "r.jsonl", _honest() + [make_record(status="error")])
    assert main(["roofline", str(run), "--profile", str(profile_file)]) == exitcodes.FAILED


def test_plot_written_next_to_the_results(tmp_path: Path, profile_file: Path) -> None:
    run = write_records(tmp_path / "run" / "records.jsonl", _honest())
    assert main(["roofline", str(run.parent), "--profile", str(profile_file), "--plot", str(run.parent)]) == 0
    for name in ("roofline.png", "roofline.svg"):
        assert (run.parent / name).stat().st_size > 10_000


def test_inflated_bytes_exit_3_in_a_subprocess(tmp_path: Path, profile_file: Path, capsys) -> None:
    """A formula that inflates bytes implies a bandwidth above the datasheet: exit 3, FORMULA ERROR."""
    inflated = make_record(device_name="CLI Test CPU", label="inflated", flops=1 << 20, bytes=80 << 30,
                           median_s=1.0)  # 86 GB/s implied > 40 GB/s theoretical
    run = write_records(tmp_path / "run" / "records.jsonl", _honest() + [inflated])
    env = {**os.environ, "COLUMNS": "200"}
    res = tileops("roofline", str(run.parent),
                  "--profile", str(profile_file), timeout=120, environ=env)
    assert res.returncode == exitcodes.PHYSICS == 3, res.stderr
    assert "FORMULA ERROR" in res.stdout and "health: FAILED" in res.stdout
    assert "physics check FAILED" in res.stderr
    # json keeps the exit code and carries the health (in process: one subprocess start is enough)
    assert main(["roofline", str(run), "--profile", str(profile_file), "--format", "json"]) == exitcodes.PHYSICS
    assert json.loads(capsys.readouterr().out)["health"]["ok"] is False


@pytest.mark.slow
def test_real_cpu_bench_then_roofline_plot(tmp_path: Path, capsys) -> None:
    """End to end on this machine: a real (quick) CPU bench of relu, re-priced and plotted by `tileops roofline`."""
    prof = write_profile(tmp_path / "cpu.yaml", make_profile(
        name="e2e-cpu", match=("any",), bw_theoretical=None, bw_calibration=None, measured={"triad": 5e9},
        roofs={"cpu.fp32": (1.5e11, 0.2), "cpu.fp32_matmul": (1.5e11, 0.2)}))
    run = tmp_path / "run"
    res = tileops("bench", "--op", "relu", "--tag", "cpu", "--quick",
                  "--profile", str(prof), "--out", str(run), timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    plots = tmp_path / "plots"
    assert main(["roofline", str(run), "--profile", str(prof), "--format", "json", "--plot", str(plots)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"] and all(r["profile"] == "e2e-cpu" and r["efficiency"] > 0 for r in doc["rows"])
    for name in ("roofline.png", "roofline.svg"):
        assert (plots / name).stat().st_size > 10_000


def test_every_flag_is_documented_and_every_documented_flag_exists() -> None:
    import argparse
    import re

    from tileops.cli import build_parser

    parser = build_parser(["roofline"])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    flags = {s for a in sub.choices["roofline"]._actions for s in a.option_strings if s.startswith("--")} - {"--help"}
    doc = (Path(__file__).parents[1] / "docs" / "roofline.md").read_text(encoding="utf-8")
    running = doc.split("## Running it", 1)[1].split("\n### ", 1)[0]
    assert flags == set(re.findall(r"`(--[a-z-]+)", running))
