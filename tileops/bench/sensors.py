"""What the machine did while a row ran, as one snapshot per row: :class:`RowSensors`.

Why a row needs it. A time says how well it is known only with its interval;
it says *why* it may not be the device's own with what surrounded it: a
neighbour's job or a hypervisor on a CPU (``tileops.bench.cpusensors``),
another process, or a power or thermal cap on a GPU (``tileops.bench.gpusensors``).
A row measured under either is marked (``contended``, ``throttled``,
``power_capped``, ``thermal``) so the roofline can call it unstable instead of
slow, and price it against the ceiling its power state matches. Energy over the
row gives joules per call.

Counters are read at both ends of the row; the GPU's instantaneous readings
(clock-event reasons, clock, power, temperature) by a light thread every
``poll_s`` (0.1 s): each poll is a handful of NVML calls, during which ctypes
releases the GIL, so the timing thread loses microseconds a tenth of a second,
and a CPU row starts no thread at all.

Every field that cannot be read is None, with its reason in ``blank`` (the
field's name -> why), so a record says "not measured, because" and nothing is
guessed (§1.2). The roots (``proc``, ``sys``) and the NVML session are
parameters: the tests run on fake trees and a fake ``pynvml``. Standard library
only (spec §5.2).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path

from tileops.bench.cpusensors import PROC, SYS, CpuWindow, cpu_contention
from tileops.bench.gpusensors import GpuWindow, gpu_contention, gpu_flags, unread_gpu
from tileops.device import DeviceInfo
from tileops.device import nvml as device_nvml
from tileops.device.nvml import NvmlError, NvmlGpu, NvmlSession
from tileops.records.contract import RowConditions


class _FromDevice:
    """The default NVML: the process's own session (``tileops.device.nvml.session_status``)."""


_FROM_DEVICE = _FromDevice()


class RowSensors:
    """``start()`` before a row, ``stop()`` after: a :class:`RowConditions`. One instance serves many rows.

    ``device``: the run's :class:`~tileops.device.DeviceInfo` (its uuid, else its index, finds the GPU in
    NVML). ``threads``: the row's own busy threads (a CPU row: torch's), which the load average counts.
    ``nvml``: an NVML session (default: the process's, ``tileops.device.nvml``), None for none.
    ``own_pids``: this process as NVML lists it (default: its PIDs in every namespace /proc shows; inside a
    container NVML lists host PIDs, so the run passes what ``tileops.device.own_gpu_pids`` found);
    ``own_pids_unknown``: why they could not be told, and then other processes are blank with it rather
    than this process counted as another. ``poll_s``: the GPU thread's period, None for no thread.
    """

    def __init__(self, device: DeviceInfo, *, threads: int = 1, proc: Path = PROC, sys: Path = SYS,
                 nvml: NvmlSession | _FromDevice | None = _FROM_DEVICE,
                 own_pids: Collection[int] | None = None, own_pids_unknown: str | None = None,
                 poll_s: float | None = 0.1, clock: Callable[[], float] = time.monotonic) -> None:
        self.kind: str = device.kind
        self.own_pids_unknown = own_pids_unknown
        self.threads = threads
        self.proc, self.sys = proc, sys
        self.clock = clock
        self.poll_s = poll_s
        self.own_pids = set(own_pids) if own_pids is not None else None
        self._gpu: NvmlGpu | None = None
        self._gpu_why = ""
        if self.kind == "cuda":
            self._open_gpu(device, nvml)
        self._started = False
        self._thread: threading.Thread | None = None
        self._window: GpuWindow | None = None

    def _open_gpu(self, device: DeviceInfo, session: NvmlSession | _FromDevice | None) -> None:
        if isinstance(session, _FromDevice):
            session, error = device_nvml.session_status()
            self._gpu_why = str(error or "")
        elif session is None:
            self._gpu_why = "no NVML given"
        if session is None:
            return
        try:
            self._gpu = session.find_gpu(device.uuid, device.index or 0)
        except NvmlError as exc:
            cause = exc.__cause__ or exc
            self._gpu_why = f"NVML does not know {device.torch_device} ({type(cause).__name__}: {cause})"

    # -- start / stop

    def start(self) -> None:
        """Read the counters and start the GPU's poll. A ``start()`` without ``stop()`` (a row that raised) is
        forgotten: its thread ends here."""
        if self._started:
            self._halt()
        self._t0 = self.clock()
        self._cpu = CpuWindow(self.proc, self.sys)
        self._stop_event = threading.Event()
        self._window = None
        if self._gpu is not None:
            self._window = GpuWindow(self._gpu, self.own_pids, self.own_pids_unknown, self.proc)
            if self.poll_s:
                self._thread = threading.Thread(target=self._poll_loop, name="tileops-sensors", daemon=True)
                self._thread.start()
        self._started = True

    def poll_once(self) -> None:
        """One reading of the GPU's clock, clock-event reasons, power and temperature (the thread's step)."""
        if self._window is not None:
            self._window.poll()

    def _poll_loop(self) -> None:
        assert self.poll_s
        while not self._stop_event.wait(self.poll_s):
            self.poll_once()

    def _halt(self) -> None:
        self._started = False
        if self._thread is not None:
            self._stop_event.set()
            self._thread.join()
            self._thread = None

    def stop(self) -> RowConditions:
        if not self._started:
            raise RuntimeError("RowSensors.stop() without start()")
        self._halt()
        gpu = None
        if self.kind == "cuda":
            if self._window is None:
                gpu = unread_gpu(self._gpu_why or "NVML is unavailable")
            else:
                self._window.poll()
                gpu = self._window.conditions(max(0.0, self.clock() - self._t0))
        cpu = self._cpu.conditions()
        window = max(0.0, self.clock() - self._t0)
        reasons: list[str] = []
        if self.kind == "cpu":
            reasons += cpu_contention(cpu, self.threads)
        flags = {"throttled": False, "power_capped": False, "thermal": False}
        if gpu is not None:
            reasons += gpu_contention(gpu, window)
            flags = gpu_flags(gpu, window)
        return RowConditions(window_s=window, contended=bool(reasons), contention=reasons, cpu=cpu, gpu=gpu,
                             **flags)
