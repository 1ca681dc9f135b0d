"""``tileops audit`` composed: the read-side bytes audit under Nsight Compute (§4.5), shown and judged.

The audit itself (``tileops.audit.run``) runs each selected row under ``ncu``
in its own process and writes every entry to ``audit.jsonl`` as it goes; this
workflow says each row as it finishes (stderr), prints the table or the format
asked for (stdout), names each reason once, and decides the exit code
(``tileops.pipeline.outcome``): 1 on any FAIL or ERROR, else 0.

With ``--pause-dcgm`` the audit runs between ``dcgmi profile --pause`` and
``dcgmi profile --resume`` (``tileops.audit.dcgm``): the run is under
``tileops.interrupts.handled``, so Ctrl-C and SIGTERM end it through the
resume; a resume that fails is said loudly and makes the exit code at least 1
(the node's DCGM profiling metrics stay paused until someone resumes them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from collections.abc import Sequence

from tileops.defaults import (AUDIT_CLOCK_CONTROLS, AUDIT_DEVICE, AUDIT_REPLAY_MODE, AUDIT_ROW_TIMEOUT_S,
                              AUDIT_WARMUP)
from tileops.pipeline.outcome import exit_code

if TYPE_CHECKING:
    from tileops.audit.run import AuditRun
    from tileops.records import AuditEntry
    from tileops.report.printer import Printer


@dataclass(frozen=True)
class AuditRequest:
    """``tileops audit``: the rows (the bench's filters), the device, ncu's settings, and the output."""

    ops: Sequence[str] = ()
    families: Sequence[str] = ()
    labels: Sequence[str] = ()
    tags: Sequence[str] = ()
    backends: Sequence[str] = ()
    dtypes: Sequence[str] = ()
    device: str = AUDIT_DEVICE
    out: Path | None = None
    config: Path | None = None  # EXEMPT configuration (a file or a folder); None: the shipped audit/
    ncu: str | None = None  # the ncu executable; None: ncu on PATH, then /usr/local/cuda/bin/ncu
    row_timeout_s: float = AUDIT_ROW_TIMEOUT_S
    warmup: int = AUDIT_WARMUP
    replay_mode: str = AUDIT_REPLAY_MODE
    clock_control: str = AUDIT_CLOCK_CONTROLS[0]
    format: str = "table"
    pause_dcgm: bool = False  # `dcgmi profile --pause` before the audit, `--resume` after it, however it ends
    dcgmi: str | None = None  # the dcgmi executable; None: dcgmi on PATH


@dataclass
class AuditResult:
    run: AuditRun
    entries: list[AuditEntry] = field(default_factory=list)
    dcgm_left_paused: bool = False  # --pause-dcgm's resume failed: DCGM's profiling metrics are still paused

    @property
    def failed(self) -> int:
        """Rows whose verdict is FAIL or ERROR (WARN, EXEMPT, SKIPPED and NO-VERDICT do not fail a run)."""
        from tileops.audit.entry import FAILING

        return sum(e.verdict in FAILING for e in self.entries)

    @property
    def exit_code(self) -> int:
        return exit_code(failed=self.failed + self.dcgm_left_paused)


def run_audit(req: AuditRequest, printer: Printer | None = None) -> AuditResult:
    """Audit the selected rows, telling ``printer`` (default: the console) each as it finishes and then the
    table (or ``req.format``). TileOpsError (exit 2), before anything runs, for bad settings, an unknown op,
    an invalid EXEMPT configuration or (``--pause-dcgm``) a DCGM that could not be paused; after that every
    selected row is written. Ctrl-C and SIGTERM raise KeyboardInterrupt (the rows not run written SKIPPED)."""
    from tileops import interrupts
    from tileops.errors import TileOpsError
    from tileops.report.printer import make_printer

    if req.row_timeout_s <= 0 or req.warmup < 0:
        raise TileOpsError("--row-timeout must be > 0 and --warmup >= 0")
    printer = printer if printer is not None else make_printer("console")
    with interrupts.handled():
        if not req.pause_dcgm:
            return _audit(req, printer)
        return _audit_with_dcgm_paused(req, printer)


def _audit_with_dcgm_paused(req: AuditRequest, printer: Printer) -> AuditResult:
    """The audit between ``dcgmi profile --pause`` and ``--resume``; a failed resume said loudly, however the
    audit ended (a finished run, an error, an interrupt)."""
    from tileops.audit.dcgm import ResumeFailure, find_dcgmi, profiling_paused

    failures: list[ResumeFailure] = []

    def left_paused(failure: ResumeFailure) -> None:
        failures.append(failure)
        printer.say([(f"audit: --pause-dcgm: {failure.message}", "red")], kind="error")

    with profiling_paused(find_dcgmi(req.dcgmi), left_paused):
        printer.say("audit: DCGM's profiling paused (`dcgmi profile --pause`); it is resumed when the audit ends")
        result = _audit(req, printer)
    if failures:
        result.dcgm_left_paused = True
        printer.say([("audit: DCGM's profiling left paused; exit 1", "red")], kind="error", bare=True)
    else:
        printer.say("audit: DCGM's profiling resumed (`dcgmi profile --resume`)")
    return result


def _audit(req: AuditRequest, printer: Printer) -> AuditResult:
    """The audit itself: the rows under ncu, each said as it finishes, then the table and the summary."""
    from tileops.audit.entry import counts
    from tileops.audit.ncu import premise
    from tileops.audit.render import VERDICT_STYLE, audit_table, audit_text
    from tileops.audit.run import AuditOptions
    from tileops.audit.run import run_audit as audit
    from tileops.bench.select import Selection

    opts = AuditOptions(
        selection=Selection(ops=list(req.ops), families=list(req.families), labels=list(req.labels),
                            tags=list(req.tags), backends=list(req.backends), dtypes=list(req.dtypes)),
        device=req.device, out=req.out, config=req.config, ncu=req.ncu, row_timeout_s=req.row_timeout_s,
        warmup=req.warmup, replay_mode=req.replay_mode, clock_control=req.clock_control)

    def progress(i: int, n: int, e: AuditEntry) -> None:
        ratio = "" if e.read_ratio is None else f" ({e.read_ratio:.3f} x declared)"
        printer.say([(f"[{i}/{n}] {e.op} {e.label} {e.dtype} {e.backend}: ", ""),
                     (e.verdict, VERDICT_STYLE.get(e.verdict, "")), (ratio, "")],
                    op=e.op, label=e.label, dtype=e.dtype, backend=e.backend, verdict=e.verdict)

    run = audit(opts, on_row=progress)
    result = AuditResult(run, run.entries)
    entries = result.entries
    if req.format == "table":
        printer.show(audit_table(entries, premise(req.replay_mode)))
        _why(entries, printer)
    else:
        printer.text(audit_text(entries, req.format))
    summary = ", ".join(f"{n} {v}" for v, n in counts(entries).items())
    printer.say(f"audit: {len(entries)} row(s): {summary}; ncu {run.ncu_version or run.ncu or 'not found'}; "
                f"wrote {run.out_dir / 'audit.jsonl'} and the reports in {run.out_dir / 'ncu'}")
    if result.exit_code:
        printer.say([("audit: FAIL or ERROR rows; exit 1", "red")], kind="error", bare=True)
    return result


def _why(entries: Sequence[AuditEntry], printer: Printer) -> None:
    """Each non-PASS reason once, with the rows it applies to (47 rows refused by ncu are one line).

    A refusal of the host (``HOST_PROBLEMS``: the counters not permitted, not available, the profiler held
    by DCGM) is one reason however each row words it: the first row's words, which carry the fix."""
    from tileops.audit.ncu import HOST_PROBLEMS
    from tileops.audit.render import VERDICT_STYLE

    groups: dict[tuple[str, str], list[AuditEntry]] = {}
    for e in entries:
        if e.verdict != "PASS":
            key = e.error_kind if e.error_kind in HOST_PROBLEMS else e.reason
            groups.setdefault((e.verdict, key or ""), []).append(e)
    for (verdict, _), rows in groups.items():
        reason = rows[0].reason
        who = (f"{rows[0].op} [{rows[0].label} {rows[0].dtype} {rows[0].backend}]" if len(rows) == 1
               else f"{len(rows)} rows ({', '.join(sorted({r.op for r in rows}))})")
        printer.say([(verdict, VERDICT_STYLE.get(verdict, "")), (f" {who}: {reason}", "")], result=True)
