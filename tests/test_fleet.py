"""The fleet launcher: NVML enumeration (faked: no GPU here), per-device plans, and the real
Docker engine for starting, failing, seeding and collecting containers."""

from __future__ import annotations

import io
import sys
import tarfile
import types
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from appliance_support import docker_client
from tileops import fleet
from tileops.cli import main as tileops_main
from cli_support import tileops

GPUS = [("NVIDIA H200", "GPU-11111111-2222-3333-4444-555555555555"),
        ("NVIDIA H200", "GPU-66666666-7777-8888-9999-000000000000")]


@pytest.fixture(autouse=True)
def fresh_nvml_session() -> Iterator[None]:
    """NVML starts once per process (tileops.device.nvml): each test here starts it anew from the bindings
    it puts in place, and leaves none of its fakes behind."""
    from tileops.device import nvml

    nvml.session_status.cache_clear()
    yield
    nvml.session_status.cache_clear()


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
    tileops("calibrate", "--device", "cpu", "--quick", "--force",  # stored even on a busy host (marked)
            "--profile-dir", str(cal), check=True, timeout=300)
    [profile_file] = cal.glob("*.yaml")
    [device_file] = (cal / "devices").glob("*.yaml")
    dev = yaml.safe_load(device_file.read_text())
    outcomes = []
    for host, scale in (("node-a", 1.0), ("node-b", 0.5)):
        d = tmp_path / host / "profiles"
        (d / "devices").mkdir(parents=True)
        (d / profile_file.name).write_text(profile_file.read_text())
        copy = dict(dev, machine=dict(dev["machine"], device=dict(dev["machine"]["device"], hostname=host)),
                    mixes={k: dict(v, bytes_per_s=v["bytes_per_s"] * scale) for k, v in dev["mixes"].items()})
        (d / "devices" / f"cpu-{host}.yaml").write_text(yaml.safe_dump(copy))
        outcomes.append(fleet.ContainerOutcome(device=fleet.FleetTarget(name=host), exit_code=0, collected=d.parent))
    outcomes.append(fleet.ContainerOutcome(device=fleet.FleetTarget(name="failed"), exit_code=1, collected=tmp_path / "none"))
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


def _result(uuid: str | None, hostname: str = "node-a", name: str = "NVIDIA H200") -> dict:
    """A per-device calibration result as a container writes it (devices/<key>.yaml)."""
    from tileops.ledger import DeviceCalibration, MixMeasurement

    now = datetime.now(timezone.utc)
    run = DeviceCalibration(run_id="cal-x", started_at=now, finished_at=now, tool_version="tileops 0.1.0",
                            torch_version="2.13.0", quick=True, kind="cuda" if uuid else "cpu", name=name,
                            uuid=uuid, hostname=hostname,
                            mixes={"triad": MixMeasurement(bytes_per_s=4e12, bytes=3 << 20, array_bytes=1 << 20,
                                                           best_s=1e-6, reps=3, kernel="triad")})
    return run.model_dump(mode="json")


def _collected(root: Path, label: str, results: dict[str, dict]) -> Path:
    """What `launch` leaves for one device: <out>/<label>/profiles/devices/<file>."""
    devices = root / label / "profiles" / "devices"
    devices.mkdir(parents=True)
    for file_name, data in results.items():
        (devices / file_name).write_text(yaml.safe_dump(data))
    return root / label


@pytest.mark.parametrize("uuid, hostname", [
    ("../../../escaped", "node-a"),                                   # a GPU id that climbs out of the store
    ("GPU-../../escaped", "node-a"),
    (None, "../../escaped"),                                          # a CPU whose host name does
    (None, "node/../../escaped"),
    ("MIG-GPU-11111111-2222-3333-4444-555555555555/1/0", "node-a"),   # the pre-R470 MIG form has slashes
])
def test_install_profiles_refuses_an_id_that_is_not_a_device(tmp_path: Path, uuid: str | None,
                                                             hostname: str) -> None:
    """Ids come from the container's output and become file names on the host: only real forms pass."""
    store = tmp_path / "a" / "b" / "store"
    good_uuid = GPUS[0][1]
    good = fleet.ContainerOutcome(device=fleet.FleetTarget(name=GPUS[0][0], index=0, uuid=good_uuid), exit_code=0,
                         collected=_collected(tmp_path / "out", "gpu0", {f"{good_uuid}.yaml": _result(good_uuid)}))
    bad_device = fleet.FleetTarget(name=GPUS[1][0], index=1, uuid=GPUS[1][1]) if uuid else fleet.CPU
    bad = fleet.ContainerOutcome(device=bad_device, exit_code=0,
                        collected=_collected(tmp_path / "out", "bad", {"x.yaml": _result(uuid, hostname)}))
    notes: list[str] = []
    written = fleet.install_profiles([good, bad], store, echo=notes.append)
    assert written == [store / "devices" / f"{good_uuid}.yaml"]  # the honest device is still installed
    assert not list(tmp_path.rglob("escaped*")), "a file escaped the store"
    assert not bad.ok and "not a device id" in bad.reason() and "GPU-<uuid>" in bad.reason()
    assert notes == [f"{bad_device.describe()}: {bad.error}"]


def test_install_profiles_refuses_a_result_for_another_gpu(tmp_path: Path) -> None:
    """A GPU's container was given one uuid: a result for any other device is not its to write."""
    (name, mine), (_, other) = GPUS
    o = fleet.ContainerOutcome(device=fleet.FleetTarget(name=name, index=0, uuid=mine), exit_code=0,
                      collected=_collected(tmp_path / "out", "gpu0", {f"{other}.yaml": _result(other)}))
    assert fleet.install_profiles([o], tmp_path / "store", echo=lambda _: None) == []
    assert not o.ok and f"was given {mine} only" in o.reason()
    assert not (tmp_path / "store").exists()


def test_install_profiles_refuses_a_malformed_result(tmp_path: Path) -> None:
    o = fleet.ContainerOutcome(device=fleet.CPU, exit_code=0,
                      collected=_collected(tmp_path / "out", "cpu", {"cpu-x.yaml": {"uuid": "x"}}))
    assert fleet.install_profiles([o], tmp_path / "store", echo=lambda _: None) == []
    assert not o.ok and "not a device calibration result" in o.reason()


def test_a_container_refused_for_a_busy_host_says_so_not_just_its_code() -> None:
    """A calibration container that exits 5 or 8 stored nothing on purpose: the fleet's line says why."""
    from tileops import exitcodes

    busy = fleet.ContainerOutcome(device=fleet.CPU, exit_code=exitcodes.BUSY)
    below = fleet.ContainerOutcome(device=fleet.CPU, exit_code=exitcodes.BELOW_STORED)
    odd = fleet.ContainerOutcome(device=fleet.CPU, exit_code=77)
    assert not busy.ok and "host was busy" in busy.reason() and busy.reason().startswith("exit code 5 (")
    assert "below the stored calibration" in below.reason() and "--force" in below.reason()
    assert odd.reason() == "exit code 77"
