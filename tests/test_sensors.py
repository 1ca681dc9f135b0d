"""The sensors around a row (tileops.bench.sensors) and the look before the rows (tileops.bench.quiet).

The CPU readers run on fake /proc and /sys trees written in tmp_path (and once on this machine's real
/proc); the GPU readers on a fake pynvml module, since NVML cannot exist here: its functions and
constants carry the names of nvidia-ml-py 13.615.71's pynvml.py, and a gpu test checks them against the
real module where it is installed.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tileops.bench import cpusensors
from tileops.bench.quiet import HostBusyError, QuietCheck, check_quiet
from tileops.bench.cpusensors import rapl_joules, read_rapl
from tileops.bench.gpusensors import APPLICATIONS_CLOCKS, GPU_IDLE, HW_THERMAL, SW_POWER_CAP, reason_names
from tileops.bench.sensors import RowSensors
from tileops.device import DeviceInfo, NvmlSession, ProcessCheck
from tileops.records.contract import RowConditions
from tileops.records import from_data, to_data

from sensors_support import Clock, FakeNvml, FakeProc, fake_rapl


# -- a fake /proc and /sys ------------------------------------------------------------------------------------


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path / "proc")


# -- CPU ------------------------------------------------------------------------------------------------------


GPU0 = DeviceInfo(kind="cuda", name="NVIDIA H200", index=0)
GPU1 = DeviceInfo(kind="cuda", name="NVIDIA H200", index=0, uuid="GPU-1")  # the one the fake NVML knows
CPU = DeviceInfo(kind="cpu", name="a CPU", hostname="h")


def test_a_quiet_cpu_row(proc: FakeProc, tmp_path: Path) -> None:
    clock = Clock()
    s = RowSensors(CPU, threads=2, proc=proc.root, sys=tmp_path / "sys", clock=clock)
    s.start()
    proc.advance(total=200, own=150, others=10, load=1.9)
    clock.t += 1.0
    got = s.stop()
    assert got.window_s == 1.0 and got.gpu is None
    cpu = got.cpu
    assert cpu is not None and cpu.cores == 2
    assert cpu.steal == 0.0 and cpu.others_busy == pytest.approx(10 / 200)
    assert (cpu.load1_start, cpu.load1_end) == (0.2, 1.9)  # the row's own two threads are in the load
    assert not got.contended and got.contention == [] and not got.throttled
    assert cpu.energy_j is None and "no RAPL energy counter" in cpu.blank["energy_j"]
    assert set(cpu.blank) == {"energy_j"}


@pytest.mark.parametrize("advance, words", [
    ({"steal": 12, "own": 150}, "steal 6.0% of CPU time"),
    ({"others": 60, "own": 100}, "other processes used 30% of the CPUs"),
    ({"own": 150, "load": 4.5}, "load 4.50 on 2 CPUs besides this row's 2 thread(s)"),
])
def test_a_contended_cpu_row_says_why(proc: FakeProc, tmp_path: Path, advance: dict, words: str) -> None:
    s = RowSensors(CPU, threads=2, proc=proc.root, sys=tmp_path / "sys")
    s.start()
    proc.advance(total=200, **advance)
    got = s.stop()
    assert got.contended and len(got.contention) == 1 and words in got.contention[0]


def test_limits_are_limits_not_any_reading(proc: FakeProc, tmp_path: Path) -> None:
    """Steal of 2 % and others at 9 % are under their limits; load 3.9 with two own threads on two CPUs is not
    over them either."""
    s = RowSensors(CPU, threads=2, proc=proc.root, sys=tmp_path / "sys")
    s.start()
    proc.advance(total=200, steal=4, others=18, own=100, load=3.9)
    assert not s.stop().contended


def test_unreadable_proc_is_blank_with_its_reason(tmp_path: Path) -> None:
    s = RowSensors(CPU, proc=tmp_path / "nothing", sys=tmp_path / "sys")
    s.start()
    got = s.stop()
    cpu = got.cpu
    assert cpu is not None and cpu.steal is None and cpu.others_busy is None and cpu.load1_end is None
    assert "nothing/stat" in cpu.blank["steal"] and "FileNotFoundError" in cpu.blank["steal"]
    assert "nothing/loadavg" in cpu.blank["load1_end"]
    assert not got.contended  # unknown is not contended: the blanks say what was not seen


def test_a_row_shorter_than_a_tick_has_no_shares(proc: FakeProc, tmp_path: Path) -> None:
    s = RowSensors(CPU, proc=proc.root, sys=tmp_path / "sys")
    s.start()
    got = s.stop()
    assert got.cpu is not None and got.cpu.steal is None and "accounting tick" in got.cpu.blank["steal"]


def test_stop_without_start_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="without start"):
        RowSensors(CPU, proc=tmp_path).stop()


def test_the_real_proc_of_this_machine_gives_a_well_formed_snapshot() -> None:
    s = RowSensors(CPU, threads=1)
    s.start()
    time.sleep(0.05)
    got = s.stop()
    cpu = got.cpu
    assert cpu is not None and got.window_s >= 0.05
    assert cpu.cores is not None and cpu.cores >= 1
    assert cpu.load1_start is not None and cpu.load1_start >= 0
    for share in ("steal", "others_busy"):
        v = getattr(cpu, share)
        assert (v is None) == (share in cpu.blank) and (v is None or 0 <= v <= 1)
    assert (cpu.energy_j is None) == ("energy_j" in cpu.blank)
    assert got.contended == bool(got.contention)


def test_a_snapshot_reads_back_through_the_record_contract(proc: FakeProc, tmp_path: Path) -> None:
    """The snapshot is plain data the strict record reader accepts as it stands: the later wiring can put it on
    a record as a field (``conditions: RowConditions | None = None``) without a new decoder."""
    s = RowSensors(CPU, threads=2, proc=proc.root, sys=tmp_path / "sys")
    s.start()
    proc.advance(total=200, steal=12, own=150)
    got = s.stop()
    assert from_data(RowConditions, to_data(got)) == got
    gpu = _sensors(FakeNvml(reasons=[SW_POWER_CAP]), tmp_path)
    gpu.start()
    back = gpu.stop()
    assert from_data(RowConditions, to_data(back)) == back


# -- RAPL -----------------------------------------------------------------------------------------------------


def test_rapl_sums_the_packages_and_undoes_a_wrap(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    fake_rapl(root, {"intel-rapl:0": ("package-0", 262_000_000_000, 262_143_328_850),
                     "intel-rapl:1": ("package-1", 5_000_000, 262_143_328_850),
                     "intel-rapl:2": ("psys", 9_000_000, 262_143_328_850),  # holds the packages: not added
                     "intel-rapl:0:0": ("core", 1, 10)})
    start = read_rapl(root)
    assert start.domains is not None and set(start.domains) == {"intel-rapl:0", "intel-rapl:1"}
    fake_rapl(root, {"intel-rapl:0": ("package-0", 1_000_000, 262_143_328_850),  # wrapped
                     "intel-rapl:1": ("package-1", 7_500_000, 262_143_328_850),
                     "intel-rapl:2": ("psys", 99_000_000, 262_143_328_850)})
    joules, why = rapl_joules(start, read_rapl(root))
    assert why == "" and joules == pytest.approx((262_143_328_850 - 262_000_000_000 + 1_000_000) * 1e-6 + 2.5)


def test_rapl_energy_on_a_cpu_row(proc: FakeProc, tmp_path: Path) -> None:
    root = tmp_path / "sys"
    fake_rapl(root, {"intel-rapl:0": ("package-0", 10_000_000, 2**32)})
    s = RowSensors(CPU, proc=proc.root, sys=root)
    s.start()
    fake_rapl(root, {"intel-rapl:0": ("package-0", 13_250_000, 2**32)})
    proc.advance(total=100, own=50)
    got = s.stop()
    assert got.cpu is not None and got.cpu.energy_j == pytest.approx(3.25) and "energy_j" not in got.cpu.blank


def test_rapl_readable_by_root_only_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Since Linux 5.10 energy_uj is mode 0400; these tests run as root, so the kernel's refusal is planted."""
    root = tmp_path / "sys"
    fake_rapl(root, {"intel-rapl:0": ("package-0", 1, 100)})
    real = Path.read_text

    def refuse(self: Path, *a: Any, **k: Any) -> str:
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", refuse)
    got = read_rapl(root)
    assert got.domains is None and "readable by root only" in got.why and "CVE-2020-8694" in got.why


def test_rapl_without_a_package_domain_or_with_changed_domains(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    fake_rapl(root, {"intel-rapl:0": ("psys", 1, 100)})
    assert "no package domain" in read_rapl(root).why
    a = cpusensors.RaplReading({"intel-rapl:0": (1, 100)})
    b = cpusensors.RaplReading({"intel-rapl:1": (5, 100)})
    assert rapl_joules(a, b) == (None, "the RAPL domains changed during the row")


# -- GPU: a fake pynvml ----------------------------------------------------------------------------------------


def _sensors(lib: Any, tmp_path: Path, clock: Clock | None = None, **kw: Any) -> RowSensors:
    proc = tmp_path / "gproc"
    if not proc.exists():
        FakeProc(proc)
    return RowSensors(GPU1, proc=proc, sys=tmp_path / "sys", nvml=NvmlSession(lib), poll_s=None, clock=clock or Clock(),
                      **{"own_pids": {4242}, **kw})


def test_a_quiet_gpu_row(tmp_path: Path) -> None:
    clock = Clock()
    lib = FakeNvml(reasons=[GPU_IDLE, 0, APPLICATIONS_CLOCKS], processes=[4242])
    s = _sensors(lib, tmp_path, clock)
    s.start()
    clock.t += 2.0
    s.poll_once()
    got = s.stop()
    g = got.gpu
    assert g is not None and got.cpu is not None  # the host is recorded beside the device
    assert g.other_processes == [] and g.energy_j == pytest.approx(500.0)
    assert g.sm_mhz_min == g.sm_mhz_max == 1980 and g.sm_mhz_readings == 3
    assert g.clock_event_mask == GPU_IDLE | APPLICATIONS_CLOCKS and g.clock_events == ["gpu_idle",
                                                                                       "applications_clocks"]
    assert g.power_w == pytest.approx(350.0) and g.power_limit_w == pytest.approx(700.0)
    assert g.temperature_c_max == 66 and g.power_capped_s == 0.0 and g.thermal_capped_s == 0.0
    assert g.blank == {}
    assert not got.contended and not got.throttled and not got.power_capped and not got.thermal


def test_a_power_capped_row_is_throttled_and_contended(tmp_path: Path) -> None:
    lib = FakeNvml(reasons=[0, SW_POWER_CAP, 0], clocks=[1980, 1500, 1755])
    s = _sensors(lib, tmp_path)
    s.start()
    s.poll_once()
    got = s.stop()
    assert got.gpu is not None and (got.gpu.sm_mhz_min, got.gpu.sm_mhz_max) == (1500, 1980)
    assert got.throttled and got.power_capped and not got.thermal and got.contended
    assert got.contention == ["clock events: sw_power_cap"]


def test_violation_counters_catch_a_cap_the_polls_missed(tmp_path: Path) -> None:
    """The reasons are instantaneous; the power policy's violation counter says the clocks were held down for
    0.4 s of a 1 s row although no poll saw it. A stray millisecond of thermal violation marks nothing."""
    clock = Clock()
    lib = FakeNvml(reasons=[0], violations={0: [5_000_000_000, 5_400_000_000], 1: [7_000_000, 8_000_000]})
    s = _sensors(lib, tmp_path, clock)
    s.start()
    clock.t += 1.0
    got = s.stop()
    assert got.gpu is not None and got.gpu.power_capped_s == pytest.approx(0.4)
    assert got.gpu.thermal_capped_s == pytest.approx(0.001)
    assert got.power_capped and got.throttled and not got.thermal
    assert got.contention == ["held below its clocks by the power policy for 400.0 ms of the row"]


def test_a_thermal_event_and_another_process(tmp_path: Path) -> None:
    lib = FakeNvml(reasons=[HW_THERMAL], processes=[4242, 777])
    s = _sensors(lib, tmp_path)
    s.start()
    got = s.stop()
    assert got.thermal and got.throttled and not got.power_capped
    assert got.gpu is not None and got.gpu.other_processes == [777]
    assert got.contention == ["1 other process(es) on the GPU (pid 777)", "clock events: hw_thermal_slowdown"]


def test_an_old_driver_reports_its_reasons_by_the_throttle_name(tmp_path: Path) -> None:
    lib = FakeNvml(reasons=[SW_POWER_CAP], old_driver=True)
    assert not hasattr(lib, "nvmlDeviceGetCurrentClocksEventReasons")
    s = _sensors(lib, tmp_path)
    s.start()
    assert s.stop().power_capped


def test_the_drivers_clock_samples_count_from_the_rows_start(tmp_path: Path) -> None:
    """The buffer held samples up to t=100 µs (1200 MHz, before the row); only newer ones are the row's."""
    lib = FakeNvml(clocks=[1980], samples=[[(90, 1200), (100, 1200)], [(90, 1200), (100, 1200), (150, 1410),
                                                                        (160, 1605)]])
    s = _sensors(lib, tmp_path)
    s.start()
    got = s.stop()
    assert got.gpu is not None and (got.gpu.sm_mhz_min, got.gpu.sm_mhz_max) == (1410, 1980)
    assert got.gpu.sm_mhz_readings == 4  # two polls, two buffered samples


def test_an_energy_counter_that_did_not_advance_is_blank(tmp_path: Path) -> None:
    lib = FakeNvml(energy_mj=[42, 42])
    s = _sensors(lib, tmp_path)
    s.start()
    got = s.stop()
    assert got.gpu is not None and got.gpu.energy_j is None
    assert "did not advance" in got.gpu.blank["energy_j"]


def test_without_nvml_every_gpu_field_is_blank_with_the_reason(tmp_path: Path) -> None:
    s = RowSensors(GPU0, proc=tmp_path, sys=tmp_path, nvml=None)
    s.start()
    got = s.stop()
    assert got.gpu is not None and got.gpu.energy_j is None and got.gpu.blank["energy_j"] == "no NVML given"
    assert not got.contended
    # the default: tileops.device's NVML, which this machine lacks (nvidia-ml-py is the gpu extra)
    from tileops.device import nvml

    session, why = nvml.session_status()
    if session is None:
        s = RowSensors(GPU0, proc=tmp_path, sys=tmp_path)
        s.start()
        g = s.stop().gpu
        assert g is not None and g.blank["sm_mhz_min"] == str(why)


def test_when_this_process_cannot_be_told_apart_other_processes_are_blank_not_counted(tmp_path: Path) -> None:
    """Inside a container NVML lists host PIDs; when the worker's probe could not find itself, the row does not
    count itself as another process (every row would read contended): the field is blank with the probe's why."""
    lib = FakeNvml(processes=[999_001])
    s = _sensors(lib, tmp_path, own_pids=None, own_pids_unknown="NVML lists 1 process(es) on cuda:0 by host PID")
    s.start()
    got = s.stop()
    assert got.gpu is not None and got.gpu.other_processes is None and not got.contended
    assert got.gpu.blank["other_processes"].startswith("NVML lists 1 process(es)")
    counted = _sensors(FakeNvml(processes=[999_001]), tmp_path)  # told apart (own_pids={4242}): 999001 is another
    counted.start()
    assert counted.stop().gpu.other_processes == [999_001]  # type: ignore[union-attr]


def test_an_unknown_device_is_blank_with_nvmls_answer(tmp_path: Path) -> None:
    class NoSuchGpu(FakeNvml):
        def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
            raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")

    s = RowSensors(DeviceInfo(kind="cuda", name="NVIDIA H200", index=3, uuid="GPU-9"), proc=tmp_path, sys=tmp_path,
                   nvml=NvmlSession(NoSuchGpu()), poll_s=None)
    s.start()
    g = s.stop().gpu
    assert g is not None and "NVML does not know cuda:3" in g.blank["energy_j"]


def test_the_polling_thread_reads_during_the_row_and_ends_with_it(tmp_path: Path) -> None:
    lib = FakeNvml(reasons=[0, 0, 0, HW_THERMAL, 0])
    s = RowSensors(GPU1, proc=tmp_path, sys=tmp_path, nvml=NvmlSession(lib), own_pids=set(),
                   poll_s=0.005)
    s.start()
    time.sleep(0.08)
    got = s.stop()
    assert lib.calls["reasons"] >= 5  # start, the thread's polls, stop
    assert got.thermal  # seen by a poll in the middle of the row
    assert not any(t.name == "tileops-sensors" for t in threading.enumerate())


def test_a_row_that_raised_before_stop_leaves_no_thread_behind(tmp_path: Path) -> None:
    s = RowSensors(GPU1, proc=tmp_path, sys=tmp_path, nvml=NvmlSession(FakeNvml()), own_pids=set(),
                   poll_s=0.005)
    s.start()  # the row raises; the worker's next row starts the same sensors again
    s.start()
    assert sum(t.name == "tileops-sensors" for t in threading.enumerate()) == 1
    s.stop()
    assert not any(t.name == "tileops-sensors" for t in threading.enumerate())


def test_reason_names_keep_unknown_bits() -> None:
    assert reason_names(SW_POWER_CAP | 0x1000) == ["sw_power_cap", "0x1000"]
    assert reason_names(0) == []


@pytest.mark.gpu
def test_the_nvml_names_exist_in_the_installed_pynvml() -> None:  # pragma: no cover - runs in scripts/device-check
    pynvml = pytest.importorskip("pynvml")
    for name in ("nvmlDeviceGetClockInfo", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit",
                 "nvmlDeviceGetTemperature", "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetViolationStatus",
                 "nvmlDeviceGetSamples", "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetHandleByUUID",
                 "nvmlDeviceGetHandleByIndex"):
        assert hasattr(pynvml, name), name
    assert hasattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons") or hasattr(
        pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons")
    for const, value in (("NVML_CLOCK_SM", 1), ("NVML_TEMPERATURE_GPU", 0), ("NVML_PROCESSOR_CLK_SAMPLES", 5),
                         ("NVML_PERF_POLICY_POWER", 0), ("NVML_PERF_POLICY_THERMAL", 1),
                         ("nvmlClocksEventReasonSwPowerCap", SW_POWER_CAP),
                         ("nvmlClocksEventReasonHwThermalSlowdown", HW_THERMAL)):
        assert getattr(pynvml, const, value) == value, const


@pytest.mark.gpu
def test_sensors_around_a_real_gpu_row() -> None:  # pragma: no cover - runs in scripts/device-check
    from tileops.device import nvml

    if nvml.session_status()[0] is None:
        pytest.skip("needs NVML (nvidia-ml-py)")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    from tileops.device import describe_device

    s = RowSensors(describe_device("cuda:0"))
    s.start()
    for _ in range(50):
        x @ x
    torch.cuda.synchronize()
    got = s.stop()
    g = got.gpu
    assert g is not None and g.sm_mhz_max is not None and g.sm_mhz_max > 0 and g.power_limit_w
    assert g.clock_event_mask is not None and (g.energy_j is None) == ("energy_j" in g.blank)


# -- the look before the rows --------------------------------------------------------------------------------


def test_a_quiet_host_passes_and_a_busy_one_warns_or_refuses(proc: FakeProc) -> None:
    def steal_during_the_window(stolen: int) -> Any:
        return lambda s: proc.advance(total=100, steal=stolen)

    got = check_quiet(proc=proc.root, sleep=steal_during_the_window(1))
    assert isinstance(got, QuietCheck) and got.quiet and got.cores == 2 and got.steal == pytest.approx(0.01)
    assert got.as_dict()["quiet"] is True and got.as_dict()["warnings"] == []
    proc.load = 3.5
    proc.write()
    busy = check_quiet(proc=proc.root, sleep=steal_during_the_window(8))
    assert not busy.quiet and len(busy.warnings) == 2
    assert "1-minute load 3.50 on 2 CPUs" in busy.warnings[0] and "8.0% of the CPU time" in busy.warnings[1]
    with pytest.raises(HostBusyError, match=r"--require-quiet: the host is not quiet: .*load 3\.50.*Fix: wait"):
        check_quiet(proc=proc.root, sleep=steal_during_the_window(8), require_quiet=True)


def test_the_gpu_check_is_the_devices_other_processes(proc: FakeProc) -> None:
    """A GPU run is judged by the device: other processes warn (and refuse), the host's load is only recorded."""
    proc.load = 9.0
    proc.write()
    sleep = lambda s: proc.advance(total=100)
    alone = check_quiet(GPU0, proc=proc.root, sleep=sleep, gpu_check=lambda d: ProcessCheck([]))
    assert alone.quiet and alone.gpu_others == [] and alone.load1 == 9.0
    shared = check_quiet(GPU0, proc=proc.root, sleep=sleep,
                         gpu_check=lambda d: ProcessCheck([{"pid": 31, "used_memory_bytes": 1}]))
    assert shared.warnings == ["1 other process(es) on cuda:0 (pid 31): they share its SMs and memory"]
    unknown = check_quiet(GPU0, proc=proc.root, sleep=sleep, gpu_check=lambda d: ProcessCheck(None, "no NVML"))
    assert unknown.quiet and unknown.blank == {"gpu_other_processes": "no NVML"}
    with pytest.raises(HostBusyError, match="pid 31"):
        check_quiet(GPU0, proc=proc.root, sleep=sleep, require_quiet=True,
                    gpu_check=lambda d: ProcessCheck([{"pid": 31, "used_memory_bytes": 1}]))


def test_an_unreadable_proc_is_blank_not_busy(tmp_path: Path) -> None:
    got = check_quiet(proc=tmp_path / "none", sleep=lambda s: None)
    assert got.quiet and got.steal is None and got.load1 is None
    assert "FileNotFoundError" in got.blank["steal"] and "loadavg" in got.blank["load1"]


def test_the_real_host_gives_a_well_formed_answer() -> None:
    got = check_quiet(window_s=0.05)
    assert got.cores is not None and got.cores >= 1 and got.load1 is not None and got.load1 >= 0
    assert got.steal is None or 0 <= got.steal <= 1
    assert got.quiet == (got.warnings == []) and all(isinstance(w, str) and w for w in got.warnings)
    assert set(got.as_dict()) == {"quiet", "cores", "load1", "steal", "window_s", "gpu_other_processes", "warnings",
                                  "blank"}
