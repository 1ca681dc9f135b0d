"""What a GPU would run, read on a CPU: every Triton kernel configuration of the manifest's GPU rows,
compiled ahead of time for sm_90a (H100/H200) and sm_80 (A100), and its SASS.

``python tests/sass_support.py OUT.json`` (run once per test session by tests/test_kernels_sass.py,
in its own process: the Triton tests switch the interpreter on for theirs) does three things:

1. **The launches.** Each GPU row (not tagged ``cpu``) of each op with a Triton kernel, in each dtype
   case, is run through the op's Triton ``Kernel`` on ``meta`` tensors with ``JITFunction.run``
   replaced by a recorder: the kernel, its arguments, constexprs, ``num_warps`` and grid, exactly as
   the launch code computes them, and nothing allocated. The FMA calibration kernel's launch is
   recorded the same way (``tileops.calibrate.gpu_fma.launch``).
2. **The compile.** For each target, Triton's own binder specializes the recorded arguments as a
   launch on that GPU would (a pointer's 16-byte alignment, an integer's divisibility by 16 or its
   being 1), then ``triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))`` runs with the
   ptxas Triton bundles. A configuration several rows share is compiled once.
3. **The SASS.** Triton's bundled ``cuobjdump`` disassembles each cubin: the width of every global
   load and store, local-memory traffic (spills), registers, and the share of FFMA in each loop.

A row a target cannot run (fp8 before compute capability 8.9) is refused for it with the bench's
own reason (``tileops.bench.select.unsupported_dtype``), not compiled.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The targets: (compute capability, name). Triton builds sm_90a for capability 9.0.
TARGETS = ((90, "sm_90a"), (80, "sm_80"))


@dataclass
class Launch:
    kernel: Any  # the JITFunction
    args: tuple
    kwargs: dict
    grid: tuple[int, ...]

    @property
    def programs(self) -> int:
        return math.prod(self.grid)


@dataclass
class RowLaunches:
    op: str
    label: str
    case: str
    dtypes: set[str]
    bytes: int | None
    launches: list[Launch] = field(default_factory=list)


def record_launches(fn: Any) -> list[Launch]:
    """Every kernel launch ``fn()`` makes, recorded instead of run."""
    from triton.runtime.jit import JITFunction

    out: list[Launch] = []

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        out.append(Launch(self, args, dict(kwargs), tuple(int(g) for g in grid)))

    saved = JITFunction.run
    JITFunction.run = run  # type: ignore[method-assign]
    try:
        fn()
    finally:
        JITFunction.run = saved  # type: ignore[method-assign]
    return out


def gpu_row_launches() -> list[RowLaunches]:
    """The launches of every GPU row of every op with a Triton kernel, on meta tensors."""
    from tileops.ops import triton_kernels
    from tileops.ops.catalog import load_entries
    from tileops.ops.registry import load_all
    from tileops.ops.spec import dtype_case_name
    from tileops.ops.workload import bind_row, build_inputs, instantiate

    entries, classes = load_entries(), load_all()
    rows = []
    for name, cls in sorted(classes.items()):
        if "triton" not in cls.backends or entries[name].status != "implemented":
            continue
        entry = entries[name]
        kernel = triton_kernels.load(cls.triton_kernel)
        for row in entry.workloads:
            if "cpu" in row.tags:
                continue
            for case in row.dtypes:
                bound = bind_row(entry, row, case)
                dtypes = set(bound.dtypes.values())
                ref = instantiate(entry, row)  # the torch backend, on meta: the row's bytes from its formula
                try:
                    ref(**build_inputs(ref, bound, "meta"))
                    nbytes = ref.eval_roofline()[1]
                except Exception:
                    nbytes = None
                rl = RowLaunches(name, row.label, dtype_case_name(case), dtypes, nbytes)
                op = instantiate(entry, row, "triton")
                why = kernel.unsupported(name, bound.dtypes, bound.shapes, op.params)
                if why is None:
                    inputs = build_inputs(op, bound, "meta")
                    rl.launches = record_launches(lambda: kernel.run(op, **inputs))
                rows.append(rl)
    return rows


def fma_launch() -> Launch:
    """The FMA calibration kernel as ``fma_kernel_rate`` launches it on a 132-SM GPU."""
    import torch

    from tileops.calibrate import gpu_fma

    grid = gpu_fma.grid_for(132)
    out = torch.empty(grid * gpu_fma.BLOCK, dtype=torch.float32, device="meta")
    (launch,) = record_launches(lambda: gpu_fma.launch(out, 4096, grid))
    return launch


def compile_key(launch: Launch, cc: int) -> tuple[Any, dict, str]:
    """(the ASTSource, the options, a stable key) of a launch specialized as on a GPU of capability ``cc``."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    fn = launch.kernel
    backend = make_backend(GPUTarget("cuda", cc, 32))
    kwargs = {**launch.kwargs, "debug": False}
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, spec, opts = binder(*launch.args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, spec, opts)
    src = ASTSource(fn, signature, constexprs, attrs)
    key = json.dumps([fn.fn.__qualname__, cc, signature, sorted((str(k), str(v)) for k, v in constexprs.items()),
                      sorted((str(k), str(v)) for k, v in attrs.items()), options.num_warps, options.num_stages])
    return src, options.__dict__, key


def cuobjdump() -> str:
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")


_OPCODE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);", re.M)


def _width(opcode: str) -> int:
    """Bits moved by a global load or store, from its opcode's type modifier (none: 32)."""
    for part in opcode.split(".")[1:]:
        if part in ("64", "128"):
            return int(part)
        if part in ("U8", "S8"):
            return 8
        if part in ("U16", "S16"):
            return 16
    return 32


def sass_facts(cubin: bytes) -> dict[str, Any]:
    """What the disassembly shows: the arch, every global load's and store's width, local memory
    instructions (spills), registers, and each loop's FFMA share."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        sass = subprocess.run([cuobjdump(), "-sass", f.name], capture_output=True, text=True, timeout=120,
                              check=True).stdout
        res = subprocess.run([cuobjdump(), "-res-usage", f.name], capture_output=True, text=True, timeout=120,
                             check=True).stdout
    finally:
        os.unlink(f.name)
    arch = re.search(r"code for (sm_\w+)", sass)
    instrs = [(int(a, 16), op, operands) for a, op, operands in _OPCODE.findall(sass)]
    loads = Counter(_width(op) for _, op, _ in instrs if op.startswith("LDG"))
    stores = Counter(_width(op) for _, op, _ in instrs if op.startswith("STG"))
    local = sum(1 for _, op, _ in instrs if op.startswith(("LDL", "STL")))
    loops = []
    for addr, op, operands in instrs:
        target = re.match(r"(?:`\(\.L_x_\d+\)\s*)?0x([0-9a-f]+)", operands.strip())
        if op.startswith("BRA") and target and int(target.group(1), 16) < addr:  # backward: a loop (not the
            # trap's branch to itself after EXIT)
            body = [o for a, o, _ in instrs if int(target.group(1), 16) <= a <= addr]
            loops.append({"instructions": len(body), "ffma": sum(o.startswith("FFMA") for o in body)})
    regs = re.search(r"REG:(\d+)", res)
    stack = re.search(r"STACK:(\d+)", res)
    local_bytes = re.search(r"LOCAL:(\d+)", res)
    return {"arch": arch.group(1) if arch else None, "loads": dict(loads), "stores": dict(stores),
            "local_instructions": local, "registers": int(regs.group(1)) if regs else None,
            "stack": int(stack.group(1)) if stack else None,
            "local_bytes": int(local_bytes.group(1)) if local_bytes else None, "loops": loops}


_JOBS: dict[str, tuple[Any, dict, int]] = {}


def _compile(key: str) -> tuple[str, dict[str, Any]]:
    import triton
    from triton.backends.compiler import GPUTarget

    src, options, cc = _JOBS[key]
    t0 = time.perf_counter()
    try:
        compiled = triton.compile(src, target=GPUTarget("cuda", cc, 32), options=options)
    except Exception as exc:
        return key, {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    facts = sass_facts(compiled.asm["cubin"])
    facts["compile_s"] = time.perf_counter() - t0
    return key, facts


def collect(jobs: int = 2) -> dict[str, Any]:
    """Everything the tests assert on, as plain data."""
    import torch  # noqa: F401  # before triton: the kernels' modules import both

    from tileops.bench.select import unsupported_dtype
    from tileops.device import DeviceInfo

    t0 = time.perf_counter()
    rows = gpu_row_launches()
    fma = fma_launch()
    out_rows = []
    for rl in rows:
        entry: dict[str, Any] = {"op": rl.op, "label": rl.label, "case": rl.case, "bytes": rl.bytes,
                                 "grids": [l.programs for l in rl.launches], "targets": {}}
        for cc, name in TARGETS:
            why = unsupported_dtype(rl.dtypes, DeviceInfo(kind="cuda", name=name, capability=(cc // 10, cc % 10)))
            if why is not None:
                entry["targets"][name] = {"refused": why}
                continue
            keys = []
            for launch in rl.launches:
                src, options, key = compile_key(launch, cc)
                _JOBS.setdefault(key, (src, options, cc))
                keys.append(key)
            entry["targets"][name] = {"configs": keys}
        out_rows.append(entry)
    fma_keys = {}
    for cc, name in TARGETS:
        src, options, key = compile_key(fma, cc)
        _JOBS.setdefault(key, (src, options, cc))
        fma_keys[name] = key
    t_plan = time.perf_counter() - t0
    import multiprocessing

    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        configs = dict(pool.map(_compile, sorted(_JOBS)))
    return {"rows": out_rows, "configs": configs, "fma": fma_keys,
            "seconds": {"plan": t_plan, "total": time.perf_counter() - t0}, "jobs": jobs}


def main() -> None:
    os.environ.pop("TRITON_INTERPRET", None)
    result = collect(int(os.environ.get("SASS_JOBS", "2")))
    Path(sys.argv[1]).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
