"""`tileops audit`: the read-side bytes audit under Nsight Compute (§4.5); docs/audit.md."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tileops import exitcodes
from tileops.audit.render import FORMATS

EPILOG = """\
default rows: every row of every implemented op that declares a read half (an op named with --op
is audited even without one: its rows get NO-VERDICT with their reads reported).
verdicts: PASS, FAIL, WARN, EXEMPT, SKIPPED, ERROR, NO-VERDICT (docs/audit.md).
exit codes: 0 no FAIL and no ERROR; 1 any FAIL or ERROR (every row is still written);
2 bad arguments, an unknown op, or an invalid EXEMPT configuration (nothing run); 130 interrupted.
"""

_STYLE = {"PASS": "green", "FAIL": "bold red", "ERROR": "bold red", "WARN": "yellow", "EXEMPT": "cyan",
          "SKIPPED": "dim", "NO-VERDICT": "magenta"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "audit", help="the read-side bytes audit: DRAM reads under Nsight Compute against each op's read formula",
        description="Run manifest rows under Nsight Compute (ncu), one process per row, sum the DRAM bytes every "
                    "kernel of the call reads, and compare them with the op's declared read half.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sel = p.add_argument_group("selection (repeatable; the bench's filters)")
    sel.add_argument("--op", action="append", default=[], help="op name (audited even without a read half)")
    sel.add_argument("--family", action="append", default=[], help="op family (elementwise, moe, ...)")
    sel.add_argument("--label", action="append", default=[], help="workload row label")
    sel.add_argument("--tag", action="append", default=[], help="workload tag")
    from tileops.commands.bench import add_backend_argument

    add_backend_argument(sel, [], "default: torch (the formula is the same for every backend; the audit "
                                  "of another measures what its kernels read)")
    sel.add_argument("--dtype", action="append", default=[], help="dtype (bfloat16, ...) or dtype case name")
    p.add_argument("--device", default="cuda:0", help="the GPU to audit on (default cuda:0)")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="where audit.jsonl and the reports go (default results/audit-<run-id>/); `tileops export` "
                        "and `serve` publish it under the GPU it audited, with that GPU's newest run; a bench run "
                        "directory puts audit.jsonl beside its records instead")
    p.add_argument("--config", type=Path, default=None, metavar="PATH",
                   help="EXEMPT configuration: a YAML file or a folder of them (default: the shipped audit/)")
    p.add_argument("--ncu", default=None, metavar="PATH", help="the ncu executable (default: ncu on PATH, then "
                                                               "/usr/local/cuda/bin/ncu)")
    p.add_argument("--row-timeout", type=float, default=300.0, metavar="S",
                   help="seconds before a row under ncu is killed and recorded as ERROR (default 300)")
    p.add_argument("--warmup", type=int, default=1, metavar="N",
                   help="calls before the profiled one, outside its NVTX range (default 1)")
    from tileops.audit.ncu import CLOCK_CONTROLS, DEFAULT_REPLAY_MODE, REPLAY_MODES

    p.add_argument("--replay-mode", choices=tuple(REPLAY_MODES), default=DEFAULT_REPLAY_MODE,
                   help="how ncu replays the call (default app-range: caches flushed once, at the call's start, so a "
                        "multi-kernel op's intermediates are read as in a real run; kernel: each kernel from cold "
                        "caches; docs/audit.md)")
    p.add_argument("--clock-control", choices=CLOCK_CONTROLS, default=CLOCK_CONTROLS[0],
                   help="ncu's clock control (default none: the GPU's clocks are left alone, as the fleet's other "
                        "jobs need; base locks them to base clocks)")
    p.add_argument("--format", choices=FORMATS, default="table",
                   help="what to print: the table (default), or json, csv, md of every row")
    p.set_defaults(func=run)


def _premise_cells() -> dict[str, str]:
    from tileops.audit.ncu import REPLAY_MODES, premise

    return {premise(m): ("cold call; reads only" if m != "kernel" else "cold replay per kernel; reads only")
            for m in REPLAY_MODES}


_PREMISE_CELL = _premise_cells()


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=200)


def _num(v: int | None) -> str:
    return "" if v is None else f"{v:,}"


def _table(entries, premise: str) -> Table:
    t = Table(title="Read-side bytes audit", caption=f"premises: {premise}", caption_justify="left")
    for col, justify in (("op", "left"), ("row", "left"), ("dtype", "left"), ("declared read B", "right"),
                         ("measured read B", "right"), ("ratio", "right"), ("measured write B", "right"),
                         ("kernels", "right"), ("verdict", "left"), ("premise", "left")):
        t.add_column(col, justify=justify, overflow="fold")
    for e in entries:
        ratio = e.read_ratio
        t.add_row(e.op, e.label, e.dtype, _num(e.expected_read_bytes), _num(e.measured_read_bytes),
                  "" if ratio is None else f"{ratio:.3f}", _num(e.measured_write_bytes), _num(e.kernels),
                  f"[{_STYLE.get(e.verdict, '')}]{e.verdict}[/]", _PREMISE_CELL.get(e.premise, "see caption"))
    return t


def exit_code(entries) -> int:
    """1 when any row is FAIL or ERROR, else 0 (WARN, EXEMPT, SKIPPED and NO-VERDICT do not fail a run)."""
    from tileops.audit.entry import FAILING

    return exitcodes.FAILED if any(e.verdict in FAILING for e in entries) else exitcodes.OK


def _why(entries, out: Console) -> None:
    """Each non-PASS reason once, with the rows it applies to (47 rows refused by ncu are one line)."""
    groups: dict[tuple[str, str], list] = {}
    for e in entries:
        if e.verdict != "PASS":
            groups.setdefault((e.verdict, e.reason), []).append(e)
    for (verdict, reason), rows in groups.items():
        who = (f"{rows[0].op} [{rows[0].label} {rows[0].dtype} {rows[0].backend}]" if len(rows) == 1
               else f"{len(rows)} rows ({', '.join(sorted({r.op for r in rows}))})")
        out.print(f"[{_STYLE.get(verdict, '')}]{verdict}[/] {who}: {reason}", highlight=False, soft_wrap=True)


def run(args: argparse.Namespace) -> int:
    from tileops.audit.entry import counts
    from tileops.audit.ncu import premise
    from tileops.audit.render import render
    from tileops.audit.run import AuditOptions, run_audit
    from tileops.bench.select import Selection

    if args.row_timeout <= 0 or args.warmup < 0:
        print("tileops audit: error: --row-timeout must be > 0 and --warmup >= 0", file=sys.stderr)
        return exitcodes.USAGE
    opts = AuditOptions(
        selection=Selection(ops=args.op, families=args.family, labels=args.label, tags=args.tag,
                            backends=args.backends, dtypes=args.dtype),
        device=args.device, out=args.out, config=args.config, ncu=args.ncu, row_timeout_s=args.row_timeout,
        warmup=args.warmup, replay_mode=args.replay_mode, clock_control=args.clock_control)
    err = Console(stderr=True, soft_wrap=True, highlight=False)

    def progress(i: int, n: int, e) -> None:
        ratio = "" if e.read_ratio is None else f" ({e.read_ratio:.3f} x declared)"
        err.print(f"[{i}/{n}] {e.op} {e.label} {e.dtype} {e.backend}: [{_STYLE.get(e.verdict, '')}]{e.verdict}[/]"
                  f"{ratio}")

    result = run_audit(opts, on_row=progress)
    entries = result.entries
    if args.format == "table":
        out = _console()
        out.print(_table(entries, premise(args.replay_mode)))
        _why(entries, out)
    else:
        sys.stdout.write(render(entries, args.format))
    summary = ", ".join(f"{n} {v}" for v, n in counts(entries).items())
    err.print(f"audit: {len(entries)} row(s): {summary}; ncu {result.ncu_version or result.ncu or 'not found'}; "
              f"wrote {result.out_dir / 'audit.jsonl'} and the reports in {result.out_dir / 'ncu'}")
    rc = exit_code(entries)
    if rc:
        err.print("audit: FAIL or ERROR rows; exit 1", style="red")
    return rc
