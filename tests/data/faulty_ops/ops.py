"""Test-only ops: a process crash, a hang, a plain exception, and a hang with a bulky record
(tests/test_bench.py, tests/test_reliability.py)."""

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


class WideRecordOp(StallOp):
    name = "wide_record_op"  # sorts after relu; its long workload label makes a record larger than a page


class SecondVisitCrashOp(Op):
    """Runs like any op on its first visit and crashes its worker on the second (the sweep's second pass, in a
    worker process of its own): the first instance made leaves a mark in the file ``SECOND_VISIT_MARK`` names,
    so a later one, in whatever process, knows it is the second visit."""

    name = "second_visit_crash_op"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        mark = os.environ["SECOND_VISIT_MARK"]
        self.second = os.path.exists(mark)
        open(mark, "a").close()

    def compute(self, x):
        if self.second:
            os.kill(os.getpid(), signal.SIGSEGV)
        return x + 1
