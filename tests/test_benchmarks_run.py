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
    ("report_html.py", ["--size-rows", "40", "--n", "60", "--repeat", "1"],
     ["page of 40 rows (with a baseline)", "written for 60 rows", "goal <= 2 s"]),
    ("attribution.py", ["--ranges", "100", "--per-range", "10", "--repeat", "1"],
     ["1,000 launches over 100 ranges", "goal < 1 s", "scan/sorted"]),
    ("serve_scrape.py", ["--records", "300", "--scrapes", "2"], ["first scrape", "goal < 200 ms"]),
    ("whole_run_tools.py", ["--n", "300", "--formats", "table,csv", "--repeat", "1"],
     ["roofline --format table", "roofline --format csv", "export --textfile again", "tileops --help"]),
])
@pytest.mark.slow
def test_a_scale_benchmark_runs_to_the_end(script: str, args: list[str], expect: list[str]) -> None:
    res = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    for text in expect:
        assert text in res.stdout, (text, res.stdout[-3000:])


def test_the_interval_simulation_runs_and_prints_each_scenarios_figures() -> None:
    """benchmarks/interval_sim.py at 40 rows a scenario: too few for its goals (exit 1 is allowed), enough to run
    every step (tests/test_hostnoise.py holds a few of its figures at 160 rows)."""
    res = subprocess.run([sys.executable, str(BENCH / "interval_sim.py"), "--rows", "40", "--scenario", "cpu + bursts",
                          "--scenario", "gpu drift 1 %"], capture_output=True, text=True, timeout=300)
    assert res.returncode in (0, 1), res.stderr[-3000:]
    assert "goals: coverage 90-97 %" in res.stdout and "cpu + bursts" in res.stdout and "gpu drift 1 %" in res.stdout


def test_the_reproducibility_benchmark_reads_runs_and_counts_coverage_width_and_same_code_calls(
        tmp_path: Path) -> None:
    """benchmarks/reproducibility.py on three runs given as data (six real ones take minutes): each ordered pair
    of runs counts once for coverage (a rerun's level inside the other's prediction), the width is the
    prediction over 1.96 sd of the levels, and the same-code comparison is the real `tileops roofline
    --baseline`'s."""
    import math

    sys.path.insert(0, str(Path(__file__).parent))
    from roofline_fixtures import make_record, write_records

    def run(name: str, times: dict[str, float]) -> Path:
        rows = [make_record(label=label, median_s=t, median_ci_s=(t * 0.9, t / 0.9), level_ci_s=(t * 0.93, t / 0.93),
                            ci_df=30.0) for label, t in times.items()]
        return write_records(tmp_path / name / "records.jsonl", rows).parent

    runs = [run("a", {"steady": 1e-3, "jumpy": 1e-3}), run("b", {"steady": 1.01e-3, "jumpy": 1.5e-3}),
            run("c", {"steady": 0.99e-3, "jumpy": 1e-3})]
    res = subprocess.run([sys.executable, str(BENCH / "reproducibility.py"), "--use", *map(str, runs)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 1, res.stderr[-3000:]  # the goals are not met by the jumpy row
    out = res.stdout
    assert "relu steady float32" in out and "6/6" in out and "2/6" in out  # jumpy: only a and c cover each other
    assert "coverage: 8/12 = 67% of the pairs (goal >= 90%)" in out
    sd = __import__("statistics").stdev([math.log(1e-3), math.log(1.01e-3), math.log(0.99e-3)])
    steady = out.split("relu steady")[1].splitlines()[0].split()
    assert steady[-2:] == [f"{math.log(1 / 0.9) / (1.96 * sd):.2f}", f"{math.log(1 / 0.93) / (1.96 * sd):.2f}"]
    assert "same code compared (2 consecutive pair(s)): 2 row(s) slower or faster (goal 0)" in out
