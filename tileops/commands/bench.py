"""`tileops bench`: time every selected (op, row, dtype, backend) and show its SOL efficiency."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from tileops.commands import argtypes
from tileops.defaults import (BACKENDS, BENCH_COMPILE_TIMEOUT_S, BENCH_ROW_TIMEOUT_S, CALIBRATION_MAX_AGE_DAYS,
                              OUTPUT_FORMATS, STOPPING)

EPILOG = """\
default rows: on a CPU the rows tagged `cpu`; on a GPU every row the device can run.
default backends: on a GPU torch, compile and triton (where the op has a Triton kernel); on a CPU torch
only (torch.compile costs seconds of C++ compilation per row there: --backend all shows both). A backend
a row cannot run here is a skipped record with the reason (Triton on a CPU: its interpreter is not timed).
--resume DIR restores the run's selection and options from DIR/run.json; a measurement flag that differs is
refused; the output-only ones (--plot/--no-plot, --push, --textfile, --job, --instance, --push-attempts,
--push-backoff, --push-timeout, --metrics-detail) may change (docs/bench.md, "Resuming a run").
exit codes: 0 ok; 1 some rows failed (error records written); 2 bad arguments, unreadable input, or an
unwritable run directory (a full disk: run.json says failed, resume after freeing space); 3 physics-check
breach (a formula claims the impossible); 4 results written but the push failed; 5 --require-quiet and
the host was busy (nothing measured: retry later); 130 interrupted by Ctrl-C, 143 stopped by SIGTERM
(docker stop): resume with --resume DIR.
"""

#: The flags that say where a run is or what to do with it, not how it runs: every other flag is a field of
#: the run's options (tileops.records.RunOptions, kept in run.json) and defaults to None here, so that a resumed
#: run can tell a flag given again from one left out.
NOT_RESTORED = frozenset({"help", "list_only", "out", "resume", "output_format"})



def restored_flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each restored option of ``parser`` (its RunOptions field) and the flag a person writes for it (the first
    of a field's flags: ``--no-plot`` before ``--plot``, which only gives back the default)."""
    flags: dict[str, str] = {}
    for a in parser._actions:
        if a.option_strings and a.dest not in NOT_RESTORED:
            flags.setdefault(a.dest, next((o for o in a.option_strings if o.startswith("--")), a.option_strings[0]))
    return flags


def add_backend_argument(group: argparse._ArgumentGroup, default: object, what: str) -> None:
    """``--backend``, shared by bench and audit: repeatable, ``all`` for every backend the op has."""
    group.add_argument("--backend", dest="backends", action="append", default=default,
                       choices=BACKENDS + ("all",), help=f"backend: {', '.join(BACKENDS)}, or all (every backend the "
                                                         f"op has); {what} (docs/ops.md, Backends)")


def _per_rule(setting: str, show: Callable[[float], str] = lambda v: f"{v:g}", quick: bool = True) -> str:
    """A stopping-rule setting's defaults as ``--help`` says them: "2% CPU, 1% GPU, 5% --quick" (one number where
    the CPU's and the GPU's agree), from ``tileops.defaults.STOPPING``."""
    cpu, gpu = show(STOPPING["cpu"][setting]), show(STOPPING["cuda"][setting])
    said = cpu if cpu == gpu else f"{cpu} CPU, {gpu} GPU"
    return f"{said}, {show(STOPPING['quick'][setting])} --quick" if quick else said


def _duration_s(text: str) -> float:
    """``--calibration-max-age``: a duration (12h, 7d, 1d12h), in seconds as run.json keeps it."""
    from tileops.durations import parse_duration

    try:
        return parse_duration(text).total_seconds()
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run the benchmarks and print SOL efficiency (the main job)",
                       description="Time ops on their manifest workloads by device-busy time, write records, "
                                   "price them against the device profile, and print the roofline table.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sel = p.add_argument_group("selection (repeatable; default: the device's default set)")
    sel.add_argument("--op", dest="ops", action="append", help="op name")
    sel.add_argument("--family", dest="families", action="append", help="op family (elementwise, gemm, ...)")
    sel.add_argument("--label", dest="labels", action="append", help="workload row label")
    sel.add_argument("--tag", dest="tags", action="append", help="workload tag (e.g. cpu)")
    add_backend_argument(sel, None, "default: torch, compile and triton on a GPU, torch on a CPU")
    sel.add_argument("--dtype", dest="dtypes", action="append", help="dtype (bfloat16, float32, ...)")
    sel.add_argument("--all-rows", action="store_true", default=None,
                     help="on a CPU, also run rows not tagged `cpu` (GPU-sized shapes: slow)")
    sel.add_argument("--shape", dest="shapes", action="append", metavar="NAME=SIZE,...",
                     help="time an ad-hoc row of each --op: sizes of its indices or derived dimensions "
                          "(M=8192,N=8192,K=8192; B=4x16 for a batch), params from its first row (or the row "
                          "--label names), priced by the op's own formula and labelled by the shape")
    p.add_argument("--list", "--dry-run", dest="list_only", action="store_true",
                   help="print the rows the selection picks (per backend, skips with their reason) and the time "
                        "budget, then exit 0: nothing is measured, calibrated or written")
    p.add_argument("--output-format", choices=OUTPUT_FORMATS, default="auto",
                   help="how the run is shown: console (rich: colour, a live bar), log (plain lines, never "
                        "wrapped, one per row), jsonl (one JSON object per event on stdout); auto (the default): "
                        "console on a terminal, log elsewhere")
    p.add_argument("--device", default=None, help="auto (the default: a GPU when there is one), cpu, cuda or cuda:N")
    p.add_argument("--threads", dest="threads", type=argtypes.threads, default=None, metavar="N",
                   help="CPU rows: the intra-op threads each row runs on (torch.set_num_threads(N) in the bench's "
                        "worker), 1 to the CPUs this process may use; default: all of them (torch's own default). "
                        "Recorded in each record (env.threads) and in the run's header, kept by --resume. 1 keeps "
                        "a row off the scheduler's time slices on a busy host (docs/bench.md). Refused on a GPU: "
                        "its rows are timed on the device, where it would change only the host's threads")
    p.add_argument("--out", type=Path, default=None, help="run directory (default: results/<run-id>/)")
    p.add_argument("--resume", type=Path, default=None, metavar="DIR",
                   help="finish a stopped run: its selection and options come from DIR/run.json; skips rows "
                        "already recorded OK")
    p.add_argument("--row-timeout", dest="row_timeout_s", type=argtypes.seconds(example="60"), default=None,
                   metavar="S", help="seconds before a row is killed and recorded as a timeout (default "
                                     f"{BENCH_ROW_TIMEOUT_S['cpu']:g} CPU, {BENCH_ROW_TIMEOUT_S['cuda']:g} GPU)")
    p.add_argument("--quick", action="store_true", default=None,
                   help="loose stopping rule: a smoke run, not a measurement")
    rule = p.add_argument_group("stopping rule (default: the device's, or --quick's; docs/timing.md)")
    rule.add_argument("--target-precision", dest="target_precision", type=argtypes.precision, default=None,
                      metavar="P", help="stop a visit of a row once its level is known to +-P (the 95 %% "
                                        "interval's half-width from its blocks of samples): 2%% or 0.02 (default "
                                        + _per_rule("target_precision", lambda v: f"{v:.0%}".replace("%", "%%"))
                                        + ")")
    rule.add_argument("--min-time", dest="min_time_s", type=argtypes.seconds(allow_zero=True, example="0.1"),
                      default=None, metavar="S",
                      help=f"time each row at least S seconds (default {_per_rule('min_time_s', quick=False)})")
    rule.add_argument("--max-time", dest="max_time_s", type=argtypes.seconds(example="1"), default=None,
                      metavar="S", help="stop timing a row after S seconds whatever its precision (default "
                                        f"{_per_rule('max_time_s')})")
    rule.add_argument("--min-samples", dest="min_samples", type=argtypes.samples, default=None, metavar="N",
                      help=f"time each row at least N repetitions (default {_per_rule('min_samples')})")
    rule.add_argument("--passes", dest="passes", type=int, choices=(1, 2), default=None,
                      help="2 (the default): visit every eager row again after the first pass, in a fresh worker "
                           "process, so each interval also covers what moves between processes and over the sweep "
                           "(the time is split between the visits); 1: one visit per row")
    rule.add_argument("--race", dest="race", choices=("interleaved", "sequential"), default=None,
                      help="a row run on several backends (--backend): interleaved (the default) alternates their "
                           "blocks of samples in one worker, so the host's drift cancels in their ratio and the best "
                           "backend is judged on the paired interval; sequential visits each backend in turn "
                           "(docs/bench.md, \"Interleaved races\")")
    p.add_argument("--require-quiet", dest="require_quiet", action="store_true", default=None,
                   help="refuse to run (exit 5, nothing measured) when the host is busy before the first row: load "
                        "above its CPUs, steal above 3 %%, or another process on the GPU; without it the run warns "
                        "and records the check in run.json")
    p.add_argument("--no-probe", dest="probe", action="store_false", default=None,
                   help="do not time the reference probe between each row's blocks (a short memory read, an FMA "
                        "probe for compute-bound rows; at most 10 %% of a row's time): its record then has no "
                        "probe, and the roofline no SOL against the device's state (docs/roofline.md)")
    p.add_argument("--timer", choices=("auto", "cupti", "cuda-events"), default=None,
                   help="GPU timer (default auto): auto = CUPTI where it works, else CUDA events that record "
                        "why; cupti = CUPTI or exit 2; cuda-events rows are priced blank (docs/timing.md)")
    p.add_argument("--compile-cache", dest="compile_cache", type=Path, default=None, metavar="DIR",
                   help="where torch.compile and Triton keep compiled code (TORCHINDUCTOR_CACHE_DIR, "
                        "TRITON_CACHE_DIR under DIR, set for the bench's workers), shared across runs; default: "
                        ".compile-cache beside the run directory (results/.compile-cache)")
    p.add_argument("--compile-timeout", dest="compile_timeout_s", type=argtypes.seconds(example="600"),
                   default=None, metavar="S",
                   help="seconds a compile or triton row's first call (its compile) may take before the row is "
                        f"recorded as a timeout (default {BENCH_COMPILE_TIMEOUT_S:g}); the timing after it has "
                        "--row-timeout of its own")
    p.add_argument("--keep-traces", dest="keep_traces", action="store_true", default=None,
                   help="keep each CUPTI row's last profiled batch as a Chrome trace in <run>/traces/ (evidence "
                        "for a timing: open it in Perfetto; docs/timing.md)")
    p.add_argument("--profile", default=None, help="price against this profile name or file")
    p.add_argument("--calibrate", choices=("auto", "quick", "full", "never"), default=None,
                   help="calibrate the device first when the profile store holds no calibration of it, or one "
                        "older than --calibration-max-age: auto (the default) is quick on a GPU, full on a CPU; "
                        "never leaves uncalibrated rows blank (docs/profiles.md)")
    p.add_argument("--calibration-max-age", dest="calibration_max_age_s", type=_duration_s, default=None,
                   metavar="DURATION",
                   help="how old a device's calibration may be before it is measured again: 12h, 7d, 1d12h "
                        f"(default {CALIBRATION_MAX_AGE_DAYS}d)")
    p.add_argument("--no-plot", dest="plot", action="store_false", default=None,
                   help="do not write the roofline plot (roofline.png, roofline.svg) or report.html")
    p.add_argument("--plot", dest="plot", action="store_true", default=None,
                   help="write the roofline plot and report.html (the default): with --resume, brings them back to "
                        "a run started with --no-plot")
    from tileops.commands.export import add_sink_arguments

    add_sink_arguments(p.add_argument_group("metrics at the end of the run (docs/metrics.md)"), restorable=True)
    p.set_defaults(func=run, flags=restored_flags(p))


def run(args: argparse.Namespace) -> int:
    from tileops.pipeline.bench import bench  # torch loads here

    return bench({k: getattr(args, k) for k in args.flags}, resume=args.resume, out=args.out, flags=args.flags,
                 argv=sys.argv[1:], output_format=args.output_format, list_only=args.list_only).exit_code
