"""A CPU row timed in scheduler slices (``tileops.bench.slices``, issue 37): planted sample sets the statistic
must decide, the kernel's slice as it is read, and what the record, its interval and its words become.

A contended 2-thread op waits for a time slice in some of its samples, so they fall a few milliseconds above the
op's own time: a visit whose blocks all hold the same mix knows the mix's median precisely, and the bench showed
``7.94 ms ± 1.4 %`` in one run, ``70.2 µs ± 10.6 %`` in the next. Such a row is marked and its interval spans
both clusters, said in words.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

import pytest
from roofline_fixtures import make_record

from tileops.bench import slices
from tileops.bench.execute import visit_timing
from tileops.bench.hostnoise import prior_model
from tileops.bench.interval import visit_of
from tileops.bench.revisit import finish
from tileops.records import Record, SchedulerSlices, parse_record, to_data, to_json
from tileops.roofline import unstable_reasons

SLICE = 1.5e-3


def _blocks(samples: list[float], per: int = 4) -> list[list[float]]:
    return [samples[i:i + per] for i in range(0, len(samples), per)]


def bimodal(seed: int, n: int = 60, op_s: float = 70e-6, share: float = 0.3) -> list[list[float]]:
    """Samples of an op of ``op_s`` whose threads wait for one to three slices in ``share`` of its samples,
    scattered over the visit."""
    r = random.Random(seed)
    return _blocks([op_s * math.exp(r.gauss(0, 0.05)) + (SLICE * r.choice((1, 2, 3)) * r.uniform(0.8, 1.0)
                                                         if r.random() < share else 0.0) for _ in range(n)])


def unimodal(seed: int, n: int = 60, op_s: float = 10e-3, sigma: float = 0.3) -> list[list[float]]:
    """A noisy row, no slices: lognormal about ``op_s`` (its spread alone is many slices wide)."""
    r = random.Random(seed)
    return _blocks([op_s * math.exp(r.gauss(0, sigma)) for _ in range(n)])


def burst(seed: int, n: int = 60, op_s: float = 1e-3, at: int = 20, length: int = 10) -> list[list[float]]:
    """A quiet row but for one burst of ``length`` consecutive samples several slices slower (a neighbour's job
    starting and ending)."""
    r = random.Random(seed)
    return _blocks([op_s * math.exp(r.gauss(0, 0.03)) + (4 * SLICE if at <= i < at + length else 0.0)
                    for i in range(n)])


# -- the statistic, on planted sample sets -------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(10))
def test_samples_bimodal_at_a_slice_are_timed_in_slices(seed: int) -> None:
    found = slices.timed_in_slices(bimodal(seed), SLICE, "planted")
    assert found is not None
    assert 0.15 < found.slow / found.samples < 0.45 and found.samples == 60
    assert found.fast_s == pytest.approx(70e-6, rel=0.1)
    assert 0.75 * SLICE < found.slow_s - found.fast_s < 3.1 * SLICE  # about a slice or two above the op's time
    assert (found.slice_s, found.slice_source) == (SLICE, "planted")


def test_a_row_mostly_in_slices_still_shows_its_fast_cluster() -> None:
    """The run that read ``7.94 ms ± 1.4 %``: most samples waited, a few did not; its median is the scheduler's."""
    found = slices.timed_in_slices(bimodal(3, share=0.85), SLICE, "planted")
    assert found is not None and found.slow / found.samples > 0.7 and found.fast_s < 100e-6


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("sigma", [0.1, 0.3])
@pytest.mark.parametrize("op_s", [1e-4, 1e-3, 1e-2, 5e-2])
def test_unimodal_noisy_samples_are_not(seed: int, sigma: float, op_s: float) -> None:
    """However wide in absolute time (a 50 ms row's spread covers tens of slices), a unimodal row fills its
    range: no empty band a slice wide with the fast cluster tight below it."""
    assert slices.timed_in_slices(unimodal(seed, op_s=op_s, sigma=sigma), SLICE, "planted") is None


@pytest.mark.parametrize("seed", range(10))
def test_a_single_slow_burst_is_not(seed: int) -> None:
    """Ten samples in a row four slices slower: the host's contention (the row's conditions say it), not a slice
    taken again and again through the visit."""
    planted = burst(seed)
    assert slices.timed_in_slices(planted, SLICE, "planted") is None
    scattered = [x for b in planted for x in b]  # the same samples, the slow ones spread over the visit
    scattered[20:30], scattered[0:60:6] = scattered[0:60:6], scattered[20:30]
    assert slices.timed_in_slices(_blocks(scattered), SLICE, "planted") is not None


def test_too_few_samples_or_slow_ones_are_not_judged() -> None:
    few = bimodal(1, n=slices.MIN_SAMPLES - 1)
    assert slices.timed_in_slices(few, SLICE, "planted") is None
    tail = [70e-6 + (2 * SLICE if i in (4, 25, 50) else 0.0) for i in range(60)]  # 5 % slow, scattered
    assert slices.timed_in_slices(_blocks(tail), SLICE, "planted") is None  # the host's tail


def test_a_band_under_half_a_slice_is_not_a_slice() -> None:
    """Bimodal, but 0.4 slice apart: some other cause (a frequency step, two code paths), not the scheduler."""
    r = random.Random(5)
    planted = _blocks([1e-3 * math.exp(r.gauss(0, 0.002)) + (0.4 * SLICE if i % 3 == 0 else 0.0) for i in range(60)])
    assert slices.timed_in_slices(planted, SLICE, "planted") is None
    assert slices.timed_in_slices(planted, 0.4 * SLICE, "planted") is not None  # a shorter slice: it is


# -- the kernel's slice ---------------------------------------------------------------------------------------


def test_the_slice_is_read_from_the_kernel_where_it_says_it(tmp_path: Path) -> None:
    cfs = tmp_path / "proc/sys/kernel/sched_min_granularity_ns"
    cfs.parent.mkdir(parents=True)
    cfs.write_text("3000000\n")
    assert slices.kernel_slice(tmp_path) == (3e-3, str(cfs))
    eevdf = tmp_path / "sys/kernel/debug/sched/base_slice_ns"
    eevdf.parent.mkdir(parents=True)
    eevdf.write_text("garbage\n")  # unreadable: the next file
    assert slices.kernel_slice(tmp_path) == (3e-3, str(cfs))
    eevdf.write_text("2250000\n")  # the newest kernel's first
    assert slices.kernel_slice(tmp_path) == (2.25e-3, str(eevdf))


def test_without_a_slice_file_the_kernels_default_stands_in_saying_so(tmp_path: Path) -> None:
    import os

    cpus = os.cpu_count() or 1
    slice_s, source = slices.kernel_slice(tmp_path)
    assert slice_s == slices.default_slice(cpus) and f"default for {cpus} CPUs" in source
    # the kernel's logarithmic scaling: 0.75 ms x (1 + log2 of the CPUs, at most 8)
    assert [slices.default_slice(c) for c in (1, 2, 4, 8, 64)] == pytest.approx([0.75e-3, 1.5e-3, 2.25e-3, 3e-3,
                                                                                 3e-3])


# -- the record, its interval, its words ---------------------------------------------------------------------


def test_a_cpu_visits_timing_carries_its_slices_and_a_gpu_timers_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slices, "host_slice", lambda: (SLICE, "planted"))
    fields = {"warmup": 1, "total_s": 1.0, "stop_reason": "time cap"}
    cpu = visit_timing(bimodal(2), timer="cpu-wall", **fields)
    assert cpu.slices is not None and cpu.slices.samples == cpu.n == 60
    assert visit_timing(bimodal(2), timer="cupti", **fields).slices is None  # the device's busy time
    assert visit_timing(unimodal(2), timer="cpu-wall", **fields).slices is None


def _sliced_record(threads: int | None = 2):  # type: ignore[no-untyped-def]
    blocks = bimodal(4, share=0.6)
    found = slices.timed_in_slices(blocks, SLICE, "planted")
    assert found is not None
    rec = make_record(median_s=visit_of(blocks).centre_s)
    rec = dataclasses.replace(rec, timing=dataclasses.replace(rec.timing, slices=found),
                              env=dataclasses.replace(rec.env, threads=threads))
    return rec, blocks, found


def test_a_sliced_rows_interval_spans_both_clusters_and_is_said_in_words() -> None:
    rec, blocks, found = _sliced_record()
    done = finish(rec, [visit_of(blocks)], "memory", prior_model("cpu", None))
    t = done.timing
    assert t is not None and t.slices == found
    for ci in (t.level_ci_s, t.median_ci_s):
        assert ci is not None and ci[0] <= found.fast_s and ci[1] >= found.slow_s  # never a precise ±
    plain = finish(dataclasses.replace(rec, timing=dataclasses.replace(rec.timing, slices=None)),
                   [visit_of(blocks)], "memory", prior_model("cpu", None))
    # what it would have said: an interval about the mix that never reaches the op's own time
    assert plain.timing.level_ci_s[0] > 5 * found.fast_s  # type: ignore[index,union-attr]
    (reason,) = unstable_reasons(done)
    assert reason == (f"timed in scheduler slices ({found.slow} of 60 samples "
                      f"~{(found.slow_s - found.fast_s) * 1e3:.3g} ms slower: the OS time slice; try --threads 1 "
                      "or a quieter host)")
    single, *_ = _sliced_record(threads=1)
    assert unstable_reasons(single)[0].endswith("the OS time slice; try a quieter host)")


def test_a_sliced_rows_progress_line_says_so_instead_of_a_plus_minus() -> None:
    from tileops.pipeline.progress import row_line

    rec, blocks, found = _sliced_record()
    line = row_line(finish(rec, [visit_of(blocks)], "memory", prior_model("cpu", None)))
    assert "(no precise interval: timed in scheduler slices (" in line and "±" not in line and "%" not in line


def test_both_readers_read_the_slices_and_a_record_written_before_them() -> None:
    """The standard reader and msgspec's mirror (``tileops.records.fast``) read the new block alike, and a
    record written before it (no ``slices`` key) as not judged; the mirror declines neither line."""
    pytest.importorskip("msgspec")
    from tileops.records.fast import line_reader

    declined: list[bytes] = []
    mirror = line_reader(Record, declined.append)
    assert mirror is not None
    rec, _, found = _sliced_record()
    line = to_json(rec)
    assert parse_record(line) == rec == mirror(line.encode()) and rec.timing.slices == found  # type: ignore[union-attr]
    older = to_data(rec)
    del older["timing"]["slices"]
    back = parse_record(json.dumps(older))
    assert back.timing is not None and back.timing.slices is None
    assert mirror(json.dumps(older).encode()) == back and declined == []


@pytest.mark.parametrize(("change", "field"), [({"slow": 61}, "timing.slices.slow"),
                                               ({"slow_s": 1e-6}, "timing.slices.slow_s"),
                                               ({"slice_s": 0}, "timing.slices.slice_s")])
def test_a_slices_block_that_contradicts_itself_is_refused_naming_its_field(change: dict, field: str) -> None:
    from tileops.records import RecordFileError

    rec, _, found = _sliced_record()
    data = to_data(rec)
    data["timing"]["slices"].update(change)
    with pytest.raises((RecordFileError, ValueError), match=field.replace(".", r"\.")):
        parse_record(json.dumps(data))
    assert isinstance(found, SchedulerSlices)
