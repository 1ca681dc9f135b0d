"""Issue 29: the physics check on a CPU's gemm rows, with the clock measured and with a planted formula.

On the development VM one quick CPU run in five called a correct gemm formula a FORMULA ERROR: its peak assumed
the nominal clock (/proc/cpuinfo's cpu MHz line) while turbo ran the cores 31-37 % faster. This runs what the
issue ran, as a user would, in a fresh profile store:

1. `tileops bench --tag cpu --op relu --op gemm --quick`, RUNS times in a row (the first one calibrates the CPU,
   as the bench does on a host with no calibration); per run the exit code, the health, and each gemm row's
   implied rate as a fraction of the compute ceiling; then the count of runs with a physics breach (goal: 0),
   and how many rows ran above the peak the stated clock alone gives (each a false FORMULA ERROR before).
2. The calibration those runs priced on: the clock measured under FMA load beside the stated one, and the
   calibration's fraction of the resulting peak (and of the peak the stated clock alone would give).
3. A planted formula that doubles gemm's FLOPs: a copy of gemm's manifest entry (its own formula, times 2) as an
   extra manifest directory (TILEOPS_MANIFEST_PATH, `tileops codegen --manifest`), never the shipped manifest;
   `tileops bench --op gemm_doubled --quick` on the same calibration, PLANTED_RUNS times: it must breach
   (exit 3), and no row of it above the theoretical may go uncalled. A doubled formula breaches only where the
   honest rows run above half the peak, so a run on a loaded host may not; `--factor` plants a larger one (the
   test suite's tiny run uses 100).

    python benchmarks/physics_cpu_gemm.py              # 20 runs
    python benchmarks/physics_cpu_gemm.py --runs 3 --calibrate quick

Exit 0 when no honest run breached and the planted formula did (every row of it above 100 %); 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from tileops import exitcodes
from tileops.ledger import load_device_results
from tileops.ops.catalog import manifest_files, shipped_manifest_dir
from tileops.profiles import load_profiles

PLANTED_OP = "gemm_doubled"
HONEST = ["--tag", "cpu", "--op", "relu", "--op", "gemm", "--quick", "--no-plot"]


def tileops(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tileops.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200", **env}, timeout=1800)


def plant(directory: Path, factor: int = 2) -> Path:
    """An extra manifest directory holding ``gemm_doubled``: gemm's entry, its CPU fp32 rows, its FLOPs formula
    multiplied by ``factor``."""
    for path in manifest_files(shipped_manifest_dir()):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and "gemm" in doc:
            entry = dict(doc["gemm"])
            break
    else:
        raise SystemExit("no gemm entry in the shipped manifest")
    entry["workloads"] = [w for w in entry["workloads"] if "cpu" in (w.get("tags") or [])
                          and w.get("dtypes") == ["float32"]]
    entry["roofline"] = {**entry["roofline"], "flops": f"{factor} * ({entry['roofline']['flops']})"}
    entry["description"] = (f"gemm with its FLOPs formula times {factor}: a planted formula error "
                            "(benchmarks/physics_cpu_gemm.py)")
    directory.mkdir(parents=True)
    (directory / "planted.yaml").write_text(yaml.safe_dump({PLANTED_OP: entry}, sort_keys=False), encoding="utf-8")
    (directory / "ops.py").write_text(
        '"""gemm under its planted doubled formula (benchmarks/physics_cpu_gemm.py)."""\n\n'
        "from tileops.ops.gemm import Gemm\n\n\n"
        f"class GemmDoubled(Gemm):\n    name = {PLANTED_OP!r}\n", encoding="utf-8")
    return directory


def run_summary(out: Path) -> tuple[str, list[tuple[float, bool]], list[str]]:
    """(health state, (implied / compute theoretical, breached) per gemm row, FORMULA ERROR sentences)."""
    doc = json.loads((out / "roofline.json").read_text(encoding="utf-8"))
    theo = {c["ceiling"]: c["theoretical_per_s"] for c in doc["health"]["ceilings"] if c["theoretical_per_s"]}
    rows = [(r["achieved_flops_per_s"] / theo[r["roof"]], bool(r["breaches"])) for r in doc["rows"]
            if r["op"] in ("gemm", PLANTED_OP) and r.get("achieved_flops_per_s") and r.get("roof") in theo]
    sentences = [b["message"] for r in doc["rows"] for b in r["breaches"]]
    return doc["health"]["state"], rows, sentences


def show_calibration(store: Path) -> float | None:
    """Print the calibration the runs price on; return the stated-clock peak as a fraction of the judged one."""
    os.environ["TILEOPS_PROFILE_DIR"] = str(store)
    cpu = [p for p in load_profiles(shipped=False) if p.kind == "cpu"]
    runs = load_device_results(store)
    if not cpu or not runs:
        print("no CPU calibration in the store")
        return None
    profile, run = cpu[0], runs[0]
    roof = profile.compute["cpu.fp32"]
    peak = roof.peak
    if peak is None:
        print(f"calibration: cpu.fp32's theoretical is {roof.theoretical_source.source}, no peak factors recorded")
        return None
    measured = f"{peak.measured_ghz:.3f} GHz" if peak.measured_ghz else f"not measured ({peak.not_measured})"
    print(f"clock: measured {measured} under {run.clock.load if run.clock else 'FMA'} load on "
          f"{run.clock.threads if run.clock else '?'} thread(s); stated {peak.stated_ghz:.3f} GHz "
          f"({peak.stated_source})" + (f"; measured / stated = {peak.measured_ghz / peak.stated_ghz:.3f}"
                                       if peak.measured_ghz and peak.stated_ghz else ""))
    print(f"peak: {peak.explain()} [{peak.ghz_source} clock; "
          f"{'judged against' if roof.not_a_bound is None else 'NOT judged against: ' + roof.not_a_bound}]")
    stated_peak = peak.peak_flops / peak.ghz * (peak.stated_ghz or peak.ghz)
    for key in ("cpu.fp32", "cpu.fp32_matmul"):
        r = profile.compute[key]
        m = run.roofs.get(key)
        if r.calibration is None or m is None:
            print(f"calibration {key}: not calibrated")
            continue
        print(f"calibration {key}: {m.flops_per_s / 1e9:.1f} GFLOP/s = {r.calibration:.1%} of the peak "
              f"({m.flops_per_s / stated_peak:.1%} of the {stated_peak / 1e9:.1f} GFLOP/s the stated clock gives)"
              + (f"; SUSPECT: {r.suspect}" if r.suspect else ""))
    return stated_peak / peak.peak_flops


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20, help="honest bench runs in a row (default 20)")
    ap.add_argument("--calibrate", choices=("auto", "quick", "full"), default="auto",
                    help="the first run's calibration (auto: full on a CPU, what the bench does by default)")
    ap.add_argument("--factor", type=int, default=2, help="the planted formula's multiple of gemm's FLOPs (default 2)")
    ap.add_argument("--planted-runs", type=int, default=5,
                    help="bench runs of the planted formula (default 5: a run whose rows ran under 1/factor of the "
                         "peak cannot breach, and on a busy host some do)")
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="tileops-physics-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        store = root / "store"
        env = {"TILEOPS_PROFILE_DIR": str(store)}
        breached_runs, rows_over_stated, top = 0, 0, 0.0
        stated_fraction: float | None = None  # the stated-clock peak as a fraction of the one judged against
        for i in range(1, args.runs + 1):
            out = root / f"honest-{i:02d}"
            t0 = time.perf_counter()
            proc = tileops("bench", *HONEST, "--calibrate", args.calibrate, "--out", str(out), env=env)
            took = time.perf_counter() - t0
            if not (out / "roofline.json").exists():
                print(f"run {i}/{args.runs}: exit {proc.returncode}, no results\n{proc.stderr[-2000:]}")
                return 1
            if i == 1:
                stated_fraction = show_calibration(store)
            state, rows, sentences = run_summary(out)
            breached_runs += proc.returncode == exitcodes.PHYSICS or any(b for _, b in rows) or bool(sentences)
            ratios = [r for r, _ in rows]
            top = max([top, *ratios])
            over = sum(r > stated_fraction for r in ratios) if stated_fraction else 0
            rows_over_stated += over
            print(f"run {i}/{args.runs}: exit {proc.returncode}, health {state}, breaches {len(sentences)}, gemm rows at "
                  f"{', '.join(f'{r:.1%}' for r in ratios)} of the compute theoretical"
                  + (f" ({over} above the stated-clock peak)" if over else "") + f" ({took:.0f} s)")
            for text in sentences:
                print(f"  {text}")
        print(f"honest runs with a physics breach: {breached_runs} of {args.runs} (highest gemm row {top:.1%} of the "
              "theoretical" + (f"; {rows_over_stated} row(s) above the peak the stated clock alone gives, each a "
                               "FORMULA ERROR before the clock was measured" if stated_fraction else "") + ")")

        planted = plant(root / "planted", args.factor)
        env_planted = {**env, "TILEOPS_MANIFEST_PATH": str(planted)}
        gen = tileops("codegen", "--manifest", str(planted), env=env_planted)
        if gen.returncode != 0:
            print(f"codegen of the planted formula failed:\n{gen.stderr[-2000:]}")
            return 1
        planted_breached, excused = 0, 0
        for i in range(1, args.planted_runs + 1):
            out = root / f"planted-{i:02d}"
            proc = tileops("bench", "--op", PLANTED_OP, "--quick", "--no-plot", "--calibrate", "never", "--out",
                           str(out), env=env_planted)
            if not (out / "roofline.json").exists():
                print(f"planted run {i}: exit {proc.returncode}, no results\n{proc.stderr[-2000:]}")
                return 1
            state, rows, sentences = run_summary(out)
            planted_breached += proc.returncode == exitcodes.PHYSICS
            excused += sum(r > 1 and not b for r, b in rows)  # above the theoretical, yet no breach: must be 0
            print(f"planted gemm formula x{args.factor}, run {i}/{args.planted_runs}: exit {proc.returncode}, health "
                  f"{state}, rows at {', '.join(f'{r:.0%}' for r, _ in rows)} of the theoretical, "
                  f"{sum(b for _, b in rows)} breached"
                  + ("" if any(r > 1 for r, _ in rows) else
                     f" (every row under 100%: the honest rows ran under 1/{args.factor} of the peak)"))
            for text in sentences:
                print(f"  {text}")
        print(f"planted formula: {planted_breached} of {args.planted_runs} run(s) breached (exit {exitcodes.PHYSICS}); "
              f"rows above the theoretical that were not called a breach: {excused}")
        met = breached_runs == 0 and planted_breached > 0 and excused == 0
        print(f"goal: no honest run breaches; the planted formula breaches, every row of it above the theoretical: "
              f"{'MET' if met else 'NOT MET'}")
        return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
