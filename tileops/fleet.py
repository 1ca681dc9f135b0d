"""Run the appliance image once per GPU of this host, through the Docker Engine API.

``tileops fleet calibrate|bench`` on a host: find the GPUs (NVML), start one
container per device with a device request for that GPU's uuid (so each
container sees exactly one GPU, as ``cuda:0``), stream every container's log
lines prefixed with the device, then copy each container's result and profile
volumes back to the host and say which device failed. ``--cpu`` runs a single
container with no GPU request.

Results come back through the Engine API (an archive of the container's
volume), not a bind mount: the container's non-root user can then write its
own volume whatever the host folder's owner, and the launcher works the same
against a remote Docker host.
"""

from __future__ import annotations

import io
import secrets
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tileops.device import host_name, nvml
from tileops.errors import TileOpsError
from tileops.exitcodes import describe
from tileops.fsutil import write_atomic

if TYPE_CHECKING:  # the docker SDK is imported where a container is really started
    import docker
    from docker.models.containers import Container

#: Where the image keeps results and the profile store (Dockerfile: VOLUME, TILEOPS_PROFILE_DIR).
RESULTS_PATH = "/data/results"
PROFILES_PATH = "/data/profiles"
TASKS = ("calibrate", "bench")


class FleetError(TileOpsError):
    """The fleet cannot start: no Docker engine, no image, no GPUs to run on."""


@dataclass(frozen=True)
class FleetTarget:
    """One target of the fleet: a GPU (index, uuid, name from NVML) or the host's CPU."""

    name: str
    index: int | None = None
    uuid: str | None = None

    @property
    def is_gpu(self) -> bool:
        return self.uuid is not None

    @property
    def label(self) -> str:
        """Short, path- and name-safe: ``gpu0``, ``gpu1``, ... or ``cpu``."""
        return f"gpu{self.index}" if self.is_gpu else "cpu"

    def describe(self) -> str:
        return f"{self.label} ({self.name}, {self.uuid})" if self.is_gpu else f"cpu ({self.name})"


CPU = FleetTarget(name=host_name())


def enumerate_gpus() -> list[FleetTarget]:
    """This host's GPUs as NVML lists them. Raises FleetError when NVML is unavailable."""
    try:
        session = nvml.session()
    except nvml.NvmlError as exc:
        if exc.bindings_missing:
            raise FleetError("cannot list GPUs: NVML bindings missing (pip install 'tileops[gpu]'); "
                             "pass --cpu to run on the CPU") from None
        raise FleetError(f"cannot list GPUs: NVML did not start ({exc.cause}); is the NVIDIA driver loaded? "
                         "pass --cpu to run on the CPU") from None
    try:
        gpus = [(i, session.gpu_by_index(i)) for i in range(session.device_count())]
        return [FleetTarget(name=gpu.name(), index=i, uuid=gpu.uuid()) for i, gpu in gpus]
    except nvml.NvmlError as exc:
        raise FleetError(f"cannot list GPUs: {exc}; pass --cpu to run on the CPU") from None


@dataclass(frozen=True)
class ContainerPlan:
    """What one container runs, on which device: everything `docker create` needs."""

    device: FleetTarget
    name: str
    command: list[str]
    labels: dict[str, str]
    device_requests: list[Any]  # docker.types.DeviceRequest

    def create_kwargs(self, image: str) -> dict[str, Any]:
        """Keyword arguments of ``client.containers.create``: the image's hardened posture
        (non-root user from the image, no capabilities, read-only root, tmpfs /tmp)."""
        return dict(image=image, command=self.command, name=self.name, labels=self.labels,
                    device_requests=self.device_requests or None, hostname=host_name(),
                    environment={"TILEOPS_FLEET_DEVICE": self.device.label}, detach=True,
                    shm_size="1g", read_only=True, tmpfs={"/tmp": ""}, cap_drop=["ALL"],
                    security_opt=["no-new-privileges:true"])


def plan(task: str, devices: Sequence[FleetTarget], extra_args: Sequence[str] = (), run_id: str | None = None
         ) -> list[ContainerPlan]:
    """One container per device; a GPU's container requests exactly that GPU by uuid."""
    if task not in TASKS:
        raise FleetError(f"unknown fleet task {task!r}: use one of {', '.join(TASKS)}")
    if not devices:
        raise FleetError("no devices to run on: NVML lists no GPU on this host (pass --cpu for the CPU)")
    run_id = run_id or new_run_id()
    from docker.types import DeviceRequest

    plans = []
    for dev in devices:
        requests = [DeviceRequest(driver="nvidia", device_ids=[dev.uuid], capabilities=[["gpu"]])] if dev.is_gpu else []
        labels = {"io.tileops.fleet.run": run_id, "io.tileops.fleet.task": task,
                  "io.tileops.fleet.device": dev.uuid or "cpu", "io.tileops.fleet.device-name": dev.name}
        plans.append(ContainerPlan(device=dev, name=f"tileops-{task}-{dev.label}-{run_id}",
                                   command=[task, *extra_args], labels=labels, device_requests=requests))
    return plans


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(2)


@dataclass
class ContainerOutcome:
    """How one device's container ended, and where its files were copied on the host."""

    device: FleetTarget
    exit_code: int | None = None
    error: str | None = None
    collected: Path | None = None
    files: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None and self.exit_code == 0

    def reason(self) -> str:
        return self.error or describe(self.exit_code)


def connect() -> docker.DockerClient:
    """A client for the local engine (DOCKER_HOST and friends honoured)."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        raise FleetError(f"cannot reach the Docker engine ({exc}); is dockerd running and is "
                         "DOCKER_HOST right?") from None
    return client


def check_image(client: docker.DockerClient, image: str) -> None:
    import docker

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise FleetError(f"image {image!r} not found on this Docker host: build it (make image) or pass "
                         "--image") from None


Printer = Callable[[str], None]


def launch(client: docker.DockerClient, image: str, plans: Sequence[ContainerPlan], out_dir: Path, *,
           seed_profiles: Path | None = None, echo: Printer = print) -> list[ContainerOutcome]:
    """Run every planned container at once, stream their logs, collect their volumes.

    ``seed_profiles``: a host profile store copied into each container's store
    before it starts (bench prices against the host's calibrations).
    Containers are removed (with their anonymous volumes) whatever happens.
    """
    from docker.errors import DockerException

    out_dir.mkdir(parents=True, exist_ok=True)
    outcomes = {p.name: ContainerOutcome(device=p.device) for p in plans}
    started: list[tuple[ContainerPlan, Container]] = []
    try:
        for p in plans:
            container = _create(client, image, p, outcomes[p.name])
            if container is not None:
                started.append((p, container))
                _seed_and_start(container, seed_profiles, outcomes[p.name])
        streams = [threading.Thread(target=_stream, args=(c, p.device.label, echo), daemon=True)
                   for p, c in started if outcomes[p.name].error is None]
        for t in streams:
            t.start()
        for p, c in started:
            if outcomes[p.name].error is None:
                outcomes[p.name].exit_code = int(c.wait().get("StatusCode", -1))
        for t in streams:
            t.join(timeout=10)
        for p, c in started:
            _collect(c, out_dir / p.device.label, outcomes[p.name])
    finally:
        for _, c in started:
            try:
                c.remove(v=True, force=True)
            except DockerException:  # already gone
                pass
    return [outcomes[p.name] for p in plans]


def _create(client: docker.DockerClient, image: str, p: ContainerPlan, outcome: ContainerOutcome
            ) -> Container | None:
    """The planned container, created; None (and the engine's refusal as this device's failure) when not."""
    from docker.errors import DockerException

    try:
        return client.containers.create(**p.create_kwargs(image))
    except DockerException as exc:
        outcome.error = f"container not created: {_engine_message(exc)}"
        return None


def _seed_and_start(container: Container, seed_profiles: Path | None, outcome: ContainerOutcome) -> None:
    """The host's profile store copied into the container's, then the container started; a failure of
    either is this device's, said in ``outcome`` (the container is still removed with the others)."""
    from docker.errors import DockerException

    if seed_profiles is not None and seed_profiles.is_dir():
        try:  # into the volume itself: the root filesystem is read-only
            container.put_archive(PROFILES_PATH, _tar_dir(seed_profiles))
        except DockerException as exc:
            outcome.error = f"could not copy the profile store in: {_engine_message(exc)}"
            return
    try:
        container.start()
    except DockerException as exc:  # e.g. no nvidia runtime for the device request
        outcome.error = f"container did not start: {_engine_message(exc)}"


def _engine_message(exc: Exception) -> str:
    return str(getattr(exc, "explanation", None) or exc)


def _stream(container: Container, label: str, echo: Printer) -> None:
    """Echo the container's output line by line, each line prefixed with its device."""
    pending = b""
    for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
        pending += chunk
        *lines, pending = pending.replace(b"\r", b"\n").split(b"\n")
        for line in lines:
            if line.strip():
                echo(f"[{label}] {line.decode(errors='replace')}")
    if pending.strip():
        echo(f"[{label}] {pending.decode(errors='replace')}")


def _collect(container: Container, dest: Path, outcome: ContainerOutcome) -> None:
    """Copy the container's results and profile volumes to ``dest/results``, ``dest/profiles``."""
    from docker.errors import DockerException

    dest.mkdir(parents=True, exist_ok=True)
    outcome.collected = dest
    for path in (RESULTS_PATH, PROFILES_PATH):
        try:
            stream, _ = container.get_archive(path)
        except DockerException as exc:  # e.g. the container was never created
            if outcome.error is None:
                outcome.error = f"could not collect {path}: {_engine_message(exc)}"
            continue
        buf = io.BytesIO(b"".join(stream))
        with tarfile.open(fileobj=buf) as tar:
            outcome.files += _extract(tar, dest)


def _extract(tar: tarfile.TarFile, dest: Path) -> list[Path]:
    """The archive's folders and regular files under ``dest``, each file written atomically through the write
    seam (a full disk leaves a copy whole or absent); a member the ``data`` filter refuses (a path out of
    ``dest``, a device) raises tarfile's error, and links are not copied (a volume of results holds none)."""
    files = []
    for member in tar.getmembers():
        m = tarfile.data_filter(member, str(dest))
        target = dest / m.name
        if m.isdir():
            target.mkdir(parents=True, exist_ok=True)
        elif m.isfile():
            data = tar.extractfile(m)
            assert data is not None  # a regular member always has its bytes
            write_atomic(target, data.read())
            files.append(target)
    return files


def _tar_dir(source: Path) -> bytes:
    """The folder's contents (not the folder itself), as a tar to unpack inside a volume."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for child in sorted(source.iterdir()):
            tar.add(child, arcname=child.name, filter=_owned_by_image_user)
    return buf.getvalue()


def _owned_by_image_user(info: tarfile.TarInfo) -> tarfile.TarInfo:
    # The image's user (Dockerfile: uid/gid 10001) must be able to update what it is given.
    info.uid = info.gid = 10001
    info.uname = info.gname = ""
    return info


def install_profiles(outcomes: Iterable[ContainerOutcome], store: Path, echo: Printer = print) -> list[Path]:
    """Put the calibrations the containers wrote into the host's profile store.

    Every device's raw result (``devices/<uuid>.yaml``) is copied. A model
    calibrated on one device gets that container's profile; a model seen on
    several devices gets one profile built from all of them (the median of each
    measurement, as ``tileops calibrate --all-devices`` does), so a single weak
    GPU neither sets nor drags its model's ceiling.
    """
    from tileops.ledger import build_profile, write_device_result
    from tileops.profiles import load_profile, write_profile

    written: list[Path] = []
    by_model: dict[str, list[tuple[Any, list[Any]]]] = {}  # model -> [(profile, its device results)]
    for o in outcomes:
        if not o.ok or o.collected is None:
            continue
        prof_dir = o.collected / "profiles"
        try:
            runs = _checked_results(o, prof_dir / "devices")
        except TileOpsError as exc:  # nothing of this container's is installed
            o.error = f"its calibration was refused: {exc}"
            echo(f"{o.device.describe()}: {o.error}")
            continue
        written += [write_device_result(r, store) for r in runs]
        for f in sorted(prof_dir.glob("*.yaml")):
            profile = load_profile(f)
            by_model.setdefault(profile.name, []).append((profile, [r for r in runs if profile.matches(r.name)]))
    for model, entries in by_model.items():
        runs = [r for _, rs in entries for r in rs]
        if len(entries) == 1 or not runs:
            written.append(write_profile(entries[0][0], store))
            continue
        profile, warnings = build_profile(entries[0][0], runs)
        for w in warnings:
            echo(f"warning: {model}: {w}")
        written.append(write_profile(profile, store))
        echo(f"{model}: one profile from {len(runs)} devices (the median of each measurement)")
    return written


def _checked_results(outcome: ContainerOutcome, folder: Path) -> list[Any]:
    """The container's per-device results, each a real device id (GPU-/MIG- uuid, ``cpu-<hostname>``).

    The ids come from the container's own output and become file names in the
    host's store, so an id such as ``../../x`` is refused, not followed; and a
    GPU's container may only report the GPU it was given.
    """
    from tileops.ledger import check_device_key, read_device_result

    runs = []
    for f in sorted(folder.glob("*.yaml")):
        run = read_device_result(f)
        key = check_device_key(run.device_key, str(f))
        if outcome.device.is_gpu and key != outcome.device.uuid:
            raise FleetError(f"{f}: a result for {key}, but this container was given {outcome.device.uuid} only")
        runs.append(run)
    return runs
