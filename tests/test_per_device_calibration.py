"""Calibration is a per-device input (§5.1): each device is priced on its own calibration, measured first
when the store has none (issue 14: the fleet path produces SOL out of the box)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tileops.ledger import (STREAM_WORDS, DeviceCalibration, MixMeasurement, RoofMeasurement,
                            device_profile_reader, read_device_result, write_device_result)
from tileops.profiles import ProfileChooser, ProfileError
from tileops.records import DeviceIdentity, Machine, iter_records, read_run_info
from cli_support import tileops

UUID_A = "GPU-11111111-2222-3333-4444-555555555555"
UUID_B = "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa"


def _h200(uuid: str, scale: float, *, name: str = "NVIDIA H200") -> DeviceCalibration:
    now = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    # formula-guard: allow a synthetic calibration run: STREAM's byte count for a 1 KiB array, no op priced
    mixes = {m: MixMeasurement(bytes_per_s=4.0e12 * scale, bytes=STREAM_WORDS[m] * 1024, array_bytes=1024,
                               best_s=1e-3, reps=3, kernel=m) for m in ("copy", "triad")}
    roofs = {"tensor_core.bf16": RoofMeasurement(flops_per_s=700e12 * scale, flops=1e12, best_s=1e-3, reps=3,
                                                 method="bf16 GEMM")}
    machine = Machine(device=DeviceIdentity(kind="cuda", name=name, uuid=uuid, index=0, hostname="node-a"),
                      driver="580.65", torch_version="2.11", tileops_version="0.1.0")
    return DeviceCalibration(run_id=f"cal-{uuid[-4:]}", started_at=now, finished_at=now, quick=True,
                             machine=machine, mixes=mixes, roofs=roofs,
                             clocks_before={"sm_mhz": 1980, "power_limit_w": 700.0})


def test_each_device_is_priced_on_its_own_calibration(tmp_path: Path) -> None:
    write_device_result(_h200(UUID_A, 1.0), tmp_path)
    write_device_result(_h200(UUID_B, 0.8), tmp_path)  # the same model, a weaker device
    chooser = ProfileChooser.resolve(store_path=tmp_path, per_device=device_profile_reader(tmp_path))
    a, b = chooser("NVIDIA H200", UUID_A), chooser("NVIDIA H200", UUID_B)
    model = chooser("NVIDIA H200")
    assert a is not None and b is not None and model is not None
    assert a.memory.effective == pytest.approx(4.0e12) and b.memory.effective == pytest.approx(3.2e12)
    assert a.memory.theoretical == b.memory.theoretical == model.memory.theoretical  # the model's datasheet
    assert model.memory.effective is None  # the shipped H200 carries no calibration of its own
    assert chooser("NVIDIA H200", "GPU-00000000-0000-0000-0000-000000000000") is model  # no result: the model's
    assert chooser("NVIDIA H200", "../escape") is model  # not a device id: never a path
    fixed = ProfileChooser.resolve("H200", store_path=tmp_path, per_device=device_profile_reader(tmp_path))
    assert fixed("NVIDIA H200", UUID_A) is fixed.fixed  # --profile prices every device on itself


def test_a_result_of_another_model_does_not_price_this_device(tmp_path: Path) -> None:
    write_device_result(_h200(UUID_A, 1.0, name="NVIDIA L4"), tmp_path)  # a store copied between hosts
    chooser = ProfileChooser.resolve(store_path=tmp_path, per_device=device_profile_reader(tmp_path))
    assert chooser("NVIDIA H200", UUID_A) is chooser("NVIDIA H200")


def test_a_result_records_when_how_and_on_what(tmp_path: Path) -> None:
    path = write_device_result(_h200(UUID_A, 1.0), tmp_path)
    data = yaml.safe_load(path.read_text())
    assert data["quick"] is True and data["finished_at"].startswith("2026-11-01")
    assert data["machine"]["driver"] == "580.65" and data["machine"]["device"]["uuid"] == UUID_A
    assert data["clocks_before"]["power_limit_w"] == 700.0


def test_a_result_written_before_the_shared_machine_description_still_reads(tmp_path: Path) -> None:
    """Schema 1 kept the device's facts as flat fields; stores written then keep working."""
    run = _h200(UUID_A, 1.0)
    data = json.loads(run.model_dump_json())
    machine = data.pop("machine")
    data.update(schema_version=1, tool_version="tileops 0.1.0", torch_version=machine["torch_version"],
                kind="cuda", name=machine["device"]["name"], uuid=UUID_A, index=0, hostname="node-a",
                driver=machine["driver"])
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(data))
    back = read_device_result(old)
    assert back.machine.device.uuid == UUID_A and back.name == "NVIDIA H200" and back.driver == "580.65"
    assert back.device_key == UUID_A and back.tool_version == "tileops 0.1.0" and back.schema_version == 2


def test_a_result_whose_machine_holds_the_flat_device_reads_as_the_nested_one(tmp_path: Path) -> None:
    """Schema 2's first results kept the machine's device flat (``device_kind``, ..., ``hostname``), as records
    did; they read to the same result, and a machine holding both shapes is refused naming the flat field."""
    run = _h200(UUID_A, 1.0)
    data = json.loads(run.model_dump_json())
    device = data["machine"].pop("device")
    flat = {**data, "machine": {**data["machine"], **{f"device_{k}": v for k, v in device.items() if k != "hostname"},
                                "hostname": device["hostname"]}}
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(yaml.safe_dump(flat))
    new.write_text(yaml.safe_dump({**data, "machine": {**data["machine"], "device": device}}))
    assert read_device_result(old) == read_device_result(new) == run
    both = tmp_path / "both.yaml"
    both.write_text(yaml.safe_dump({**flat, "machine": {**flat["machine"], "device": device}}))
    with pytest.raises(ProfileError, match=r"machine\.device_kind: the older flat device field beside `device`"):
        read_device_result(both)


# --------------------------------------------------------------------------- through `tileops bench`


def _bench(store: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TILEOPS_PROFILE_DIR": str(store), "TILEOPS_HOSTNAME": "bench-host"}
    return tileops("bench", "--op", "relu", "--dtype", "float32",
                   "--quick", "--no-plot", "--out", str(out), *extra, environ=env, timeout=600)


@pytest.mark.slow
def test_bench_calibrates_a_device_it_has_no_calibration_of_first_then_reuses_it(tmp_path: Path) -> None:
    store = tmp_path / "store"
    r = _bench(store, tmp_path / "never", "--calibrate", "never")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (store / "devices").exists()  # never: nothing measured, rows blank with their reason
    assert "blank: no-profile" in r.stdout and "quick calibration" not in r.stdout

    r = _bench(store, tmp_path / "first", "--calibrate", "quick")
    assert r.returncode == 0, r.stdout + r.stderr
    first_line = next(line for line in r.stderr.splitlines() if line.startswith("calibrating"))
    assert "cpu-bench-host" in first_line and "no stored calibration" in first_line
    assert r.stderr.index("calibrating") < r.stderr.index("[1/")  # calibrated before the first row
    # docs/reliability.md, guarantee 5: the calibration's "wrote" line (its result, the CPU's profile) is stderr's
    assert "wrote " in r.stderr and "cpu-bench-host.yaml" in r.stderr and "wrote " not in r.stdout
    result = read_device_result(store / "devices" / "cpu-bench-host.yaml")
    assert result.quick and result.machine.device.hostname == "bench-host"
    (rec,) = list(iter_records(tmp_path / "first"))
    assert rec.env.device.key == "cpu-bench-host"
    (row,) = json.loads((tmp_path / "first" / "roofline.json").read_text())["rows"]
    assert row["verdict"] != "blank" and row["efficiency"] > 0, row  # priced on what this host reached
    # ... and the summary says the figures rest on a quick (rough) calibration, never silently
    assert "note: priced on a quick calibration of cpu-bench-host" in r.stdout
    assert "`tileops calibrate --device cpu` measures the full one" in r.stdout
    assert read_run_info(tmp_path / "first").status == "completed"

    r = _bench(store, tmp_path / "again", "--calibrate", "quick")  # fresh: reused, nothing measured
    assert r.returncode == 0, r.stdout + r.stderr
    assert "calibration of cpu-bench-host: calibrated" in r.stderr and "calibrating cpu" not in r.stderr
    assert read_device_result(store / "devices" / "cpu-bench-host.yaml").run_id == result.run_id

    r = _bench(store, tmp_path / "stale", "--calibrate", "quick", "--calibration-max-age", "1s")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "over the maximum age 1s" in r.stderr
    assert read_device_result(store / "devices" / "cpu-bench-host.yaml").run_id != result.run_id


def test_a_fresh_gpu_with_a_shipped_profile_is_calibrated_quick_before_its_rows_then_priced_on_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 14's GPU half through the real pipeline step, with the one thing that cannot exist here (the GPU
    measurement) replaced: a device the store has no calibration of is measured quick, first, and its own
    result prices it; the next run reuses it; a GPU no profile names is not measured (nothing to scale)."""
    import tileops.calibrate.run as calibrate_run
    from tileops.device import DeviceInfo
    from tileops.pipeline.calibrate import ensure_calibrated

    store = tmp_path / "store"
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(store))
    gpu = DeviceInfo(kind="cuda", name="NVIDIA H200", index=0, uuid=UUID_A, hostname="node-a")
    asked: list[tuple[str, bool]] = []

    def measured(device: DeviceInfo, *, quick: bool, progress=None, options=None, profiles=None):  # a GPU's
        asked.append((device.torch_device, quick))
        now = dt.datetime.now(dt.timezone.utc)
        run = _h200(UUID_A, 0.9).model_copy(update={"started_at": now, "finished_at": now, "quick": quick})
        return calibrate_run.CalibrationOutcome(profile=None, run=run)  # type: ignore[arg-type]

    monkeypatch.setattr(calibrate_run, "calibrate_device", measured)
    said: list[str] = []
    chooser = ProfileChooser.resolve(store_path=store, per_device=device_profile_reader(store))
    key = gpu.key
    before = chooser(gpu.name, key)
    assert before is not None and before.memory.effective is None  # the shipped datasheet alone: SOL blank

    ensure_calibrated(gpu, chooser, "auto", dt.timedelta(days=7), said.append)
    assert asked == [("cuda:0", True)]  # auto is quick on a GPU
    assert any(line.startswith("calibrating cuda:0") for line in said)
    after = chooser(gpu.name, key)
    assert after is not None and after.memory.effective == pytest.approx(0.9 * 4.0e12)  # its own result
    assert after.memory.theoretical == before.memory.theoretical

    again = ProfileChooser.resolve(store_path=store, per_device=device_profile_reader(store))
    ensure_calibrated(gpu, again, "auto", dt.timedelta(days=7), said.append)
    assert len(asked) == 1 and again(gpu.name, key).memory.effective == pytest.approx(0.9 * 4.0e12)

    unknown = DeviceInfo(kind="cuda", name="NVIDIA Made-Up GPU", index=1, uuid=UUID_B, hostname="node-a")
    ensure_calibrated(unknown, again, "auto", dt.timedelta(days=7), said.append)
    assert len(asked) == 1 and "no profile names 'NVIDIA Made-Up GPU'" in said[-1]


def test_a_nominal_bandwidth_in_the_environment_reaches_a_bench_with_a_fresh_calibration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """README: a CPU whose nominal bandwidth is unknown is NOT JUDGED until TILEOPS_DRAM_BANDWIDTH gives it. A
    bench whose device already has a fresh calibration measured nothing and ignored the variable; now its CPU
    profile is rebuilt from the stored result with the nominal (nothing measured), and the row is judged."""
    import datetime as dt

    from tileops.ledger import build_profile, write_device_result
    from tileops.calibrate.theoretical import base_profile
    from tileops.device import describe_device
    from tileops.pipeline.calibrate import ensure_calibrated
    from tileops.profiles import write_profile

    sys.path.insert(0, str(Path(__file__).parent))
    from test_calibrate_max_age import cpu_result

    store = tmp_path / "store"
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(store))
    for var in ("TILEOPS_HOSTNAME", "NODE_NAME", "TILEOPS_DRAM_BANDWIDTH"):
        monkeypatch.delenv(var, raising=False)
    cpu = describe_device("cpu")
    stored = cpu_result(dt.datetime.now(dt.timezone.utc), quick=False)
    write_device_result(stored, store)
    base, _ = base_profile("cpu", cpu.name, profiles=[])
    unknown = base.model_copy(update={"memory": None})  # a host whose DMI does not tell the nominal
    profile, _ = build_profile(unknown, [stored])
    write_profile(profile, store)
    key = cpu.key
    said: list[str] = []
    chooser = ProfileChooser.resolve(store_path=store, per_device=device_profile_reader(store))
    ensure_calibrated(cpu, chooser, "auto", dt.timedelta(days=7), said.append)
    assert chooser(cpu.name, key).memory is None or chooser(cpu.name, key).memory.theoretical is None
    assert not any("rebuilt" in line for line in said)  # no nominal stated: nothing to rebuild

    monkeypatch.setenv("TILEOPS_DRAM_BANDWIDTH", "76.8GB/s")
    chooser = ProfileChooser.resolve(store_path=store, per_device=device_profile_reader(store))
    got = ensure_calibrated(cpu, chooser, "auto", dt.timedelta(days=7), said.append)
    assert got is not None and got.result.run_id == stored.run_id  # nothing measured
    assert "TILEOPS_DRAM_BANDWIDTH=76.8GB/s states the nominal memory bandwidth" in said[-1]
    priced_on = chooser(cpu.name, key)
    assert priced_on.memory.theoretical == pytest.approx(76.8e9) and priced_on.memory.effective is not None
