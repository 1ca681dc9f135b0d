"""scripts/device-check: its CPU dry run passes end to end, and its step budgets fit five minutes.

The GPU run itself needs an H200 (scripts/device-check OUT on the device machine); this catches
a syntax error, a broken step command or a budget that no longer fits before that run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "device-check"
STEPS = ["setup", "versions", "timers", "calibrate", "bench", "do-bench", "backends", "gpu-tests", "ncu", "audit"]


def test_the_step_budgets_in_the_script_match_its_header_and_fit_five_minutes() -> None:
    text = SCRIPT.read_text()
    header = dict(re.findall(r"^#   ([a-z-]+)\s+(\d+)\s", text, re.M))
    assert list(header) == STEPS + ["sum"]
    assert sum(int(header[s]) for s in STEPS) == int(header["sum"]) <= 240
    used = {name: int(b) for name, b in re.findall(r"^\s*(?:gpu_)?step ([a-z-]+) (\d+) ", text, re.M)}
    for name, budget in used.items():
        assert int(header[name]) == budget, name


@pytest.mark.slow
def test_the_dry_run_on_this_cpu_runs_every_step_and_prints_the_summary(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(SCRIPT), str(out), "--dry-run"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHON": sys.executable})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    summary = r.stdout[r.stdout.index("===== device-check summary"):]
    for name in STEPS:
        assert re.search(rf"^{name}\s+(passed|skipped)", summary, re.M), (name, summary)
    assert "skipped: no GPU" in summary
    timers = json.loads((out / "timers.json").read_text())
    assert timers["device"] == "cpu" and timers["cpu-wall"] > 0 and "skipped" in timers["cupti"]
    assert (out / "device-check.log").read_text().count("=====") >= len(STEPS)
    assert len(list(out.iterdir())) <= 8  # what the device machine sends back
