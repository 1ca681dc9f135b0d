"""Test-only ops: a process crash, a hang, and a plain exception (tests/test_bench.py)."""

import os
import signal
import time

from tileops.ops.base import Op


class CrashOp(Op):
    name = "crash_op"

    def compute(self, x):
        os.kill(os.getpid(), signal.SIGSEGV)  # what a faulting kernel does to the process


class StallOp(Op):
    name = "stall_op"

    def compute(self, x):
        time.sleep(3600)


class RaiseOp(Op):
    name = "raise_op"

    def compute(self, x):
        raise RuntimeError("deliberate failure inside the op")
