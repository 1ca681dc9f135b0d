"""scripts/device-check: its budgets are counted work printed with their counts and fit 270 s, its CPU dry run passes end to end
and prints what the GPU run will do (budgets, carried wheels), and its checkers fail a step that recorded
an error.

The GPU run itself needs an H200 (scripts/device-check OUT on the device machine); this catches a syntax
error, a broken step command, a budget that no longer fits or an audit that plans other rows before that run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "device-check"
VERIFY = ROOT / "scripts" / "device_check_verify.py"
STEPS = ["setup", "versions", "timers", "calibrate", "bench", "do-bench", "backends", "gpu-tests", "ncu", "audit"]
LIMIT_S = 270
MAX_FILES = 7
#: each counted step's printed budget: "bench: 6 rows x 2 visits x 2 s + 15 s start = 39 s"
COUNTED = re.compile(r"^device-check: budget ([a-z-]+): (\d+) ([a-z ()-]+?)(?: x \d+ [a-z]+)? x ([\d.]+) s "
                     r"\+ ([\d.]+) s start = (\d+) s$", re.M)


def printed_budgets(stdout: str) -> dict[str, int]:
    """The budgets the plan line prints, and a check that they sum to what it says, within the limit."""
    (plan,) = re.findall(r"^device-check: step budgets \(s\): (.*)$", stdout, re.M)
    printed = {k: int(v) for k, v in re.findall(r"([a-z-]+) (\d+)(?:,|;)", plan)}
    (total,) = re.findall(r"sum (\d+) s \(limit (\d+) s\)", plan)
    assert int(total[0]) == sum(printed.values()) <= int(total[1]) == LIMIT_S
    return printed


def test_each_budget_is_counted_work_printed_with_its_count_and_the_sum_fits() -> None:
    r = subprocess.run(["bash", str(SCRIPT), "/tmp/unused-device-check-plan", "--dry-run", "--plan"],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHON": sys.executable})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    printed = printed_budgets(r.stdout)
    assert list(printed) == STEPS and sum(printed.values()) <= LIMIT_S
    counted = {m[0]: m for m in COUNTED.findall(r.stdout)}
    assert set(counted) == {"bench", "do-bench", "backends", "gpu-tests", "audit"}, r.stdout
    for name, (_, count, what, per, start, budget) in counted.items():
        assert int(count) > 0 and what.strip(), name  # each names what it counted
        assert printed[name] == int(budget)
    assert counted["bench"][1:3] == ("6", "rows") and " x 2 visits" in r.stdout  # the bench's own --list plan
    assert counted["audit"][1] == "2" and "ncu children" in counted["audit"][2]


def check_the_dry_runs_plan_steps_and_summary(r: subprocess.CompletedProcess, out: Path) -> None:
    """A passing dry run: the budgets printed before any step (their sum under five minutes), the carried
    wheels, every step passed or skipped, the timers' file, the audit's planned rows, and at most the files the
    device machine sends back."""
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert list(printed_budgets(r.stdout)) == STEPS and len(COUNTED.findall(r.stdout)) == 5
    # the carried wheels, computed from pyproject.toml and the device's list
    sys.path.insert(0, str(ROOT / "scripts"))
    from device_packages import carried_set

    for c in carried_set()[0]:  # listed before the steps, or by the setup step once it installed the wheels
        assert re.search(rf"^  {re.escape(c.name)}==\S+", r.stdout, re.M), c
    assert "typing-extensions>=" in r.stdout  # what they ask of the device's own
    summary = r.stdout[r.stdout.index("===== device-check summary"):]
    for name in STEPS:
        assert re.search(rf"^{name}\s+(passed|skipped)", summary, re.M), (name, summary)
    assert "skipped: no GPU" in summary
    timers = json.loads((out / "timers.json").read_text())
    assert timers["device"] == "cpu" and timers["cpu-wall"] > 0 and "skipped" in timers["cupti"]
    assert "2 row(s): 2 ERROR" in r.stdout  # the audit plans exactly its relu and bf16 gemm rows
    assert "--clock-control none" in SCRIPT.read_text()
    assert (out / "device-check.log").read_text().count("=====") >= len(STEPS)
    files = list(out.iterdir())
    assert len(files) <= MAX_FILES and all(f.is_file() for f in files)  # what the device machine sends back


def _write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path.parent


def _verify(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(VERIFY), *args], capture_output=True, text=True, timeout=60)


def test_a_step_that_recorded_an_error_fails(tmp_path: Path) -> None:
    ok = {"op": "relu", "label": "r", "dtype": "bfloat16", "backend": "torch", "status": "ok",
          "timing": {"timer": "cupti", "median_s": 1e-5, "span_s": 1.1e-5, "fallback_reason": None,
                     "median_ci_s": [0.98e-5, 1.03e-5]},
          "conditions": {"window_s": 0.4, "contended": False, "throttled": False,
                         "gpu": {"sm_mhz_min": 1755.0, "sm_mhz_max": 1980.0, "power_w": 410.0, "power_limit_w": 700.0,
                                 "temperature_c_max": 61.0, "energy_j": None, "other_processes": [],
                                 "clock_events": ["gpu_idle"], "blank": {"energy_j": "the counter did not advance"}}}}
    no_interval = {**ok, "label": "i", "timing": {**ok["timing"], "median_ci_s": None}}
    no_sensors = {**ok, "label": "s", "conditions": None}
    fell_back = {**ok, "label": "f", "timing": {"timer": "cuda-events", "median_s": 1e-5,
                                                "fallback_reason": "CUPTI attribution failed"}}
    failed = {**ok, "label": "e", "status": "error", "timing": None, "error": {"message": "CUDA error: boom"}}
    good = _verify("records", str(_write(tmp_path / "a" / "records.jsonl", [ok])))
    assert good.returncode == 0, good.stdout
    assert "a rerun within 9.8-10.3 us, visits None; SM 1755-1980 MHz; 410 W of 700.0 W; 61 C; energy_j blank " \
           "(the counter did not advance); other processes []; clock events gpu_idle" in good.stdout
    assert "host noise" not in good.stdout  # no run.json: a one-pass run
    noise = {"pairs": 6, "rows_by_kind": {"memory": 6}, "second_pass_shift": {"memory": 0.002}, "kept_first": [],
             "between_visits": {"memory": {"sigma": 0.004, "df": 5, "source": "this run (6 rows)"},
                                "compute": {"sigma": 0.01, "df": 2, "source": "the documented default"}}}
    (tmp_path / "a" / "run.json").write_text(json.dumps({"host_noise": noise}))
    drifted = _verify("records", str(tmp_path / "a"))
    assert drifted.returncode == 0 and ("host noise over 6 row(s) visited twice: memory between visits sigma 0.0040 "
                                        "(this run (6 rows)); second pass shift {'memory': 0.002}") in drifted.stdout
    for bad in (fell_back, failed, no_interval, no_sensors):
        r = _verify("records", str(_write(tmp_path / bad["label"] / "records.jsonl", [ok, bad])))
        assert r.returncode == 1 and "FAILED" in r.stdout
    assert _verify("records", str(tmp_path / "none")).returncode == 1

    row = {"op": "relu", "label": "r", "dtype": "bfloat16", "verdict": "PASS", "reason": "", "error_kind": None}
    gvisor = {**row, "verdict": "ERROR", "error_kind": "counters-unavailable", "reason": "LibraryNotLoaded"}
    assert _verify("audit", str(_write(tmp_path / "p" / "audit.jsonl", [row, row])), "--rows", "2").returncode == 0
    assert _verify("audit", str(_write(tmp_path / "p1" / "audit.jsonl", [row])), "--rows", "2").returncode == 1
    assert _verify("audit", str(_write(tmp_path / "g" / "audit.jsonl", [gvisor] * 2)), "--rows", "2").returncode == 3
    err = {**row, "verdict": "ERROR", "error_kind": "timeout", "reason": "ran past --row-timeout"}
    assert _verify("audit", str(_write(tmp_path / "e" / "audit.jsonl", [row, err])), "--rows", "2").returncode == 1
    assert _verify("audit", str(tmp_path / "e"), "--rows", "2", "--dry-run").returncode == 0

    log = tmp_path / "ncu.log"
    log.write_text("==ERROR== Failed to initialize the profiler: LibraryNotLoaded\n")
    assert _verify("ncu", str(log)).returncode == 3
    log.write_text("==PROF== Disconnected\n  gpu__time_duration.sum   usecond   12.3\n")
    assert _verify("ncu", str(log)).returncode == 0
    log.write_text("==ERROR== The application returned an error code (1).\n")
    assert _verify("ncu", str(log)).returncode == 1


#: A python for device-check that stalls in the timers step after writing part of its result, and answers the
#: dry run's other checks at once (this test is about a step over its budget, not what the others check).
STALLING_PYTHON = """#!/usr/bin/env bash
for a in "$@"; do
  case "$a" in
    --every-timer) next=1; continue ;;
    scripts/device_imports.py|--help|pytest|audit) exit 0 ;;
  esac
  if [[ -n "${next:-}" ]]; then mkdir -p "$a"; echo '{"partial": true}' > "$a/timers.json"; exec sleep 600; fi
done
exec PYTHON "$@"
"""


def test_a_step_over_its_budget_is_stopped_its_output_kept_and_the_others_run(tmp_path: Path) -> None:
    """A step that overruns is killed at its budget (DRY_SCALE x its seconds; a fraction here), reported as over
    it, and what it wrote before is kept in OUT; the steps after it still run and the summary comes."""
    python = tmp_path / "python"
    python.write_text(STALLING_PYTHON.replace("PYTHON", sys.executable))
    python.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": str(python), "DRY_SCALE": "0.25", "DEVICE_WHEELS": str(tmp_path / "no-wheels")}
    r = subprocess.run(["bash", str(SCRIPT), str(out), "--dry-run"], capture_output=True, text=True, timeout=300,
                       env=env)
    summary = r.stdout[r.stdout.index("===== device-check summary"):]
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    assert re.search(r"^timers\s+FAILED: over its 5 s budget, stopped \(what it wrote is kept\)", summary, re.M), summary
    assert json.loads((out / "timers.json").read_text()) == {"partial": True}  # its partial result, kept
    for name in STEPS:  # every step after it still had its turn
        assert re.search(rf"^{name}\s+\S", summary, re.M), (name, summary)
    assert "sleep 600" not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout


GPU_STEPS = ["calibrate", "bench", "do-bench", "backends"]


@pytest.mark.slow
def test_the_dry_run_fails_without_the_carried_wheels_and_passes_with_them(tmp_path: Path) -> None:
    """In a sandbox where pydantic, platformdirs, docker (the carried packages) import only from the wheels
    device-check installs, and msgspec not at all: with no wheels the dry run fails each GPU step, naming the
    packages and `make device-wheels`, as the real run would fail; with the wheel set built by the real
    command (`scripts/device_packages.py wheels`, from PyPI, for this interpreter's version) it passes, printing its plan, running every step and printing the summary
    (one dry run checks both: each costs tens of seconds)."""
    from device_support import sandbox_env

    env = {**sandbox_env(tmp_path / "sandbox", wheels_only=True), "PYTHON": sys.executable}
    bare = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "bare"), "--dry-run"], capture_output=True, text=True,
                          timeout=600, env={**env, "DEVICE_WHEELS": str(tmp_path / "no-wheels")})
    log = bare.stdout[-6000:] + bare.stderr[-2000:]
    assert bare.returncode == 1, log
    summary = bare.stdout[bare.stdout.index("===== device-check summary"):]
    for name in GPU_STEPS:
        assert re.search(rf"^{name}\s+FAILED: its real run would not import .*make device-wheels", summary, re.M), \
            (name, summary)
    for package in ("pydantic", "platformdirs", "docker"):
        assert re.search(rf"device_imports: calibrate: {package} .*not installed.*make device-wheels.*no wheel in",
                         bare.stdout), (package, log)
    assert "msgspec absent (an optional extra" in bare.stdout  # hidden too, and optional: named, not a failure
    assert re.search(r"^setup\s+FAILED", summary, re.M)
    # rows it cannot count are never a small budget: the listing's error is named and the step does not run
    assert re.search(r"^device-check: budget bench: NOT COUNTED \(tileops bench --list failed: .*pydantic", bare.stdout,
                     re.M), log
    assert re.search(r"^audit\s+FAILED: not run: its budget could not be counted", summary, re.M), summary

    wheels = tmp_path / "wheels"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"  # the machine's is 3.12: `make device-wheels`
    built = subprocess.run([sys.executable, str(ROOT / "scripts" / "device_packages.py"), "wheels", str(wheels),
                            "--python-version", version], capture_output=True, text=True, timeout=600, env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    carried = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "carried"), "--dry-run"], capture_output=True,
                             text=True, timeout=600, env={**env, "DEVICE_WHEELS": str(wheels)})
    check_the_dry_runs_plan_steps_and_summary(carried, tmp_path / "carried")  # the whole plan, every step
    # counted after the wheels are installed: the same rows as on a machine that has the packages (the plan of an
    # earlier version ran before the install, counted 0 rows and gave the bench 15 s)
    counted = {m[0]: m[1] for m in COUNTED.findall(carried.stdout)}
    assert counted["bench"] == "6" and counted["audit"] == "2", counted
    summary = carried.stdout[carried.stdout.index("===== device-check summary"):]
    assert re.search(r"^setup\s+passed", summary, re.M), summary
    for name in GPU_STEPS:
        assert re.search(rf"^{name}\s+skipped: no GPU \(its command starts, its imports load\)", summary, re.M), \
            (name, summary)
