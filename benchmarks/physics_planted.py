"""Benchmark (issue 34): a planted formula error is caught on a busy host, and correct formulas never breach.

Noise only ever slows a timed call, so a physics breach can be judged on what noise cannot fake (each row's fast
end, ``Timing.fast_ci_s``). This runs what the issue runs, as a user would, in a fresh profile store:

1. ``tileops bench --device cpu --tag cpu --dtype float32 --op gemm --op relu`` (the default rule: each row two
   visits), ``--runs`` times with another process keeping one core busy (``python3 -c 'while True: pass'``)
   and ``--quiet-runs`` times without, the nominal DRAM bandwidth given by ``TILEOPS_DRAM_BANDWIDTH`` (default
   460.8 GB/s: the DDR5-4800 x 12 channels of an EPYC 9004 socket, the development VM's CPU family; give your
   host's with ``--dram-bandwidth``). Each run's own health is counted: correct formulas, so a breach is a
   false alarm (goal: 0 in every run, loaded or not).
2. A planted formula error in each run's records: gemm's FLOPs and relu's bytes multiplied so that the row's
   median implies 1.5x its theoretical ceiling (compute: the profile's cpu.fp32 peak; memory: the nominal),
   written as a copy of the run, re-priced with ``tileops roofline COPY --profile <the run's profile>``. Goal:
   exit 3 in at least 9 of 10 loaded runs.

Per run it prints the exit codes, the health, each planted row's implied rate at its median and at its fast
end (the least the fast end implies, what the check judges) over the ceiling.

    python benchmarks/physics_planted.py [--runs 10] [--quiet-runs 10] [--factor 1.5] [--dram-bandwidth 460.8e9]

Exit 0 when every goal is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tileops import exitcodes
from tileops.records import iter_records, to_json

ROWS = ["--device", "cpu", "--tag", "cpu", "--dtype", "float32", "--op", "gemm", "--op", "relu", "--no-plot"]
#: An EPYC 9004 socket's nominal: 12 channels of DDR5-4800 x 8 bytes (the VM's CPU: family 25, model 17).
DEFAULT_NOMINAL = 12 * 4800e6 * 8


def tileops(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tileops.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200", **env}, timeout=1800)


def ceilings(run: Path) -> tuple[str, dict[str, float]]:
    """The run's profile and its theoretical ceilings (ceiling -> per second), from its roofline.json."""
    doc = json.loads((run / "roofline.json").read_text(encoding="utf-8"))
    profile = next(r["profile"] for r in doc["rows"] if r.get("profile"))
    return profile, {c["ceiling"]: c["theoretical_per_s"] for c in doc["health"]["ceilings"]
                     if c["theoretical_per_s"]}


def plant(run: Path, out: Path, theo: dict[str, float], factor: float) -> list[tuple[str, float, float]]:
    """A copy of ``run`` whose gemm FLOPs and relu bytes make each row's median imply ``factor`` x its ceiling;
    per planted row (name, ratio at the median, ratio at the fast end's top)."""
    out.mkdir(parents=True)
    planted, lines = [], []
    for r in iter_records(run):
        t = r.timing
        if r.status == "ok" and t is not None and r.op in ("gemm", "relu"):
            if r.op == "gemm" and r.flops:
                ceiling = theo.get("cpu.fp32") or max(v for k, v in theo.items() if k != "memory")
                new = int(factor * ceiling * t.actual_time_s)
                r = dataclasses.replace(r, flops=new)
                work = new
            elif r.bytes and "memory" in theo:
                ceiling = theo["memory"]
                new = int(factor * ceiling * t.actual_time_s)
                r = dataclasses.replace(r, bytes=new, read_bytes=None)
                work = new
            else:
                lines.append(to_json(r))
                continue
            fast = t.fast_ci_s[1] + t.excluded_copies_s if t.fast_ci_s else t.actual_time_s
            planted.append((f"{r.op} {r.label}", work / t.actual_time_s / ceiling, work / fast / ceiling))
        lines.append(to_json(r))
    (out / "records.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return planted


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="runs with one core kept busy (default 10)")
    ap.add_argument("--quiet-runs", type=int, default=10, help="runs without the load (default 10)")
    ap.add_argument("--factor", type=float, default=1.5, help="the planted error: the median implies this x the "
                    "ceiling (default 1.5)")
    ap.add_argument("--dram-bandwidth", type=float, default=DEFAULT_NOMINAL, help="the nominal DRAM bandwidth, "
                    f"bytes/s (default {DEFAULT_NOMINAL:.4g})")
    ap.add_argument("--quick", action="store_true", help="pass --quick to the bench")
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tileops-planted-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        env = {"TILEOPS_PROFILE_DIR": str(root / "store"), "TILEOPS_DRAM_BANDWIDTH": f"{args.dram_bandwidth:.6g}"}
        print(f"physics under load: gemm and relu (float32, CPU rows), nominal DRAM {args.dram_bandwidth / 1e9:.1f} "
              f"GB/s; {args.runs} run(s) with one core busy, {args.quiet_runs} without; planted x{args.factor} at "
              f"the median; load average {os.getloadavg()[0]:.2f}")
        false_alarms = caught = loaded = rows_caught = rows_planted = 0
        for i in range(args.runs + args.quiet_runs):
            busy = i < args.runs
            out = root / f"run-{i:02d}"
            load = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
            try:
                t0 = time.perf_counter()
                honest = tileops("bench", *ROWS, *(["--quick"] if args.quick else []), "--out", str(out), env=env)
                took = time.perf_counter() - t0
                if not (out / "roofline.json").exists():
                    print(f"run {i + 1}: exit {honest.returncode}, no results\n{honest.stderr[-2000:]}")
                    return 1
                profile, theo = ceilings(out)
                rows = plant(out, root / f"planted-{i:02d}", theo, args.factor)
                priced = tileops("roofline", str(root / f"planted-{i:02d}"), "--profile", profile, "--format", "json",
                                 env=env)
            finally:
                if load is not None:
                    load.kill()
                    load.wait()
            health = next((x for x in honest.stdout.splitlines() if x.startswith("health:")), "health: ?")
            false_alarms += honest.returncode == exitcodes.PHYSICS
            if busy:
                loaded += 1
                caught += priced.returncode == exitcodes.PHYSICS
                rows_planted += len(rows)
                rows_caught += sum(bool(r["breaches"]) for r in json.loads(priced.stdout)["rows"])
            shown = ", ".join(f"{name} {m:.2f}x at the median, {f:.2f}x at the fast end" for name, m, f in rows)
            print(f"run {i + 1} ({'one core busy' if busy else 'quiet'}, {took:.0f} s): honest exit "
                  f"{honest.returncode} ({health[8:60]}...); planted exit {priced.returncode}: {shown}")
        print(f"correct formulas: {false_alarms} breach(es) in {args.runs + args.quiet_runs} run(s) (goal 0)")
        print(f"planted x{args.factor}: caught (exit 3) in {caught} of {loaded} run(s) with one core busy "
              f"(goal at least 9 in 10); rows caught one by one: {rows_caught} of {rows_planted}")
        met = false_alarms == 0 and (loaded == 0 or caught >= 0.9 * loaded)
        print(f"goals: {'MET' if met else 'NOT MET'}")
        return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
