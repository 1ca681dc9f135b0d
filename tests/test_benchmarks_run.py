"""The scale benchmarks still run (issue 18's figures come from them): each at a tiny size, as a subprocess.

They print timings, which a test does not judge (speed goals belong in the
benchmarks); this only holds that each script runs to the end against the
current package and prints its goal lines, so an API change cannot leave one
broken until someone needs its figure.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.mark.parametrize("script, args, expect", [
    ("roofline_plot.py", ["--n", "40", "--repeat", "1"], ["plot of 40 rows", "goal < 5 s"]),
    ("roofline_pricing.py", ["--n", "300", "--repeat", "1"], ["300"]),
    ("attribution.py", ["--ranges", "100", "--per-range", "10", "--repeat", "1"],
     ["1,000 launches over 100 ranges", "goal < 1 s", "scan/sorted"]),
    ("serve_scrape.py", ["--records", "300", "--scrapes", "2"], ["first scrape", "goal < 200 ms"]),
    ("interval_coverage.py", ["--rows", "3"], ["goal >= 90 %", "bursts       two passes + drift"]),
    ("whole_run_tools.py", ["--n", "300", "--formats", "table,csv", "--repeat", "1"],
     ["roofline --format table", "roofline --format csv", "export --textfile again", "tileops --help"]),
])
def test_a_scale_benchmark_runs_to_the_end(script: str, args: list[str], expect: list[str]) -> None:
    res = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    for text in expect:
        assert text in res.stdout, (text, res.stdout[-3000:])
