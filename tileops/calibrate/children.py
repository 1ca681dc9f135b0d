"""Every device calibrated in turn, each in its own process: the launcher of ``python -m tileops.calibrate.child``.

One device's CUDA context, allocator state or crash never touches another's
run. The launcher and the child share no code: the child measures with
``tileops.calibrate.run.measure_device`` and writes the raw result to a file
this module names; this module reads it back through the ledger. So neither
imports the other (the child is started, never imported).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable

import torch

from tileops.ledger import DeviceCalibration, read_device_result


def visible_devices() -> list[str]:
    """``cuda:0`` … ``cuda:N-1`` for every visible GPU; ``["cpu"]`` on a host without one."""
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return [f"cuda:{i}" for i in range(n)] or ["cpu"]


@dataclass
class ChildResult:
    device: str
    run: DeviceCalibration | None
    error: str | None = None


def run_children(devices: list[str], *, quick: bool, echo: Callable[[str], None] = print,
                 max_age: str | None = None) -> list[ChildResult]:
    """Calibrate each device in turn, each in its own ``python -m tileops.calibrate.child`` process.

    With ``max_age``, a child whose device has a fresh stored result hands that back unmeasured."""
    out: list[ChildResult] = []
    with tempfile.TemporaryDirectory(prefix="tileops-cal-") as tmp:
        for i, dev in enumerate(devices, 1):
            path = Path(tmp) / f"{dev.replace(':', '-')}.yaml"
            cmd = [sys.executable, "-m", "tileops.calibrate.child", "--device", dev, "--results-out", str(path)]
            if quick:
                cmd.append("--quick")
            if max_age is not None:
                cmd += ["--max-age", max_age]
            echo(f"[{i}/{len(devices)}] calibrating {dev} in its own process")
            proc = subprocess.run(cmd, env=os.environ.copy())
            if proc.returncode != 0 or not path.exists():
                out.append(ChildResult(dev, None, f"exit code {proc.returncode}"))
                continue
            out.append(ChildResult(dev, read_device_result(path)))
    return out
