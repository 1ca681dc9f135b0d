"""``tileops bench --threads N`` and ``--quick``'s intervals for slow rows (issue 37), on the real command line.

A CPU row's threads are the worker's ``torch.set_num_threads(N)``: the count is checked against the CPUs this
process may use before anything is written, refused on a GPU, read back in the worker into every record
(``env.threads``), shown in the run's header and kept by ``--resume`` (a resumed run cannot change it). And
``--quick`` gives every row an interval: a row slower than its blocks' time takes single-sample blocks, so each
visit has two blocks at least (before, a gemm row past about 25 ms read ``n=3, no interval``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import pytest
from export_support import profile, write_profile_file

from cli_support import tileops
from tileops.bench.worker import cpu_threads, default_threads
from tileops.errors import TileOpsError
from tileops.records import iter_records, read_run_info

CPUS = default_threads()


def test_the_thread_count_is_the_cpus_by_default_and_refused_beyond_them_or_on_a_gpu() -> None:
    assert cpu_threads(None, "cpu") == CPUS == len(os.sched_getaffinity(0))
    assert cpu_threads(1, "cpu") == 1 and cpu_threads(CPUS, "cpu") == CPUS
    with pytest.raises(TileOpsError, match=rf"^--threads {CPUS + 1}: this process may use {CPUS} CPU\(s\) .*give "
                                           rf"--threads from 1 to {CPUS}$"):
        cpu_threads(CPUS + 1, "cpu")
    with pytest.raises(TileOpsError, match=r"a GPU row is timed on the device, where it would change only the "
                                           r"host's threads .* Leave --threads out, or give --device cpu"):
        cpu_threads(1, "cuda")
    assert cpu_threads(None, "cuda") is None
    with pytest.raises(TileOpsError, match=rf"^run.json: threads {CPUS + 9}: this process may use {CPUS} CPU\(s\) "
                                           rf".*; the run keeps its count: resume where {CPUS + 9} CPUs are free, "
                                           r"or start a new run with --out$"):
        cpu_threads(CPUS + 9, "cpu", source="run.json: threads")  # a resumed run's own count, on a smaller host


def test_threads_below_one_are_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    from tileops.cli import build_parser

    parser = build_parser(["bench"])
    bench = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["bench"]
    for bad in ("0", "-2", "two", "1.5"):
        with pytest.raises(SystemExit) as exc:
            bench.parse_args(["--threads", bad])
        assert exc.value.code == 2
        assert (f"argument --threads: expected a whole number of threads from 1 to the CPUs this process may use; "
                f"got {bad!r}") in capsys.readouterr().err
    assert bench.parse_args(["--threads", "1"]).threads == 1


def test_threads_beyond_the_cpus_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    """``--list`` refuses it as the run does (exit 2, the same sentence), and the run writes nothing."""
    too_many = str(CPUS + 1)
    listed = tileops("bench", "--list", "--op", "relu", "--device", "cpu", "--threads", too_many)
    out = tmp_path / "run"
    ran = tileops("bench", "--op", "relu", "--device", "cpu", "--threads", too_many, "--out", str(out))
    for r in (listed, ran):
        assert r.returncode == 2, r.stderr
        assert f"--threads {too_many}: this process may use {CPUS} CPU(s)" in r.stderr
    assert not out.exists()


# -- real runs ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def priced(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict[str, str]]:
    """Flags that price on a profile file and calibrate nothing, and a profile store of the module's own (the
    host's noise prior is kept there)."""
    d = tmp_path_factory.mktemp("threads")
    prof = write_profile_file(d / "cpu.yaml", profile(bandwidth=1e15))
    return ["--profile", str(prof), "--calibrate", "never", "--no-plot"], {"TILEOPS_PROFILE_DIR": str(d / "store")}


def _records(out: Path) -> list:  # type: ignore[type-arg]
    recs = list(iter_records(out))
    assert recs and all(r.status == "ok" for r in recs), [r.error for r in recs]
    return recs


@pytest.mark.slow
def test_quick_gemm_on_the_cpu_gives_every_row_an_interval(tmp_path: Path,
                                                          priced: tuple[list[str], dict[str, str]]) -> None:
    """The issue's command: every gemm row's record holds both intervals (``level_ci_s``: this run's level;
    ``median_ci_s``: a rerun's), on the threads this process may use, recorded; a resume asking another count
    is refused naming the run's."""
    flags, env = priced
    out = tmp_path / "run"
    r = tileops("bench", "--quick", "--op", "gemm", "--device", "cpu", "--out", str(out), *flags, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    recs = _records(out)
    assert {x.op for x in recs} == {"gemm"} and len(recs) >= 3
    for rec in recs:
        t = rec.timing
        assert t.level_ci_s is not None and t.median_ci_s is not None, rec.key
        assert t.level_ci_s[0] <= t.median_s <= t.level_ci_s[1] and t.ci_df is not None and t.ci_df >= 1
        assert rec.env.threads == CPUS
    assert read_run_info(out).threads == CPUS and read_run_info(out).options.threads is None
    assert f"(cpu, {CPUS} thread{'s' if CPUS > 1 else ''}) -> {out}" in r.stderr + r.stdout
    from tileops.pipeline.bench import resume_request

    assert resume_request(out, {}).options.threads == CPUS  # the count it ran on, whatever this host has now
    if CPUS > 1:
        again = tileops("bench", "--resume", str(out), "--threads", "1", env=env)
        assert again.returncode == 2
        assert f"these flags differ: --threads (the run: {CPUS})" in again.stderr
    # a host that now gives the process fewer CPUs than the run ran on: refused, the run file untouched
    run_file = out / "run.json"
    data = json.loads(run_file.read_text())
    data["threads"] = CPUS + 3
    run_file.write_text(json.dumps(data))
    smaller = tileops("bench", "--resume", str(out), env=env)
    assert smaller.returncode == 2
    assert (f"{out}/run.json: threads {CPUS + 3}: this process may use {CPUS} CPU(s) (its CPU affinity); the run "
            f"keeps its count: resume where {CPUS + 3} CPUs are free") in smaller.stderr
    assert json.loads(run_file.read_text()) == data


@pytest.mark.slow
def test_threads_1_is_recorded_and_a_slow_rows_every_visit_has_an_interval(
        tmp_path: Path, priced: tuple[list[str], dict[str, str]]) -> None:
    """``--threads 1`` on a gemm slower than ``--quick``'s blocks: the worker ran it on one thread (every record's
    ``env.threads``, read back there), run.json keeps it, the header says it with what it does to the SOL; the
    row's second visit, which its progress line shows alone, took two single-sample blocks: an interval of its
    own, no "one block"."""
    flags, env = priced
    out = tmp_path / "run"
    shape = "M=1024,N=1024,K=1024"  # tens of milliseconds a call on one thread: a block of 3 passed the cap
    r = tileops("bench", "--quick", "--op", "gemm", "--dtype", "float32", "--shape", shape, "--device", "cpu",
                "--threads", "1", "--out", str(out), *flags, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    (rec,) = _records(out)
    assert rec.env.threads == 1 and rec.timing.level_ci_s is not None
    assert rec.timing.median_s > 0.01  # slower than --quick's block time (0.01 s): the case of the issue
    lines = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert [x["env"]["threads"] for x in lines] == [1]
    info = read_run_info(out)
    assert info.threads == 1 and info.options.threads == 1
    assert f"(cpu, 1 thread) -> {out}" in r.stderr + r.stdout
    if CPUS > 1:
        assert f"note: CPU rows run on 1 of the {CPUS} CPUs this process may use (--threads 1)" in r.stderr
    second = r.stderr.split("second pass:", 1)[1]
    line = re.search(rf"\] gemm {re.escape(shape)} float32: (.*)", second)
    assert line is not None, second
    assert re.search(r"(±[\d.]+ %|\+[\d.]+ %/-[\d.]+ %|not known to within 10x|no precise interval: timed in "
                     r"scheduler slices)", line.group(1)) and "one block" not in line.group(1), line.group(1)
    if CPUS > 1:
        again = tileops("bench", "--resume", str(out), "--threads", str(CPUS), env=env)
        assert again.returncode == 2 and "these flags differ: --threads (the run: 1)" in again.stderr
