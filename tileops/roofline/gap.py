"""Where a row's SOL gap goes: more bytes than the formula's minimum, or too slow at the bytes it moves.

Why. "30 % SOL" names a distance, not a cause, and the two causes have
different fixes: a kernel that reads its input twice needs a different
algorithm, one that moves the minimum slowly needs better access patterns or
occupancy. Where the audit measured the same call's DRAM traffic
(``tileops audit``, docs/audit.md), the gap splits exactly:

    SOL = (time at the ceiling for the formula's bytes / that for the bytes moved)
          x (time at the ceiling for the bytes moved / actual time)

For a memory-bound row the first factor is ``formula bytes / bytes moved``, so
"30 % SOL" reads "moves 1.8x the minimum bytes; at what it moves it runs at
55 % of the ceiling" (0.55 / 1.8 = 0.30). A compute-bound row's time at the
ceiling is its compute time unless the bytes moved outweigh it, so extra
traffic explains its gap only past that point, and the split says which.

Which bytes were moved. The audit measures reads from cold caches at the start
of the call, which is how the bench times it (a cache flush before every
sample); those are the reads. Its writes are a lower bound: writes still in L2
when the call ends never reach DRAM inside the profiled range (the audit
reports them and never judges them). The formula's write half (its bytes less
its declared read half) is another lower bound, the algorithm's minimum. The
bytes moved are the measured reads plus the larger of the two: nothing is
guessed above what was seen, so the traffic ratio can understate the excess
and the achieved fraction can understate the speed, never the reverse.

When the split is not shown, the blank says why: no audit of the row, an
audit without a reading (ERROR, SKIPPED), an op with no declared read half
(NO-VERDICT: its writes cannot be told from its reads), a different device or
call (data terms, declared reads), or a per-kernel replay, which reads each
intermediate back from DRAM and so measures the replay, not the op.

Pure arithmetic over the record contract (a record, an audit entry, the
ceiling the row was priced against): the roofline tool, its outputs and the
metrics read it (``Priced.gap``, set by ``price_iter`` when the run has audit
entries).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tileops.records import AuditEntry, Record

#: Audit verdicts that come with a measured read for a declared read half.
MEASURED = ("PASS", "WARN", "FAIL", "EXEMPT")
#: The premise a per-kernel replay's entries carry (tileops.audit.ncu.REPLAY_MODES["kernel"]).
KERNEL_REPLAY = "--replay-mode kernel"


@dataclass(frozen=True)
class GapSplit:
    """SOL = achieved / traffic factor; for a memory-bound row the traffic factor is ``traffic_ratio``."""

    efficiency: float  # the row's SOL: time at the ceiling for the formula's work / actual time
    traffic_ratio: float  # bytes moved / the formula's bytes (> 1: excess traffic)
    achieved: float  # time at the ceiling for the bytes moved (and the FLOPs) / actual time
    moved_bytes: int
    formula_bytes: int
    bound_at_moved: str  # what bounds the row at the bytes moved: "memory" or "compute"
    note: str = ""  # a caveat (a FAIL audit: the formula charges more than the kernel reads)

    @property
    def traffic_factor(self) -> float:
        """How much the extra traffic alone costs in SOL (1: none): ``efficiency * traffic_factor == achieved``."""
        return self.achieved / self.efficiency

    def describe(self) -> str:
        """One line for a person: the two causes, in the words of issue 28."""
        if self.bound_at_moved == "compute":
            return (f"moves {self.traffic_ratio:.2f}x the formula's bytes, but is compute-bound even at those: "
                    f"the traffic does not explain its gap; it runs at {self.achieved:.0%} of its compute ceiling")
        words = "the minimum" if self.traffic_ratio >= 1 else "the formula's"
        return (f"moves {self.traffic_ratio:.2f}x {words} bytes; at what it moves it runs at "
                f"{self.achieved:.0%} of the ceiling")


@dataclass(frozen=True)
class GapBlank:
    why: str


def split_gap(*, formula_bytes: int, formula_read_bytes: int, measured_read_bytes: int,
              measured_write_bytes: int | None, actual_time_s: float, bandwidth: float,
              compute_time_s: float = 0.0, note: str = "") -> GapSplit:
    """The split from numbers: bytes (the formula's, its read half, the audit's readings), the row's actual time,
    the bandwidth ceiling it was priced against (bytes/s) and its time at the compute ceiling (0: no FLOPs)."""
    for name, v in (("formula_bytes", formula_bytes), ("actual_time_s", actual_time_s), ("bandwidth", bandwidth)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be positive, got {v!r}")
    if not 0 <= formula_read_bytes <= formula_bytes:
        raise ValueError(f"formula_read_bytes must be within 0..formula_bytes ({formula_bytes}), got "
                         f"{formula_read_bytes}")
    if measured_read_bytes < 0 or (measured_write_bytes or 0) < 0 or not compute_time_s >= 0:
        raise ValueError("measured bytes and compute_time_s must be >= 0")
    writes = max(measured_write_bytes or 0, formula_bytes - formula_read_bytes)
    moved = measured_read_bytes + writes
    sol = max(formula_bytes / bandwidth, compute_time_s)
    sol_moved = max(moved / bandwidth, compute_time_s)
    bound = "memory" if moved / bandwidth >= compute_time_s else "compute"
    return GapSplit(efficiency=sol / actual_time_s, traffic_ratio=moved / formula_bytes,
                    achieved=sol_moved / actual_time_s, moved_bytes=moved, formula_bytes=formula_bytes,
                    bound_at_moved=bound, note=note)


def gap_for(record: Record, entry: AuditEntry | None, *, actual_time_s: float, bandwidth: float,
            compute_time_s: float = 0.0) -> GapSplit | GapBlank:
    """The split of a priced row by its audit entry, or why there is none. ``actual_time_s``, ``bandwidth`` and
    ``compute_time_s`` are the pricing's (``Priced.actual_time_s``, ``.effective_bandwidth``, ``.compute_time_s``)."""
    if entry is None:
        return GapBlank("the row was not audited (`tileops audit --out RUN_DIR` measures its DRAM traffic)")
    if entry.key != record.key:
        raise ValueError(f"audit entry {entry.key} is not row {record.key}")
    if entry.verdict == "NO-VERDICT" or record.read_bytes is None:
        return GapBlank("the op declares no read half, so the formula's writes cannot be told from its reads")
    if entry.verdict not in MEASURED or entry.measured_read_bytes is None:
        why = f": {entry.reason}" if entry.reason else ""
        return GapBlank(f"the audit has no DRAM reading for this row ({entry.verdict}{why})")
    if KERNEL_REPLAY in entry.premise:
        return GapBlank("the audit replayed each kernel from cold caches, which reads every intermediate back from "
                        "DRAM: its traffic is the replay's, not the op's (re-audit with the default --replay-mode)")
    audited = entry.device.name if entry.device is not None else ""  # "": the entry names no device
    if audited and audited != record.env.device.name:
        return GapBlank(f"audited on {audited!r}, timed on {record.env.device.name!r}: traffic differs "
                        "between devices (audit this device)")
    if entry.data_terms != record.data_terms:
        return GapBlank(f"the audit measured a different call (data terms {entry.data_terms} against "
                        f"{record.data_terms})")
    if entry.expected_read_bytes != record.read_bytes:
        return GapBlank(f"the audited call declares {entry.expected_read_bytes} read bytes, the timed one "
                        f"{record.read_bytes}: not the same call")
    if not record.bytes:
        return GapBlank("the record carries no bytes from its formula")
    note = ""
    if entry.verdict == "FAIL":
        note = ("the audit FAILED: the kernel reads less than the formula charges, so the formula (and this row's "
                "SOL) is suspect")
    elif entry.verdict == "EXEMPT":
        note = (f"the audit exempts this call's shortfall ({entry.exemption or 'a configured condition'}): the "
                "formula charges bytes this call need not read")
    return split_gap(formula_bytes=record.bytes, formula_read_bytes=record.read_bytes,
                     measured_read_bytes=entry.measured_read_bytes, measured_write_bytes=entry.measured_write_bytes,
                     actual_time_s=actual_time_s, bandwidth=bandwidth, compute_time_s=compute_time_s, note=note)
