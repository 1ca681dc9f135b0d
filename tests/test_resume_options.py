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
        "require_quiet": [], "passes": ["1"], "threads": ["1"], "probe": [],
        "race": ["sequential"],
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
    with pytest.raises(TileOpsError, match=r"--row-timeout \(the run: 120.0\)"):  # a measurement flag: must match
        resume_request(out, {"row_timeout_s": 60.0}, flags=flags)
    assert resume_request(out, {"metrics_detail": "lean"}, flags=flags).options.metrics_detail == "lean"  # output


# --------------------------------------------------------------------------- what may change on --resume


def test_the_option_classes_cover_every_option_once_and_the_docs_list_them() -> None:
    """One list in the code (``records.OUTPUT_ONLY_FIELDS``, the rest measurement), and docs/bench.md's
    "Resuming a run" names exactly the flags of each class."""
    import re

    from tileops.records import MEASUREMENT_FIELDS, OUTPUT_ONLY_FIELDS

    assert set(MEASUREMENT_FIELDS) | set(OUTPUT_ONLY_FIELDS) == OPTION_FIELDS
    assert not set(MEASUREMENT_FIELDS) & set(OUTPUT_ONLY_FIELDS)
    page = (Path(__file__).parents[1] / "docs" / "bench.md").read_text(encoding="utf-8")
    section = page.split("## Resuming a run", 1)[1].split("\n## ", 1)[0]
    said = {cls: set(re.findall(r"`(--[a-z-]+)`", section.split(f"**{cls}**", 1)[1].split("\n- ", 1)[0].split("\n\n", 1)[0]))
            for cls in ("measurement", "output-only")}
    actions = bench_parser()._actions

    def flags_of(fields: tuple[str, ...]) -> set[str]:
        return {o for a in actions if a.dest in fields for o in a.option_strings if o.startswith("--")}

    assert said["measurement"] == flags_of(MEASUREMENT_FIELDS)
    assert said["output-only"] == flags_of(OUTPUT_ONLY_FIELDS)


@pytest.mark.slow
def test_output_only_flags_may_change_on_resume_and_measurement_flags_may_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`--resume DIR --no-plot` was refused when the first run drew plots: the plot, the sinks and the metrics'
    detail may change (the resumed run uses them and run.json keeps them); a measurement flag still may not.
    A run stopped by a real SIGINT after its first row is resumed three times."""
    from tileops.pipeline import progress

    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(tmp_path / "store"))
    prof = write_profile_file(tmp_path / "generous.yaml", profile(bandwidth=1e15))
    finished = progress.RowProgress.row_finished

    def ctrl_c_after_the_first_row(self, index, total, planned, record) -> None:
        finished(self, index, total, planned, record)
        if index == 1:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(progress.RowProgress, "row_finished", ctrl_c_after_the_first_row)
    out = tmp_path / "run"
    assert main(["bench", "--device", "cpu", "--quick", "--op", "relu", "--passes", "1", "--calibrate", "never",
                 "--profile", str(prof), "--out", str(out)]) == 130
    monkeypatch.setattr(progress.RowProgress, "row_finished", finished)
    assert read_run_info(out).options.plot is True
    capsys.readouterr()

    assert main(["bench", "--resume", str(out), "--passes", "2", "--no-plot"]) == 2  # measurement: refused
    err = " ".join(capsys.readouterr().err.split())
    assert "--passes (the run: 1)" in err and "output-only flags may change: --no-plot, --push" in err
    assert "--no-plot (the run" not in err  # the output-only flag given beside it is not the problem

    tf = tmp_path / "tf"
    assert main(["bench", "--resume", str(out), "--no-plot", "--textfile", str(tf), "--metrics-detail", "full"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "output-only flags changed on --resume" in err and "--plot/--no-plot: no plot (the run: plots)" in err
    info = read_run_info(out)
    assert info.status == "completed" and len(list(iter_records(out))) == info.rows_total == 2
    assert not list(out.glob("roofline*.png"))  # --no-plot, taken
    assert not info.options.plot and info.options.textfile_dir == str(tf.absolute())  # kept for a later resume
    assert info.options.metrics_detail == "full" and info.options.passes == 1 and info.options.quick
    (prom,) = tf.glob("tileops_cpu-*.prom")
    assert "tileops_row_info{" in prom.read_text()  # full detail: the sinks asked on resume were used

    assert main(["bench", "--resume", str(out), "--plot"]) == 0  # and the plot back, from the run's own records
    assert list(out.glob("roofline*.png")) and read_run_info(out).options.plot is True


# --------------------------------------------------------------------------- --list checks what the run checks


@pytest.mark.parametrize("case", ["profile", "rule", "timer", "textfile", "out-file", "out-held", "label",
                                  "device", "resume-flag"])
def test_list_checks_what_the_run_checks_with_the_same_exit_and_sentence(
        case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`bench --list --profile nosuch` exited 0 where the run exits 2: every input the run checks before its
    first row, --list checks too, through the same code: the same exit code and sentence, nothing written."""
    from tileops.records import RunInfo, utcnow, write_run_info

    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(tmp_path / "store"))
    monkeypatch.chdir(tmp_path)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    held = tmp_path / "held"  # a run stopped before its first row: its run file, its empty records
    held.mkdir()
    (held / "records.jsonl").write_text("")
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    for run in (held, stopped):
        write_run_info(run, RunInfo(run_id="r", started_at=utcnow(), status="interrupted",
                                    selection={"ops": ["relu"], "device": "cpu"},
                                    options=RunOptions(ops=["relu"], quick=True, calibrate="never")))
    args = {"profile": ["--profile", "nosuch"], "rule": ["--min-time", "3", "--max-time", "1"],
            "timer": ["--timer", "cupti"], "textfile": ["--textfile", str(a_file / "x")],
            "out-file": ["--out", str(a_file)], "out-held": ["--out", str(held)], "label": ["--label", "nosuch"],
            "device": ["--device", "cuda:7"], "resume-flag": ["--resume", str(stopped), "--passes", "1"]}[case]
    if case != "resume-flag":
        args = ["--op", "relu", "--device", "cpu", "--quick", "--calibrate", "never", *args]
    before = sorted(p.name for p in tmp_path.iterdir())

    assert main(["bench", *args, "--list"]) == 2
    listed = capsys.readouterr().err
    assert main(["bench", *args]) == 2
    ran = capsys.readouterr().err
    assert listed == ran and listed.startswith("tileops bench: error: ") and "Traceback" not in listed
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # neither wrote anything
    assert sorted(p.name for p in held.iterdir()) == ["records.jsonl", "run.json"]


def test_list_plans_a_good_request_and_a_run_dir_that_cannot_be_written_is_the_runs_sentence(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The check that refuses a bad --out leaves a good one alone: --list of a new --out plans, creating
    nothing; the run's own refusal of an --out under a file is the sentence --list gave."""
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(tmp_path / "store"))
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--op", "relu", "--list", "--out", str(tmp_path / "new" / "run")]) == 0
    assert "2 to run" in capsys.readouterr().out and not (tmp_path / "new").exists()
    (tmp_path / "f").write_text("")
    with pytest.raises(TileOpsError, match=r"/f/run: cannot write \(.*/f is not a directory\); choose a writable --out"):
        sweep.check_run_dir(tmp_path / "f" / "run", None)


# --------------------------------------------------------------------------- a second pass owed


@pytest.mark.slow
def test_a_run_stopped_in_its_second_pass_finishes_it_when_resumed(tmp_path: Path) -> None:
    """A real `tileops bench` stopped by SIGTERM once its second pass began resumed as "0 to run" and never got
    its second visits nor its drift. Resumed, it finishes the pass: each row's second visit, pooled with the
    first visit the stopped session measured (not measured again), and run.json's host_noise."""
    import subprocess
    import time

    from cli_support import tileops, tileops_argv

    env = {**os.environ, "TILEOPS_PROFILE_DIR": str(tmp_path / "profiles")}
    out = tmp_path / "run"
    log = tmp_path / "stderr.log"
    with log.open("w") as err:
        p = subprocess.Popen(tileops_argv("bench", "--device", "cpu", "--quick", "--op", "add", "--out", str(out),
                                          "--no-plot", "--calibrate", "never"),
                             env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
        try:
            deadline = time.monotonic() + 540
            while "second pass:" not in log.read_text() and p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert p.poll() is None, f"the bench ended before its second pass:\n{log.read_text()[-3000:]}"
            p.send_signal(signal.SIGTERM)  # the fresh worker is still starting (torch's import): mid-pass
            assert p.wait(timeout=120) == 143, log.read_text()[-3000:]
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    stopped = read_run_info(out)
    assert stopped.status == "interrupted" and stopped.host_noise == {}  # the pass never settled
    first = {r.key: r for r in iter_records(out)}
    assert len(first) == stopped.rows_total == 3 and all(len(r.timing.visits_s) == 1 for r in first.values())
    assert (out / "first-visits.jsonl").is_file()

    listed = tileops("bench", "--resume", str(out), "--list", "--output-format", "log", env=env)
    assert listed.returncode == 0 and "3 of them owed their second visit" in listed.stdout, listed.stderr

    r = tileops("bench", "--resume", str(out), env=env)
    assert r.returncode in (0, 1), r.stderr[-3000:]
    assert "resuming: 3 row(s) already recorded OK, 0 to run; the second pass visits 3 of them again (the run " \
           "stopped before its second pass ended)" in " ".join(r.stdout.split())
    assert "second pass: 3 row(s) visited again" in " ".join(r.stderr.split())
    info = read_run_info(out)
    noise = info.host_noise
    assert info.status == "completed" and noise["pairs"] == 3 and noise["kept_first"] == []
    assert set(noise["second_pass_shift"]) >= {"memory"} and noise["between_visits"]["memory"]["source"] == \
        "this run (3 rows)"  # the drift between the passes, and each component, as an unbroken run has them
    recs = {r.key: r for r in iter_records(out)}
    assert set(recs) == set(first)  # one record per row: replaced, not appended
    for key, rec in recs.items():
        t = rec.timing
        assert len(t.visits_s) == 2 and t.visits_s[0] == pytest.approx(first[key].timing.visits_s[0], rel=1e-12)
        assert t.median_s == pytest.approx((t.visits_s[0] * t.visits_s[1]) ** 0.5)
        assert t.level_ci_s[0] <= t.median_s <= t.level_ci_s[1]
    assert not (out / "first-visits.jsonl").exists()  # settled: nothing owed any more
