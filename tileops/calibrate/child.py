"""One device measured in its own process: ``python -m tileops.calibrate.child``, run by ``--all-devices``.

A GPU's measurement runs in a fresh process so one device's CUDA context, caching allocator and failures stay
its own (``tileops.calibrate.children.run_children`` starts one child per device). The child measures and writes
the raw result to ``--results-out``, nothing else: the parent builds each model's profile and keeps the store.
With ``--max-age``, a device whose stored result is fresh hands that result back unmeasured (its run id,
unchanged, tells the parent it was kept).

It is this package's own entry point, as ``tileops.audit.child`` is the audit's: a lower layer never
starts the command line (``python -m tileops.cli``), which would re-enter every layer above it.

Exit codes: 0 the result was written; 1 the measurement failed (the message on stderr); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tileops.calibrate.child",
                                description="Measure one device and write its raw calibration result.")
    p.add_argument("--device", required=True, help="cpu, cuda:N")
    p.add_argument("--results-out", type=Path, required=True, help="where the raw result (YAML) is written")
    p.add_argument("--quick", action="store_true", help="small sizes and few repetitions")
    p.add_argument("--max-age", metavar="DURATION",
                   help="hand back the stored result unmeasured when it is newer than this (12h, 7d)")
    return p.parse_args(argv)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from tileops.durations import parse_duration
    from tileops.ledger import stored_freshness, write_device_result

    try:
        max_age = parse_duration(args.max_age) if args.max_age is not None else None
    except ValueError as exc:
        _say(f"--max-age: {exc}")
        return 2
    from tileops.device import describe_device

    try:
        info = describe_device(args.device)
    except ValueError as exc:
        _say(str(exc))
        return 1
    if max_age is not None:
        fresh = stored_freshness(info.key, max_age, quick=args.quick)
        if fresh.fresh and fresh.result is not None:
            _say(f"{fresh.key}: {fresh.reason}: skipped, nothing measured")
            write_device_result(fresh.result, path=args.results_out)
            return 0
        _say(f"{fresh.key}: {fresh.reason}: calibrating")
    from tileops.calibrate.run import measure_device
    from tileops.calibrate.summary import make_console, run_view

    def progress(what: str, step: int, steps: int) -> None:
        _say(f"{args.device} [{step}/{steps}] {what}")

    try:
        run = measure_device(info, quick=args.quick, progress=progress)
    except ValueError as exc:
        _say(f"{args.device}: the calibration failed: {exc}")
        return 1
    write_device_result(run, path=args.results_out)
    make_console(stderr=True).print(run_view(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
