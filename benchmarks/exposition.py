"""Exposition speed: render ~10,000 series of priced rows in the Prometheus text format.

Goal (issue 7): under 100 ms for 10,000 series on a 2-core machine. Prints the
series count, the time to collect the samples from a priced run and the time
of a full render (samples + text), best of several repetitions, side by side
with prometheus_client's ``generate_latest`` of the same number of plain gauge
samples (why the text writer is our own: tileops/export/exposition.py).

    python benchmarks/exposition.py [--series 10000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from tileops.records import DeviceIdentity, Environment, Record, RunInfo, Timing
from tileops.export.metrics import collect_samples, exposition
from tileops.export.snapshot import RunSnapshot, build_snapshots
from tileops.profiles import Profile, ProfileChooser
from tileops.roofline import price_all

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _profile() -> Profile:
    src = {"source": "calibration", "run_id": "bench", "tool_version": "bench"}
    return Profile.model_validate({
        "name": "BenchCPU", "kind": "cpu", "match": ["Bench CPU"],
        "memory": {"theoretical": 100e9, "calibration": 0.8, "theoretical_source": {"source": "user"},
                   "calibration_source": src, "mixes": {"copy": 0.7, "triad": 0.8}},
        "compute": {"cpu.fp32": {"theoretical": 1e12, "calibration": 0.5, "theoretical_source": {"source": "estimate"},
                                 "calibration_source": src}},
        "roof_aliases": {"cuda_core.fp32": "cpu.fp32"},
    })


def _snapshot(rows: int) -> RunSnapshot:
    env = Environment(device=DeviceIdentity(kind="cpu", name="Bench CPU", hostname="bench-host"), torch_version="x",
                      tileops_version="x", run_id="bench")
    recs = []
    for i in range(rows):
        t = 1e-3 * (1 + i % 7)
        recs.append(Record(
            run_id="bench", op=f"op{i % 40}", family="elementwise", label=f"shape{i}", dtype="float32",
            backend="torch", shapes={"x": [i, 1024]}, status="ok",
            timing=Timing(timer="cpu-wall", median_s=t, min_s=t, mean_s=t, p10_s=t, p90_s=t, n=5, rel_noise=0.01,
                          warmup=1, total_s=t * 6, stop_reason="noise target reached"),
            flops=i * 1000 + 1, bytes=8_000_000 + i, roof_key="cuda_core.fp32", env=env, started_at=T0,
            finished_at=T0 + timedelta(seconds=1)))
    prof = _profile()
    chooser = ProfileChooser.only(prof)
    info = RunInfo(run_id="bench", started_at=T0, finished_at=T0 + timedelta(minutes=1), status="completed")
    (snap,) = build_snapshots(Path("bench"), info, price_all(recs, chooser), chooser)
    return snap


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--series", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()

    probe = _snapshot(100)
    per_row = len(collect_samples([probe], build_info=False)) / 100
    rows = max(1, round(args.series / per_row))
    snap = _snapshot(rows)
    n = len(collect_samples([snap]))
    body = exposition([snap])

    t_fam = _best(lambda: collect_samples([snap]), args.repeat)
    t_render = _best(lambda: exposition([snap]), args.repeat)

    reg = CollectorRegistry()
    g = Gauge("plain_gauge", "reference", ["Hostname", "UUID", "modelName", "op", "label", "dtype", "backend"],
              registry=reg)
    for i in range(n):
        g.labels("bench-host", "CPU-bench-host", "Bench CPU", f"op{i % 40}", f"shape{i}", "float32", "torch").set(i)
    t_plain = _best(lambda: generate_latest(reg), args.repeat)

    print(f"rows {rows}, series {n}, body {len(body) / 1e6:.2f} MB")
    print(f"collect samples     {t_fam * 1e3:7.1f} ms")
    print(f"render (full)       {t_render * 1e3:7.1f} ms   goal < 100 ms: {'PASS' if t_render < 0.1 else 'FAIL'}")
    print(f"prometheus_client   {t_plain * 1e3:7.1f} ms   (same number of plain Gauge samples)")
    print(f"ratio full/plain    {t_render / t_plain:7.2f}")


if __name__ == "__main__":
    main()
