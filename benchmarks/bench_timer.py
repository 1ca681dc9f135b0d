"""Benchmark of the runner's timer (issue 4), not a test: agreement with reference timers, side by side.

On the CPU our ``cpu-wall`` timer (LLC flushed before every repetition) runs
beside ``torch.utils.benchmark.Timer`` (no flush: warm cache) on the same op,
shape and inputs; on a GPU our CUPTI timer runs beside ``triton.testing.do_bench``
(which flushes L2 too). For each row it prints both medians, their ratio, the
wall time each timer spent, and the spread of our median over repeated runs.

    python benchmarks/bench_timer.py [--device cpu|cuda] [--repeats 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from rich.console import Console
from rich.table import Table

from tileops.bench.execute import make_timer, measure
from tileops.bench.timers import CpuWallTimer
from tileops.bench.stopping import CPU_RULE, GPU_RULE
from tileops.bench.execute import Task
from tileops.ops.catalog import load_entries
from tileops.ops.workload import bind_row, build_inputs, instantiate

ROWS = {  # (op, row label, dtype case) on each device
    "cpu": [("relu", None, "float32"), ("linear", None, "float32"), ("softmax", None, "float32")],
    "cuda": [("relu", None, "bfloat16"), ("linear", None, "bfloat16"), ("softmax", None, "bfloat16")],
}


def _row(op: str, device: str):
    entry = load_entries()[op]
    rows = [w for w in entry.workloads if ("cpu" in w.tags) == (device == "cpu")]
    return entry, rows[0]


def reference_median(fn, device: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    if device == "cpu":
        from torch.utils.benchmark import Timer

        m = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads()).blocked_autorange(min_run_time=0.5)
        return m.median, time.perf_counter() - t0
    import triton.testing  # pragma: no cover - GPU

    return triton.testing.do_bench(fn, return_mode="median") * 1e-3, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    device = "cpu" if args.device == "cpu" else "cuda:0"
    kind = "cpu" if device == "cpu" else "cuda"
    from tileops.device import describe_device

    info = describe_device(device)
    rule = CPU_RULE if kind == "cpu" else GPU_RULE
    table = Table(title=f"timer agreement on {info.name} ({device}, {torch.get_num_threads()} threads)")
    for col in ("op", "row", "dtype", "ours median", "ours wall", "reference median", "ref wall",
                "ours / ref", "ours warm / ref", f"our spread over {args.repeats} runs", "our noise"):
        table.add_column(col, justify="right" if col not in ("op", "row", "dtype") else "left")
    out = []
    for op, _, case in ROWS[kind]:
        entry, row = _row(op, kind)
        bound = bind_row(entry, row, case)
        o = instantiate(entry, row)
        inputs = build_inputs(o, bound, device)
        fn = lambda: o(**inputs)  # noqa: E731
        task = Task(op=op, label=row.label, case=case, case_name=case, backend="torch", device=device, rule=rule)
        timer = make_timer(task, info.l2_bytes)
        medians, walls, noises = [], [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            t = measure(fn, timer, rule)
            walls.append(time.perf_counter() - t0)
            medians.append(t.median_s)
            noises.append(t.rel_noise)
        ref, ref_wall = reference_median(fn, kind)
        # Like for like: on the CPU the reference does not flush, so time ours without the flush too.
        warm = measure(fn, CpuWallTimer(lambda: None), rule).median_s if kind == "cpu" else None
        ours = statistics.median(medians)
        if kind != "cpu":
            warm = ours  # do_bench flushes L2 as ours does: the cold figures are already like for like
        spread = (max(medians) - min(medians)) / ours
        table.add_row(op, row.label, case, f"{ours * 1e6:.1f} us", f"{statistics.median(walls):.2f} s",
                      f"{ref * 1e6:.1f} us", f"{ref_wall:.2f} s", f"{ours / ref:.2f}", f"{warm / ref:.2f}", f"{spread:.1%}",
                      f"{statistics.median(noises):.1%}")
        out.append({"op": op, "row": row.label, "dtype": case, "ours_median_s": ours, "ref_median_s": ref,
                    "ratio": ours / ref, "warm_ratio": warm / ref, "spread": spread, "ours_wall_s": statistics.median(walls),
                    "ref_wall_s": ref_wall})
    Console(width=200).print(table)
    Console(width=200).print(
        "ours flushes the last-level cache before every repetition; on the CPU the reference does not, so "
        "ours / ref > 1 is the cost of cold data, and 'ours warm / ref' (no flush) is the like-for-like agreement.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
