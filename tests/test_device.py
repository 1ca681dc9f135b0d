"""What device this is: the host's stable name, which records and calibrations key a CPU by."""

from __future__ import annotations

import socket

import pytest

from tileops.bench.environment import run_environment
from tileops.device import describe_device, host_name


def test_host_name_prefers_the_node_name_of_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TILEOPS_HOSTNAME", raising=False)
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert host_name() == socket.gethostname()
    monkeypatch.setenv("NODE_NAME", "gpu-node-17")  # the chart passes spec.nodeName; the pod's hostname changes
    assert host_name() == "gpu-node-17"
    monkeypatch.setenv("TILEOPS_HOSTNAME", "rack3-host9")  # an explicit name wins
    assert host_name() == "rack3-host9"
    monkeypatch.setenv("TILEOPS_HOSTNAME", "  ")  # blank is unset
    assert host_name() == "gpu-node-17"


def test_records_and_device_keys_carry_that_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TILEOPS_HOSTNAME", raising=False)
    monkeypatch.setenv("NODE_NAME", "gpu-node-17")
    env = run_environment(describe_device("cpu"), "run-1", threads=2)
    assert env.device.hostname == "gpu-node-17" and env.device.key == "cpu-gpu-node-17"
