"""Which device a measurement or an audit names, in the one shape every file keeps it: :class:`DeviceIdentity`.

A record's environment, a stored calibration's machine and an audit entry each
hold the device as one nested ``device`` object. Files written before that held
the same facts as flat fields beside the others (``device_kind``,
``device_name``, ``device_uuid``, ``device_index``, ``hostname``); the readers
upgrade such an object to the nested shape before reading it (:func:`nest_machine`,
:func:`nest_audit`), so an older file reads to the same objects as a new one.
An object holding both shapes is refused: which of the two counts would be a
guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

#: The flat fields of a machine before the device was nested, and the identity's field each became.
MACHINE_FLAT_FIELDS = {"device_kind": "kind", "device_name": "name", "device_uuid": "uuid",
                       "device_index": "index", "hostname": "hostname"}
#: An audit entry's flat device fields before the device was nested (its host stays flat where no device was
#: audited: :func:`nest_audit`).
AUDIT_FLAT_FIELDS = {"device_name": "name", "device_uuid": "uuid", "hostname": "hostname"}


def device_key(uuid: str | None, hostname: str) -> str:
    """A device's stable key, decided here only: its GPU (or MIG) uuid, or ``cpu-<hostname>`` for a host's
    CPU (which has no uuid). Records, calibration results, the profile store and the metrics' ``UUID`` label
    all name a device by it."""
    return uuid or f"cpu-{hostname}"


@dataclass(frozen=True, kw_only=True)
class DeviceIdentity:
    """A device as files name it: what profiles match (``name``, §1.2), the key the store and the metrics use
    (:attr:`key`), and the host it is on. A CPU has no uuid; its key is ``cpu-<hostname>``."""

    kind: Literal["cpu", "cuda"]
    name: str
    uuid: str | None = None
    index: int | None = None
    hostname: str

    @property
    def key(self) -> str:
        """The device's stable key (:func:`device_key`)."""
        return device_key(self.uuid, self.hostname)


class ShapeError(ValueError):
    """An object that holds a device in both the flat and the nested shape; ``field`` names the flat one."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _both(flat: str) -> ShapeError:
    return ShapeError(flat, "the older flat device field beside `device`, which holds it: keep `device` alone")


def nest_machine(data: dict[str, Any]) -> dict[str, Any]:
    """A machine's (or a record environment's) object with its flat device fields moved into ``device``; an
    object without them unchanged. A flat field a file left out stays out, so the nested object's reader
    names it as missing (``device.kind``)."""
    flat = [k for k in MACHINE_FLAT_FIELDS if k in data]
    if not flat:
        return data
    if "device" in data:
        raise _both(flat[0])
    out = {k: v for k, v in data.items() if k not in MACHINE_FLAT_FIELDS}
    out["device"] = {MACHINE_FLAT_FIELDS[k]: data[k] for k in flat}
    return out


def nest_audit(data: dict[str, Any]) -> dict[str, Any]:
    """An audit entry's object with its flat device fields moved into ``device``.

    The audit measures CUDA devices only, so an older entry naming a device (its name or uuid) names a
    ``cuda`` one; an entry naming none (an audit on a host without a GPU) keeps its ``hostname`` flat, the
    host it ran on, since there is no device to hold it.
    """
    named = [k for k in ("device_name", "device_uuid") if k in data]
    if "device" in data:
        if named:
            raise _both(named[0])
        return data  # a host beside a device: AuditEntry.contract_check refuses it, on either reader's path
    if not named:
        return data
    if all(data[k] is None for k in named):  # written by an audit that found no device: the host alone
        return {k: v for k, v in data.items() if k not in named}
    out = {k: v for k, v in data.items() if k not in AUDIT_FLAT_FIELDS}
    out["device"] = {"kind": "cuda", "name": data.get("device_name") or "", "uuid": data.get("device_uuid"),
                     "hostname": data.get("hostname") or ""}
    return out
