"""Running a calibration: measure one device, build its profile, or calibrate every device in turn.

Measuring and writing are separate: ``calibrate_device`` (and ``calibrate_cpu``)
return a Profile and write nothing; the composing layer (``tileops.pipeline``)
writes. Each takes the device as described once (``tileops.device.DeviceInfo``).
``tileops.calibrate.children`` calibrates each visible device in its own
process (``tileops.calibrate.child``, which measures with ``measure_device``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from collections.abc import Callable, Iterable

import torch

from tileops import __version__
from tileops.calibrate import measure
from tileops.calibrate.clock import highest, load_clock_kernel, measure_clock
from tileops.calibrate.host import HostWatch
from tileops.calibrate.streaming import load_kernels
from tileops.calibrate.theoretical import TheoryOptions, base_profile
from tileops.bench.sensors import RowSensors
from tileops.ledger import ClockMeasurement, DeviceCalibration, build_profile, new_run_id
from tileops.device import DeviceInfo, describe_device, read_clocks
from tileops.profiles import Profile
from tileops.records import Machine, RowConditions
from tileops.revision import git_revision

#: progress(what, step, steps): called before each step, and once more with step == steps at the end.
Progress = Callable[[str, int, int], None]

CPU_ROOFS = ("cpu.fp32", "cpu.fp32_matmul")
GPU_ROOFS = ("cuda_core.fp32", "tensor_core.tf32", "tensor_core.bf16", "tensor_core.fp16", "tensor_core.fp8",
             "tensor_core.int8")


@dataclass
class CalibrationOutcome:
    profile: Profile
    run: DeviceCalibration
    warnings: list[str] = field(default_factory=list)


CLOCK_STEP = "clock under FMA load"


def _steps(kind: str) -> list[str]:
    roofs = CPU_ROOFS if kind == "cpu" else GPU_ROOFS
    clock = [CLOCK_STEP] if kind == "cpu" else []
    return [f"bandwidth: {m}" for m in ("copy", "triad", "read", "write")] + clock + [
        f"compute: {k}" for k in roofs] + ["latency floor"]


def idle_warnings(info: DeviceInfo) -> list[str]:
    """Why the device may not be idle before a calibration starts (the bench's look before its first row:
    load and steal on a CPU, other processes on a GPU), and what could not be checked. A calibration keeps
    these in its host check (``tileops.calibrate.host``), where contention refuses or marks it."""
    watch = HostWatch(info)
    blank = watch.look_before()
    return [*watch.before_reasons, *blank]


def measure_device(info: DeviceInfo, *, quick: bool = False, progress: Progress | None = None,
                   run_id: str | None = None) -> DeviceCalibration:
    """Measure the device's mixes, roofs and latency floor. Writes nothing."""
    dev = torch.device(info.torch_device)
    started = dt.datetime.now(dt.timezone.utc)
    if info.kind == "cpu":  # built before the host is watched: the compiler is this calibration's, no neighbour
        load_kernels()
        load_clock_kernel()
    watch = HostWatch(info)
    warnings = watch.look_before()
    steps = _steps(info.kind)
    done = [0]

    def step(what: str) -> None:
        if progress is not None:
            progress(what, done[0], len(steps))
        done[0] += 1
        watch.step(what)

    clocks_before = read_clocks(info)  # now, not when the device was described
    sensors = sensors_for(info)
    sensors.start()  # the whole measurement is one window: its power state is the calibration's
    try:
        if info.kind == "cpu":
            sizes = measure.cpu_sizes(info.l2_bytes, info.memory_bytes, quick)
        else:  # pragma: no cover - needs a GPU
            torch.cuda.set_device(dev)
            sizes = measure.gpu_sizes(info.l2_bytes, info.memory_bytes, quick)
        mixes, mix_notes = measure.measure_mixes(dev, sizes, step)
        warnings += mix_notes
        roofs: dict[str, measure.RoofMeasurement] = {}
        not_measured: dict[str, str] = {}
        clock: ClockMeasurement | None = None
        clock_why: str | None = None
        if info.kind == "cpu":
            # The clock on the bench's threads, around the FMA path and the big matmul (same thermal state); the
            # higher of the two. Why it could not be measured is said by build_profile's warning.
            step(CLOCK_STEP)
            threads = torch.get_num_threads()
            before = measure_clock(threads)
            step("compute: cpu.fp32")
            roofs["cpu.fp32"] = measure.cpu_fma_path(sizes)
            step("compute: cpu.fp32_matmul")
            roofs["cpu.fp32_matmul"] = measure.cpu_big_matmul(sizes)
            clock, clock_why = highest([before, measure_clock(threads)],
                                       ["before the FMA path", "after the big matmul"])
            step("latency floor")
            floor, how = measure.cpu_latency_floor(sizes)
        else:  # pragma: no cover - needs a GPU
            for key in GPU_ROOFS:
                step(f"compute: {key}")
                try:
                    roofs[key] = (measure.gpu_fp32(dev, sizes) if key == "cuda_core.fp32"
                                  else measure.gpu_gemm(key, dev, sizes))
                except Exception as exc:  # an unsupported dtype is a finding, not a crash
                    not_measured[key] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                finally:
                    torch.cuda.empty_cache()
            step("latency floor")
            floor, how = measure.gpu_latency_floor(dev, sizes)
    finally:
        conditions = sensors.stop()
    host = watch.finish(conditions)
    warnings += power_warnings(conditions)
    if progress is not None:
        progress("done", len(steps), len(steps))
    machine = Machine(**info.machine_fields(), torch_version=torch.__version__, tileops_version=__version__,
                      git_revision=git_revision())
    return DeviceCalibration(
        run_id=run_id or new_run_id(), started_at=started, finished_at=dt.datetime.now(dt.timezone.utc),
        quick=quick, machine=machine, clocks_before=clocks_before, clocks_after=read_clocks(info),
        mixes=mixes,
        roofs=roofs, not_measured=not_measured, latency_floor_s=floor, latency_method=how, clock=clock,
        clock_not_measured=clock_why or None, warnings=warnings, conditions=conditions,
        power_state=conditions.power_state(), power_blank=conditions.power_blank(), host=host)


def sensors_for(info: DeviceInfo) -> RowSensors:
    """The bench's sensors on the calibrated device: the same readings a row's record carries."""
    if info.kind == "cpu":
        return RowSensors(info, threads=torch.get_num_threads(), poll_s=None)
    return RowSensors(info)  # pragma: no cover - GPU


def power_warnings(conditions: RowConditions) -> list[str]:
    """A calibration measured under a power or thermal cap: its fractions are not the burst ones."""
    state = conditions.power_state()
    if state is None or state == "uncapped":
        return []
    g = conditions.gpu
    assert g is not None  # a power state is a GPU's
    clocks = (f", SM clock {g.sm_mhz_min:.0f}-{g.sm_mhz_max:.0f} MHz"
              if g.sm_mhz_min is not None and g.sm_mhz_max is not None else "")
    limit = f" under a {g.power_limit_w:.0f} W limit" if g.power_limit_w is not None else ""
    seen = ", ".join(g.clock_events) or "the violation counters"
    if state == "power-capped":
        return [f"measured power-capped{limit} ({seen}{clocks}): these fractions are sustained ones, below the "
                "burst ceiling a row at full clocks reaches; keep them as the profile's `sustained` and calibrate "
                "again with the clocks free for the burst `calibration` (docs/profiles.md, \"Burst and sustained "
                "fractions\")"]
    return [f"measured under a thermal cap ({seen}{clocks}): the device was too hot, so these fractions are low; "
            "fix the cooling and calibrate again"]


def calibrate_device(info: DeviceInfo, *, quick: bool = False, progress: Progress | None = None,
                     options: TheoryOptions | None = None,
                     profiles: Iterable[Profile] | None = None) -> CalibrationOutcome:
    """Measure the device and build its calibrated profile (theoretical figures resolved first, so a
    missing clock fails before minutes of measuring). Writes nothing. Without ``options``, what the
    environment states (``TheoryOptions.from_env``: ``$TILEOPS_DRAM_BANDWIDTH``)."""
    options = options if options is not None else TheoryOptions.from_env()
    base, notes = base_profile(info.kind, info.name, options, profiles)
    run = measure_device(info, quick=quick, progress=progress)
    run.warnings += physics_warnings(info, base, run)  # kept in the device's result: --all-devices prints them too
    profile, warnings = build_profile(base, [run])
    return CalibrationOutcome(profile=profile, run=run, warnings=[*run.warnings, *notes, *warnings])


def physics_warnings(info: DeviceInfo, base: Profile, run: DeviceCalibration) -> list[str]:
    """Before this calibration prices anything: the device's own facts against its profile's theoretical figures,
    and what it measured against what others published for the same SKU (``tileops.ceilings``)."""
    from tileops.ceilings.peers import peer_warnings
    from tileops.ceilings.runtime import check_device

    facts = check_device(info, base)
    return [*facts.warnings(), *peer_warnings(info.name, {m: x.bytes_per_s for m, x in run.mixes.items()},
                                              {k: x.flops_per_s for k, x in run.roofs.items()})]


def calibrate_cpu(quick: bool = False, progress: Progress | None = None,
                  options: TheoryOptions | None = None) -> Profile:
    """The calibrated CPU profile of this host (not written anywhere)."""
    return calibrate_device(describe_device("cpu"), quick=quick, progress=progress, options=options).profile
