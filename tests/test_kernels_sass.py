"""The Triton kernels a GPU would run, checked on the CPU: compiled ahead of time for sm_90a and sm_80
with Triton's bundled ptxas, and read in SASS with its cuobjdump (tests/sass_support.py).

The allowed exceptions (narrow accesses, rows that do not fill an H200) are documented in
docs/gpu-validation.md; the tests read them there, so a new exception is a documented one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tileops.ops import backends

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "gpu-validation.md"
#: An H200's multiprocessors, and the programs a launch needs to keep each busy twice over.
H200_SMS = 132
MIN_PROGRAMS = 2 * H200_SMS
#: The H200's theoretical HBM bandwidth (profiles/h200.yaml), and the SOL time under which a row is latency-bound.
H200_BYTES_PER_S = 4.8e12
LATENCY_BOUND_S = 5e-6
MIN_FFMA_SHARE = 0.95


@pytest.fixture(scope="module")
def sass(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not backends.triton_installed():
        if os.environ.get("CI") == "true":
            pytest.fail("triton is not installed (CI=true: `make test` installs it through the test extra)")
        pytest.skip("triton is not installed (pip install -e '.[test]')")
    out = tmp_path_factory.mktemp("sass") / "sass.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, str(Path(__file__).parent / "sass_support.py"), str(out)], env=env,
                         capture_output=True, text=True, timeout=1500)
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads(out.read_text())


def doc_table(heading: str) -> list[list[str]]:
    """The body rows of the first markdown table under ``heading`` in docs/gpu-validation.md."""
    text = DOC.read_text(encoding="utf-8")
    lines = text.split(f"### {heading}", 1)[1].splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    rows = lines[start:end]
    cells = [[c.strip().strip("`") for c in ln.strip("|").split("|")] for ln in rows]
    return cells[2:]  # after the header and its rule


def kernel_name(key: str) -> str:
    return json.loads(key)[0]


@pytest.mark.slow
def test_every_gpu_row_compiles_for_sm_90a_and_sm_80_or_is_refused_with_a_reason(sass: dict[str, Any]) -> None:
    rows, configs = sass["rows"], sass["configs"]
    assert len(rows) > 100 and {r["op"] for r in rows} >= {"relu", "where", "softmax", "rms_norm", "embedding"}
    refused = {"sm_90a": [], "sm_80": []}
    for r in rows:
        assert r["grids"], f"{r['op']} {r['label']} {r['case']}: no launch recorded"
        for target, got in r["targets"].items():
            if "refused" in got:
                refused[target].append((r["op"], r["label"], got["refused"]))
                continue
            for key in got["configs"]:
                facts = configs[key]
                assert "error" not in facts, (r["op"], r["label"], r["case"], target, facts)
                assert facts["arch"] == target, (key, facts["arch"])
    assert refused["sm_90a"] == []
    # fp8 rows only, with the bench's reason
    assert refused["sm_80"] and all("fp8 needs compute capability 8.9" in why for _, _, why in refused["sm_80"])
    assert {op for op, _, _ in refused["sm_80"]} == {"cast"}
    # a configuration several rows launch is compiled once: far fewer compiles than launches
    launches = sum(len(t["configs"]) for r in rows for t in r["targets"].values() if "configs" in t)
    assert len(configs) < launches


def test_no_kernel_spills(sass: dict[str, Any]) -> None:
    for key, facts in sass["configs"].items():
        assert facts["local_instructions"] == 0 and facts["local_bytes"] == 0, (kernel_name(key), facts)
        assert facts["registers"] and facts["registers"] <= 255


def test_memory_bound_kernels_load_and_store_128_bits_but_the_documented_exceptions(sass: dict[str, Any]) -> None:
    allowed = {k: (int(loads), int(stores)) for k, loads, stores, _ in doc_table("Narrow global accesses, and why "
                                                                                 "they are allowed")}
    used: set[str] = set()
    for key, facts in sass["configs"].items():
        name = kernel_name(key)
        if name == "_fma_chains":
            continue  # compute-bound: one store an element, no loads
        narrow_loads = sum(n for w, n in facts["loads"].items() if w != "128")
        narrow_stores = sum(n for w, n in facts["stores"].items() if w != "128")
        assert facts["loads"].get("128", 0) + facts["stores"].get("128", 0) > 0, (name, facts)
        if narrow_loads or narrow_stores:
            assert name in allowed, f"{name}: narrow accesses {facts['loads']} {facts['stores']} not documented"
            used.add(name)
            max_loads, max_stores = allowed[name]
            assert narrow_loads <= max_loads and narrow_stores <= max_stores, (name, json.loads(key)[3], facts)
    assert used == set(allowed), f"documented exceptions no kernel needs: {set(allowed) - used}"


def test_every_large_row_fills_an_h200_or_is_documented_latency_bound(sass: dict[str, Any]) -> None:
    documented = {(op, label, case): (int(programs), int(nbytes.replace(",", "")))
                  for op, label, case, programs, nbytes, _ in doc_table("Rows that do not fill an H200, and why "
                                                                        "that is right")}
    small = {}
    for r in sass["rows"]:
        key = (r["op"], r["label"], r["case"])
        if min(r["grids"]) >= MIN_PROGRAMS:
            assert r["bytes"] is None or key not in documented, key
            continue
        assert key in documented, f"{key}: launches {r['grids']} programs (< {MIN_PROGRAMS}) and is not documented"
        programs, nbytes = documented[key]
        assert programs == min(r["grids"]), key
        if r["bytes"] is not None:  # a shape-only formula: the documented bytes are the formula's
            assert nbytes == r["bytes"], key
        assert nbytes / H200_BYTES_PER_S < LATENCY_BOUND_S, f"{key}: {nbytes:,} B is not latency-bound"
        small[key] = r
    assert set(small) == set(documented), f"stale entries: {set(documented) - set(small)}"
    # the sampling rows that ran one program a row now run one a tile
    softmax = [r for r in sass["rows"] if r["op"] == "softmax" and "sampling-probs" in r["label"]]
    assert softmax and all(min(r["grids"]) >= 2048 for r in softmax), [(r["label"], r["grids"]) for r in softmax]


def test_the_fma_calibration_loop_is_at_least_95_percent_ffma(sass: dict[str, Any]) -> None:
    for target, key in sass["fma"].items():
        loop = max(sass["configs"][key]["loops"], key=lambda lp: lp["instructions"])
        share = loop["ffma"] / loop["instructions"]
        assert share >= MIN_FFMA_SHARE, (target, loop)
    from tileops.calibrate import gpu_fma

    # the FLOPs it reports count every FFMA of the unrolled loop: 2 per FMA, 4 chains, UNROLL steps a trip
    assert gpu_fma.flops_of(10, 3) == 2 * gpu_fma.CHAINS * gpu_fma.UNROLL * 10 * 3 * gpu_fma.BLOCK


def test_the_where_scalar_operand_is_one_load_a_program(sass: dict[str, Any]) -> None:
    """The causal-mask fill (`T: [1]`) read its fill value with 16 scalar loads a thread before issue 24."""
    for r in sass["rows"]:
        if r["op"] == "where" and "mask" in r["label"]:
            for key in r["targets"]["sm_90a"]["configs"]:
                facts = sass["configs"][key]
                assert sum(n for w, n in facts["loads"].items() if w != "128") == 1, (r["label"], facts)
