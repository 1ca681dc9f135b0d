"""The audit's verdicts at their boundaries (tileops.audit.verdict): every path, every tolerance edge.

The tolerances are the documented ones (docs/audit.md): a shortfall is below
declared - (1 % of declared + one 32 B sector); WARN is above 2 x declared +
64 B per input + 64 KiB per kernel. Changing them changes these numbers and the docs.
"""

from __future__ import annotations

import pytest

from tileops.audit.reports import KernelReading, summarize
from tileops.audit.verdict import Exemption, judge, limits

DECLARED = 1_000_000
FAIL_BELOW = 1_000_000 - (10_000 + 32)  # 1 % and one sector
WARN_ABOVE_1K = 2_000_000 + 2 * 64 + 65_536  # two inputs, one kernel

EXEMPT = Exemption(where="audit/x.yaml:3", reason="loads predicated away", measurement="test: no measurement")


def test_the_band_is_the_documented_one() -> None:
    lim = limits(DECLARED, inputs=2, kernels=1)
    assert (lim.fail_below, lim.warn_above) == (FAIL_BELOW, WARN_ABOVE_1K)
    # 1 % rounds up (a fraction of a byte still widens the band), the sector is added once.
    assert limits(150, inputs=1, kernels=1).fail_below == 150 - 2 - 32


@pytest.mark.parametrize("measured, verdict", [
    (FAIL_BELOW, "PASS"),          # on the edge: not a shortfall
    (FAIL_BELOW - 1, "FAIL"),      # one byte under it
    (DECLARED, "PASS"),
    (WARN_ABOVE_1K, "PASS"),       # on the upper edge
    (WARN_ABOVE_1K + 1, "WARN"),
    (0, "FAIL"),
])
def test_tolerance_edges(measured: int, verdict: str) -> None:
    j = judge(declared=DECLARED, measured=measured, inputs=2, kernels=1)
    assert j.verdict == verdict, j.reason
    assert j.limits is not None and j.limits.fail_below == FAIL_BELOW


def test_a_tiny_read_half_is_judged_at_sector_resolution() -> None:
    # 64 B declared: 1 % is one byte, so anything from 31 B up is the same reading as 64 B.
    assert judge(declared=64, measured=31, inputs=1, kernels=1).verdict == "PASS"
    assert judge(declared=64, measured=30, inputs=1, kernels=1).verdict == "FAIL"


def test_a_multi_kernel_call_is_summed_and_gets_an_allowance_per_kernel() -> None:
    kernels = [KernelReading("gemm", 600_000, 100_000, 1000.0), KernelReading("silu", 300_000, 300_000, 10.0),
               KernelReading("gemm2", 1_200_000, 100_000, 900.0)]
    m = summarize(kernels)
    assert (m.read_bytes, m.write_bytes, m.kernels) == (2_100_000, 500_000, 3)
    assert m.duration_ns == pytest.approx(1910.0)
    # 2.1 x declared: a WARN for one kernel, inside the band for three (their cold replays fetch code too).
    assert judge(declared=DECLARED, measured=m.read_bytes, inputs=2, kernels=1).verdict == "WARN"
    assert judge(declared=DECLARED, measured=m.read_bytes, inputs=2, kernels=m.kernels).verdict == "PASS"
    # A shortfall summed over kernels is a shortfall: no per-kernel allowance on that side.
    short = summarize([KernelReading("a", 400_000, 0, None), KernelReading("b", 400_000, 0, None)])
    assert short.duration_ns is None
    assert judge(declared=DECLARED, measured=short.read_bytes, inputs=2, kernels=2).verdict == "FAIL"


def test_a_kernel_without_the_read_metric_makes_the_call_unmeasured() -> None:
    from tileops.audit.reports import ReportError

    with pytest.raises(ReportError) as exc:
        summarize([KernelReading("a", 10, 0, 1.0), KernelReading("b", None, 0, 1.0)])
    assert exc.value.kind == "metric-not-collectable" and "dram__bytes_read.sum" in str(exc.value)
    assert "asked for" in str(exc.value) and "1 of 2 kernels" in str(exc.value)
    with pytest.raises(ReportError) as exc:
        summarize([])
    assert exc.value.kind == "no-kernel"


def test_exempt_only_for_a_shortfall_inside_the_exception() -> None:
    short = judge(declared=DECLARED, measured=500_000, inputs=2, kernels=1, exemption=EXEMPT)
    assert short.verdict == "EXEMPT"
    assert "audit/x.yaml:3" in short.reason and "loads predicated away" in short.reason
    assert "test: no measurement" in short.reason
    # Inside the exception but not short: judged as usual.
    assert judge(declared=DECLARED, measured=DECLARED, inputs=2, kernels=1, exemption=EXEMPT).verdict == "PASS"
    assert judge(declared=DECLARED, measured=3_000_000, inputs=2, kernels=1, exemption=EXEMPT).verdict == "WARN"
    # Outside it (the driver passes no exemption, and says why): FAIL, with the note.
    out = judge(declared=DECLARED, measured=500_000, inputs=2, kernels=1,
                exemption_note="outside the exception at audit/x.yaml:3 (`prod(T) == 1` is false)")
    assert out.verdict == "FAIL" and "outside the exception at audit/x.yaml:3" in out.reason


def test_skipped_error_and_no_verdict_paths() -> None:
    assert judge(declared=DECLARED, measured=DECLARED, skip_reason="fp8 needs 8.9+").verdict == "SKIPPED"
    zero = judge(declared=0, measured=4096)
    assert zero.verdict == "SKIPPED" and "no read at all" in zero.reason
    nv = judge(declared=None, measured=123_456)
    assert nv.verdict == "NO-VERDICT" and "not a pass" in nv.reason
    # An unusable measurement is ERROR whatever was declared: the audit was asked to measure and could not.
    assert judge(declared=None, measured=None, error="ncu missing").verdict == "ERROR"
    assert judge(declared=DECLARED, measured=None, error="ERR_NVGPUCTRPERM").verdict == "ERROR"
    assert judge(declared=DECLARED, measured=None).verdict == "ERROR"
    # Never run beats everything.
    assert judge(declared=None, measured=None, error="x", skip_reason="interrupted").verdict == "SKIPPED"


def test_every_verdict_line_names_its_numbers() -> None:
    j = judge(declared=DECLARED, measured=FAIL_BELOW - 1, inputs=2, kernels=1)
    assert f"{FAIL_BELOW - 1:,} B" in j.reason and f"{DECLARED:,} B" in j.reason and f"{FAIL_BELOW:,} B" in j.reason
