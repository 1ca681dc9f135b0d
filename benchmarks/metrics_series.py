"""Series per GPU at each metrics detail level, and what a fleet of them costs a Prometheus.

One synthetic GPU run priced by the real roofline tool and counted by the real
exporter (``tileops.export.metrics.collect_samples``): ``--rows`` workload rows
(default 450, the GPU rows x backends of issue 18) on a calibrated H200
profile, memory- and compute-bound, with the device's calibration and its
previous one (what a calibrated fleet exports). Prints the series per GPU at
``lean`` and ``full``, the Prometheus-side series the per-row recording rule
adds, and the totals and head memory for 1,000 and 10,000 GPUs
(docs/metrics.md, "Capacity", quotes this output).

    python benchmarks/metrics_series.py [--rows 450] [--bytes-per-series 3584]
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

from tileops.ledger import (DeviceCalibration, MixMeasurement, RoofMeasurement, build_profile,
                            with_previous)
from tileops.export.metrics import METRICS, collect_samples
from tileops.export.snapshot import RunSnapshot, build_snapshots
from tileops.profiles import ProfileChooser, find_profile
from tileops.records import DeviceIdentity, Environment, Record, RunInfo, Timing
from tileops.roofline import price_all

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
ROOFS = ("cuda_core.fp32", "tensor_core.tf32", "tensor_core.bf16", "tensor_core.fp16", "tensor_core.fp8",
         "tensor_core.int8")


def _calibration(run_id: str, day: int, scale: float) -> DeviceCalibration:
    when = T0 + timedelta(days=day)
    mixes = {m: MixMeasurement(bytes_per_s=4.2e12 * scale, bytes=1 << 30, array_bytes=1 << 30, best_s=1e-3, reps=5,
                               kernel=m) for m in ("copy", "triad", "read", "write")}
    peaks = find_profile("H200").compute
    roofs = {k: RoofMeasurement(flops_per_s=0.8 * peaks[k].theoretical * scale, flops=1e12, best_s=1e-3, reps=5,
                                method="gemm") for k in ROOFS}
    return DeviceCalibration(run_id=run_id, started_at=when, finished_at=when, tool_version="bench",
                             torch_version="x", quick=False, kind="cuda", name="NVIDIA H200", uuid="GPU-bench",
                             hostname="gpu-node", mixes=mixes, roofs=roofs, latency_floor_s=2.5e-6)


def _snapshot(rows: int) -> RunSnapshot:
    cal = with_previous(_calibration("cal-2", 7, 0.98), [_calibration("cal-1", 0, 1.0)])
    profile, _ = build_profile(find_profile("H200"), [cal])
    env = Environment(device=DeviceIdentity(kind="cuda", name="NVIDIA H200", uuid="GPU-bench", hostname="gpu-node"),
                      torch_version="x", tileops_version="x", run_id="bench")
    recs = []
    for i in range(rows):
        t = 1e-4 * (1 + i % 9)
        compute = i % 3 == 0  # a third of the rows are contractions, the rest memory-bound
        recs.append(Record(
            run_id="bench", op=f"op{i % 60}", family="bench", label=f"shape{i}", dtype="bfloat16",
            backend=("torch", "triton")[i % 2], status="ok",
            timing=Timing(timer="cupti", median_s=t, min_s=t, mean_s=t, p10_s=t, p90_s=t, n=5, rel_noise=0.01,
                          warmup=1, total_s=t * 6, stop_reason="noise target reached",
                          median_ci_s=[t * 0.99, t * 1.01]),  # every ok row of a run carries its interval
            flops=(4 * 10**10 if compute else 10**6) + i, bytes=10**8 + i,
            roof_key="tensor_core.bf16" if compute else "cuda_core.fp32", env=env, started_at=T0,
            finished_at=T0 + timedelta(seconds=1)))
    chooser = ProfileChooser.only(profile)
    info = RunInfo(run_id="bench", started_at=T0, finished_at=T0 + timedelta(minutes=30), status="completed")
    (snap,) = build_snapshots(Path("bench"), info, price_all(recs, chooser), chooser, calibrations={"GPU-bench": cal})
    return replace(snap, last_success_s=None)  # counted as docs/metrics.md counts: before a last success is known


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=450)
    ap.add_argument("--bytes-per-series", type=float, default=3584,
                    help="Prometheus head memory per active series (docs/metrics.md, 'Capacity', says where from)")
    args = ap.parse_args()
    snap = _snapshot(args.rows)
    rules_per_row = 1  # tileops:sol_ratio:best_7d, the one per-row recording rule
    print(f"one GPU, {args.rows} rows ({snap.health.by_verdict}), physics {snap.health.state}")
    for detail in ("lean", "full"):
        samples = collect_samples([snap], build_info=False, detail=detail)
        per_row = sum(len(samples.data[n]) for n, spec in METRICS.items() if spec.scope == "row")
        exported = len(samples)
        stored = exported + rules_per_row * args.rows
        print(f"{detail:5}: {exported:6,} series exported per GPU ({per_row / args.rows:.2f} per row, "
              f"{exported - per_row} per device); {stored:6,} stored with the per-row recording rule")
        for gpus in (1_000, 10_000):
            total = stored * gpus
            print(f"       {gpus:6,} GPUs: {total / 1e6:6.2f} M series, "
                  f"~{total * args.bytes_per_series / 2**30:5.1f} GiB of head memory")


if __name__ == "__main__":
    main()
