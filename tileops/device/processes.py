"""Which processes on a GPU are others, and which are this one, inside a container too (PID namespaces).

A calibration needs an idle device, and a row's sensors must tell a neighbour
from the row's own process. NVML lists host PIDs; inside a container this
process's PID differs, and ``NSpid`` in ``/proc/self/status`` lists only the
namespaces of the container's own procfs. So when neither finds this process
but it holds a CUDA context, it finds itself by what only it can do: it
allocates ``PROBE_BYTES`` and the one process whose NVML memory grows by that
much is this one (:func:`own_pids_in`). When that does not single one out, the
answer is None, never a guess: counting this process as another would call
every device busy, missing another would call a busy one idle.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from tileops.device import nvml
from tileops.device.clocks import gpu_uuid
from tileops.device.identity import DeviceInfo

#: What this process allocates to find itself in NVML's process list (a container's PIDs are not the host's).
PROBE_BYTES = 64 * 2**20


class ProcessCheck(NamedTuple):
    """Other processes on a GPU (``others``), or None with ``why`` NVML could not tell."""

    others: list[dict[str, Any]] | None
    why: str = ""


def other_gpu_processes(device: DeviceInfo) -> ProcessCheck:
    """Other processes on this GPU (NVML), excluding this one; or None and the reason it cannot tell."""
    if device.kind == "cpu":
        return ProcessCheck([])
    found = _gpu_listing(device)
    if isinstance(found, str):
        return ProcessCheck(None, found)
    listed, mine = found
    return ProcessCheck([{"pid": pid, "used_memory_bytes": used} for pid, used in listed.items() if pid not in mine])


def own_gpu_pids(device: DeviceInfo) -> tuple[set[int] | None, str]:
    """This process's PIDs as NVML lists them on ``device`` (one probe, as :func:`other_gpu_processes` makes),
    or None and why they cannot be told: a bench worker asks once and its row sensors then tell the other
    processes on the device from itself inside a container too."""
    if device.kind == "cpu":
        return set(), ""
    found = _gpu_listing(device)  # pragma: no cover - needs a GPU
    return (None, found) if isinstance(found, str) else (found[1], "")  # pragma: no cover - needs a GPU


def gpu_processes(device: DeviceInfo) -> list[dict[str, Any]] | None:
    """Other processes on this GPU, excluding this one; None when NVML cannot tell
    (:func:`other_gpu_processes` says why)."""
    return other_gpu_processes(device).others


def _gpu_listing(device: DeviceInfo) -> tuple[dict[int, int | None], set[int]] | str:
    """NVML's {pid: used memory} on the device and which of them are this process; or why not."""
    index, name = device.index or 0, device.torch_device
    try:
        session = nvml.session()
    except nvml.NvmlError as exc:
        return str(exc)
    uuid = gpu_uuid(index)
    try:
        gpu = session.gpu_by_uuid(uuid or "")
    except nvml.NvmlError:
        return f"NVML does not know {name} (uuid {uuid or 'unknown'})"
    listed = process_memory(gpu)
    if listed is None:
        return f"NVML could not list the processes on {name}"
    mine = own_pids_in(listed, namespace_pids(), _holds_context(index), lambda: _probe_listing(gpu, index))
    if mine is None:
        return (f"NVML lists {len(listed)} process(es) on {name} by host PID, and none is this process's PID (inside "
                f"a container PIDs differ), nor did a {PROBE_BYTES // 2**20} MiB allocation single this process "
                "out; run the container with --pid=host, or check with nvidia-smi on the host that nothing else runs")
    return listed, mine


def process_memory(gpu: nvml.NvmlGpu) -> dict[int, int | None] | None:
    """NVML's {pid: used GPU memory} on ``gpu`` (None where NVML gives no per-process memory)."""
    listed = gpu.processes()
    return None if listed is None else {p.pid: p.used_bytes for p in listed}


def namespace_pids(status: Path = Path("/proc/self/status")) -> set[int]:
    """This process's PID in every PID namespace its procfs shows (``NSpid``), and ``os.getpid()``."""
    pids = {os.getpid()}
    try:
        for line in status.read_text().splitlines():
            if line.startswith("NSpid:"):
                pids.update(int(x) for x in line.split()[1:])
    except (OSError, ValueError):
        pass
    return pids


def own_pids_in(listed: dict[int, int | None], own: set[int], holds_context: bool,
                probe: Callable[[], dict[int, int | None] | None]) -> set[int] | None:
    """Which of NVML's PIDs are this process; None when that cannot be told.

    ``listed`` is NVML's {pid: used GPU memory}; ``own`` this process's PIDs in the
    namespaces it can see; ``probe`` re-lists NVML while this process holds an
    extra ``PROBE_BYTES``. A PID NVML shares with us settles it; a process without
    a CUDA context is not listed at all. Otherwise the listed process whose memory
    grew by at least half the probe (or that appeared with it) is this one.
    """
    hit = own & listed.keys()
    if hit:
        return hit
    if not holds_context:
        return set()
    after = probe()
    if after is None:
        return None
    grew = set()
    for pid, used in after.items():
        before = listed.get(pid)
        if used is not None and (pid not in listed or (before is not None and used - before >= PROBE_BYTES // 2)):
            grew.add(pid)
    return grew if len(grew) == 1 else None


def _holds_context(index: int) -> bool:  # pragma: no cover - needs a GPU
    try:
        import torch

        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


def _probe_listing(gpu: nvml.NvmlGpu, index: int) -> dict[int, int | None] | None:  # pragma: no cover - GPU
    """NVML's list while this process holds ``PROBE_BYTES`` more, freshly allocated from the driver."""
    try:
        import torch

        torch.cuda.empty_cache()  # so the probe is a new cudaMalloc, not a cached block
        block = torch.empty(PROBE_BYTES, dtype=torch.uint8, device=f"cuda:{index}")
        try:
            torch.cuda.synchronize(index)
            return process_memory(gpu)
        finally:
            del block
            torch.cuda.empty_cache()
    except Exception:
        return None
