"""How long pricing 100,000 records takes (issue 6 goal: under 2 s on a 2-core dev machine).

    python benchmarks/roofline_pricing.py [--n 100000] [--repeat 3]

Builds N records once (as the bench writes them: a mix of memory- and
compute-bound rows, a few blanks and errors), then times, side by side:
``price_all`` over the records, ``health`` over the result, and, for scale,
parsing the same records from JSON Lines (which any re-analysis pays first) and
a fixed plain-Python loop (how fast this machine is at the moment).
Best of ``--repeat`` runs; prints one line per step.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import time

from tileops.records import DeviceIdentity, Environment, Record, Timing, parse_record, to_json
from tileops.profiles import MemoryRoof, Profile, ProfileChooser, Provenance, Roof
from tileops.roofline import health, price_all

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
SRC = Provenance(source="datasheet", ref="benchmark")
CAL = Provenance(source="calibration", run_id="bench", date=dt.date(2026, 1, 1), tool_version="0")


def profile() -> Profile:
    return Profile(
        name="bench-cpu", kind="cpu", match=["Bench CPU"],
        memory=MemoryRoof(theoretical=50e9, calibration=0.6, theoretical_source=SRC, calibration_source=CAL,
                          mixes={"triad": 0.6, "copy": 0.55}),
        compute={"cpu.fp32": Roof(theoretical=300e9, calibration=0.7, theoretical_source=SRC,
                                  calibration_source=CAL),
                 "cpu.fp32_matmul": Roof(theoretical=300e9, calibration=0.5, theoretical_source=SRC,
                                         calibration_source=CAL)},
        roof_aliases={"cuda_core.fp32": "cpu.fp32", "tensor_core.tf32": "cpu.fp32_matmul"},
        latency_floor_s=5e-6, latency_floor_source=CAL)


def records(n: int) -> list[Record]:
    rng = random.Random(0)
    env = Environment(device=DeviceIdentity(kind="cpu", name="Bench CPU", hostname="bench"), torch_version="2.13.0",
                      tileops_version="0.1.0", run_id="bench")
    out = []
    for i in range(n):
        kind = rng.random()
        elems = rng.choice([1 << 10, 1 << 16, 1 << 20, 1 << 24])
        if kind < 0.02:
            out.append(Record(run_id="bench", op="mul", family="elementwise", label=f"row{i}", dtype="float32",
                              backend="torch", status="skipped", skip_reason="unsupported", env=env,
                              started_at=T0, finished_at=T0))
            continue
        flops, nbytes, key = ((elems * rng.choice([1, 5, 8]), elems * 8, "cuda_core.fp32") if kind < 0.8 else
                              (2 * elems * 256, elems * 12, "tensor_core.tf32"))
        if kind > 0.98:
            nbytes = 0  # blank: bytes zero
        t = max(nbytes, 1) / rng.uniform(5e9, 30e9) + 1e-6
        timing = Timing(timer="cpu-wall", median_s=t, min_s=t * 0.97, mean_s=t * 1.01, p10_s=t * 0.98,
                        p90_s=t * 1.05, n=20, rel_noise=0.02, warmup=3, total_s=t * 25, stop_reason="noise")
        out.append(Record(run_id="bench", op="relu" if key == "cuda_core.fp32" else "gemm", family="x",
                          label=f"row{i}", dtype="float32", backend="torch", status="ok", timing=timing,
                          flops=flops, bytes=nbytes, roof_key=key, env=env, started_at=T0, finished_at=T0))
    return out


def reference_loop() -> int:
    s = 0
    for i in range(1_000_000):
        s += i * 2
    return s


def best(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    prof = profile()
    recs = records(args.n)
    lines = [to_json(r) for r in recs]
    t_price, priced = best(lambda: price_all(recs, ProfileChooser.only(prof)), args.repeat)
    t_health, h = best(lambda: health(priced), args.repeat)  # type: ignore[arg-type]
    t_parse, _ = best(lambda: [parse_record(x) for x in lines], 1)
    t_ref, _ = best(reference_loop, args.repeat)
    print(f"records: {args.n:,}  (best of {args.repeat})")
    print(f"reference loop:     {t_ref:7.3f} s  (1M plain-Python adds: how fast this machine is right now; "
          "a shared machine under load is several times slower)")
    print(f"price_all:          {t_price:7.3f} s  ({t_price / args.n * 1e6:.2f} µs/record)  goal < 2 s: "
          f"{'met' if t_price < 2 else 'MISSED'}")
    print(f"health:             {t_health:7.3f} s")
    print(f"parse JSON Lines:   {t_parse:7.3f} s  (for scale: reading the records costs "
          f"{t_parse / t_price:.1f}x pricing them)")
    print(f"price_all / reference loop: {t_price / t_ref:.2f}")
    print(f"verdicts: {h.by_verdict}")  # type: ignore[union-attr]


if __name__ == "__main__":
    main()
