"""Benchmark of the backends side by side (issue 16), not a test: per row, the SOL of torch eager,
torch.compile and the Triton kernel, and how far the best is ahead of the next, from one run.

It runs one ``tileops bench --backend all`` over the rows below, then reads the run's
``roofline.json`` (the roofline tool's pricing: every backend of a row makes the same call and is
priced against the same formula, so their SOL ratios compare the implementations directly) and
prints one line per row: each backend's SOL (or why it was skipped or failed), its compile time
(the first call, compilation included, reported apart from every timing), the best backend and its
margin over the runner-up in SOL points and as a speed ratio.

Rows: relu, add, silu_and_mul, rms_norm and softmax (the memory-bound ops issue 16 names).
  * ``--device cpu`` (the default): their rows tagged ``cpu``. Triton is listed as skipped, with
    the reason the op gives: on a CPU only Triton's interpreter runs its kernels, which checks
    correctness and is not timed.
  * ``--device cuda``: their manifest rows whose tensors occupy 64 MiB or more (read off a call on
    meta tensors; nothing is allocated to choose them). The goal on an H200: the Triton kernel at
    90 % SOL or more on every such row and ahead of both eager and compile; each line says whether
    it is met. Not measured while this was written (no GPU): docs/ops.md, "Backends".

    python benchmarks/backends.py [--device cpu|cuda] [--dtype D] [--rows-per-op N] [--quick]
                                  [--profile NAME|FILE] [--compile-cache DIR] [--out DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

OPS = ("relu", "add", "silu_and_mul", "rms_norm", "softmax")
BACKENDS = ("torch", "compile", "triton")
MIN_GPU_ROW_MIB = 64
#: The goal for the Triton kernels on an H200 (issue 16): this SOL or more, and ahead of eager and compile.
GOAL_SOL = 0.90


def gpu_rows(dtype: str | None, per_op: int | None) -> list[tuple[str, str]]:
    """(op, label) of every row of ``OPS`` whose tensors occupy MIN_GPU_ROW_MIB or more in some dtype case
    (``dtype`` only, when given), at most ``per_op`` rows per op, in manifest order."""
    from tileops.bench.select import footprint
    from tileops.ops.catalog import load_entries
    from tileops.ops.spec import dtype_case_name

    entries = load_entries()
    out: list[tuple[str, str]] = []
    for op in OPS:
        rows = []
        for row in entries[op].workloads:
            cases = [c for c in row.dtypes if dtype is None or dtype_case_name(c) == dtype]
            sizes = [footprint(entries[op], row, c) or 0 for c in cases]
            if sizes and max(sizes) >= MIN_GPU_ROW_MIB * 2**20:
                rows.append((op, row.label))
        out += rows[:per_op] if per_op else rows
    return out


def bench_command(args: argparse.Namespace, out: Path, rows: list[tuple[str, str]] | None) -> list[str]:
    cmd = [sys.executable, "-m", "tileops.cli", "bench", "--device", args.device, "--backend", "all",
           "--out", str(out), "--no-plot"]
    for op in OPS:
        cmd += ["--op", op]
    for label in dict.fromkeys(label for _, label in rows or []):
        cmd += ["--label", label]
    if args.dtype:
        cmd += ["--dtype", args.dtype]
    if args.quick:
        cmd.append("--quick")
    if args.profile:
        cmd += ["--profile", args.profile]
    if args.compile_cache:
        cmd += ["--compile-cache", str(args.compile_cache)]
    return cmd


def _pct(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio * 100:.1f} %"


def summarise(doc: dict[str, Any], wanted: set[tuple[str, str]] | None, goal: bool) -> list[dict[str, Any]]:
    """One entry per (op, label, dtype): each backend's SOL or why it has none, compile seconds, the best
    and its margin (from the roofline tool's own comparison), and on a GPU whether the goal is met."""
    races = {(r["op"], r["label"], r["dtype"]): r for r in doc.get("backends", [])}
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in doc["rows"]:
        if wanted is not None and (r["op"], r["label"]) not in wanted:
            continue  # a --label of another op's row
        key = (r["op"], r["label"], r["dtype"])
        e = rows.setdefault(key, {"op": r["op"], "label": r["label"], "dtype": r["dtype"], "sol": {}, "why": {},
                                  "compile_s": {}})
        e["sol"][r["backend"]] = r["efficiency"]
        if r["efficiency"] is None:  # skipped, failed or blank: the roofline tool's sentence says which and why
            e["why"][r["backend"]] = (r["blank_reason"] or r["verdict"], r["blank_detail"] or r["verdict"])
        if r["compile_s"] is not None:
            e["compile_s"][r["backend"]] = r["compile_s"]
    for key, e in rows.items():
        race = races.get(key, {})
        e.update(best=race.get("best"), runner_up=race.get("runner_up"), margin=race.get("margin"),
                 speedup=race.get("speedup"))
        if goal:
            t = e["sol"].get("triton")
            e["goal_met"] = (t is not None and t >= GOAL_SOL and e["best"] == "triton"
                             and all(e["sol"].get(b) is not None for b in ("torch", "compile")))
    return list(rows.values())


def print_table(rows: list[dict[str, Any]], goal: bool) -> None:
    head = ["op", "label", "dtype", *BACKENDS, "compile time", "best", "margin"] + (["goal"] if goal else [])
    lines = [head]
    notes: dict[str, str] = {}
    for e in rows:
        cells = [e["op"], e["label"], e["dtype"]]
        for b in BACKENDS:
            if b not in e["sol"]:
                cells.append("(none)")
            elif e["sol"][b] is not None:
                cells.append(_pct(e["sol"][b]))
            else:  # skipped, failed or blank: a footnote, not a 100-character cell
                kind, why = e["why"][b]
                mark = notes.setdefault(why, f"[{len(notes) + 1}]")
                cells.append(f"{kind} {mark}")
        cells.append(", ".join(f"{b} {s:.1f} s" for b, s in e["compile_s"].items()) or "—")
        cells.append(e["best"] or "—")
        cells.append("—" if e["margin"] is None else f"+{e['margin'] * 100:.1f} pts ({e['speedup']:.2f}x)")
        if goal:
            cells.append("met" if e["goal_met"] else "NOT met")
        lines.append(cells)
    widths = [max(len(str(r[i])) for r in lines) for i in range(len(head))]
    for r in lines:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
    for why, mark in notes.items():
        print(f"{mark} {why}")
    print("SOL = speed-of-light time / measured time on the same formula, so a row's backends compare directly; "
          "compile time is the first call, compilation included, never part of a timing.")
    if goal:
        met = sum(e["goal_met"] for e in rows)
        print(f"goal (Triton >= {GOAL_SOL:.0%} SOL and ahead of eager and compile): met on {met} of {len(rows)} rows")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", default=None, help="one dtype (e.g. bfloat16); default every dtype of the rows")
    p.add_argument("--rows-per-op", type=int, default=None, metavar="N",
                   help="on a GPU, the first N rows of 64 MiB or more per op (default all)")
    p.add_argument("--quick", action="store_true", help="the bench's loose stopping rule (a smoke run)")
    p.add_argument("--profile", default=None, help="price against this profile (default: the device's)")
    p.add_argument("--compile-cache", type=Path, default=None, metavar="DIR",
                   help="the bench's --compile-cache (default: .compile-cache beside --out)")
    p.add_argument("--out", type=Path, default=None, metavar="DIR", help="the run directory (default: a temporary one)")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the per-row figures here")
    args = p.parse_args(argv)

    rows = gpu_rows(args.dtype, args.rows_per_op) if args.device == "cuda" else None
    if rows is not None and not rows:
        print(f"no row of {', '.join(OPS)} reaches {MIN_GPU_ROW_MIB} MiB", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="tileops-backends-")) / "run"
    cmd = bench_command(args, out, rows)
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, stdout=sys.stderr, env=os.environ.copy())  # its table and progress, on stderr
    report = out / "roofline.json"
    if not report.exists():
        print(f"the bench wrote no {report} (exit {r.returncode})", file=sys.stderr)
        return 1
    goal = args.device == "cuda"
    summary = summarise(json.loads(report.read_text()), set(rows) if rows is not None else None, goal)
    print_table(summary, goal)
    if args.json:
        args.json.write_text(json.dumps({"device": args.device, "run": str(out), "bench_exit": r.returncode,
                                         "goal_sol": GOAL_SOL if goal else None, "rows": summary}, indent=2) + "\n")
    return r.returncode  # a row that failed fails the benchmark (scripts/device-check counts it); the goal does not


if __name__ == "__main__":
    sys.exit(main())
