"""§4.7: a value-decided row draws from a generator of its own, seeded by a stable hash of (op, row
label) and the dtype case, or by the row's explicit ``seed:``. Never by its position: a row added
upstream must not move another row's routing, its bytes or its data terms."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest
import torch
import yaml

from tileops.manifest.load import read_manifest
from tileops.ops.catalog import load_entries, shipped_manifest_dir
from tileops.ops.spec import OpEntry, Workload, row_seed
from tileops.ops.workload import bind_row, build_inputs, instantiate

#: (op, manifest file, the existing value-decided row, a row to insert before it)
CASES = [
    ("fused_experts", "moe.yaml", "cpu-64tok-8e-top2",
     {"label": "cpu-inserted-32tok-8e-top2", "indices": {"T": 32, "Hd": 256, "Kt": 2, "E": 8, "I2": 256, "I": 128},
      "dtypes": [{"x": "float32", "topk_ids": "int64"}], "tags": ["cpu"]}),
    ("embedding", "embedding.yaml", "cpu-small-2k-tokens",
     {"label": "cpu-inserted-1k-tokens", "indices": {"T": [1024], "V": 32000, "D": 256},
      "dtypes": [{"ids": "int64", "weight": "float32"}], "tags": ["cpu"]}),
]


def run_row(entry: OpEntry, label: str, case: Any) -> tuple[dict[str, torch.Tensor], tuple[int, int], dict]:
    row = next(w for w in entry.workloads if w.label == label)
    op = instantiate(entry, row)
    inputs = build_inputs(op, bind_row(entry, row, case), "cpu")
    op(**inputs)
    return inputs, op.eval_roofline(), op.roofline_data_terms()


@pytest.fixture(scope="module")
def edited(tmp_path_factory: pytest.TempPathFactory) -> dict[str, OpEntry]:
    """A copy of the manifest files with a row inserted before each existing value-decided row."""
    d = tmp_path_factory.mktemp("inserted")
    for op, fname, _, new in CASES:
        if not (d / fname).exists():
            shutil.copy(shipped_manifest_dir() / fname, d / fname)
        doc = yaml.safe_load((d / fname).read_text())
        doc[op]["workloads"].insert(0, new)
        (d / fname).write_text(yaml.safe_dump(doc, sort_keys=False))
    report = read_manifest([d])
    assert report.ok, [x.render() for x in report.defects]
    return report.entries()


@pytest.mark.parametrize("op,fname,label,new", CASES, ids=[c[0] for c in CASES])
def test_inserting_a_row_upstream_moves_no_other_rows_bytes_or_data_terms(
        edited: dict[str, OpEntry], op: str, fname: str, label: str, new: dict) -> None:
    shipped, moved = load_entries()[op], edited[op]
    labels = [w.label for w in moved.workloads]
    assert labels[0] == new["label"]
    assert labels.index(label) == [w.label for w in shipped.workloads].index(label) + 1  # it really moved down
    row = next(w for w in shipped.workloads if w.label == label)
    for case in row.dtypes:
        before = run_row(shipped, label, case)
        after = run_row(moved, label, case)
        for name, t in before[0].items():
            assert torch.equal(t, after[0][name]), f"{op} [{label}]: input {name} moved"
        assert after[1] == before[1], f"{op} [{label}]: (flops, bytes) moved"
        assert after[2] == before[2] and after[2], f"{op} [{label}]: data terms moved"


def test_the_seed_depends_on_the_label_and_the_case_not_the_position() -> None:
    """Control: the hash really reads the label (renaming a row redraws it) and the case."""
    entry = load_entries()["fused_experts"]
    row = next(w for w in entry.workloads if w.label == "cpu-64tok-8e-top2")
    case = row.dtypes[0]
    renamed = replace(entry, workloads=(replace(row, label="cpu-64tok-8e-top2-renamed"),))
    a, b = run_row(entry, row.label, case), run_row(renamed, "cpu-64tok-8e-top2-renamed", case)
    assert not torch.equal(a[0]["topk_ids"], b[0]["topk_ids"])
    assert row_seed("fused_experts", row, case) != row_seed("fused_experts", row, {"x": "float32",
                                                                                   "topk_ids": "int32"})
    assert row_seed("fused_experts", row, case) != row_seed("moe_ffn", row, case)


def test_an_explicit_seed_decides_alone() -> None:
    """`seed:` on a row replaces (op, label): two rows with one seed and one case draw alike."""
    one = Workload(label="a", indices={}, seed=7)
    other = Workload(label="b", indices={}, seed=7)
    assert row_seed("embedding", one, "int64") == row_seed("fused_experts", other, "int64")
    assert row_seed("embedding", one, "int64") != row_seed("embedding", Workload(label="a", indices={}), "int64")
    assert row_seed("embedding", one, "int64") != row_seed("embedding", replace(one, seed=8), "int64")


def test_the_seed_is_the_same_in_every_process() -> None:
    """A stable hash, not Python's hash(), which PYTHONHASHSEED salts per process."""
    code = ("import json; from tileops.ops.spec import Workload, row_seed\n"
            "print(json.dumps(row_seed('fused_experts', Workload(label='cpu-64tok-8e-top2', indices={}), "
            "{'x': 'float32', 'topk_ids': 'int64'})))")
    seeds = set()
    for salt in ("1", "2", "random"):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONHASHSEED": salt})
        assert r.returncode == 0, r.stderr
        seeds.add(json.loads(r.stdout))
    here = row_seed("fused_experts", Workload(label="cpu-64tok-8e-top2", indices={}),
                    {"x": "float32", "topk_ids": "int64"})
    assert seeds == {here}
