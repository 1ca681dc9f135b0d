"""The fleet launcher: NVML enumeration (faked: no GPU here), per-device plans, and the real
Docker engine for starting, failing, seeding and collecting containers."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import pytest
import yaml

from appliance_support import docker_client
from tileops import fleet
from tileops.cli import main as tileops_main

GPUS = [("NVIDIA H200", "GPU-11111111-2222-3333-4444-555555555555"),
        ("NVIDIA H200", "GPU-66666666-7777-8888-9999-000000000000")]


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A stand-in for the NVML bindings (the only part of this module that needs a GPU)."""
    mod = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    mod.NVMLError = NVMLError
    mod.nvmlInit = lambda: None
    mod.nvmlShutdown = lambda: None
    mod.nvmlDeviceGetCount = lambda: len(GPUS)
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetName = lambda h: GPUS[h][0].encode()  # older bindings return bytes
    mod.nvmlDeviceGetUUID = lambda h: GPUS[h][1]
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    return mod


def test_enumerate_gpus(fake_nvml: types.ModuleType) -> None:
    devices = fleet.enumerate_gpus()
    assert [(d.index, d.name, d.uuid) for d in devices] == [(0, *GPUS[0]), (1, *GPUS[1])]
    assert [d.label for d in devices] == ["gpu0", "gpu1"]


def test_enumerate_without_nvml_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    with pytest.raises(fleet.FleetError, match=r"--cpu"):
        fleet.enumerate_gpus()


def test_enumerate_when_the_driver_is_absent(fake_nvml: types.ModuleType) -> None:
    def fail() -> None:
        raise fake_nvml.NVMLError("Driver Not Loaded")

    fake_nvml.nvmlInit = fail
    with pytest.raises(fleet.FleetError, match="Driver Not Loaded"):
        fleet.enumerate_gpus()


def test_one_container_per_gpu_requesting_that_gpu(fake_nvml: types.ModuleType) -> None:
    plans = fleet.plan("calibrate", fleet.enumerate_gpus(), ["--quick"], run_id="r1")
    assert len(plans) == 2 and len({p.name for p in plans}) == 2
    for p, (_, uuid) in zip(plans, GPUS, strict=True):
        assert p.command == ["calibrate", "--quick"]
        [req] = p.device_requests
        assert req["Driver"] == "nvidia" and req["DeviceIDs"] == [uuid] and req["Capabilities"] == [["gpu"]]
        assert p.labels["io.tileops.fleet.device"] == uuid and p.labels["io.tileops.fleet.run"] == "r1"
        kw = p.create_kwargs("img")
        assert kw["device_requests"] == [req]
        assert kw["read_only"] is True and kw["cap_drop"] == ["ALL"]


def test_cpu_plan_requests_no_gpu() -> None:
    [p] = fleet.plan("bench", [fleet.CPU])
    assert p.device_requests == [] and p.create_kwargs("img")["device_requests"] is None
    assert p.device.label == "cpu" and p.command == ["bench"]


def test_plan_refuses_nonsense() -> None:
    with pytest.raises(fleet.FleetError, match="unknown fleet task"):
        fleet.plan("audit", [fleet.CPU])
    with pytest.raises(fleet.FleetError, match="no devices"):
        fleet.plan("bench", [])


# --------------------------------------------------------------------------- the real engine


@pytest.fixture(scope="module")
def client():
    return docker_client()


@pytest.fixture(scope="module")
def bare_image(client) -> str:
    """An image with no program at all: containers are created, seeded and collected, but never run."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for d in ("data", "data/results", "data/profiles"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o777
            tar.addfile(info)
    tag = "tileops-test-bare:latest"
    # The appliance image's volumes (Dockerfile), so seeding and collecting work as with the real one.
    client.api.import_image_from_data(buf.getvalue(), repository="tileops-test-bare", tag="latest",
                                      changes=['VOLUME ["/data/results", "/data/profiles"]'])
    return tag


@pytest.mark.slow
def test_a_gpu_the_engine_cannot_give_is_a_named_failure(client, bare_image: str, fake_nvml, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """This host has no NVIDIA runtime: each GPU's container is refused, and the exit names both devices."""
    code = tileops_main(["fleet", "bench", "--image", bare_image, "--out", str(tmp_path / "out"),
                         "--profile-dir", str(tmp_path / "store")])
    err = capsys.readouterr().err
    assert code == 1
    for i, (name, uuid) in enumerate(GPUS):
        assert f"device gpu{i} ({name}, {uuid}) failed" in err
    assert not client.containers.list(all=True, filters={"label": "io.tileops.fleet.task=bench",
                                                         "ancestor": bare_image})


@pytest.mark.slow
def test_profiles_go_in_and_results_come_out(client, bare_image: str, tmp_path: Path) -> None:
    """Seeding copies the host store into the container's volume; collection copies it back."""
    store = tmp_path / "store"
    (store / "devices").mkdir(parents=True)
    (store / "cpu-x.yaml").write_text("name: cpu-x\n")
    (store / "devices" / "cpu-host.yaml").write_text("uuid: null\n")
    [p] = fleet.plan("bench", [fleet.CPU])
    lines: list[str] = []
    [outcome] = fleet.launch(client, bare_image, [p], tmp_path / "out", seed_profiles=store, echo=lines.append)
    assert not outcome.ok and "did not start" in outcome.reason()  # nothing to execute in a bare image
    got = tmp_path / "out" / "cpu" / "profiles"
    assert (got / "cpu-x.yaml").read_text() == "name: cpu-x\n"
    assert (got / "devices" / "cpu-host.yaml").read_text() == "uuid: null\n"
    assert (tmp_path / "out" / "cpu" / "results").is_dir()
    assert not client.containers.list(all=True, filters={"name": p.name})


@pytest.mark.slow
def test_install_profiles_one_profile_per_model(tmp_path: Path) -> None:
    """Two devices of one model: both raw results kept, one model profile from their median."""
    cal = tmp_path / "cal"
    subprocess.run([sys.executable, "-m", "tileops.cli", "calibrate", "--device", "cpu", "--quick",
                    "--profile-dir", str(cal)], check=True, capture_output=True, timeout=300)
    [profile_file] = cal.glob("*.yaml")
    [device_file] = (cal / "devices").glob("*.yaml")
    dev = yaml.safe_load(device_file.read_text())
    outcomes = []
    for host, scale in (("node-a", 1.0), ("node-b", 0.5)):
        d = tmp_path / host / "profiles"
        (d / "devices").mkdir(parents=True)
        (d / profile_file.name).write_text(profile_file.read_text())
        copy = dict(dev, hostname=host, mixes={k: dict(v, bytes_per_s=v["bytes_per_s"] * scale)
                                               for k, v in dev["mixes"].items()})
        (d / "devices" / f"cpu-{host}.yaml").write_text(yaml.safe_dump(copy))
        outcomes.append(fleet.Outcome(device=fleet.Device(name=host), exit_code=0, collected=d.parent))
    outcomes.append(fleet.Outcome(device=fleet.Device(name="failed"), exit_code=1, collected=tmp_path / "none"))
    store = tmp_path / "store"
    notes: list[str] = []
    written = fleet.install_profiles(outcomes, store, echo=notes.append)
    assert {p.relative_to(store).as_posix() for p in written} == {
        "devices/cpu-node-a.yaml", "devices/cpu-node-b.yaml", profile_file.name}
    from tileops.profiles import load_profile

    merged = load_profile(store / profile_file.name)
    for mix, m in dev["mixes"].items():
        assert merged.memory.measured[mix] == pytest.approx(m["bytes_per_s"] * 0.75)  # median of x and x/2
    assert any("2 devices" in n for n in notes)
