"""The process's one NVML session (tileops.device.nvml): started once, shut down at exit, every failure one
error, and the only module that imports the bindings. NVML cannot run here: a fake of nvidia-ml-py's names."""

from __future__ import annotations

import ast
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from tileops.device import nvml

PKG = Path(__file__).resolve().parents[1] / "tileops"


@pytest.fixture(autouse=True)
def fresh_session() -> Iterator[None]:
    nvml.session_status.cache_clear()
    yield
    nvml.session_status.cache_clear()


def _bindings(monkeypatch: pytest.MonkeyPatch, *, init_fails: bool = False) -> types.ModuleType:
    mod = types.ModuleType("pynvml")
    mod.calls = []

    def init() -> None:
        mod.calls.append("init")
        if init_fails:
            raise RuntimeError("Driver Not Loaded")

    mod.nvmlInit = init
    mod.nvmlShutdown = lambda: mod.calls.append("shutdown")

    def by_uuid(uuid: str) -> str:
        raise RuntimeError("NVML_ERROR_NOT_FOUND")

    mod.nvmlDeviceGetHandleByUUID = by_uuid
    mod.nvmlDeviceGetHandleByIndex = lambda i: f"h{i}"
    mod.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    return mod


def test_nvml_starts_once_per_process_and_shuts_down_at_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    lib = _bindings(monkeypatch)
    at_exit: list = []
    monkeypatch.setattr(nvml.atexit, "register", lambda fn, *args: at_exit.append((fn, args)))
    first, second = nvml.session(), nvml.session()
    assert first is second and lib.calls == ["init"]
    ((fn, args),) = at_exit
    fn(*args)
    assert lib.calls == ["init", "shutdown"]


def test_no_bindings_and_no_driver_are_one_error_saying_which(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the import fails
    with pytest.raises(nvml.NvmlError, match="nvidia-ml-py is not installed") as missing:
        nvml.session()
    assert missing.value.bindings_missing
    assert nvml.why_unavailable() == str(missing.value)
    nvml.session_status.cache_clear()
    _bindings(monkeypatch, init_fails=True)
    with pytest.raises(nvml.NvmlError, match="NVML could not start") as no_driver:
        nvml.session()
    assert not no_driver.value.bindings_missing and no_driver.value.cause == "Driver Not Loaded"


def test_a_failed_call_names_the_call_and_a_gpu_is_found_by_index_when_its_uuid_is_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _bindings(monkeypatch)
    session = nvml.session()
    gpu = session.find_gpu("MIG-unknown", 2)
    assert gpu.handle == "h2" and gpu.name() == "NVIDIA H200"  # bytes from older bindings, as text
    with pytest.raises(nvml.NvmlError, match=r"NVML nvmlDeviceGetMemoryBusWidth failed \(AttributeError"):
        gpu.bus_width_bits()  # a call these bindings lack
    assert gpu.power_w() is None and gpu.clock_event_mask() is None  # a sensor's reading: None, not an error
    with pytest.raises(nvml.NvmlError, match="NVML_ERROR_NOT_FOUND"):
        session.find_gpu("GPU-x", None)


def test_only_the_device_package_imports_the_nvml_bindings() -> None:
    importers = []
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "pynvml" for n in names):
                importers.append(path.relative_to(PKG).as_posix())
    assert importers == ["device/nvml.py"]
