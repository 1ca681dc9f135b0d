"""Which GPU processes are others (tileops.device.gpu_processes), inside and outside a container.

NVML reports host PIDs; inside a container this process has another PID and its procfs
shows only the container's namespace. The pure part that decides is tested here on the
shapes NVML returns; NSpid is read from this machine's real /proc.
"""

from __future__ import annotations

import os
from pathlib import Path

from tileops.device import PROBE_BYTES, DeviceInfo, gpu_processes, namespace_pids, own_pids_in

MiB = 2**20


def never() -> dict[int, int | None]:
    raise AssertionError("no probe needed")


def test_namespace_pids_read_nspid_from_this_procfs(tmp_path: Path) -> None:
    assert os.getpid() in namespace_pids()
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nNSpid:\t48213\t7\n")
    assert namespace_pids(status) >= {48213, 7, os.getpid()}
    assert namespace_pids(tmp_path / "missing") == {os.getpid()}


def test_same_pid_namespace_matches_by_pid() -> None:
    listed = {os.getpid(): 900 * MiB, 4242: 10_000 * MiB}
    assert own_pids_in(listed, {os.getpid()}, holds_context=True, probe=never) == {os.getpid()}


def test_a_process_without_a_cuda_context_is_not_listed() -> None:
    assert own_pids_in({4242: 10_000 * MiB}, {7}, holds_context=False, probe=never) == set()


def test_in_a_container_the_process_whose_memory_grows_with_the_probe_is_this_one() -> None:
    before = {81234: 600 * MiB, 90001: 20_000 * MiB}  # host PIDs: neither is os.getpid() in the container
    after = {81234: 600 * MiB + PROBE_BYTES, 90001: 20_000 * MiB + 2 * MiB}
    assert own_pids_in(before, {7}, holds_context=True, probe=lambda: after) == {81234}


def test_a_context_created_by_the_probe_is_this_one() -> None:
    before = {90001: 20_000 * MiB}
    after = {90001: 20_000 * MiB, 81234: 300 * MiB + PROBE_BYTES}
    assert own_pids_in(before, {7}, holds_context=True, probe=lambda: after) == {81234}


def test_when_nvml_cannot_tell_it_says_so() -> None:
    before = {81234: None, 90001: None}  # no per-process memory (some containers and MIG setups)
    assert own_pids_in(before, {7}, holds_context=True, probe=lambda: dict(before)) is None
    both = {81234: 600 * MiB, 90001: 600 * MiB}
    grown = {p: m + PROBE_BYTES for p, m in both.items()}  # two grew: ambiguous, never a guess
    assert own_pids_in(both, {7}, holds_context=True, probe=lambda: grown) is None
    assert own_pids_in(both, {7}, holds_context=True, probe=lambda: None) is None


def test_a_cpu_device_has_no_gpu_processes() -> None:
    assert gpu_processes(DeviceInfo(kind="cpu", name="any CPU")) == []


# --------------------------------------------------------------------------- what the calibration's idle check says


def _fake_gpu(monkeypatch, listed: dict[int, int | None], after: dict[int, int | None] | None) -> None:
    """The GPU-only pieces (a GPU's NVML) stand in; which processes are others, and the message, are real."""
    from tileops.device import nvml
    from tileops.device import processes as P

    monkeypatch.setattr(nvml, "session_status", lambda: (nvml.NvmlSession(object()), None))
    monkeypatch.setattr(P, "gpu_uuid", lambda index: "GPU-1234")
    monkeypatch.setattr(nvml.NvmlSession, "gpu_by_uuid", lambda self, uuid: nvml.NvmlGpu(self, object()))
    monkeypatch.setattr(P, "process_memory", lambda gpu: dict(listed))
    monkeypatch.setattr(P, "_holds_context", lambda index: True)
    monkeypatch.setattr(P, "_probe_listing", lambda gpu, index: after)


def _idle_warnings() -> list[str]:
    from tileops.calibrate.run import idle_warnings
    from tileops.device import DeviceInfo

    return idle_warnings(DeviceInfo(kind="cuda", name="NVIDIA H200", index=0, uuid="GPU-1234"))


def test_the_idle_check_says_nvml_is_missing_only_when_it_is(monkeypatch) -> None:
    import importlib.util

    if importlib.util.find_spec("pynvml") is not None:
        import pytest

        pytest.skip("nvidia-ml-py is installed here")
    (warning,) = _idle_warnings()  # this host, for real: no nvidia-ml-py
    assert "could not check that cuda:0 is idle" in warning and "nvidia-ml-py is not installed" in warning


def test_the_idle_check_says_when_this_process_cannot_be_told_apart_in_a_container(monkeypatch) -> None:
    both = {81234: 600 * MiB, 90001: 600 * MiB}
    _fake_gpu(monkeypatch, both, {p: m + PROBE_BYTES for p, m in both.items()})  # two grew: ambiguous
    (warning,) = _idle_warnings()
    assert "could not check that cuda:0 is idle" in warning and "nvidia-ml-py" not in warning
    assert "none is this process's PID" in warning and "--pid=host" in warning and "2 process(es)" in warning


def test_the_idle_check_names_the_other_processes_and_is_quiet_when_alone(monkeypatch) -> None:
    before = {81234: 600 * MiB, 90001: 20_000 * MiB}
    _fake_gpu(monkeypatch, before, {81234: 600 * MiB + PROBE_BYTES, 90001: 20_000 * MiB})
    (warning,) = _idle_warnings()
    assert "1 other process(es) on cuda:0 (pid 90001)" in warning
    _fake_gpu(monkeypatch, {81234: 600 * MiB}, {81234: 600 * MiB + PROBE_BYTES})
    assert _idle_warnings() == []
