"""``tileops bench --list`` (``--dry-run``): the plan of a run before running it.

What a selection picks, row by row and per backend (skips with their reason),
and what the run will cost in time: the stopping rule bounds each row's timing,
``--row-timeout`` bounds each row, ``--compile-timeout`` each compile. Nothing
is measured, calibrated or written; a bad selection is the same exit 2 with the
same sentence as the run would give.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tileops.bench import sweep
from tileops.durations import format_budget
from tileops.bench.worker import cpu_threads
from tileops.pipeline.outcome import exit_code
from tileops.records import RECORDS_FILE, Record, iter_records, read_run_info
from tileops.report.printer import Listing, Printer

if TYPE_CHECKING:
    from tileops.pipeline.bench import BenchRequest, CheckedRequest


@dataclass(frozen=True)
class Listed:
    """The plan was printed: nothing measured, calibrated or written."""

    rows: int

    @property
    def exit_code(self) -> int:
        return exit_code()


def list_plan(req: BenchRequest, printer: Printer, checked: CheckedRequest) -> Listed:
    """Show the rows ``req`` would run and its time budget through ``printer``; ``checked``: its inputs, checked
    as the run checks them (``pipeline.bench.check_request``)."""
    opts = req.options
    device = checked.device
    notes = list(checked.sweep.notes)
    planned = checked.sweep.planned
    done: dict[tuple[str, str, str, str], Record] = {}
    owed: dict[tuple[str, str, str, str], sweep.FirstVisit] = {}
    if req.resume is not None and (req.resume / RECORDS_FILE).exists():
        done = {r.key: r for r in iter_records(req.resume / RECORDS_FILE, fast_json=False) if r.status == "ok"}
        info = read_run_info(req.resume)
        if info is not None:
            owed, said = sweep.owed_second_visits(req.resume, info, planned, done)
            notes += said
    rule = checked.sweep.rule
    cpu_threads(opts.threads, device.kind)  # --threads beyond this host's CPUs, or on a GPU: refused as the run is
    row_timeout = opts.row_timeout_s or sweep.DEFAULT_ROW_TIMEOUT_S[device.kind]
    compile_timeout = opts.compile_timeout_s or sweep.DEFAULT_COMPILE_TIMEOUT_S

    plan = Listing(f"tileops bench --list: {device.name} ({device.torch_device})",
                   ("op", "label", "dtype", "backend", "plan"), notes=notes)
    runs: Counter[str] = Counter()
    skips: Counter[str] = Counter()
    done_n = 0
    for p in planned:
        if p.key in owed:
            what, style = "done; its second visit is owed (the run stopped before its second pass ended)", "dim"
            done_n += 1
        elif p.key in done:
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
                 + (f", {done_n} already done" if done_n else "")
                 + (f" ({len(owed)} of them owed their second visit)" if owed else "")
                 + (f" ({per_backend})" if per_backend else ""))
    compiled = sum(n for b, n in runs.items() if b != "torch")
    typical = (n_run + len(owed) / 2) * (rule.warmup_s + rule.max_time_s)  # an owed visit: half a row's cap
    lines.append(f"timing: each visit stops once its level is known to ±{rule.target_precision:.1%} (from "
                 f"at least {rule.min_blocks} blocks of samples and {rule.min_time_s:g} s) or at "
                 f"{rule.max_time_s:g} s, after {rule.warmup_s:g} s of warm-up"
                 + (" (--quick)" if opts.quick else "")
                 + (f": {'at most about ' if typical >= 1 else ''}{format_budget(typical)} of timing, plus each "
                    "row's set-up (its inputs, its first call)" if n_run else ": no row left to time")
                 + (f"; the {runs['torch']} eager row(s) are visited twice, half of that in each visit and the "
                    "second in a fresh worker process, so each interval covers what moves between processes and "
                    "over the sweep (--passes 1: once)" if opts.passes == 2 and runs["torch"] else ""))
    visits = n_run + (runs["torch"] if opts.passes == 2 else 0) + len(owed)  # each visit has the row timeout
    worst = visits * row_timeout + compiled * compile_timeout
    lines.append(f"limit: a row is stopped after --row-timeout {row_timeout:g} s"
                 + (f", and a compile or triton row's first call (its compile) after --compile-timeout "
                    f"{compile_timeout:g} s ({compiled} such row(s))" if compiled else "")
                 + (f": the run cannot take more than {format_budget(worst)}" if worst else
                    ": no row left to run"))
    lines.append("nothing was measured or written; run the same command without --list to measure")
    printer.listing(plan)
    return Listed(len(planned))
