"""`tileops bench`: time every selected (op, row, dtype, backend) and show its SOL efficiency."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EPILOG = """\
default rows: on a CPU the rows tagged `cpu`; on a GPU every row the device can run.
exit codes: 0 ok; 1 some rows failed (error records written); 2 bad arguments;
3 physics-check breach (a formula claims the impossible); 4 results written but the push failed;
130 interrupted (resume with --resume DIR).
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run the benchmarks and print SOL efficiency (the main job)",
                       description="Time ops on their manifest workloads by device-busy time, write records, "
                                   "price them against the device profile, and print the roofline table.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sel = p.add_argument_group("selection (repeatable; default: the device's default set)")
    sel.add_argument("--op", action="append", default=[], help="op name")
    sel.add_argument("--family", action="append", default=[], help="op family (elementwise, gemm, ...)")
    sel.add_argument("--label", action="append", default=[], help="workload row label")
    sel.add_argument("--tag", action="append", default=[], help="workload tag (e.g. cpu)")
    sel.add_argument("--backend", action="append", default=[], help="backend (torch, ...)")
    sel.add_argument("--dtype", action="append", default=[], help="dtype (bfloat16, float32, ...)")
    sel.add_argument("--all-rows", action="store_true",
                     help="on a CPU, also run rows not tagged `cpu` (GPU-sized shapes: slow)")
    p.add_argument("--device", default="auto", help="auto (a GPU when there is one), cpu, cuda or cuda:N")
    p.add_argument("--out", type=Path, default=None, help="run directory (default: results/<run-id>/)")
    p.add_argument("--resume", type=Path, default=None, metavar="DIR",
                   help="finish an interrupted run: skip rows already recorded OK")
    p.add_argument("--row-timeout", type=float, default=None, metavar="S",
                   help="seconds before a row is killed and recorded as a timeout (default 60 CPU, 180 GPU)")
    p.add_argument("--quick", action="store_true", help="loose stopping rule: a smoke run, not a measurement")
    p.add_argument("--timer", choices=("auto", "cupti", "cuda-events"), default="auto",
                   help="GPU timer: auto = CUPTI where it works, else CUDA events that record why; cupti = "
                        "CUPTI or exit 2; cuda-events rows are priced blank (docs/timing.md)")
    p.add_argument("--profile", default=None, help="price against this profile name or file")
    p.add_argument("--calibrate", choices=("auto", "never"), default="auto",
                   help="auto: calibrate a CPU that no profile matches before pricing")
    p.add_argument("--no-plot", dest="plot", action="store_false", help="do not write the roofline plot")
    from tileops.commands.export import add_sink_arguments

    add_sink_arguments(p.add_argument_group("metrics at the end of the run (docs/metrics.md)"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tileops.bench.select import Selection  # torch loads here, not when the CLI starts
    from tileops.bench.sweep import SweepOptions
    from tileops.commands.export import retry_policy
    from tileops.pipeline.bench import BenchRequest, OutputOptions, run_bench

    req = BenchRequest(
        sweep=SweepOptions(
            selection=Selection(ops=args.op, families=args.family, labels=args.label, tags=args.tag,
                                backends=args.backend, dtypes=args.dtype, all_rows=args.all_rows),
            device=args.device, out=args.out, resume=args.resume, row_timeout_s=args.row_timeout,
            quick=args.quick, timer=args.timer, argv=sys.argv[1:]),
        output=OutputOptions(
            profile=args.profile, calibrate=args.calibrate, plot=args.plot, push_url=args.push,
            textfile_dir=args.textfile, job=args.job, instance=args.instance, push_policy=retry_policy(args),
            metrics_detail=args.metrics_detail),
    )
    console = Console()
    if not console.is_terminal:  # logs (docker, CI, files): wide enough for the SOL table
        console = Console(width=200)
    return run_bench(req, console)
