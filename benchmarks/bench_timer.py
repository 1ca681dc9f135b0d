"""Benchmark of how a row is timed (issues 12 and 18), not a test: our timer beside references, one run.

CPU (``--device cpu``): the relu, add and softmax rows (512x1024 fp32), in one process, every
method interleaved per repeat, all threads the bench uses:
  * ours cold: what the bench runs for a row (``Op.prepare``, the LLC read-sweep, ``measure``
    with the CPU stopping rule); its wall time is the bench's sampling cost per row;
  * ours warm: the same without the flush;
  * bare loops: write (or read) a buffer of twice the LLC, then time the raw torch call;
  * torch.utils.benchmark.Timer (warm, blocked_autorange, min_run_time 0.5 s);
  * before: the bench's path before issue 18 (the checked call ``op(...)`` after a write flush).
  It prints the medians, ours cold over each bare loop, ours warm over Timer, each method's spread
  of medians over the repeats (the precision it delivers) and the wall time per row.
GPU (``--device cuda``): relu, gemm and sdpa bf16 rows timed by our CUPTI timer with the read-sweep
  L2 flush (the bench's), with a write flush (as ``do_bench`` flushes), and by
  ``triton.testing.do_bench`` on the same prepared call: ours over do_bench per row, and noise.
``--every-timer DIR``: one row timed by every timer this device has; the Chrome trace of one CUPTI
  batch goes to DIR/cupti-trace.json.gz and the figures to DIR/timers.json, with the attribution
  re-read from the kept trace (it must agree with the live one). Exit 1 when a timer failed or
  CUPTI fell back (scripts/device-check counts it as a failed step).

    python benchmarks/bench_timer.py [--device cpu|cuda] [--repeats 3] [--threads N] [--json OUT] [--every-timer DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from tileops.bench.execute import measure
from tileops.bench.interval import CPU_BLOCKS, GPU_BLOCKS, QUICK_BLOCKS, BlockRule
from tileops.bench.cupti import attribute_iterations, trace_events_from_chrome
from tileops.bench.timers import CacheFlusher, CpuWallTimer, CudaEventTimer, CuptiTimer, cupti_unavailable_reason
from tileops.ops.catalog import load_entries
from tileops.ops.workload import bind_row, build_inputs, instantiate

CPU_ROWS = [("relu", "cpu-512x1024"), ("add", "cpu-512x1024"), ("softmax", "cpu-512x1024")]
GPU_ROWS = [("relu", "llama3-70b-mlp-act-decode-64"), ("relu", "llama3-8b-mlp-act-prefill-4k"),
            ("gemm", "llama3-8b-qkv-prefill-4k-nt"), ("sdpa_fwd", "llama3-8b-prefill-4k-causal"),
            ("sdpa_fwd", "llama3-8b-decode-bs64-ctx4k")]
#: The raw torch call of each CPU row, for the bare loop (what the op's compute calls).
RAW = {
    "relu": lambda i: (lambda: torch.relu(i["x"])),
    "add": lambda i: (lambda: torch.add(i["a"], i["b"])),
    "softmax": lambda i: (lambda: torch.softmax(i["x"], dim=-1)),
}


def prepared_row(op_name: str, label: str, dtype: str, device: str) -> tuple[Callable[[], Any], dict]:
    """The bench's callable for a row (``Op.prepare``) and the row's inputs; ``inputs["__op__"]`` is
    the op itself, whose full checked call ``op(**inputs)`` is what the bench timed before."""
    entry = load_entries()[op_name]
    row = next(w for w in entry.workloads if w.label == label)
    op = instantiate(entry, row)
    inputs = build_inputs(op, bind_row(entry, row, dtype), device)
    return op.prepare(**inputs).run, {**inputs, "__op__": op}


def bare_loop(fn: Callable[[], Any], flush: Callable[[], None], n: int) -> float:
    """The reference: flush, then time the raw call, n times; the median in seconds."""
    out = []
    for _ in range(n):
        flush()
        t0 = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t0)
    return statistics.median(out) * 1e-9


def torch_timer(fn: Callable[[], Any]) -> tuple[float, float]:
    from torch.utils.benchmark import Timer

    t0 = time.perf_counter()
    m = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads()).blocked_autorange(min_run_time=0.5)
    return m.median, time.perf_counter() - t0


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values) if len(values) > 1 else 0.0


def cpu_table(repeats: int, rule: BlockRule) -> list[dict[str, Any]]:
    from tileops.device import cpu_llc_bytes

    llc = cpu_llc_bytes()
    read, write = CacheFlusher("cpu", llc), CacheFlusher("cpu", llc, mode="write")
    rows = {key: prepared_row(*key, "float32", "cpu") for key in CPU_ROWS}
    got: dict[tuple[str, str], dict[str, list[float]]] = {k: {} for k in CPU_ROWS}

    def note(key: tuple[str, str], what: str, value: float) -> None:
        got[key].setdefault(what, []).append(value)

    for r in range(repeats):
        for key in CPU_ROWS[r % len(CPU_ROWS):] + CPU_ROWS[:r % len(CPU_ROWS)]:
            run, inputs = rows[key]
            raw = RAW[key[0]](inputs)
            steps: list[tuple[str, Callable[[], None]]] = []

            def ours() -> None:
                t0 = time.perf_counter()
                t = measure(run, CpuWallTimer(read), rule)
                note(key, "ours_wall", time.perf_counter() - t0)
                note(key, "ours", t.median_s)
                note(key, "ours_noise", t.rel_noise)
                note(key, "ours_n", t.n)

            def before() -> None:  # the bench before issue 18: the checked call, after a write flush
                op = inputs["__op__"]
                args = {k: v for k, v in inputs.items() if k != "__op__"}
                note(key, "before", measure(lambda: op(**args), CpuWallTimer(write), rule).median_s)

            def warm() -> None:
                note(key, "warm", measure(run, CpuWallTimer(lambda: None), rule).median_s)

            def timer() -> None:
                median, wall = torch_timer(raw)
                note(key, "timer", median)
                note(key, "timer_wall", wall)

            steps = [("ours", ours), ("bare_write", lambda: note(key, "bare_write", bare_loop(raw, write, 100))),
                     ("bare_read", lambda: note(key, "bare_read", bare_loop(raw, read, 100))),
                     ("warm", warm), ("timer", timer), ("before", before)]
            for _, step in steps[r % len(steps):] + steps[:r % len(steps)]:  # rotate: no method always first
                step()
    out = []
    for (op, label), v in got.items():
        med = {k: statistics.median(x) for k, x in v.items()}
        out.append({
            "op": op, "row": label, "dtype": "float32",
            "ours_cold_s": med["ours"], "bare_write_s": med["bare_write"], "bare_read_s": med["bare_read"],
            "ours_warm_s": med["warm"], "timer_s": med["timer"], "before_cold_s": med["before"],
            "before_over_bare_write": med["before"] / med["bare_write"],
            "cold_over_bare_write": med["ours"] / med["bare_write"], "cold_over_bare_read": med["ours"] / med["bare_read"],
            "warm_over_timer": med["warm"] / med["timer"],
            "ours_noise": med["ours_noise"], "ours_n": med["ours_n"],
            "ours_spread": spread(v["ours"]), "warm_spread": spread(v["warm"]), "timer_spread": spread(v["timer"]),
            "ours_wall_s": med["ours_wall"], "timer_wall_s": med["timer_wall"],
            "wall_over_timer": med["ours_wall"] / med["timer_wall"],
        })
    return out


def gpu_table(repeats: int, rule: BlockRule) -> list[dict[str, Any]]:  # pragma: no cover - needs a GPU
    import triton.testing

    from tileops.device import describe_device

    info = describe_device("cuda:0")
    read, write = CacheFlusher("cuda:0", info.l2_bytes), CacheFlusher("cuda:0", info.l2_bytes, mode="write")
    out = []
    for op, label in GPU_ROWS:
        run, _ = prepared_row(op, label, "bfloat16", "cuda:0")
        v: dict[str, list[float]] = {}
        fallbacks: list[str] = []
        for _ in range(repeats):
            for what, flush in (("ours_read", read), ("ours_write", write)):
                t = measure(run, CuptiTimer(flush, "cuda:0"), rule)
                v.setdefault(what, []).append(t.median_s)
                v.setdefault(what + "_noise", []).append(t.rel_noise)
                if t.fallback_reason:
                    print(f"{op} {label}: {t.fallback_reason}")
                    fallbacks.append(f"{op} {label} ({what}): {t.fallback_reason}")
            lo, mid, hi = triton.testing.do_bench(run, quantiles=[0.2, 0.5, 0.8])
            v.setdefault("do_bench", []).append(mid * 1e-3)
            v.setdefault("do_bench_iqr", []).append((hi - lo) / mid)
        med = {k: statistics.median(x) for k, x in v.items()}
        out.append({"op": op, "row": label, "dtype": "bfloat16", "fallbacks": fallbacks,
                    **{k + "_s" if not k.endswith(("noise", "iqr")) else k: m for k, m in med.items()},
                    "ours_over_do_bench": med["ours_write"] / med["do_bench"],
                    "ours_read_over_do_bench": med["ours_read"] / med["do_bench"],
                    "ours_spread": spread(v["ours_write"]), "do_bench_spread": spread(v["do_bench"])})
    return out


def every_timer(out_dir: Path, device: str) -> dict[str, Any]:
    """One row by every timer this device has; one CUPTI batch's raw events kept as a Chrome trace."""
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"device": device, "torch": torch.__version__}
    if device == "cpu":
        run, _ = prepared_row("relu", "cpu-512x1024", "float32", "cpu")
        from tileops.device import cpu_llc_bytes

        flush = CacheFlusher("cpu", cpu_llc_bytes())
        result["cpu-wall"] = measure(run, CpuWallTimer(flush), QUICK_BLOCKS).median_s
        result["cpu-wall warm"] = measure(run, CpuWallTimer(lambda: None), QUICK_BLOCKS).median_s
        result["cupti"] = f"skipped: {cupti_unavailable_reason()}"
        return result
    from tileops.device import describe_device  # pragma: no cover - needs a GPU

    info = describe_device(device)  # pragma: no cover
    run, _ = prepared_row("relu", "llama3-70b-mlp-act-decode-64", "bfloat16", device)  # pragma: no cover
    flush = CacheFlusher(device, info.l2_bytes)  # pragma: no cover
    result["device_name"], result["l2_bytes"] = info.name, info.l2_bytes  # pragma: no cover
    errors = result["errors"] = []  # pragma: no cover
    for name, timer in (("cupti", CuptiTimer(flush, device)), ("cuda-events", CudaEventTimer(flush, device)),
                        ("cupti write-flush", CuptiTimer(CacheFlusher(device, info.l2_bytes, mode="write"), device))):
        try:  # pragma: no cover
            t = measure(run, timer, QUICK_BLOCKS)
            result[name] = {"median_s": t.median_s, "span_s": t.span_s, "n": t.n, "rel_noise": t.rel_noise,
                            "timer": t.timer, "fallback_reason": t.fallback_reason}
            if name.startswith("cupti") and (t.timer != "cupti" or t.fallback_reason):
                errors.append(f"{name}: fell back to {t.timer}: {t.fallback_reason}")
        except Exception as exc:  # pragma: no cover - report, go on to the next timer
            result[name] = f"{type(exc).__name__}: {exc}"
            errors.append(f"{name}: {result[name]}")
    trace = out_dir / "cupti-trace.json.gz"  # pragma: no cover
    try:  # pragma: no cover
        live = CuptiTimer(flush, device, trace_path=str(trace)).sample(run, 3)
        with gzip.open(trace, "rt", encoding="utf-8") as f:
            kept = [it.busy_s for it in attribute_iterations(trace_events_from_chrome(json.load(f)), 3)]
        result["one batch of 3"] = {"live_s": live, "from_kept_trace_s": kept}
        if kept != live:
            errors.append(f"the kept trace attributes {kept}, the live batch {live}")
    except Exception as exc:  # pragma: no cover
        result["one batch of 3"] = f"{type(exc).__name__}: {exc}"
        errors.append(f"one batch of 3: {result['one batch of 3']}")
    return result  # pragma: no cover


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats per row (default 3)")
    ap.add_argument("--quick", action="store_true", help="the quick stopping rule: a smoke run, not a measurement")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (default: torch's, all usable cores, as the bench's worker sets)")
    ap.add_argument("--json", default=None, help="write the figures here")
    ap.add_argument("--every-timer", type=Path, default=None, metavar="DIR",
                    help="time one row by every timer, keep one CUPTI batch's trace in DIR, and stop")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = "cpu" if args.device == "cpu" else "cuda:0"
    if args.every_timer is not None:
        result = every_timer(args.every_timer, device)
        (args.every_timer / "timers.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
        print(json.dumps(result, indent=2, default=str))
        for err in result.get("errors", ()):
            print(f"bench_timer: FAILED: {err}", file=sys.stderr)
        return 1 if result.get("errors") else 0
    rule = QUICK_BLOCKS if args.quick else (CPU_BLOCKS if device == "cpu" else GPU_BLOCKS)
    rows = cpu_table(args.repeats, rule) if device == "cpu" else gpu_table(args.repeats, rule)
    print(f"{device}, {torch.get_num_threads()} threads, torch {torch.__version__}, {args.repeats} interleaved "
          f"repeats, rule {rule}")
    us = lambda s: f"{s * 1e6:9.1f}"
    if device == "cpu":
        print(f"{'op':8} {'before':>9} {'bef/wr':>6} {'ours cold':>9} {'bare wr':>9} {'bare rd':>9} {'cold/wr':>7} "
              f"{'cold/rd':>7} {'ours warm':>9} "
              f"{'Timer':>9} {'warm/T':>6} {'noise':>6} {'n':>5} {'spread':>6} {'T sprd':>6} {'wall':>6} {'T wall':>6} "
              f"{'wall/T':>6}   (us, s)")
        for r in rows:
            print(f"{r['op']:8} {us(r['before_cold_s'])} {r['before_over_bare_write']:6.2f} "
                  f"{us(r['ours_cold_s'])} {us(r['bare_write_s'])} {us(r['bare_read_s'])} "
                  f"{r['cold_over_bare_write']:7.2f} {r['cold_over_bare_read']:7.2f} {us(r['ours_warm_s'])} "
                  f"{us(r['timer_s'])} {r['warm_over_timer']:6.2f} {r['ours_noise']:6.1%} {r['ours_n']:5.0f} "
                  f"{r['ours_spread']:6.1%} {r['timer_spread']:6.1%} {r['ours_wall_s']:6.2f} {r['timer_wall_s']:6.2f} "
                  f"{r['wall_over_timer']:6.2f}")
        print("before: the bench's cold path before issue 18 (the checked call op(...) after a write flush); cold/wr: "
              "ours cold over the bare loop that writes 2x LLC (the issue's reference); cold/rd: over the bare loop that "
              "reads it (the bench's flush); spread: (max-min)/median of the medians over repeats")
    else:  # pragma: no cover - needs a GPU
        print(f"{'op':9} {'row':32} {'ours rd':>9} {'ours wr':>9} {'do_bench':>9} {'wr/db':>6} {'rd/db':>6} "
              f"{'noise':>6} {'spread':>6} {'db sprd':>7}   (us)")
        for r in rows:
            print(f"{r['op']:9} {r['row']:32} {us(r['ours_read_s'])} {us(r['ours_write_s'])} {us(r['do_bench_s'])} "
                  f"{r['ours_over_do_bench']:6.3f} {r['ours_read_over_do_bench']:6.3f} {r['ours_write_noise']:6.1%} "
                  f"{r['ours_spread']:6.1%} {r['do_bench_spread']:7.1%}")
        print("wr/db: ours with do_bench's write flush over do_bench (like for like; goal 0.98-1.02); rd/db: the "
              "bench's read-sweep flush over do_bench")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    fell_back = [f for r in rows for f in r.get("fallbacks", ())]
    for f in fell_back:
        print(f"bench_timer: FAILED: CUPTI fell back: {f}", file=sys.stderr)
    return 1 if fell_back else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
