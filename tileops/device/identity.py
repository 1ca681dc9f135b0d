"""Which device a run is on: :class:`DeviceInfo`, the one identity every layer is handed, and the host's name.

A device is described once per run (``tileops.device.describe_device``) and
passed around as this object, so nothing parses ``--device`` again and nothing
re-reads NVML to learn what it already knows. Its :attr:`DeviceInfo.key` is the
name the store and the metrics use; :attr:`DeviceInfo.identity` is how a
record, a calibration and an audit entry keep it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any, Literal

from tileops.records import DeviceIdentity, device_key

#: Environment variables naming the host a measurement ran on, before the kernel's hostname:
#: inside a Kubernetes pod the hostname is the pod's (new every run), while the chart passes the
#: node's name as NODE_NAME, which is also what dcgm-exporter labels its series with.
HOSTNAME_ENV = ("TILEOPS_HOSTNAME", "NODE_NAME")


def host_name() -> str:
    """The host's stable name: ``$TILEOPS_HOSTNAME``, ``$NODE_NAME`` (a Kubernetes node), else the hostname."""
    for var in HOSTNAME_ENV:
        value = os.environ.get(var, "").strip()
        if value:
            return value
    return socket.gethostname()


@dataclass(frozen=True)
class DeviceInfo:
    """One device as the bench, the calibration, the audit and the records see it: the one identity passed
    around, described once per run (``describe_device``), so nothing parses ``--device`` again.

    :attr:`key` names it in the store and the metrics, :attr:`torch_device` is what torch is given.
    """

    kind: Literal["cpu", "cuda"]
    name: str  # what profiles match: the driver's GPU name, or the CPU model
    index: int | None = None
    uuid: str | None = None
    driver: str | None = None
    cuda: str | None = None
    cpu_model: str | None = None
    threads: int | None = None
    l2_bytes: int | None = None  # L2 on a GPU, last-level cache on a CPU
    memory_bytes: int | None = None
    sm_count: int | None = None
    capability: tuple[int, int] | None = None
    clocks: dict[str, Any] | None = None
    hostname: str = field(default_factory=lambda: host_name())

    @property
    def torch_device(self) -> str:
        """The torch device string: ``cpu`` or ``cuda:N``."""
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index or 0}"

    @property
    def key(self) -> str:
        """The device's stable key: its GPU (or MIG) uuid, or ``cpu-<hostname>`` (``tileops.records.device_key``)."""
        return device_key(self.uuid, self.hostname)

    @property
    def identity(self) -> DeviceIdentity:
        """The device as files name it (a record's ``env.device``, a calibration's, an audit entry's)."""
        return DeviceIdentity(kind=self.kind, name=self.name, uuid=self.uuid, index=self.index,
                              hostname=self.hostname)

    def machine_fields(self) -> dict[str, Any]:
        """The fields of ``tileops.records.Machine`` this device decides (records and calibrations share them)."""
        return {"device": self.identity, "driver": self.driver, "cuda": self.cuda,
                "cpu_model": self.cpu_model, "threads": self.threads, "l2_bytes": self.l2_bytes}
