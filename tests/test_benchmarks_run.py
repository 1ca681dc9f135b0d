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


def test_the_reproducibility_benchmark_reads_two_runs_and_says_no_interval_where_a_record_has_none(
        tmp_path: Path) -> None:
    """benchmarks/reproducibility.py on two runs given as data (a real pair takes minutes): coverage counts the
    rows with an interval (one inside, one outside), a record without one says "no interval", and the same-code
    comparison is the real `tileops roofline --baseline`'s."""
    sys.path.insert(0, str(Path(__file__).parent))
    from roofline_fixtures import make_record, write_records

    def run(name: str, times: dict[str, float], ci: bool) -> Path:
        rows = [make_record(label=label, median_s=t, median_ci_s=(t * 0.95, t * 1.05) if ci and label != "old" else None)
                for label, t in times.items()]
        return write_records(tmp_path / name / "records.jsonl", rows).parent

    first = run("first", {"inside": 1e-3, "outside": 1e-3, "old": 1e-3}, ci=True)
    second = run("second", {"inside": 1.02e-3, "outside": 1.3e-3, "old": 1e-3}, ci=True)
    res = subprocess.run([sys.executable, str(BENCH / "reproducibility.py"), "--runs", str(first), str(second)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "coverage: 1/2 = 50% of the rows' second SOL inside the first's interval (goal >= 90%)" in out
    assert "1 row(s) with no interval left out" in out and "no interval" in out.split("coverage:")[0]
    assert "1 slower, 0 faster (goal 0; 1 now), 1 same, 1 ambiguous; exit 1" in out  # old: same on its medians
    assert "1 row(s) on the medians alone (no interval)" in out
