"""§4.2: no module outside the manifest tooling and tileops.ops.formulas computes FLOPs or bytes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tileops.formula_guard import ALLOWED, is_cost_name, repo_root, scan, scan_source

ROOT = repo_root()


def findings_in(src: str) -> list[tuple[int, str, str]]:
    return [(f.line, f.rule, f.target) for f in scan_source(textwrap.dedent(src), "bench_mod.py")]


def test_the_repository_has_no_formula_outside_the_manifest() -> None:
    found = scan()
    assert found == [], "\n".join(f.render() for f in found)


def test_every_allowed_path_exists_and_says_why() -> None:
    for prefix, why in ALLOWED.items():
        assert (ROOT / prefix.rstrip("/")).exists(), f"ALLOWED names a path that does not exist: {prefix}"
        assert len(why.split()) >= 4, f"{prefix}: say why it may count"


def test_the_allowed_modules_really_count_so_the_guard_sees_them() -> None:
    """Without the allowlist the scan flags the generated evaluators and the func formulas:
    the guard is not clean because it is blind."""
    allowed_files = ["tileops/ops/_roofline_gen.py", "tileops/ops/formulas.py", "tests/test_oracle.py"]
    found = {f.path for f in scan([ROOT / f for f in allowed_files], allowed={})}
    assert found == set(allowed_files)


def test_the_ordinary_idioms_are_caught_in_a_scratch_file(tmp_path: Path) -> None:
    """Issue 11 item 7: the three ways people actually write a formula into a benchmark or a test."""
    scratch = tmp_path / "tests" / "test_scratch.py"
    scratch.parent.mkdir()
    scratch.write_text(textwrap.dedent("""\
        def bench(a, b, t, M, N, K):
            tflops = 2*M*N*K/t
            gbps = (a.numel()+b.numel())*a.element_size()/t
            work = 2*M*N*K
            return tflops, gbps, work
    """))
    found = scan([scratch], root=tmp_path)
    assert [(f.line, f.rule, f.target) for f in found] == [
        (2, "formula-arithmetic", "tflops"), (3, "size-source", "gbps"), (4, "formula-arithmetic", "work")]


def test_tests_are_in_the_default_scope() -> None:
    from tileops.formula_guard import DEFAULT_SCOPE

    assert {"tileops", "benchmarks", "scripts", "tests"} <= set(DEFAULT_SCOPE)


@pytest.mark.parametrize("src", [
    "tflops = rec.flops / t / 1e12\n",
    "gbps = rec.bytes / seconds / 1e9\n",
    "peak_tflops = sms * clock * 2 * lanes / 1e12\n",
    "theoretical_gbps = bus_bits * clock * 2 / 8\n",
    "bandwidth = theoretical * calibration\n",
    "work_dir = base / 'x'\n",
])
def test_reading_a_priced_number_into_a_rate_is_not_a_finding(src: str) -> None:
    assert findings_in(src) == []


def test_a_waiver_on_the_comment_line_above_a_statement_counts() -> None:
    src = "# formula-guard: allow a synthetic record for a test\nrec = make(flops=2 * m * n)\n"
    assert findings_in(src) == []
    assert findings_in("# an unrelated comment\nrec = make(flops=2 * m * n)\n") != []


@pytest.mark.parametrize("src,rule,target", [
    ("m, n, k = a.shape[0], b.shape[1], a.shape[1]\nflops = 2 * m * n * k\n", "formula-arithmetic", "flops"),
    ("nbytes = x.numel() * x.element_size()\n", "size-source", "nbytes"),
    ("total_bytes = 0\nfor t in ts:\n    total_bytes += t.nbytes\n", "size-source", "total_bytes"),
    ("import math\nbytes_moved = math.prod(x.shape) * 2\n", "size-source", "bytes_moved"),
    ("rec = Record(op='gemm', flops=2 * m * n * k, bytes=nb)\n", "formula-arithmetic", "flops"),
    ("row = {'label': l, 'bytes': a.numel() * 4}\n", "size-source", "bytes"),
    ("def attention_flops(b, h, s, d):\n    return 4 * b * h * s * s * d\n", "formula-arithmetic", "attention_flops"),
    ("read_bytes: int = w.nelement() * w.element_size()\n", "size-source", "read_bytes"),
    ("self.flops = batch * tokens * hidden\n", "formula-arithmetic", "flops"),
    ("out['flops'] = 6 * n\n", "formula-arithmetic", "flops"),
    ("nbytes = torch.finfo(dt).bits // 8 * n\n", "size-source", "nbytes"),
])
def test_a_bench_module_that_computes_flops_or_bytes_is_caught(src: str, rule: str, target: str) -> None:
    got = findings_in(src)
    assert got and got[-1][1:] == (rule, target), got


@pytest.mark.parametrize("src", [
    "flops, nbytes = op.eval_roofline()\n",
    "read = op.eval_roofline_read_bytes()\n",
    "bytes_per_s = rec.bytes / seconds\n",
    "rate = rec.flops / t\n",
    "total_flops = sum(r.flops for r in rows)\n",
    "peak_flops = cores * ghz * fma * lanes * 2\n",
    "flush_buffer_bytes = 2 * l2_cache_bytes\n",
    "rec = Record(flops=flops, bytes=nbytes, roof_key=op.roof_key())\n",
    "flops = None\n",
    "n = x.numel() * 2  # not a cost name\n",
    "flops = 2 * m * n * k  # formula-guard: allow a worked example in a docstring test\n",
])
def test_reading_priced_numbers_is_not_a_finding(src: str) -> None:
    assert findings_in(src) == []


def test_a_waiver_needs_a_reason() -> None:
    assert findings_in("flops = 2 * m * n  # formula-guard: allow\n") != []


def test_cost_names() -> None:
    for n in ("flops", "nbytes", "total_flops", "read_bytes", "bytes_moved", "FLOPS", "write_bytes"):
        assert is_cost_name(n), n
    for n in ("peak_flops", "bytes_per_s", "achieved_flops_per_s", "l2_cache_bytes", "bandwidth", "tokens"):
        assert not is_cost_name(n), n


def test_a_planted_bench_file_fails_the_scan(tmp_path: Path) -> None:
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "my_gemm_bench.py").write_text("def run(a, b):\n    flops = 2 * a.shape[0] * a.shape[1] * b.shape[1]\n"
                                            "    return flops\n")
    (bench / "fine.py").write_text("def run(op):\n    flops, nbytes = op.eval_roofline()\n    return flops\n")
    found = scan([bench], root=tmp_path)
    assert [(f.path, f.line, f.rule) for f in found] == [("benchmarks/my_gemm_bench.py", 2, "formula-arithmetic")]
    assert "my_gemm_bench.py:2" in found[0].render() and "eval_roofline" in found[0].render()


def test_the_command_line_exits_nonzero_on_a_finding(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("nbytes = x.numel() * 2\n")
    r = subprocess.run([sys.executable, "-m", "tileops.formula_guard", str(bad)], capture_output=True, text=True)
    assert r.returncode == 1 and "bad.py:1" in r.stdout
    ok = subprocess.run([sys.executable, "-m", "tileops.formula_guard"], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_an_unparsable_file_is_a_finding_not_a_crash() -> None:
    assert scan_source("def f(:\n", "broken.py")[0].rule == "syntax"
