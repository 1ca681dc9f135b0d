"""Issues 26 and 34: `tileops roofline NEW --baseline OLD` decides each shared row from both runs' levels and their
intervals (tileops.report.compare_robust): same, faster, slower, ambiguous or unjudged. Only ``slower`` fails the
command (exit 1); ``ambiguous`` and ``unjudged`` are counted and never fail it.

Records are built as data (tests/roofline_fixtures.py) and go through the real command.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
from roofline_fixtures import make_profile, make_record, write_profile, write_records

from tileops import exitcodes
from tileops.cli import main
from tileops.records import GpuConditions, RowConditions
from tileops.report.baseline import TimeIndex, compare_indexes
from tileops.roofline import price

PROFILE = make_profile(name="cli-test-cpu", match=("CLI Test CPU",), bw_theoretical=40e9, bw_calibration=0.5,
                       roofs={"cpu.fp32": (200e9, 0.5)})


def _row(label: str, median: float, half: float | None, **kw):
    """A row whose level is known to ``median * (1 -+ half)`` (95 %, normal quantile), a rerun to sqrt(2) that."""
    ci = None if half is None else (median * (1 - half), median * (1 + half))
    rerun = None if half is None else (median * (1 - 1.4 * half), median * (1 + 1.4 * half))
    return make_record(device_name="CLI Test CPU", label=label, flops=1 << 20, bytes=8 << 20, median_s=median,
                       median_ci_s=rerun, level_ci_s=ci, **kw)


@pytest.fixture()
def profile_file(tmp_path: Path) -> Path:
    return write_profile(tmp_path / "p.yaml", PROFILE)


def _compare(tmp_path: Path, profile_file: Path, old: list, new: list, fmt: str, capsys) -> tuple[int, str]:
    o = write_records(tmp_path / "old" / "records.jsonl", old)
    n = write_records(tmp_path / "new" / "records.jsonl", new)
    code = main(["roofline", str(n.parent), "--profile", str(profile_file), "--baseline", str(o.parent),
                 "--format", fmt])
    return code, capsys.readouterr().out


def test_each_shared_row_is_same_faster_slower_or_ambiguous_from_both_levels(tmp_path: Path, profile_file: Path,
                                                                            capsys) -> None:
    old = [_row("same", 1e-3, 0.02), _row("slower", 1e-3, 0.02), _row("faster", 1e-3, 0.02),
           _row("wide", 1e-3, 0.30)]
    new = [_row("same", 1.01e-3, 0.02), _row("slower", 1.3e-3, 0.02), _row("faster", 0.7e-3, 0.02),
           _row("wide", 1.5e-3, 0.30)]
    code, out = _compare(tmp_path, profile_file, old, new, "json", capsys)
    assert code == exitcodes.FAILED  # a slower row
    doc = json.loads(out)["baseline"]
    by_label = {r["label"]: r for r in doc["rows"]}
    assert {k: r["change"] for k, r in by_label.items()} == {
        "same": "same", "slower": "slower", "faster": "faster", "wide": "ambiguous"}
    assert by_label["slower"]["reason"] == "significant" and by_label["wide"]["reason"] == "not-shown"
    lo, hi = by_label["slower"]["ratio_interval"]
    se = math.hypot(math.log(1 / 0.98), math.log(1 / 0.98)) / 1.959964  # each level's wider side (below), normal
    assert lo == pytest.approx(1.3 * math.exp(-1.959964 * se)) and hi == pytest.approx(1.3 * math.exp(1.959964 * se))
    assert all(r["basis"] == "interval" for r in doc["rows"]) and by_label["slower"]["p_value"] < 1e-6
    assert doc["counts"] == {"same": 1, "slower": 1, "faster": 1, "ambiguous": 1} and doc["regressions"] == 1


def test_an_ambiguous_row_never_fails_the_command(tmp_path: Path, profile_file: Path, capsys) -> None:
    """On a busy host a median 1.5x the baseline's with intervals of ±30 % is not shown to be slower:
    the old fixed 10 % rule failed such a run; now it is counted as ambiguous and the exit code is 0."""
    code, out = _compare(tmp_path, profile_file, [_row("a", 1e-3, 0.30)], [_row("a", 1.5e-3, 0.30)], "table",
                         capsys)
    assert code == exitcodes.OK
    assert "1 ambiguous" in out and "never a failure" in out
    assert "│ relu │ a     │ float32 │ torch   │     1 ms │ 1.5 ms │ 1.50x │      0.91–2.48x │ ambiguous │ not-shown │" \
        in out


def test_a_gap_on_a_disturbed_side_is_ambiguous_not_a_regression(tmp_path: Path, profile_file: Path,
                                                                  capsys) -> None:
    busy = RowConditions(window_s=0.3, contended=True, contention=["load 3.5 on 2 cores"])
    code, out = _compare(tmp_path, profile_file, [_row("a", 1e-3, 0.01)],
                         [_row("a", 1.5e-3, 0.01, conditions=busy)], "json", capsys)
    assert code == exitcodes.OK
    (row,) = json.loads(out)["baseline"]["rows"]
    assert row["change"] == "ambiguous" and row["reason"] == "disturbed" and "load 3.5" in row["message"]


def test_a_baseline_without_intervals_is_unjudged_never_slower(tmp_path: Path, profile_file: Path,
                                                                capsys) -> None:
    """Issue 34: a row without an interval went through a point rule (`180.07x slower point-rule`, exit 1)."""
    code, out = _compare(tmp_path, profile_file, [_row("a", 84.6e-6, None)], [_row("a", 15.2e-3, 0.01)], "md",
                         capsys)
    assert code == exitcodes.OK
    assert "| unjudged | missing-interval |" in out
    assert "1 row(s) unjudged: a side has no interval" in out


def test_a_record_from_before_issue_34_compares_on_its_rerun_interval_narrowed(tmp_path: Path, profile_file: Path,
                                                                               capsys) -> None:
    """An older record holds only the prediction of a rerun (two levels' uncertainty): its level's interval is
    that, narrowed by sqrt(2) in log."""
    def old_style(label: str, median: float, half: float):
        return make_record(device_name="CLI Test CPU", label=label, flops=1 << 20, bytes=8 << 20, median_s=median,
                           median_ci_s=(median * math.exp(-half), median * math.exp(half)))
    code, out = _compare(tmp_path, profile_file, [old_style("a", 1e-3, 0.04)], [old_style("a", 1.3e-3, 0.04)],
                         "json", capsys)
    (row,) = json.loads(out)["baseline"]["rows"]
    assert code == exitcodes.FAILED and row["change"] == "slower"
    lo, _ = row["ratio_interval"]
    assert lo == pytest.approx(1.3 * math.exp(-0.04 * math.sqrt(2) / math.sqrt(2)))


def test_csv_adds_the_change_and_its_reason(tmp_path: Path, profile_file: Path, capsys) -> None:
    code, out = _compare(tmp_path, profile_file, [_row("a", 1e-3, 0.02)], [_row("a", 1.01e-3, 0.02)], "csv", capsys)
    assert code == exitcodes.OK
    (row,) = list(csv.DictReader(io.StringIO(out)))
    assert row["change"] == "same" and row["change_reason"] == "within-threshold"


def test_gpu_rows_compare_in_cycles_where_both_know_their_sm_clock() -> None:
    """A 20 % slower row whose SM clock fell 20 % is the clock, not the code (nvbench confirms in cycles)."""
    def gpu(median: float, mhz: float):
        cond = RowConditions(window_s=0.2, gpu=GpuConditions(sm_mhz_min=mhz, sm_mhz_max=mhz))
        return make_record(device_kind="cuda", device_name="Test GPU", timer="cupti", median_s=median,
                           median_ci_s=(median * 0.993, median * 1.007), level_ci_s=(median * 0.995, median * 1.005),
                           ci_df=30.0, conditions=cond)
    prof = make_profile(name="gpu", kind="gpu", match=("Test GPU",), roofs={"cuda_core.fp32": (1e12, 0.9)},
                        aliases={})
    old, new = TimeIndex.of([price(gpu(1e-3, 1980), prof)]), TimeIndex.of([price(gpu(1.2e-3, 1650), prof)])
    (row,) = compare_indexes(new, old).rows
    assert row.change == "ambiguous" and row.reason == "clocks-explain-change"
    steady = TimeIndex.of([price(gpu(1.2e-3, 1980), prof)])
    (row,) = compare_indexes(steady, old).rows
    assert row.change == "slower" and row.reason == "significant-in-cycles"
