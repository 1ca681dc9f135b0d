"""A calibration looks at its host (issue 37, item 4): measured contended, or with a ceiling below the stored
calibration's beyond noise, it is refused (nothing stored, exit 5 or 8) or, with ``--force``, stored marked, and
every row priced on a marked calibration says so.

The contention is real: a ``while True: pass`` process pinned to the CPU the calibration is pinned to, for the
duration of a quick calibration. The drop is a stored calibration planted above what this host reaches.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tileops import exitcodes
from tileops.bench.quiet import check_quiet
from tileops.calibrate.host import MIN_TICKS, HostWatch
from tileops.calibrate.timing import spread
from tileops.device import DeviceInfo, describe_device
from tileops.ledger import (STREAM_WORDS, CalibrationMark, DeviceCalibration, Drop, HostCheck, Judgement,
                            MixMeasurement, RoofMeasurement, judge_calibration, load_device_history,
                            read_device_result, write_device_result)
from tileops.ledger.floors import load_floors
from tileops.ledger.intake import judge_intake
from tileops.ledger.judge import DROP_FLOOR
from tileops.pipeline.calibrate import CalibrateResult
from tileops.pipeline.intake import IntakeOutcome, say_not_judged
from tileops.records import DeviceIdentity, Machine
from tileops.report.printer import LogPrinter
from cli_support import tileops_argv
from export_support import env as record_env
from export_support import record, write_run

HOST = "calhost-test"
KEY = f"cpu-{HOST}"
T0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


def result(*, day: int = 1, scale: float = 1.0, quick: bool = True, run_id: str | None = None,
           spread_: float | None = None, name: str | None = None, host: HostCheck | None = None,
           marked: CalibrationMark | None = None) -> DeviceCalibration:
    """A CPU calibration of host ``HOST`` (as `tileops calibrate` writes one), every ceiling times ``scale``."""
    when = T0 + dt.timedelta(days=day)
    # formula-guard: allow a planted calibration: STREAM's byte count for a 1 MiB array, no op priced
    mixes = {m: MixMeasurement(bytes_per_s=bw * scale, bytes=STREAM_WORDS[m] << 20, array_bytes=1 << 20, best_s=1e-3,
                               reps=3, kernel=m, spread=spread_)
             for m, bw in {"copy": 2e10, "triad": 2.2e10, "read": 1.8e10, "write": 1.6e10}.items()}
    roofs = {k: RoofMeasurement(flops_per_s=f * scale, flops=1e9, best_s=1e-2, reps=3, method=k, spread=spread_)
             for k, f in {"cpu.fp32": 5e10, "cpu.fp32_matmul": 6e10}.items()}
    machine = Machine(device=DeviceIdentity(kind="cpu", name=name or "Test CPU 9000", hostname=HOST),
                      torch_version="2.13.0", tileops_version="0.1.0")
    return DeviceCalibration(run_id=run_id or f"cal-{day:02d}", started_at=when - dt.timedelta(seconds=20),
                             finished_at=when, quick=quick, machine=machine, mixes=mixes, roofs=roofs,
                             latency_floor_s=2e-6, latency_method="trivial op", host=host, marked=marked)


# --------------------------------------------------------------------------- the judgement (tileops.ledger.judge)


def test_a_drop_within_the_floor_is_kept_and_one_beyond_it_names_the_ceiling(tmp_path: Path) -> None:
    write_device_result(result(day=1), tmp_path)
    assert judge_calibration(result(day=2, scale=0.90), tmp_path).ok  # 10 % below: within the CPU's 15 %
    low = result(day=2)
    low.mixes["copy"] = low.mixes["copy"].model_copy(update={"bytes_per_s": 1.4e10})  # 30 % below 20 GB/s
    j = judge_calibration(low, tmp_path)
    assert not j.ok and not j.contended and [d.ceiling for d in j.drops] == ["memory.copy"]
    (reason,) = j.reasons()
    assert "memory.copy measured 14 GB/s, 30% below the stored 20 GB/s (calibration cal-01" in reason
    assert f"beyond its noise of {DROP_FLOOR['cpu']:.0%} (the cpu floor)" in reason
    assert judge_calibration(result(day=2, scale=3.0), tmp_path).ok  # a rise is never refused


def test_a_noisy_measurement_is_given_its_own_noise() -> None:
    """Each calibration's own spread (median repetition over best) widens what a drop must exceed."""
    stored = [result(day=1, spread_=0.2)]
    j = judge_calibration(result(day=2, scale=0.75, spread_=0.2), stored=stored)  # 25 % below, spreads 20 % each
    assert j.ok
    j = judge_calibration(result(day=2, scale=0.6, spread_=0.2), stored=stored)
    assert len(j.drops) == 6 and all(d.noise == "the two calibrations' own spreads" for d in j.drops)
    assert j.drops[0].tolerance == pytest.approx(1 - 1 / 1.2 ** 2)
    assert spread([1.0, 1.2, 1.1]) == pytest.approx(0.1) and spread([2.0]) == 0.0


def test_a_device_whose_history_wanders_is_judged_against_its_own_history() -> None:
    wandering = [result(day=d, scale=s) for d, s in ((1, 1.0), (2, 0.7), (3, 1.3), (4, 1.0))]
    j = judge_calibration(result(day=5, scale=0.75), stored=wandering[::-1])  # 25 % below the newest
    assert j.ok
    steady = [result(day=d) for d in (1, 2, 3, 4)]
    j = judge_calibration(result(day=5, scale=0.75), stored=steady[::-1])
    assert j.drops and j.drops[0].noise == "the cpu floor"


def test_only_a_clean_stored_calibration_of_the_same_mode_is_the_reference() -> None:
    forced = CalibrationMark(reasons=["measured contended: x"], by="tileops calibrate --force")
    stored = [result(day=3, scale=0.5, marked=forced), result(day=2, scale=0.5, quick=False), result(day=1)]
    j = judge_calibration(result(day=4, scale=0.5), stored=stored)
    assert j.reference == "cal-01" and len(j.drops) == 6  # not the marked one, not the full one
    assert judge_calibration(result(day=4, scale=0.5, quick=False), stored=stored).reference == "cal-02"
    assert judge_calibration(result(day=4, scale=0.5), stored=[]).ok  # a first calibration has nothing to fall below


def test_contention_is_a_reason_of_its_own(tmp_path: Path) -> None:
    busy = HostCheck(contended=True, reasons=["over the whole calibration: other processes used 49% of the CPUs"])
    j = judge_calibration(result(host=busy), tmp_path)
    assert j.contended and j.reasons() == ["measured contended: over the whole calibration: other processes used "
                                           "49% of the CPUs"]
    assert judge_calibration(result(host=HostCheck(contended=False)), tmp_path).ok


def test_a_result_written_before_calibrations_looked_still_reads(tmp_path: Path) -> None:
    path = write_device_result(result(), tmp_path)
    doc = yaml.safe_load(path.read_text())
    for key in ("host", "marked"):
        doc.pop(key)
    for part in ("mixes", "roofs"):
        for m in doc[part].values():
            m.pop("spread")
    path.write_text(yaml.safe_dump(doc))
    old = read_device_result(path)
    assert old.host is None and old.marked is None and old.mixes["copy"].spread is None
    assert judge_calibration(result(day=2, scale=0.5), tmp_path).drops  # and is still compared with


def test_the_refusal_codes_and_their_place_among_the_others() -> None:
    busy = Judgement(contended=["x"])
    dropped = Judgement(drops=[Drop("memory.copy", 1.0, 2.0, 0.15, "the cpu floor")], reference="cal-01")
    assert CalibrateResult(refused={KEY: busy}).exit_code == exitcodes.BUSY == 5
    assert CalibrateResult(refused={KEY: dropped}).exit_code == exitcodes.BELOW_STORED == 8
    assert CalibrateResult(refused={KEY: dropped, "cpu-b": busy}).exit_code == 5
    assert CalibrateResult(refused={KEY: dropped}, failed=["cuda:1 (exit code 1)"]).exit_code == 1
    assert CalibrateResult(refused={KEY: busy}, intake=IntakeOutcome()).exit_code == 5  # before "no floor" (7)


# --------------------------------------------------------------------------- the looks (tileops.calibrate.host)


class Proc:
    """A /proc with per-CPU lines a test advances: ``cpus`` CPUs, this process's ticks and its children's."""

    def __init__(self, root: Path, cpus: int = 4) -> None:
        self.root, self.ticks = root, {c: [0, 0, 0] for c in range(cpus)}  # cpu -> [busy, idle, steal]
        self.own = self.children = 0
        (root / "self").mkdir(parents=True)
        self.write()

    def write(self) -> None:
        lines = [f"cpu{c} {b} 0 0 {i} 0 0 0 {s} 0 0" for c, (b, i, s) in self.ticks.items()]
        (self.root / "stat").write_text("cpu  0 0 0 0 0 0 0 0\n" + "\n".join(lines) + "\n")
        (self.root / "loadavg").write_text("0.10 0.1 0.1 1/100 1\n")
        (self.root / "self" / "stat").write_text(
            f"7 (py) R 1 7 7 0 -1 0 0 0 0 0 {self.own} 0 {self.children} 0 20 0 1 0\n")

    def advance(self, cpu: int, *, own: int = 0, children: int = 0, others: int = 0, idle: int = 0,
                steal: int = 0) -> None:
        self.ticks[cpu][0] += own + children + others
        self.ticks[cpu][1] += idle
        self.ticks[cpu][2] += steal
        self.own += own
        self.children += children
        self.write()


def _watch(proc: Proc, cpus: list[int]) -> HostWatch:
    quiet = functools.partial(check_quiet, sleep=lambda s: None)
    return HostWatch(DeviceInfo(kind="cpu", name="Test CPU 9000"), proc=proc.root, cpus=cpus, quiet=quiet)


def test_each_step_is_judged_on_this_calibrations_own_cpus(tmp_path: Path) -> None:
    proc = Proc(tmp_path)
    watch = _watch(proc, [0])
    assert watch.look_before() == []
    watch.step("bandwidth: copy")
    proc.advance(0, own=80, children=20)  # this process and the compiler it ran: its own work
    proc.advance(1, others=100)  # another CPU, busy: not this calibration's
    watch.step("compute: cpu.fp32")
    proc.advance(0, own=50, others=50)  # a neighbour on its CPU: half its time
    watch.step("latency floor")
    proc.advance(0, own=5)  # too short to tell
    host = watch.finish(None)
    assert host.steps == {"bandwidth: copy": 0.0, "compute: cpu.fp32": 0.5, "latency floor": None}
    assert host.contended and host.cpus == [0]
    assert host.reasons == ["other processes used up to 50% of this calibration's 1 CPU(s) (limit 10%) during 1 of "
                            "its 2 steps (compute: cpu.fp32)"]
    assert host.others_busy == pytest.approx(50 / (100 + 100 + 5))
    assert 2 * MIN_TICKS > 5


def test_a_quiet_host_gives_no_reason_and_steal_is_one(tmp_path: Path) -> None:
    proc = Proc(tmp_path)
    watch = _watch(proc, [0, 1])
    watch.look_before()
    watch.step("bandwidth: copy")
    for c in (0, 1):
        proc.advance(c, own=95, idle=5)
    host = watch.finish(None)
    assert not host.contended and host.steps == {"bandwidth: copy": 0.0}
    watch = _watch(proc, [0, 1])
    watch.look_before()
    watch.step("compute: cpu.fp32")
    for c in (0, 1):
        proc.advance(c, own=90, steal=10)
    (reason,) = watch.finish(None).reasons
    assert reason.startswith("the hypervisor took up to 10.0% of its CPUs' time (steal, limit 3%)")


# --------------------------------------------------------------------------- for real: a busy core, a planted drop


def _digest(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file()}


def _pin(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})


@contextlib.contextmanager
def busy_core(cpu: int) -> Iterator[None]:
    """A ``while True: pass`` process on ``cpu`` for as long as the block runs."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=functools.partial(_pin, cpu))
    try:
        time.sleep(0.3)  # started and spinning
        yield
    finally:
        proc.kill()
        proc.wait()


def _calibrate(store: Path, *extra: str, cpu: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TILEOPS_PROFILE_DIR": str(store), "TILEOPS_HOSTNAME": HOST, "COLUMNS": "200"}
    return subprocess.run(tileops_argv("calibrate", "--device", "cpu", "--quick", *extra), capture_output=True,
                          text=True, env=env, timeout=300,
                          preexec_fn=functools.partial(_pin, cpu) if cpu is not None else None)


def _planted_store(store: Path, scale: float = 1.0) -> DeviceCalibration:
    """A clean stored calibration of this CPU (its real name, host ``HOST``)."""
    return read_device_result(write_device_result(result(scale=scale, name=describe_device("cpu").name), store))


@pytest.mark.slow
def test_a_calibration_beside_a_busy_core_is_refused_and_nothing_stored_is_lost(tmp_path: Path) -> None:
    store = tmp_path / "store"
    _planted_store(store)
    before = _digest(store)
    cpu = min(os.sched_getaffinity(0))
    with busy_core(cpu):
        proc = _calibrate(store, "--check", "--format", "json", cpu=cpu)
    assert proc.returncode == exitcodes.BUSY, proc.stderr[-3000:]
    assert _digest(store) == before  # byte for byte
    doc = json.loads(proc.stdout)
    (refused,) = doc["refused"]
    assert refused["device"] == KEY and refused["exit_code"] == 5
    assert refused["reasons"][0].startswith("measured contended: ")
    (measured,) = doc["devices"]
    host = measured["host"]
    assert host["contended"] and host["cpus"] == [cpu] and host["others_busy"] > 0.10, host
    assert f"the calibration of {KEY} is refused, nothing stored (its stored calibration stands; exit 5)" in proc.stderr
    assert "--force" in proc.stderr
    # --check: a figure a neighbour lowered is neither a reject nor a pass; the node is not judged
    assert f"intake NOT JUDGED: {KEY}: its calibration was refused and not stored" in proc.stderr
    assert "intake REJECT" not in proc.stderr + proc.stdout and "intake PASS" not in proc.stderr + proc.stdout


@pytest.mark.slow
def test_forced_beside_a_busy_core_it_is_stored_marked_and_a_priced_row_says_so(tmp_path: Path) -> None:
    store = tmp_path / "store"
    planted = _planted_store(store)
    cpu = min(os.sched_getaffinity(0))
    with busy_core(cpu):
        proc = _calibrate(store, "--force", cpu=cpu)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{KEY}: stored marked (--force)" in proc.stderr and "MARKED: priced on calibration" in proc.stdout
    assert "host: contended (" in proc.stdout  # the summary says how the host was
    current = read_device_result(store / "devices" / f"{KEY}.yaml")
    assert current.marked is not None and current.marked.by == "tileops calibrate --force"
    assert current.marked.reasons[0].startswith("measured contended: ")
    assert [r.run_id for r in load_device_history(KEY, store)] == [current.run_id, planted.run_id]  # nothing lost
    (profile_file,) = store.glob("*.yaml")
    assert current.run_id in (yaml.safe_load(profile_file.read_text())["calibration_marked"] or "")

    # a row of this device priced on it: its notes, the summary and roofline.json name the calibration and why
    e = record_env(hostname=HOST, device=describe_device("cpu").name)
    run = write_run(tmp_path / "run", [record(e=e), record(label="large", e=e)])
    env = {**os.environ, "TILEOPS_PROFILE_DIR": str(store), "TILEOPS_HOSTNAME": HOST, "COLUMNS": "200"}
    shown = subprocess.run(tileops_argv("roofline", str(run), "--format", "json"), capture_output=True, text=True,
                           env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    note = f"priced on calibration {current.run_id} of {KEY}, stored marked (tileops calibrate --force): measured " \
           "contended: "
    assert len(doc["rows"]) == 2 and all(any(n.startswith(note) for n in row["notes"]) for row in doc["rows"])
    assert any(line.startswith(f"note: {note}") for line in doc["summary"])
    table = subprocess.run(tileops_argv("roofline", str(run)), capture_output=True, text=True, env=env, timeout=120)
    assert f"note: {note}" in table.stdout


@pytest.mark.slow
def test_an_envelope_below_the_stored_one_beyond_noise_is_refused(tmp_path: Path) -> None:
    """The stored calibration is planted a hundred times above what this host reaches: every ceiling falls."""
    store = tmp_path / "store"
    _planted_store(store, scale=100.0)
    before = _digest(store)
    proc = _calibrate(store, "--format", "json")
    doc = json.loads(proc.stdout)
    contended = doc["devices"][0]["host"]["contended"]  # on a busy host exit 5 says so first; the drop stands
    assert proc.returncode == (exitcodes.BUSY if contended else exitcodes.BELOW_STORED), proc.stderr[-3000:]
    assert _digest(store) == before
    (refused,) = doc["refused"]
    drops = [r for r in refused["reasons"] if not r.startswith("measured contended")]
    assert any(r.startswith("memory.copy measured ") and "below the stored 2 TB/s (calibration cal-01" in r
               for r in drops), drops
    assert any(r.startswith("cpu.fp32 measured ") for r in drops)
    assert "is refused, nothing stored" in proc.stderr


# --------------------------------------------------------------------------- node intake and marked calibrations


def test_a_marked_calibration_never_lowers_the_history_floor(tmp_path: Path) -> None:
    forced = CalibrationMark(reasons=["measured contended: x"], by="tileops calibrate --force")
    for day in (1, 2, 3):
        write_device_result(result(day=day), tmp_path)
    write_device_result(result(day=4, scale=0.3, marked=forced), tmp_path)
    now = result(day=5, scale=0.5)
    verdict = judge_intake(now, load_floors(tmp_path), None, load_device_history(KEY, tmp_path))
    floor = next(c for c in verdict.checks if c.floor.ceiling == "memory.copy").floor
    assert floor.rate == pytest.approx(2e10 * 0.85) and "3 earlier quick" in floor.source  # the marked one left out
    judged = judge_intake(result(day=5, marked=forced), load_floors(tmp_path), None,
                          load_device_history(KEY, tmp_path))
    assert judged.state == "pass" and judged.marked == "measured contended: x (tileops calibrate --force)"


def test_a_refused_device_is_said_not_judged() -> None:
    out = io.StringIO()
    say_not_judged(KEY, ["measured contended: load 3.1 on 2 CPUs"], 5, LogPrinter(out, out), True)
    assert out.getvalue().startswith(f"intake NOT JUDGED: {KEY}: its calibration was refused and not stored "
                                     "(measured contended: load 3.1 on 2 CPUs); nothing was judged (exit 5)")


@pytest.mark.slow
def test_the_bench_stores_its_own_dropped_calibration_marked_and_its_rows_say_so(tmp_path: Path) -> None:
    """The bench cannot refuse its run: a calibration it measures below the stored one is stored marked."""
    store, out = tmp_path / "store", tmp_path / "run"
    stale = result(day=1, scale=100.0, name=describe_device("cpu").name)  # finished long ago: over --max-age
    write_device_result(stale, store)
    env = {**os.environ, "TILEOPS_PROFILE_DIR": str(store), "TILEOPS_HOSTNAME": HOST, "COLUMNS": "200"}
    proc = subprocess.run(tileops_argv("bench", "--quick", "--op", "relu", "--device", "cpu", "--calibrate",
                                       "quick", "--no-plot", "--out", str(out)),
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    current = read_device_result(store / "devices" / f"{KEY}.yaml")
    assert current.run_id != stale.run_id and current.marked is not None
    assert current.marked.by.startswith("the bench's calibration step") and current.marked.compared_with == "cal-01"
    assert any(r.startswith("memory.copy measured ") for r in current.marked.reasons)
    assert f"calibration of {KEY} stored marked" in proc.stderr
    doc = json.loads((out / "roofline.json").read_text())
    note = f"priced on calibration {current.run_id} of {KEY}, stored marked (the bench's calibration step"
    assert doc["rows"] and all(any(n.startswith(note) for n in row["notes"]) for row in doc["rows"])


def test_a_device_whose_current_result_was_removed_is_calibrated_afresh(tmp_path: Path) -> None:
    """docs/deploy.md: after a roll-out, removing devices/<key>.yaml recalibrates; its history is not held against it."""
    path = write_device_result(result(day=1), tmp_path)
    assert judge_calibration(result(day=2, scale=0.5), tmp_path).drops
    path.unlink()
    assert judge_calibration(result(day=2, scale=0.5), tmp_path).ok
