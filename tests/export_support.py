"""Builders for the export tests: records, run files and profiles made directly from the contracts.

Numbers are chosen so the expected prices are easy to reason about, but the
tests compare the exporter against ``tileops.roofline`` itself, never against
numbers written here.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tileops.records import (DeviceIdentity, Environment, ErrorInfo, Record, RunInfo, Timing, append_record,
                             write_run_info)
from tileops.profiles import Profile

T0 = datetime(2026, 1, 5, 12, 0, 0, tzinfo=timezone.utc)


def profile(*, bandwidth: float = 100e9, calibration: float = 0.8, name: str = "TestCPU",
            match: str = "Test CPU 9000") -> Profile:
    """A CPU-like profile with a known nominal bandwidth, so the physics check can judge bytes."""
    src = {"source": "calibration", "run_id": "cal-1", "tool_version": "test"}
    return Profile.model_validate({
        "name": name, "kind": "cpu", "match": [match],
        "memory": {"theoretical": bandwidth, "calibration": calibration,
                   "theoretical_source": {"source": "user"}, "calibration_source": src,
                   "mixes": {"copy": calibration * 0.9, "triad": calibration},
                   "measured": {"copy": bandwidth * calibration * 0.9, "triad": bandwidth * calibration}},
        # a stated peak (an estimate on an unmeasured clock would be no bound, and not judged: issue 29)
        "compute": {"cpu.fp32": {"theoretical": 1e12, "calibration": 0.5, "theoretical_source": {"source": "user"},
                                 "calibration_source": src}},
        "roof_aliases": {"cuda_core.fp32": "cpu.fp32"},
        "latency_floor_s": 1e-7,
    })


def env(*, run_id: str = "run-1", hostname: str = "node-a", device: str = "Test CPU 9000",
        uuid: str | None = None, kind: str = "cpu") -> Environment:
    return Environment(device=DeviceIdentity(kind=kind, name=device, uuid=uuid, hostname=hostname),
                       cpu_model=device, threads=2, torch_version="2.13.0", tileops_version="0.1.0",
                       git_revision="abc123def456", run_id=run_id)


def record(op: str = "relu", label: str = "small", *, bytes_: int | None = 8_000_000, flops: int | None = 1_000_000,
           seconds: float = 1e-3, status: str = "ok", dtype: str = "float32", backend: str = "torch",
           e: Environment | None = None, start: datetime = T0) -> Record:
    e = e or env()
    timing = None
    if status == "ok":
        timing = Timing(timer="cpu-wall", median_s=seconds, min_s=seconds * 0.95, mean_s=seconds, p10_s=seconds,
                        p90_s=seconds * 1.05, n=10, rel_noise=0.01, warmup=2, total_s=seconds * 12,
                        stop_reason="noise target reached")
    return Record(run_id=e.run_id, op=op, family="elementwise", label=label, dtype=dtype, backend=backend,
                  params={"inplace": False}, shapes={"x": [1000, 2000]}, tags=["cpu"], status=status,
                  error=ErrorInfo(kind="exception", message="boom") if status == "error" else None,
                  timing=timing, flops=flops if status == "ok" else None, bytes=bytes_ if status == "ok" else None,
                  roof_key="cuda_core.fp32", env=e, started_at=start, finished_at=start + timedelta(seconds=1))


def write_run(run_dir: Path, records: list[Record], *, status: str = "completed", start: datetime = T0,
              minutes: float = 2.0, audit: list[dict] | None = None) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    for r in records:
        append_record(run_dir / "records.jsonl", r)
    write_run_info(run_dir, RunInfo(run_id=records[0].run_id, started_at=start,
                                    finished_at=start + timedelta(minutes=minutes), status=status,
                                    exit_code=0, rows_total=len(records)))
    if audit is not None:
        (run_dir / "audit.jsonl").write_text("".join(json.dumps(a) + "\n" for a in audit), encoding="utf-8")
    return run_dir


def write_profile_file(path: Path, prof: Profile) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(prof.model_dump(mode="json", exclude_none=True)), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- real servers


def need_binary(name: str) -> str:
    """The path of an external binary; skip locally when missing, fail under CI=true (team rule)."""
    for candidate in (shutil.which(name), f"/usr/bin/{name}"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    msg = (f"{name} not installed: `apt-get install prometheus prometheus-pushgateway` "
           "(.ci/run installs them in CI)")
    if os.environ.get("CI") == "true":
        pytest.fail(msg)
    pytest.skip(msg)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    """Wait until ``url`` answers 200 (bounded); fail naming the URL and the process's output."""
    import urllib.request

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{proc.args[0]} exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError as exc:
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"{url} did not answer within {timeout_s} s ({last})")


def stop(proc: subprocess.Popen) -> None:
    """Terminate a process we started and reap it (bounded)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def start_pushgateway(tmp: Path) -> tuple[subprocess.Popen, str]:
    exe = need_binary("prometheus-pushgateway")
    port = free_port()
    log = open(tmp / "pushgateway.log", "wb")
    # Debian's build persists to /var/lib/prometheus by default: keep each test's gateway in memory only.
    proc = subprocess.Popen([exe, f"--web.listen-address=127.0.0.1:{port}", "--persistence.file="],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/-/ready", 20, proc)
    except BaseException:
        stop(proc)
        raise
    return proc, url
