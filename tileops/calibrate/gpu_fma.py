"""The CUDA-core fp32 roof: a Triton kernel of independent FMA chains held in registers.

Imported only on a GPU host (``import triton`` fails elsewhere, and the caller
falls back). Each element runs ``CHAINS`` independent chains ``x = x*a + b``
(Triton contracts a multiply-add into one FMA), so the FMA pipes stay busy
with no memory traffic but one load-free start and one store: 2 FLOPs per
chain step.
"""

from __future__ import annotations

import torch
import triton  # ImportError here is the caller's signal to fall back
import triton.language as tl

from tileops.calibrate.timing import best_time

CHAINS = 4
#: Chain steps per trip of the loop, unrolled at compile time: the loop's own instructions (a counter, a
#: compare, a branch) then cost under 5 % of its issue slots. One step a trip left 32 FFMA beside 4 loop
#: instructions on sm_90 (89 % FFMA: the roof ~11 % low); tests/test_kernels_sass.py holds >= 95 %.
UNROLL = 4
BLOCK = 1024
#: Programs per SM: enough resident warps to hide the FMA pipe's latency with CHAINS independent chains.
PROGRAMS_PER_SM = 16


@triton.jit
def _fma_chains(out_ptr, n_iter, BLOCK: tl.constexpr, UNROLL: tl.constexpr):  # pragma: no cover - needs a GPU
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = offs.to(tl.float32) * 1e-7
    a = x + 0.1
    b = x + 0.2
    c = x + 0.3
    d = x + 0.4
    for _ in range(n_iter):
        for _ in tl.static_range(UNROLL):
            a = a * 0.999 + 0.001
            b = b * 0.999 + 0.002
            c = c * 0.999 + 0.003
            d = d * 0.999 + 0.004
    tl.store(out_ptr + offs, a + b + c + d)


def grid_for(sms: int) -> int:
    """Programs of a launch on a GPU of ``sms`` multiprocessors."""
    return sms * PROGRAMS_PER_SM


def launch(out: torch.Tensor, n_iter: int, grid: int) -> None:
    """One launch of ``grid`` programs, each ``n_iter`` trips of ``UNROLL`` steps on its BLOCK elements."""
    _fma_chains[(grid,)](out, n_iter, BLOCK=BLOCK, UNROLL=UNROLL)


def flops_of(n_iter: int, grid: int) -> float:
    """FLOPs of one launch: 2 per FMA, CHAINS chains, UNROLL steps a trip, every element."""
    return 2.0 * CHAINS * UNROLL * n_iter * grid * BLOCK


def fma_kernel_rate(device: torch.device, target_s: float) -> tuple[float, float, float, str]:  # pragma: no cover
    """(FLOP/s, FLOPs per launch, best seconds, method) of the FMA-chain kernel on ``device``."""
    grid = grid_for(torch.cuda.get_device_properties(device).multi_processor_count)
    out = torch.empty(grid * BLOCK, dtype=torch.float32, device=device)
    n_iter = 256

    def run() -> None:
        launch(out, n_iter, grid)

    t = best_time(run, device, reps=2, warmup=2)  # compiles on the first call
    n_iter = max(256, int(n_iter * target_s / max(t, 1e-7)))
    t = best_time(run, device, reps=5, warmup=1)
    flops = flops_of(n_iter, grid)
    return flops / t, flops, t, (f"Triton FMA chains ({CHAINS} per element, {n_iter} x {UNROLL} steps, "
                                 f"{grid}x{BLOCK} elements), best of 5")
