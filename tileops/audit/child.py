"""The audited process: ``python -m tileops.audit.child``, run by ncu, one row.

It builds the row as the bench does, warms the op up outside the profiled
range, runs one call inside the NVTX range ncu filters on, and writes the
call's facts (:class:`tileops.audit.facts.CallFacts`) to ``--facts``. Every
failure is written there too, with what to do about it, so the parent always
has an answer; the exit code only says whether the call ran.

Exit codes: 0 the call ran; 1 the op failed; 3 no CUDA device; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Iterator

NO_CUDA = ("no CUDA device is visible to the audited process (torch.cuda.is_available() is False): the audit "
           "reads GPU DRAM counters and runs only on a GPU host (docker run --gpus all, a GPU node)")


@contextmanager
def nvtx_range(domain: str | None, name: str) -> Iterator[None]:
    """One push/pop range: in ``domain`` through the ``nvtx`` module, else torch's default domain."""
    if domain:
        import nvtx

        nvtx.push_range(message=name, domain=domain)
        try:
            yield
        finally:
            nvtx.pop_range(domain=domain)
    else:
        import torch

        torch.cuda.nvtx.range_push(name)
        try:
            yield
        finally:
            torch.cuda.nvtx.range_pop()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tileops.audit.child")
    p.add_argument("--op", required=True)
    p.add_argument("--label", required=True)
    p.add_argument("--case", required=True, help="the dtype case as JSON")
    p.add_argument("--backend", default="torch")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--nvtx-domain", default="", help="empty: torch.cuda.nvtx's default domain")
    p.add_argument("--nvtx-range", default="call")
    p.add_argument("--facts", type=Path, required=True)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from tileops.audit.facts import CallFacts

    try:
        import torch

        if not torch.cuda.is_available():
            CallFacts.failed(args.op, "no-cuda", NO_CUDA).write(args.facts)
            return 3
        device = torch.device(args.device)
        props = torch.cuda.get_device_properties(device)
        ident = {"device_name": props.name, "device_uuid": _uuid(props)}
    except Exception as exc:  # a broken CUDA install: say so rather than die silently
        CallFacts.failed(args.op, "no-cuda", f"{NO_CUDA} ({type(exc).__name__}: {exc})").write(args.facts)
        return 3
    try:
        from tileops.audit.plan import find_row, manifest_entries
        from tileops.ops.workload import bind_row, build_inputs, instantiate

        entry = manifest_entries()[args.op]
        row, case = find_row(entry, args.label, args.case)
        op = instantiate(entry, row, args.backend)
        inputs = build_inputs(op, bind_row(entry, row, case), str(device))
        if args.backend != "torch":  # compile (or JIT) outside the range: ncu must see the kernels, not the compiler
            op.prepare(**inputs)
        for _ in range(max(args.warmup, 0)):  # outside the range: never profiled
            op(**inputs)
        torch.cuda.synchronize(device)
        with nvtx_range(args.nvtx_domain or None, args.nvtx_range):
            op(**inputs)
            torch.cuda.synchronize(device)
        CallFacts.of_op(op, **ident).write(args.facts)
        return 0
    except Exception as exc:
        tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:]).strip()
        CallFacts.failed(args.op, "op-error", f"the row failed in the audited process: {type(exc).__name__}: "
                         f"{exc}\n{tail}"[:2000], **ident).write(args.facts)
        return 1


def _uuid(props: object) -> str | None:
    u = getattr(props, "uuid", None)
    if u is None:
        return None
    s = str(u)
    return s if s.startswith("GPU-") else f"GPU-{s}"


if __name__ == "__main__":
    sys.exit(main())
