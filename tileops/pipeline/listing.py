"""``tileops bench --list`` (``--dry-run``): the plan of a run before running it.

What a selection picks, row by row and per backend (skips with their reason),
and what the run will cost in time: the stopping rule bounds each row's timing,
``--row-timeout`` bounds each row, ``--compile-timeout`` each compile. Nothing
is measured, calibrated or written; a bad selection is the same exit 2 with the
same sentence as the run would give.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tileops.bench import sweep
from tileops.bench.worker import cpu_threads
from tileops.pipeline.outcome import exit_code
from tileops.records import RECORDS_FILE, iter_records
from tileops.report.printer import Listing, Printer

if TYPE_CHECKING:
    from tileops.pipeline.bench import BenchRequest


def _duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3 h 20 min``: a budget, not a measurement."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    if minutes < 90:
        return f"{minutes:.0f} min"
    return str(dt.timedelta(seconds=round(seconds))).rsplit(":", 1)[0].replace(":", " h ", 1) + " min"


@dataclass(frozen=True)
class Listed:
    """The plan was printed: nothing measured, calibrated or written."""

    rows: int

    @property
    def exit_code(self) -> int:
        return exit_code()


def list_plan(req: BenchRequest, printer: Printer) -> Listed:
    """Show the rows ``req`` would run and its time budget through ``printer``."""
    from tileops.device import describe_device

    opts = req.options
    device = describe_device(opts.device)
    notes: list[str] = []
    planned = sweep.plan_rows(req.selection, device, notes, strict=req.resume is None)
    done: set[tuple[str, str, str, str]] = set()
    if req.resume is not None and (req.resume / RECORDS_FILE).exists():
        done = {r.key for r in iter_records(req.resume / RECORDS_FILE, fast_json=False) if r.status == "ok"}
    rule = sweep.stopping_rule(device, opts)
    cpu_threads(opts.threads, device.kind)  # --threads beyond this host's CPUs, or on a GPU: refused as the run is
    row_timeout = opts.row_timeout_s or sweep.DEFAULT_ROW_TIMEOUT_S[device.kind]
    compile_timeout = opts.compile_timeout_s or sweep.DEFAULT_COMPILE_TIMEOUT_S

    plan = Listing(f"tileops bench --list: {device.name} ({device.torch_device})",
                   ("op", "label", "dtype", "backend", "plan"), notes=notes)
    runs: Counter[str] = Counter()
    skips: Counter[str] = Counter()
    done_n = 0
    for p in planned:
        if p.key in done:
            what, style = "done (recorded OK; --resume skips it)", "dim"
            done_n += 1
        elif p.skip_reason:
            what, style = f"skip: {p.skip_reason}", "yellow"
            skips[p.backend] += 1
        else:
            what, style = "run", ""
            runs[p.backend] += 1
        plan.rows.append(((p.op, p.row.label, p.case_name, p.backend, what),
                          ("bold", "", "", "", style)))
    n_run = sum(runs.values())
    backends = sorted(set(runs) | set(skips))
    per_backend = "; ".join(f"{b} {runs[b]} to run" + (f", {skips[b]} skipped" if skips[b] else "")
                            for b in backends)
    lines = plan.lines
    lines.append(f"{len(planned)} row(s): {n_run} to run, {sum(skips.values())} skipped"
                 + (f", {done_n} already done" if done_n else "") + f" ({per_backend})")
    compiled = sum(n for b, n in runs.items() if b != "torch")
    typical = n_run * (rule.warmup_s + rule.max_time_s)
    lines.append(f"timing: each visit stops once its level is known to ±{rule.target_precision:.1%} (from "
                 f"at least {rule.min_blocks} blocks of samples and {rule.min_time_s:g} s) or at "
                 f"{rule.max_time_s:g} s, after {rule.warmup_s:g} s of warm-up"
                 + (" (--quick)" if opts.quick else "") + f": at most about {_duration(typical)} of timing, "
                 "plus each row's set-up (its inputs, its first call)"
                 + (f"; the {runs['torch']} eager row(s) are visited twice, half of that in each visit and the "
                    "second in a fresh worker process, so each interval covers what moves between processes and "
                    "over the sweep (--passes 1: once)" if opts.passes == 2 and runs["torch"] else ""))
    visits = n_run + (runs["torch"] if opts.passes == 2 else 0)  # each visit has the row timeout
    worst = visits * row_timeout + compiled * compile_timeout
    lines.append(f"limit: a row is stopped after --row-timeout {row_timeout:g} s"
                 + (f", and a compile or triton row's first call (its compile) after --compile-timeout "
                    f"{compile_timeout:g} s ({compiled} such row(s))" if compiled else "")
                 + f": the run cannot take more than {_duration(worst)}")
    lines.append("nothing was measured or written; run the same command without --list to measure")
    printer.listing(plan)
    return Listed(len(planned))
