"""`tileops audit`: the read-side bytes audit under Nsight Compute (§4.5); docs/audit.md.

The workflow is ``tileops.pipeline.audit``; this module parses its arguments.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tileops.defaults import (AUDIT_CLOCK_CONTROLS, AUDIT_DEVICE, AUDIT_FORMATS, AUDIT_REPLAY_MODE, AUDIT_REPLAY_MODES,
                              AUDIT_ROW_TIMEOUT_S, AUDIT_WARMUP)

EPILOG = """\
default rows: every row of every implemented op that declares a read half (an op named with --op
is audited even without one: its rows get NO-VERDICT with their reads reported).
verdicts: PASS, FAIL, WARN, EXEMPT, SKIPPED, ERROR, NO-VERDICT (docs/audit.md).
exit codes: 0 no FAIL and no ERROR; 1 any FAIL or ERROR (every row is still written);
1 also when --pause-dcgm's `dcgmi profile --resume` failed (DCGM's profiling left paused);
2 bad arguments, an unknown op, an invalid EXEMPT configuration, or --pause-dcgm without dcgmi or
with a pause that failed (nothing run); 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
"""


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
    p.add_argument("--device", default=AUDIT_DEVICE, help="the GPU to audit on (default %(default)s)")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="where audit.jsonl and the reports go (default results/audit-<run-id>/); `tileops export` "
                        "and `serve` publish it under the GPU it audited, with that GPU's newest run; a bench run "
                        "directory puts audit.jsonl beside its records instead")
    p.add_argument("--config", type=Path, default=None, metavar="PATH",
                   help="EXEMPT configuration: a YAML file or a folder of them (default: the shipped audit/)")
    p.add_argument("--ncu", default=None, metavar="PATH", help="the ncu executable (default: ncu on PATH, then "
                                                               "/usr/local/cuda/bin/ncu)")
    p.add_argument("--row-timeout", type=float, default=AUDIT_ROW_TIMEOUT_S, metavar="S",
                   help="seconds before a row under ncu is killed and recorded as ERROR (default %(default)g)")
    p.add_argument("--warmup", type=int, default=AUDIT_WARMUP, metavar="N",
                   help="calls before the profiled one, outside its NVTX range (default 1)")
    p.add_argument("--replay-mode", choices=tuple(AUDIT_REPLAY_MODES), default=AUDIT_REPLAY_MODE,
                   help="how ncu replays the call (default app-range: caches flushed once, at the call's start, so a "
                        "multi-kernel op's intermediates are read as in a real run; kernel: each kernel from cold "
                        "caches; docs/audit.md)")
    p.add_argument("--clock-control", choices=AUDIT_CLOCK_CONTROLS, default=AUDIT_CLOCK_CONTROLS[0],
                   help="ncu's clock control (default none: the GPU's clocks are left alone, as the fleet's other "
                        "jobs need; base locks them to base clocks)")
    p.add_argument("--format", choices=AUDIT_FORMATS, default="table",
                   help="what to print: the table (default), or json, csv, md of every row")
    p.add_argument("--pause-dcgm", action="store_true",
                   help="run `dcgmi profile --pause` before the audit and `dcgmi profile --resume` after it, "
                        "however it ends (DCGM's profiling metrics hold the counters ncu needs; docs/audit.md)")
    p.add_argument("--dcgmi", default=None, metavar="PATH",
                   help="the dcgmi executable for --pause-dcgm (default: dcgmi on PATH)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tileops.pipeline.audit import AuditRequest, run_audit

    req = AuditRequest(ops=args.op, families=args.family, labels=args.label, tags=args.tag, backends=args.backends,
                       dtypes=args.dtype, device=args.device, out=args.out, config=args.config, ncu=args.ncu,
                       row_timeout_s=args.row_timeout, warmup=args.warmup, replay_mode=args.replay_mode,
                       clock_control=args.clock_control, format=args.format, pause_dcgm=args.pause_dcgm,
                       dcgmi=args.dcgmi)
    return run_audit(req).exit_code
