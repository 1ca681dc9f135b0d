"""``tileops bench --resume`` restores everything a user set: every flag of the bench, read off its parser.

One run sets every restored flag to a value that is not its default, is
interrupted by a real SIGINT after its first row, and is resumed with
``--resume DIR`` alone; the resumed run holds the same options (field by
field), and what it does at its end shows it used them (the metrics at the
detail asked, pushed with the job, instance and attempts asked, no plot). A flag
added to the bench without a value here fails the first test, so none can be
left out of run.json unnoticed.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from export_support import free_port, profile, write_profile_file
from sensors_support import FakeProc

from tileops.bench import sweep
from tileops.bench.quiet import check_quiet
from tileops.cli import build_parser, main
from tileops.commands.bench import NOT_RESTORED, restored_flags
from tileops.errors import TileOpsError
from tileops.records import RunOptions, iter_records, read_run_info

OPTION_FIELDS = {f.name for f in dataclasses.fields(RunOptions)}


def bench_parser() -> argparse.ArgumentParser:
    parser = build_parser(["bench"])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["bench"]


def values(tmp_path: Path) -> dict[str, list[str]]:
    """A non-default value for every restored flag, as a person types it after the flag (none for a switch;
    a repeatable flag is given once per value)."""
    prof = write_profile_file(tmp_path / "generous.yaml", profile(bandwidth=1e15))  # nothing a CPU row breaches
    return {
        "ops": ["relu"], "families": ["elementwise"], "labels": ["cpu-512x1024"], "tags": ["cpu"],
        "backends": ["torch"], "dtypes": ["float32", "bfloat16"], "all_rows": [], "shapes": ["S=64x128"],
        "device": ["cpu"], "quick": [], "row_timeout_s": ["120"], "timer": ["cuda-events"],
        "compile_cache": [str(tmp_path / "cc")], "compile_timeout_s": ["300"], "keep_traces": [],
        "profile": [str(prof)], "calibrate": ["never"], "calibration_max_age_s": ["12h"], "plot": [],
        "push_url": [f"http://127.0.0.1:{free_port()}"], "textfile_dir": [str(tmp_path / "tf")],
        "job": ["nightly"], "instance": ["gpu-07"], "push_attempts": ["1"], "push_backoff_s": ["0"],
        "push_timeout_s": ["1"], "metrics_detail": ["full"],
        "target_precision": ["4%"], "min_time_s": ["0.01"], "max_time_s": ["0.2"], "min_samples": ["5"],
        "require_quiet": [], "passes": ["1"], "threads": ["1"],
    }


def test_every_bench_flag_is_a_run_option_and_every_run_option_a_flag(tmp_path: Path) -> None:
    flags = restored_flags(bench_parser())
    assert set(flags) == OPTION_FIELDS  # a flag run.json does not keep, or an option no flag sets, fails here
    assert set(values(tmp_path)) == set(flags)  # and each one is exercised below
    assert {"list_only", "out", "resume"} <= NOT_RESTORED


@pytest.mark.slow
def test_a_resumed_run_restores_every_flag_it_was_started_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from tileops.pipeline import progress
    from tileops.pipeline.bench import new_request, resume_request

    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(tmp_path / "store"))
    # --require-quiet on a shared host would refuse: the look before the rows reads a quiet /proc tree
    quiet = FakeProc(tmp_path / "proc")
    monkeypatch.setattr(sweep, "check_quiet", functools.partial(check_quiet, proc=quiet.root,
                                                                sleep=lambda s: quiet.advance(total=100)))
    flags = restored_flags(bench_parser())
    repeatable = {a.dest for a in bench_parser()._actions if isinstance(a, argparse._AppendAction)}
    argv = [token for dest, given in values(tmp_path).items()
            for token in ([t for v in given for t in (flags[dest], v)] if dest in repeatable else [flags[dest], *given])]
    out = tmp_path / "run"

    finished = progress.RowProgress.row_finished

    def ctrl_c_after_the_first_row(self, index, total, planned, record) -> None:
        finished(self, index, total, planned, record)
        if index == 1:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, between two rows

    monkeypatch.setattr(progress.RowProgress, "row_finished", ctrl_c_after_the_first_row)
    assert main(["bench", *argv, "--out", str(out)]) == 130
    info = read_run_info(out)
    assert info.status == "interrupted" and len(list(iter_records(out))) == 1 and info.rows_total > 1
    parsed = bench_parser().parse_args(argv)
    asked = new_request({dest: getattr(parsed, dest) for dest in flags}).options
    assert info.options == asked  # run.json keeps every flag, as given (paths absolute)
    monkeypatch.setattr(progress.RowProgress, "row_finished", finished)
    capsys.readouterr()

    assert main(["bench", "--resume", str(out)]) == 4  # finished, then the push to nothing failed
    err = capsys.readouterr().err
    resumed = resume_request(out, {})
    assert dataclasses.asdict(resumed.options) == dataclasses.asdict(asked)  # every field, one by one
    assert read_run_info(out).status == "completed" and len(list(iter_records(out))) == info.rows_total
    # ... and the resumed run used them: metrics at full detail, in the job and instance asked, one attempt
    (prom,) = (tmp_path / "tf").glob("tileops_cpu-*.prom")  # the device's (beside the build info's)
    assert "tileops_row_info{" in prom.read_text()  # full detail only
    assert "failed after 1 attempt(s)" in err
    assert "--job nightly --instance gpu-07 --metrics-detail full" in err
    assert not list(out.glob("roofline*.png"))  # --no-plot
    assert read_run_info(out).quiet["quiet"] is True  # type: ignore[union-attr]  # --require-quiet looked again
    assert "calibrating" not in err  # --calibrate never (and --profile)
    assert read_run_info(out).host_noise == {} and "second pass" not in err  # --passes 1: one visit per row
    assert {r.env.threads for r in iter_records(out)} == {1} and read_run_info(out).threads == 1  # --threads 1
    with pytest.raises(TileOpsError, match=r"--metrics-detail \(the run: full\)"):
        resume_request(out, {"metrics_detail": "lean"}, flags=flags)
