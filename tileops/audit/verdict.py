"""The verdict on one measured call: pure functions over numbers (§4.5).

The read side is a lower bound, conditional on its premises. With every cache
cold when the call starts (``--cache-control all``, the call replayed as one
range), each distinct byte it reads comes from DRAM at least once, so the reads
of a call cannot fall below its declared read half; replaying each kernel cold
(``--replay-mode kernel``) can only add reads (an intermediate one kernel wrote
is read back by the next), never remove them.

Tolerances, and why:

* **Shortfall (FAIL)**: measured < declared - (1 % of declared + 32 B).
  1 %: §1.2 lets a formula charge a whole input where the algorithm reads
  distinct elements that differ from it by under 1 % on every row, so a
  correct formula may exceed the true minimum by that much. 32 B: one DRAM
  sector, the counter's resolution (``dram__bytes_read`` counts whole 32-byte
  sectors), so two readings closer than a sector are the same reading.
  Nothing else widens it: sector rounding, cold-cache replay, instruction and
  parameter fetch all *add* reads.
* **Excess (WARN)**: measured > 2 x declared + 64 B per input + 64 KiB per kernel.
  2 x: one extra full pass over what the call reads (a two-pass norm or
  softmax) or, under per-kernel cold replay, a second kernel re-reading an
  intermediate as large as its input, reaches twice the declared reads; past
  that the reading is dominated by cost the formula does not describe, and
  the row says so. 64 B per input: a partial sector at each end of every input
  storage. 64 KiB per kernel: what a cold replay fetches besides data (the
  kernel's code, its parameters, descriptors); an allowance, not a
  measurement: the first GPU run shows whether it holds (docs/audit.md).

A shortfall inside a configured exception is EXEMPT: measured, reported, not a
verdict on the formula. Writes are never judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tileops.records import AuditVerdict

#: One DRAM sector: the unit dram__bytes_read counts in.
SECTOR_BYTES = 32
SHORT_FRACTION = 0.01
WARN_FACTOR = 2.0
#: Non-data bytes a cold kernel replay may fetch (code, parameters, descriptors): an allowance.
KERNEL_OVERHEAD_BYTES = 64 * 1024


@dataclass(frozen=True)
class Limits:
    """The band a reading is judged against: below ``fail_below`` a shortfall, above ``warn_above`` WARN."""

    fail_below: int
    warn_above: int


def limits(declared: int, *, inputs: int, kernels: int) -> Limits:
    """The tolerance band around a declared read half (module docstring: why these numbers)."""
    slack_short = math.ceil(SHORT_FRACTION * declared) + SECTOR_BYTES
    slack_excess = 2 * SECTOR_BYTES * max(inputs, 0) + KERNEL_OVERHEAD_BYTES * max(kernels, 0)
    return Limits(fail_below=declared - slack_short, warn_above=math.floor(WARN_FACTOR * declared) + slack_excess)


@dataclass(frozen=True)
class Exemption:
    """A configured exception whose ``when`` holds for the measured call."""

    where: str  # file:line of the entry
    reason: str
    measurement: str


@dataclass(frozen=True)
class Judgement:
    verdict: AuditVerdict
    reason: str
    limits: Limits | None = None


def _b(n: int) -> str:
    return f"{n:,} B"


def judge(*, declared: int | None, measured: int | None, inputs: int = 0, kernels: int = 0,
          error: str | None = None, skip_reason: str | None = None,
          exemption: Exemption | None = None, exemption_note: str | None = None) -> Judgement:
    """The verdict for one row, from its declared read half and the reads ncu measured.

    Precedence: a row never run is SKIPPED; a row without a usable measurement
    is ERROR (even one that declares no read half: the audit was asked to
    measure it and could not); then NO-VERDICT (nothing declared), SKIPPED (a
    read half of zero), and the band of :func:`limits`.
    ``exemption``: the configured exception whose ``when`` holds for this call,
    if any; ``exemption_note`` says why none applies where one was configured
    (its ``when`` is false, or could not be evaluated), for the FAIL line.
    """
    if skip_reason is not None:
        return Judgement("SKIPPED", f"never run: {skip_reason}")
    if error is not None:
        return Judgement("ERROR", error)
    if declared is None:
        return Judgement("NO-VERDICT", "the op declares no read half (Op.eval_roofline_read_bytes() is None): "
                                       "reads measured and reported, not judged; NO-VERDICT is not a pass")
    if declared == 0:
        return Judgement("SKIPPED", "the read formula declares no read at all (read half = 0 B)")
    if measured is None:
        return Judgement("ERROR", "no DRAM read measurement for this call")
    lim = limits(declared, inputs=inputs, kernels=kernels)
    ratio = measured / declared
    seen = f"measured {_b(measured)} = {ratio:.3f} x the declared {_b(declared)}"
    if measured < lim.fail_below:
        if exemption is not None:
            return Judgement("EXEMPT", f"{seen}, below {_b(lim.fail_below)}, inside the exception at "
                                       f"{exemption.where}: {exemption.reason} (earned by: {exemption.measurement})",
                             lim)
        note = f"; {exemption_note}" if exemption_note else ""
        return Judgement("FAIL", f"{seen}, below {_b(lim.fail_below)} (declared - 1 % - one 32 B sector): the "
                                 f"kernels read less than the formula says every implementation must{note}", lim)
    if measured > lim.warn_above:
        return Judgement("WARN", f"{seen}, above {_b(lim.warn_above)} (2 x declared + sector and per-kernel "
                                 "allowances): multi-pass or replay cost the formula does not describe", lim)
    return Judgement("PASS", f"{seen}, within [{_b(lim.fail_below)}, {_b(lim.warn_above)}]", lim)
