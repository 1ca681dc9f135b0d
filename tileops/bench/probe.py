"""The reference probe (issue 39): the device's own state, read between a row's blocks.

Why. A row's time answers two questions at once: is the device slow now (a
neighbour eating its memory bandwidth, a throttled clock, a straggler), or did
the kernel get worse? On this project's 2-core VM a memory-bound row moves 11-27 %
between processes; a copy timed in blocks interleaved with relu's blocks moved
with it (issue 39). So a short probe of a fixed kernel, timed between the row's
blocks, reads the device's state at the moments the row ran, and the roofline
divides it out (``tileops.roofline.state``): the row's SOL against the device's
state, the kernel's own efficiency.

What it runs (:class:`Probe`), one worker's buffers allocated once, outside any
row's timing:

* ``memory``, every row: ``torch.sum`` over the next chunk of a buffer of twice
  the last-level cache, each probe a different chunk in turn, so the chunk it
  reads is cold (the row's timer flushes the cache before each sample too).
  Counted as STREAM counts a read, one word per element; read against the
  profile's ``read`` mix. A read, not the calibration's copy: the bench loads no
  calibration code (spec §5.2), torch's copy stores through the cache
  (write-allocate), and a read moves the bytes it counts.
* ``fma``, compute-bound rows (FLOPs per byte at least the device kind's
  balance): a batch of 2 x threads cache-resident 256^3 fp32 GEMMs (``bmm``, the
  calibration's ``cpu.fp32`` kernel at its quick size); on a GPU one 2048^3 fp32
  GEMM with TF32 off, read against ``cuda_core.fp32``.
* ``sm_clock``, a GPU: NVML's SM clock at each probe.

The kernels are not the calibration's own, and a probe's level is a median where
a calibration keeps its best pass; so a healthy device reads a probe ratio under
1 by a constant of the probe's own. That constant is the same in two runs of the
same device, so it cancels in a comparison (``roofline --baseline``); what moves
is the device.

The cost (:class:`VisitProbe`). Before each probe the visit's probing so far
plus the probe's last duration must stay within :data:`PROBE_SHARE` (10 %) of
the visit's elapsed time; a probe that would pass it waits for a later gap. The
record keeps what probing cost (``ProbeReading.cost_s``, ``cost_share``).

GPU paths are written and fail closed (a kind that fails is recorded as not run,
with why); they have not been run on a GPU. Standard library and torch only
(spec §5.2).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass, field
from collections.abc import Callable

import torch

from tileops.device import DeviceInfo
from tileops.records import ProbeRate, ProbeReading

#: The most of a visit's time the probes may take.
PROBE_SHARE = 0.10
#: The most runs of one probe in one gap between blocks (a quick row has few gaps; each run is one more reading).
PER_GAP = 3
#: Untimed runs of each probe when a worker builds it (the first pays one-time costs).
WARM_RUNS = 3
#: A CPU memory probe's chunk: a few hundred microseconds of DRAM traffic, many chunks per buffer.
CPU_CHUNK_BYTES = 4 << 20
#: A GPU's: large enough that launch overhead is small next to its traffic.
GPU_CHUNK_BYTES = 64 << 20
#: The square size of the CPU FMA probe's GEMMs (cache-resident: three 256 KiB operands per thread).
CPU_FMA_N = 256
GPU_FMA_N = 2048
#: FLOPs per byte from which a row gets the FMA probe: about a machine's balance (peak / bandwidth).
BALANCE = {"cpu": 8.0, "cuda": 64.0}
F32 = 4


def compute_bound(flops: float | None, nbytes: float | None, device_kind: str) -> bool:
    """Whether a row's work is compute-bound enough to want the FMA probe (its intensity at least the balance)."""
    f, b = flops or 0, nbytes or 0
    balance = BALANCE.get(device_kind, BALANCE["cpu"])
    return f > 0 and (b == 0 or f / b >= balance)


@dataclass
class ProbeKind:
    """One probe: what it runs (``run`` returns its own seconds), the work one run does, what it is read
    against."""

    name: str
    unit: str
    work: float
    reference: str | None
    method: str
    run: Callable[[], float]
    last_s: float = 0.0  # what the next run is expected to cost: the median wall seconds of the last few runs
    recent: list[float] = field(default_factory=list)

    def ran(self, wall_s: float) -> None:
        """A run took ``wall_s``: the estimate follows the median of the last three (one run a neighbour slowed
        does not starve the probe for the rest of the row)."""
        self.recent = [*self.recent[-2:], wall_s]
        self.last_s = statistics.median(self.recent)


class Probe:
    """A worker's probe of one device: its buffers are made once and touched (so no page fault is timed).

    ``kinds(compute)`` gives the probes a row runs; ``not_run`` why a kind is missing (a GPU's NVML clock
    unreadable, a kind that failed to build)."""

    def __init__(self, device: DeviceInfo) -> None:
        self.device = device
        self.not_run: dict[str, str] = {}
        self._kinds: dict[str, ProbeKind] = {}
        for name, build in (("memory", self._memory), ("fma", self._fma), ("sm_clock", self._sm_clock)):
            try:
                kind = build()
                if kind is not None:  # untimed runs: first-call costs (BLAS, kernel load), then the cost estimate
                    for _ in range(WARM_RUNS):
                        kind.ran(_wall(kind.run))
            except Exception as exc:  # fail closed: a probe that cannot be built or run is not run, and says why
                self.not_run[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
                continue
            if kind is not None:
                self._kinds[name] = kind

    def kinds(self, compute: bool) -> tuple[list[ProbeKind], dict[str, str]]:
        """The probes for a row (``compute``: it gets the FMA probe) and why any other kind is not run."""
        out = [k for n, k in self._kinds.items() if n != "fma" or compute]
        why = dict(self.not_run)
        if not compute and "fma" in self._kinds:
            why["fma"] = "a memory-bound row: its FLOPs per byte are under the device's balance"
        return out, why

    # -- the kinds ---------------------------------------------------------------------------------------

    def _memory(self) -> ProbeKind:
        dev = self.device.torch_device
        gpu = self.device.kind == "cuda"
        chunk = GPU_CHUNK_BYTES if gpu else CPU_CHUNK_BYTES
        chunk = max(chunk, 2 * (self.device.l2_bytes or 0)) if gpu else chunk
        total = max(2 * (self.device.l2_bytes or 32 << 20), 4 * chunk)
        n, per = total // F32, chunk // F32
        buf = torch.ones(n, dtype=torch.float32, device=dev)
        offsets = list(range(0, n - per + 1, per))
        state = {"i": 0}

        def run() -> float:
            off = offsets[state["i"] % len(offsets)]
            state["i"] += 1
            part = buf[off:off + per]
            return _timed(lambda: part.sum(), gpu, dev)

        return ProbeKind("memory", "B/s", float(per * F32), "read",
                         f"torch.sum over a cold {chunk >> 20} MiB chunk of a {total >> 20} MiB buffer, "
                         "the next chunk each probe (one word per element, STREAM's read)", run)

    def _fma(self) -> ProbeKind:
        dev = self.device.torch_device
        if self.device.kind == "cuda":  # pragma: no cover - needs a GPU
            return self._gpu_fma()
        batch = 2 * torch.get_num_threads()
        n = CPU_FMA_N
        x, y = torch.randn(batch, n, n), torch.randn(batch, n, n)
        z = torch.empty(batch, n, n)

        def run() -> float:
            return _timed(lambda: torch.bmm(x, y, out=z), False, dev)

        return ProbeKind("fma", "FLOP/s", 2.0 * batch * n**3, "cpu.fp32",
                         f"cache-resident fp32 GEMMs, bmm {batch}x{n}x{n}x{n} (BLAS FMA micro-kernel)", run)

    def _gpu_fma(self) -> ProbeKind:  # pragma: no cover - needs a GPU
        dev = self.device.torch_device
        n = GPU_FMA_N
        a = torch.randn(n, n, device=dev)
        b = torch.randn(n, n, device=dev)

        def run() -> float:
            was = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = False
            try:
                return _timed(lambda: torch.mm(a, b), True, dev)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = was

        return ProbeKind("fma", "FLOP/s", 2.0 * n**3, "cuda_core.fp32",
                         f"fp32 GEMM {n}^3 with TF32 off (torch.mm)", run)

    def _sm_clock(self) -> ProbeKind | None:
        if self.device.kind != "cuda":
            self.not_run["sm_clock"] = "a CPU: no SM clock"
            return None
        return self._gpu_clock()  # pragma: no cover - needs a GPU

    def _gpu_clock(self) -> ProbeKind:  # pragma: no cover - needs a GPU
        from tileops.device.nvml import session

        gpu = session().find_gpu(self.device.uuid, self.device.index)
        if gpu.sm_mhz() is None:
            raise RuntimeError("NVML gives no SM clock for this device")

        def run() -> float:
            mhz = gpu.sm_mhz()
            if mhz is None or mhz <= 0:
                raise RuntimeError("NVML gave no SM clock")
            return 1.0 / (mhz * 1e6)  # one cycle's period: work (1 cycle) / time is the clock

        return ProbeKind("sm_clock", "Hz", 1.0, None, "NVML's SM clock at each probe", run)


def _timed(fn: Callable[[], object], gpu: bool, dev: str) -> float:
    """Seconds one call of ``fn`` took: the wall clock on a CPU, CUDA events on a GPU."""
    if gpu:  # pragma: no cover - needs a GPU
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(dev)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _wall(run: Callable[[], float]) -> float:
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


_PROBES: dict[str, Probe] = {}


def worker_probe(device: DeviceInfo) -> Probe:
    """The worker's one probe of ``device`` (its buffers allocated once, like the cache flusher's)."""
    if device.key not in _PROBES:
        _PROBES[device.key] = Probe(device)
    return _PROBES[device.key]


@dataclass
class VisitProbe:
    """The probes of one visit of a row: :meth:`between` is the block loop's hook (``sample_blocks``'
    ``between``), :meth:`reading` what the visit's record keeps."""

    kinds: list[ProbeKind]
    not_run: dict[str, str] = field(default_factory=dict)
    share: float = PROBE_SHARE
    clock: Callable[[], float] = time.perf_counter
    times: dict[str, list[float]] = field(default_factory=dict)
    cost_s: float = 0.0
    failed: dict[str, str] = field(default_factory=dict)
    _t0: float | None = None

    def start(self) -> None:
        """The visit starts (its warm-up): the share is of the time from here."""
        self._t0 = self.clock()

    def between(self) -> None:
        """Run each probe, up to :data:`PER_GAP` times, while its cost still fits the share of the visit's time so
        far (:meth:`ProbeKind.ran`: what the next run is expected to cost)."""
        if self._t0 is None:
            self.start()
        assert self._t0 is not None
        for kind in self.kinds:
            for _ in range(PER_GAP):
                if kind.name in self.failed or self.cost_s + kind.last_s > self.share * (self.clock() - self._t0):
                    break
                self._run(kind)

    def _run(self, kind: ProbeKind) -> None:
        t0 = self.clock()
        try:
            seconds: float | None = kind.run()
        except Exception as exc:  # fail closed: the kind stops, the record says why
            self.failed[kind.name] = f"failed during the row: {type(exc).__name__}: {str(exc)[:200]}"
            seconds = None
        wall = self.clock() - t0
        kind.ran(wall)
        self.cost_s += wall
        if seconds is not None and seconds > 0:
            self.times.setdefault(kind.name, []).append(seconds)

    def reading(self, total_s: float | None) -> ProbeReading:
        """What the visit's record keeps: each kind's times (a kind with none says why), the cost and its share
        of ``total_s`` (the visit's timing wall time)."""
        rates = [ProbeRate(kind=k.name, unit=k.unit, work=k.work, times_s=[self.times[k.name]],  # type: ignore[arg-type]
                           reference=k.reference, method=k.method)
                 for k in self.kinds if self.times.get(k.name)]
        why = {**self.not_run, **self.failed}
        for k in self.kinds:
            if not self.times.get(k.name) and k.name not in why:
                why[k.name] = (f"no gap had room: a probe takes {k.last_s * 1e3:.2f} ms, more than "
                               f"{self.share:.0%} of the row's time allowed")
        share = min(1.0, self.cost_s / total_s) if total_s else None
        return ProbeReading(rates=rates, cost_s=self.cost_s, cost_share=share, not_run=why)


def merge_readings(first: ProbeReading | None, second: ProbeReading | None, total_s: float | None
                   ) -> ProbeReading | None:
    """A row's probe over its two visits: each kind's times per visit (a kind one visit lacks keeps the other's),
    the costs added, the share of both visits' time (``total_s``). None where neither visit was probed."""
    if first is None or second is None:
        return second or first
    rates = []
    kinds = [r.kind for r in first.rates] + [r.kind for r in second.rates if first.rate(r.kind) is None]
    for kind in kinds:
        a, b = first.rate(kind), second.rate(kind)
        base = b or a
        assert base is not None
        times = [*(a.times_s if a else []), *(b.times_s if b else [])]
        rates.append(dataclasses.replace(base, times_s=times))
    cost = first.cost_s + second.cost_s
    not_run = {k: v for k, v in {**first.not_run, **second.not_run}.items() if k not in kinds}
    return ProbeReading(rates=rates, cost_s=cost, cost_share=min(1.0, cost / total_s) if total_s else None,
                        not_run=not_run)
