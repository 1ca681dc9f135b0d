"""`tileops calibrate --max-age`: a device calibrated recently enough is not measured again (issue 14).

What an init container runs before every benchmark pod (helm/tileops, docs/deploy.md): each device is
measured only when its stored result (``<store>/devices/<key>.yaml``; on a CPU the key is
``cpu-<hostname>``) is missing, rough (quick) or older than the given age.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tileops.ledger import (STREAM_WORDS, DeviceCalibration, MixMeasurement, RoofMeasurement,
                            read_device_result, stored_freshness, write_device_result)
from tileops.durations import format_age, format_budget, parse_duration
from tileops.device import describe_device
from tileops.profiles import load_profile
from cli_support import tileops

NOW = dt.datetime.now(dt.timezone.utc)
CPU_KEY = f"cpu-{socket.gethostname()}"


def calibrate(store: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TILEOPS_PROFILE_DIR": str(store), "COLUMNS": "160"}
    return tileops("calibrate", *extra, environ=env, timeout=300)


def cpu_result(finished: dt.datetime, *, quick: bool = True, run_id: str = "cal-stored") -> DeviceCalibration:
    """This host's CPU as a stored calibration result (the shape `tileops calibrate` writes)."""
    mixes = {m: MixMeasurement(bytes_per_s=bw, bytes=STREAM_WORDS[m] * 1 << 20, array_bytes=1 << 20, best_s=1e-3,
                               reps=3, kernel=m)
             for m, bw in {"copy": 9e9, "triad": 1e10, "read": 1.1e10, "write": 8e9}.items()}
    roofs = {"cpu.fp32": RoofMeasurement(flops_per_s=5e10, flops=1e9, best_s=2e-2, reps=3, method="fma"),
             "cpu.fp32_matmul": RoofMeasurement(flops_per_s=6e10, flops=1e9, best_s=2e-2, reps=3, method="sgemm")}
    return DeviceCalibration(run_id=run_id, started_at=finished - dt.timedelta(seconds=20), finished_at=finished,
                             tool_version="tileops 0.1.0", torch_version="2.13.0", quick=quick, kind="cpu",
                             name=describe_device("cpu").name, hostname=socket.gethostname(), mixes=mixes,
                             roofs=roofs, latency_floor_s=2e-6, latency_method="trivial op")


# --------------------------------------------------------------------------- the rule itself


@pytest.mark.parametrize("text, seconds", [("7d", 7 * 86400), ("12h", 43200), ("90m", 5400), ("30s", 30),
                                           ("2w", 14 * 86400), ("1d12h", 129600), ("1.5h", 5400), (" 7D ", 604800)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["7", "d", "7x", "0d", "-1d", "7 days", "", "1d-2h"])
def test_bad_durations_name_the_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"12h, 7d|positive"):
        parse_duration(text)


def test_format_age() -> None:
    assert format_age(dt.timedelta(days=3, hours=4, minutes=5)) == "3d 4h"
    assert format_age(dt.timedelta(minutes=2, seconds=3)) == "2m 3s"
    assert format_age(dt.timedelta(0)) == "0s"


def test_format_budget_never_reads_0_s_for_a_budget_that_is_not_nothing() -> None:
    assert [format_budget(s) for s in (0.0, 0.152, 0.6, 45, 720, 12000)] == [
        "0 s", "under 1 s", "under 1 s", "45 s", "12 min", "3 h 20 min"]


def test_freshness(tmp_path: Path) -> None:
    week = dt.timedelta(days=7)
    assert not stored_freshness(CPU_KEY, week, store=tmp_path).fresh  # nothing stored
    write_device_result(cpu_result(NOW - dt.timedelta(days=2), quick=False), tmp_path)
    got = stored_freshness(CPU_KEY, week, store=tmp_path)
    assert got.fresh and "2d" in got.reason and got.result.run_id == "cal-stored"
    assert stored_freshness(CPU_KEY, week, store=tmp_path, quick=True).fresh  # a full one serves a quick ask
    old = stored_freshness(CPU_KEY, dt.timedelta(days=1), store=tmp_path)
    assert not old.fresh and "over the maximum age 1d" in old.reason

    write_device_result(cpu_result(NOW - dt.timedelta(hours=1), quick=True), tmp_path)
    rough = stored_freshness(CPU_KEY, week, store=tmp_path)  # a quick result never stands in for a full one
    assert not rough.fresh and "quick" in rough.reason
    assert stored_freshness(CPU_KEY, week, store=tmp_path, quick=True).fresh

    write_device_result(cpu_result(NOW + dt.timedelta(days=1)), tmp_path)
    assert not stored_freshness(CPU_KEY, week, store=tmp_path, quick=True).fresh  # from the future: re-measure

    (tmp_path / "devices" / f"{CPU_KEY}.yaml").write_text("schema_version: [\n")
    broken = stored_freshness(CPU_KEY, week, store=tmp_path, quick=True)
    assert not broken.fresh and "unreadable" in broken.reason


# --------------------------------------------------------------------------- the command, on this host's CPU


@pytest.mark.slow
def test_fresh_cpu_is_skipped_and_its_profile_rebuilt_when_missing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    stored = write_device_result(cpu_result(NOW - dt.timedelta(hours=3)), store)
    before = stored.read_bytes()

    # The store has the device's result but no profile for its model: rebuilt from the result, nothing measured.
    first = calibrate(store, "--device", "cpu", "--quick", "--max-age", "7d")
    assert first.returncode == 0, first.stderr
    assert f"{CPU_KEY}: calibrated 3h" in first.stderr and "skipped, nothing measured" in first.stderr
    assert "rebuilt from the stored result" in first.stderr
    (profile_file,) = store.glob("*.yaml")
    profile = load_profile(profile_file)
    assert profile.matches(describe_device("cpu").name)
    assert profile.compute["cpu.fp32"].calibration_source.run_id == "cal-stored"
    assert stored.read_bytes() == before

    # Everything there: nothing measured, nothing written, said so, exit 0.
    mtime = profile_file.stat().st_mtime_ns
    again = calibrate(store, "--device", "cpu", "--quick", "--max-age", "12h", "--format", "json")
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["written"] == [] and summary["skipped"][0]["device"] == CPU_KEY
    assert "under the maximum age 12h" in summary["skipped"][0]["reason"]
    assert profile_file.stat().st_mtime_ns == mtime and stored.read_bytes() == before


@pytest.mark.slow
def test_all_devices_skips_a_fresh_cpu(tmp_path: Path) -> None:
    """--all-devices hands --max-age to each device's own process; a fresh device comes back unmeasured."""
    store = tmp_path / "store"
    stored = write_device_result(cpu_result(NOW - dt.timedelta(minutes=5)), store)
    assert calibrate(store, "--device", "cpu", "--quick", "--max-age", "1d").returncode == 0  # the profile
    files = {p: p.read_bytes() for p in store.rglob("*.yaml")}
    proc = calibrate(store, "--all-devices", "--quick", "--max-age", "1d", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert re.search(rf"{CPU_KEY}: calibrated \d+m .*under the maximum age 1d: skipped", proc.stderr), proc.stderr
    assert "profile kept" in proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["written"] == [] and [s["device"] for s in summary["skipped"]] == [CPU_KEY]
    assert {p: p.read_bytes() for p in store.rglob("*.yaml")} == files
    assert read_device_result(stored).run_id == "cal-stored"


def child(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TILEOPS_PROFILE_DIR": str(store)}
    return subprocess.run([sys.executable, "-m", "tileops.calibrate.child", *args], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.mark.slow
def test_the_per_device_child_hands_back_a_fresh_result_and_refuses_what_it_cannot_measure(tmp_path: Path) -> None:
    """``python -m tileops.calibrate.child``, what --all-devices starts per device (not the command line again):
    a fresh stored result comes back as it is; a device that is not there and a bad age are errors with an exit
    code the parent reads, and nothing is written."""
    store = tmp_path / "store"
    write_device_result(cpu_result(NOW - dt.timedelta(minutes=5)), store)
    out = tmp_path / "cpu.yaml"
    proc = child(store, "--device", "cpu", "--quick", "--max-age", "1d", "--results-out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert f"{CPU_KEY}: calibrated" in proc.stderr and "skipped, nothing measured" in proc.stderr
    assert read_device_result(out).run_id == "cal-stored"

    gone = tmp_path / "gpu.yaml"
    proc = child(store, "--device", "cuda:7", "--results-out", str(gone))
    assert proc.returncode == 1 and "cuda:7 is not visible" in proc.stderr and "Traceback" not in proc.stderr
    assert not gone.exists()
    proc = child(store, "--device", "cpu", "--max-age", "soon", "--results-out", str(gone))
    assert proc.returncode == 2 and "--max-age" in proc.stderr and not gone.exists()


@pytest.mark.slow
def test_a_stale_cpu_is_measured_again_then_skipped(tmp_path: Path) -> None:
    """Older than --max-age: a real (quick) calibration replaces the result; the next call skips it."""
    store = tmp_path / "store"
    stored = write_device_result(cpu_result(NOW - dt.timedelta(days=8)), store)
    # --force: the planted figures are not this host's, and the host may be busy: stored marked, not refused
    proc = calibrate(store, "--device", "cpu", "--quick", "--max-age", "7d", "--force")
    assert proc.returncode == 0, proc.stderr
    assert "calibrated 8d" in proc.stderr and "over the maximum age 7d: calibrating" in proc.stderr
    new = read_device_result(stored)
    assert new.run_id != "cal-stored" and NOW - dt.timedelta(minutes=1) < new.finished_at
    assert len(list(store.glob("*.yaml"))) == 1

    again = calibrate(store, "--device", "cpu", "--quick", "--max-age", "7d")
    assert again.returncode == 0 and "skipped, nothing measured" in again.stderr
    assert read_device_result(stored).run_id == new.run_id


@pytest.mark.parametrize("extra, message", [
    (("--max-age", "a week"), "is not a duration"),
    (("--max-age", "0h"), "positive"),
    (("--max-age", "7d", "--write-shipped"), "--write-shipped"),
])
def test_bad_max_age_is_refused_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     extra: tuple[str, ...], message: str) -> None:
    from tileops.cli import main

    assert main(["calibrate", "--device", "cpu", "--profile-dir", str(tmp_path / "store"), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "store").exists()


def test_the_stored_result_yaml_is_what_calibrate_writes(tmp_path: Path) -> None:
    """The hand-built result above is the real file format (so the tests feed the command real input)."""
    path = write_device_result(cpu_result(NOW), tmp_path)
    assert path == tmp_path / "devices" / f"{CPU_KEY}.yaml"
    assert yaml.safe_load(path.read_text())["machine"]["device"]["kind"] == "cpu"
    assert read_device_result(path) == cpu_result(NOW)
