"""The bench side of issue 26: each row's interval and conditions, the look at the host before the rows, the
stopping rule's knobs, and a progress line a person can read.

Real rows run through the bench's own path on this CPU; the host's business cannot be chosen here, so the
look before the rows reads a fake /proc tree (tests/sensors_support.py) where a test needs it quiet or busy.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

sys.path.insert(0, str(Path(__file__).parent))
from roofline_fixtures import make_record
from sensors_support import FakeProc

from tileops import exitcodes
from tileops.bench import sweep
from tileops.bench.interval import CPU_BLOCKS, GPU_BLOCKS, QUICK_BLOCKS, BlockRule
from tileops.bench.quiet import check_quiet
from tileops.bench.stopping import NOISE_REACHED, TIME_CAP
from tileops.bench.timers import CpuWallTimer
from tileops.cli import main
from tileops.device import DeviceInfo
from tileops.errors import TileOpsError
from tileops.records import CpuConditions, RowConditions, RunOptions, iter_records, parse_record, read_run_info, to_json

CPU = DeviceInfo(kind="cpu", name="a CPU", hostname="h")
GPU = DeviceInfo(kind="cuda", name="a GPU", index=0)
ONE_ROW = ["--op", "relu", "--label", "cpu-512x1024", "--dtype", "float32", "--quick", "--calibrate", "never",
           "--no-plot"]


# -- a row: its interval and what surrounded it ------------------------------------------------------------


def test_a_real_cpu_row_carries_its_interval_and_what_surrounded_it() -> None:
    from tileops.bench.environment import run_environment
    from tileops.bench.execute import Task, run_task
    from tileops.device import describe_device
    from tileops.ops.catalog import load_entries

    cpu = describe_device("cpu")
    row = next(w for w in load_entries()["relu"].workloads if "cpu" in w.tags)
    rec = run_task(Task(op="relu", label=row.label, case="float32", case_name="float32", backend="torch",
                        device=cpu, rule=QUICK_BLOCKS, env=run_environment(cpu, "intervals", 1)))
    assert rec.status == "ok", rec.error
    t = rec.timing
    assert t is not None and t.median_ci_s is not None
    lo, hi = t.median_ci_s
    assert lo <= t.median_s <= hi and lo < hi  # real samples never agree to the last bit
    assert t.n >= 2 and t.ci_df is not None  # two blocks at least (an interval of the visit's own, ci_df = blocks
    # - 1), however slow a busy host makes the call: a slow call's blocks shrink to one sample (issue 37)
    assert t.stop_reason in (NOISE_REACHED, TIME_CAP)
    c = rec.conditions
    assert c is not None and c.gpu is None and c.cpu is not None
    assert c.window_s >= t.total_s - t.warmup * t.median_s - 0.05  # the sensors were around the timing
    assert c.cpu.cores and c.cpu.cores >= 1 and c.cpu.load1_end is not None
    assert (c.cpu.steal is None) == ("steal" in c.cpu.blank)  # a figure, or why not
    assert c.contended == bool(c.contention)
    back = parse_record(to_json(rec))
    assert back == rec and back.timing.median_ci_s == [lo, hi]  # type: ignore[union-attr]


class CountingTimer(CpuWallTimer):
    """The CPU's wall-clock timer, logging what the bench asks of it."""

    def __init__(self, log: list[str]) -> None:
        super().__init__(lambda: None)
        self.log = log

    def sample(self, fn, k):  # type: ignore[no-untyped-def]
        self.log.append(f"block {k}")
        return super().sample(fn, k)


def test_a_row_is_sampled_in_blocks_each_rewarmed_by_an_untimed_call() -> None:
    """Between two blocks the pause lets a CPU's pool threads sleep: one untimed, synchronised call wakes them,
    so each block's first sample does not pay for the pause."""
    from tileops.bench.execute import measure

    log: list[str] = []
    calls = 0

    def op() -> None:
        nonlocal calls
        calls += 1

    rule = BlockRule(target_precision=0.5, min_time_s=0.0, max_time_s=0.5, min_samples=6, warmup_s=0.0,
                     min_blocks=4, block_time_s=0.001, pause_s=0.001, min_block_samples=3)
    t = measure(op, CountingTimer(log), rule)
    blocks = [int(x.split()[1]) for x in log]
    assert len(blocks) >= rule.min_blocks and t.n == sum(blocks)
    assert calls == t.warmup + t.n + (len(blocks) - 1)  # one rewarm call before every block but the first
    assert t.median_ci_s is not None and t.median_ci_s[0] <= t.median_s <= t.median_ci_s[1]


def test_a_gpu_timers_batch_is_the_smallest_block() -> None:
    """A CUDA-event batch is one synchronisation, a CUPTI batch one profiler session: no block is smaller."""
    from tileops.bench.execute import measure

    log: list[str] = []

    class Batched(CountingTimer):
        first_batch = 10

    measure(lambda: None, Batched(log), dataclasses.replace(QUICK_BLOCKS, min_block_samples=3, max_time_s=0.05,
                                                            min_time_s=0.0, warmup_s=0.0))
    assert log and all(int(x.split()[1]) >= 10 for x in log)


def test_a_gpu_row_records_the_devices_clocks_power_and_neighbours(monkeypatch: pytest.MonkeyPatch) -> None:
    """The executor's sensors on a GPU: NVML (a fake pynvml here: no GPU on this machine) found by the device's
    uuid, this process told apart by the worker's one probe, a power cap seen during the row."""
    from tileops import device as devmod
    from tileops.bench import execute
    from tileops.bench.gpusensors import SW_POWER_CAP
    from sensors_support import FakeNvml

    lib = FakeNvml(reasons=[0, SW_POWER_CAP], clocks=[1980, 1755], processes=[4242, 777, 31])
    monkeypatch.setattr(devmod.nvml, "session_status", lambda: (devmod.NvmlSession(lib), None))
    monkeypatch.setattr(devmod, "own_gpu_pids", lambda d: ({4242}, ""))
    monkeypatch.setattr(execute, "_SENSORS", {})
    gpu = DeviceInfo(kind="cuda", name="NVIDIA H200", index=0, uuid="GPU-1")
    rule = dataclasses.replace(QUICK_BLOCKS, max_time_s=0.05, min_time_s=0.0, warmup_s=0.0)
    # 4242 the worker (its probe), 777 the bench that started it (a GPU calibration left it a context), 31 another
    timing, c, _ = execute.measure_row(lambda: None, CpuWallTimer(lambda: None), rule, gpu, parent_pids=(777,))
    assert timing.median_ci_s is not None and c.gpu is not None and c.cpu is not None
    assert c.gpu.other_processes == [31] and c.gpu.sm_mhz_min == 1755 and c.gpu.sm_mhz_max == 1980
    assert c.throttled and c.power_capped and not c.thermal and c.contended
    assert "sw_power_cap" in c.gpu.clock_events and c.gpu.power_limit_w == 700.0

    # a container that hides this process from NVML: other processes blank with why, never itself counted
    monkeypatch.setattr(devmod, "own_gpu_pids", lambda d: (None, "NVML lists host PIDs; none is this process"))
    monkeypatch.setattr(execute, "_SENSORS", {})
    _, hidden, _ = execute.measure_row(lambda: None, CpuWallTimer(lambda: None), rule, gpu)
    assert hidden.gpu is not None and hidden.gpu.other_processes is None
    assert hidden.gpu.blank["other_processes"] == "NVML lists host PIDs; none is this process"
    # ... or hides the bench process that started the worker
    monkeypatch.setattr(devmod, "own_gpu_pids", lambda d: ({4242}, ""))
    monkeypatch.setattr(execute, "_SENSORS", {})
    _, parent_hidden, _ = execute.measure_row(lambda: None, CpuWallTimer(lambda: None), rule, gpu,
                                           parent_unknown="NVML lists host PIDs; the bench is not among them")
    assert parent_hidden.gpu is not None and parent_hidden.gpu.other_processes is None
    assert not any("other process" in why for why in parent_hidden.contention)  # only the power cap
    assert parent_hidden.gpu.blank["other_processes"] == "NVML lists host PIDs; the bench is not among them"


def test_blocks_that_disagree_wildly_give_an_interval_a_record_can_carry() -> None:
    """Ten blocks each ten times slower than the last (a host going from idle to swamped): the visit's own
    interval spans hundreds of times its level, and the record carries it (held to its durations where it
    would pass them), still wide."""
    from tileops.bench.execute import measure
    from tileops.records import MAX_TIME_S, MIN_TIME_S, Timing

    class Swamped(CpuWallTimer):
        blocks = 0

        def sample(self, fn, k):  # type: ignore[no-untyped-def]
            self.blocks += 1
            return [1e-6 * 10 ** self.blocks] * k

    rule = BlockRule(target_precision=0.01, min_time_s=0.0, max_time_s=5.0, min_samples=3, max_samples=30,
                     warmup_s=0.0, min_blocks=3, block_time_s=1e-9, pause_s=0.0, min_block_samples=3,
                     max_block_samples=3)
    t = measure(lambda: None, Swamped(lambda: None), rule)
    assert t.n == 30 and t.median_ci_s is not None and t.level_ci_s == t.median_ci_s
    lo, hi = t.median_ci_s
    assert MIN_TIME_S <= lo < t.median_s / 100 and MAX_TIME_S >= hi > 100 * t.median_s
    assert Timing.contract_check(t) is None  # what the readers apply: the record reads back


# -- the stopping rule's knobs ------------------------------------------------------------------------------


def test_the_knobs_replace_the_devices_preset_and_bad_combinations_are_refused() -> None:
    assert sweep.stopping_rule(CPU, RunOptions()) == CPU_BLOCKS
    assert sweep.stopping_rule(GPU, RunOptions()) == GPU_BLOCKS
    assert sweep.stopping_rule(GPU, RunOptions(quick=True)) == QUICK_BLOCKS
    rule = sweep.stopping_rule(CPU, RunOptions(target_precision=0.1, min_time_s=0.3, max_time_s=2.0, min_samples=40))
    assert (rule.target_precision, rule.min_time_s, rule.max_time_s, rule.min_samples) == (0.1, 0.3, 2.0, 40)
    assert rule.block_time_s == CPU_BLOCKS.block_time_s  # what was not given stays the preset's
    # one side given alone: the other gives way rather than making a rule that cannot stop as asked
    assert sweep.stopping_rule(CPU, RunOptions(max_time_s=0.05)).min_time_s == 0.05
    assert sweep.stopping_rule(CPU, RunOptions(min_time_s=3.0)).max_time_s == 3.0
    with pytest.raises(TileOpsError, match=r"--min-time 2 is above --max-time 1"):
        sweep.stopping_rule(CPU, RunOptions(min_time_s=2.0, max_time_s=1.0))
    with pytest.raises(TileOpsError, match=r"--min-samples 5000 is above the rule's sample cap \(2000\)"):
        sweep.stopping_rule(CPU, RunOptions(min_samples=5000))


@pytest.mark.parametrize("args, words", [
    (["--target-precision", "0"], "expected a precision above 0 and at most 100 %"),
    (["--target-precision", "150%"], "expected a precision above 0"),
    (["--max-time", "-1"], "expected a positive number of seconds"),
    (["--min-samples", "0"], "expected a whole number of samples from 1 to 100000"),
    (["--min-time", "3", "--max-time", "1"], "--min-time 3 is above --max-time 1"),
])
def test_a_bad_knob_is_exit_2_before_anything_is_written(args: list[str], words: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    try:
        rc = main(["bench", *ONE_ROW, *args, "--out", str(out)])
    except SystemExit as exc:  # argparse refuses the value itself
        rc = int(exc.code or 0)
    assert rc == exitcodes.USAGE and words in capsys.readouterr().err
    assert not out.exists()


def test_the_precision_flag_reads_percent_or_fraction() -> None:
    from tileops.commands.argtypes import precision

    assert precision("2%") == pytest.approx(0.02) and precision("0.02") == 0.02 and precision("100%") == 1.0


# -- the progress line ---------------------------------------------------------------------------------------


def _ok(median: float, ci: list[float] | None, n: int = 486, stop: str = NOISE_REACHED,  # type: ignore[no-untyped-def]
        level_ci_s: tuple[float, float] | None = None, **extra: object):
    rec = make_record(median_s=median, level_ci_s=level_ci_s, **extra)
    return dataclasses.replace(rec, timing=dataclasses.replace(rec.timing, median_ci_s=ci, n=n, stop_reason=stop))


def test_a_finished_rows_line_reads_as_a_person_would_write_it() -> None:
    from tileops.pipeline.progress import row_line

    assert row_line(_ok(133.9e-6, [131.1e-6, 136.7e-6])) == "134 µs ±2.1 % (n=486, precision reached)"
    assert row_line(_ok(1e-3, [0.99e-3, 1.05e-3], n=12, stop=TIME_CAP)) == "1 ms +5.0 %/-1.0 % (n=12, time cap)"
    # issue 34: the level's interval and a rerun's, both sides where they differ
    both = _ok(1e-3, [0.95e-3, 1.06e-3], level_ci_s=(0.97e-3, 1.04e-3))
    assert row_line(both) == "1 ms +4.0 %/-3.0 % (a rerun: +6.0 %/-5.0 %) (n=486, precision reached)"
    # an interval further than 10x from the level: words with the reason, never "1e-09 s–1e+09 s"
    assert row_line(_ok(1e-4, [1e-6, 0.5])) == ("100 µs not known to within 10x (its blocks or visits disagree by "
                                               "that much: a busy host) (n=486, precision reached)")
    # issue 37: a level not known within 10x says its reason once, not again for where a rerun may read
    lost = row_line(_ok(1e-4, [1e-7, 5.0], level_ci_s=(1e-6, 0.5)))
    assert lost == ("100 µs not known to within 10x (its blocks or visits disagree by that much: a busy host) "
                    "(n=486, precision reached)")
    assert row_line(_ok(1e-4, [1e-7, 5.0], level_ci_s=(0.95e-4, 1.05e-4))).startswith(
        "100 µs ±5.0 % (a rerun: not known to within 10x (its blocks or visits disagree by that much: a busy host))")
    assert row_line(_ok(1e-4, None)) == ("100 µs (one block, its time cap reached: this visit alone has no interval; "
                                         "the row's is set from both visits at the end) (n=486, precision reached)")
    busy = RowConditions(window_s=0.3, contended=True, contention=["steal 5.0% of CPU time (limit 3%)"],
                         cpu=CpuConditions(cores=2, steal=0.05))
    assert row_line(_ok(1e-4, [0.9e-4, 1.1e-4], conditions=busy)).endswith(
        "(n=486, precision reached); steal 5.0% of CPU time (limit 3%)")


def test_every_finished_row_stays_visible_above_the_live_bar() -> None:
    """On a terminal the bar redraws in place; each finished row is printed above it and stays."""
    from tileops.bench.select import Planned
    from tileops.ops.catalog import load_entries
    from tileops.pipeline.progress import RowProgress
    from tileops.report.printer import ConsolePrinter

    row = load_entries()["relu"].workloads[0]
    buf = io.StringIO()
    term = Console(file=buf, width=200, force_terminal=True)
    rows = [Planned("relu", row, "float32", "torch"), Planned("relu", row, "bfloat16", "torch")]
    with ConsolePrinter(Console(file=io.StringIO()), term).rows(2) as events:
        assert events.live  # type: ignore[attr-defined]  # the console's own bar
        progress = RowProgress(events)
        for i, p in enumerate(rows, 1):
            progress.row_started(i, 2, p)
            progress.row_finished(i, 2, p, _ok(133.9e-6 * i, [131.1e-6 * i, 136.7e-6 * i]))
    text = buf.getvalue()
    for p, shown in zip(rows, ("134 µs", "268 µs")):
        assert f"relu {row.label} {p.case_name}: {shown} ±2.1 % (n=486, precision reached)" in text


# -- the look at the host before the rows ----------------------------------------------------------------------


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeProc:
    """The sweep's look before the rows reads this /proc tree (2 CPUs; 1 % steal over the window)."""
    proc = FakeProc(tmp_path / "proc")
    monkeypatch.setattr(sweep, "check_quiet", functools.partial(
        check_quiet, proc=proc.root, sleep=lambda s: proc.advance(total=100, steal=1)))
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(tmp_path / "store"))
    return proc


def test_require_quiet_on_a_busy_host_refuses_before_anything_is_written(
        host: FakeProc, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    host.load = 5.0
    host.write()
    out = tmp_path / "run"
    assert main(["bench", *ONE_ROW, "--require-quiet", "--out", str(out)]) == exitcodes.BUSY == 5
    err = capsys.readouterr().err
    assert "--require-quiet: the host is not quiet: the host is busy: 1-minute load 5.00 on 2 CPUs" in err
    assert "Fix: wait for the other work to finish" in err
    assert not out.exists()  # nothing measured, nothing written


@pytest.mark.slow
def test_a_busy_host_warns_records_the_look_in_run_json_and_measures(
        host: FakeProc, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    host.load = 5.0
    host.write()
    out = tmp_path / "run"
    assert main(["bench", *ONE_ROW, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: the host is busy: 1-minute load 5.00 on 2 CPUs" in err and "--require-quiet refuses" in err
    quiet = read_run_info(out).quiet  # type: ignore[union-attr]
    assert quiet["quiet"] is False and quiet["load1"] == 5.0 and quiet["cores"] == 2
    assert quiet["steal"] == pytest.approx(0.01) and "1-minute load 5.00" in quiet["warnings"][0]
    (rec,) = iter_records(out)
    assert rec.status == "ok" and rec.timing.median_ci_s is not None and rec.conditions is not None  # type: ignore[union-attr]
    raw = json.loads((out / "records.jsonl").read_text())
    assert len(raw["timing"]["median_ci_s"]) == 2 and "window_s" in raw["conditions"]


@pytest.mark.slow
def test_a_quiet_host_passes_without_a_word(host: FakeProc, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["bench", *ONE_ROW, "--require-quiet", "--out", str(out)]) == 0
    assert "warning: the host" not in capsys.readouterr().err
    info = read_run_info(out)
    assert info is not None and info.quiet["quiet"] is True and info.options.require_quiet is True
    assert info.stopping_rule == dataclasses.asdict(QUICK_BLOCKS)  # what the rows were timed by, every knob
