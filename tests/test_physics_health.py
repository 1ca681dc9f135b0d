"""Health that says what it judged, end to end through `tileops bench`, `tileops roofline` and the metrics.

A test-only op (tests/data/inflated_ops) copies 4 MiB honestly while its manifest formula claims 1000x
that traffic. Priced on a profile that states the nominal memory bandwidth, the physics check catches it
and the bench exits 3. Priced on a profile whose nominal is unknown (a container without DMI), the very
same run is "not judged": exit 0, but nowhere "passed", no `tileops_run_healthy`, and the reason named.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tileops import exitcodes
from tileops.records import read_run_info
from cli_support import tileops as run_tileops

pytestmark = pytest.mark.slow  # two real bench runs (a worker process each)

INFLATED = Path(__file__).parent / "data" / "inflated_ops"
SOURCE = {"source": "user", "ref": "tests/test_physics_health.py"}
CAL = {"source": "calibration", "run_id": "cal-test", "tool_version": "test"}


def tileops(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return run_tileops(*args, env={"COLUMNS": "200", **env}, timeout=timeout)


def _profile(path: Path, *, nominal: float | None) -> Path:
    """A CPU profile pricing every device (--profile FILE); its memory nominal is known or not."""
    memory: dict = {"theoretical_source": SOURCE if nominal else {"source": "unknown", "note": "no DMI"},
                    "measured": {"triad": 20e9}}
    if nominal:
        memory |= {"theoretical": nominal, "calibration": 0.1, "calibration_source": CAL, "mixes": {"triad": 0.1}}
    doc = {"name": path.stem, "kind": "cpu", "match": ["any cpu"], "memory": memory,
           "compute": {"cpu.fp32": {"theoretical": 1e12, "calibration": 0.5, "theoretical_source": SOURCE,
                                    "calibration_source": CAL}},
           "roof_aliases": {"cuda_core.fp32": "cpu.fp32"}}
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The inflated op's manifest directory with its own generated evaluator, and an empty profile store."""
    root = tmp_path_factory.mktemp("physics")
    d = root / "inflated_ops"
    shutil.copytree(INFLATED, d)
    r = tileops("codegen", "--manifest", str(d), env={})
    assert r.returncode == 0, r.stderr
    return {"TILEOPS_MANIFEST_PATH": str(d), "TILEOPS_PROFILE_DIR": str(root / "store")}


def _metrics(textfile_dir: Path) -> dict[str, list]:
    (prom,) = [p for p in textfile_dir.glob("tileops_*.prom") if p.name != "tileops_build.prom"]
    return {f.name: f.samples for f in text_string_to_metric_families(prom.read_text(encoding="utf-8"))}


def test_bench_exits_3_when_an_inflated_bytes_formula_breaches_the_nominal(tmp_path: Path, env: dict) -> None:
    known = _profile(tmp_path / "known.yaml", nominal=200e9)  # 4 MiB x 1000 in ~1 ms is ~4 TB/s: 20x over
    out, metrics = tmp_path / "run", tmp_path / "textfile"
    r = tileops("bench", "--op", "inflated_copy", "--quick", "--no-plot", "--profile", str(known), "--out", str(out),
                "--textfile", str(metrics), env=env)
    assert r.returncode == exitcodes.PHYSICS, r.stdout[-3000:] + r.stderr[-3000:]
    assert "FORMULA ERROR: inflated_copy [cpu-1m-x1000" in r.stdout
    assert "physics check BREACHED on memory: 1 of 1 row(s)" in r.stdout and "health: FAILED" in r.stdout
    info = read_run_info(out)
    assert info is not None and info.exit_code == exitcodes.PHYSICS
    assert info.health["ok"] is False and info.health["state"] == "breached"
    assert [(c["ceiling"], c["state"]) for c in info.health["ceilings"]] == [("memory", "breached")]
    # a CPU has no GPU facts to hold its profile against: the run says so, and prints nothing about it
    facts = info.health["device_facts"]
    assert facts["state"] == "not-checked" and "is a CPU" in facts["reason"] and facts["note"] is None
    assert "device facts" not in r.stdout + r.stderr
    doc = json.loads((out / "roofline.json").read_text())
    assert doc["health"]["state"] == "breached" and doc["rows"][0]["breaches"]
    m = _metrics(metrics)
    assert [s.value for s in m["tileops_run_healthy"]] == [0]
    assert [s.labels["state"] for s in m["tileops_run_physics_check"] if s.value == 1] == ["breached"]
    (row,) = m["tileops_row_verdict"]
    assert row.labels["physics"] == "breach" and row.labels["op"] == "inflated_copy"
    assert m["tileops_physics_breach_ratio"][0].value > 1


def test_the_same_formula_on_an_unknown_nominal_is_not_judged_never_passed(tmp_path: Path, env: dict,
                                                                          capsys: pytest.CaptureFixture[str],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    blind = _profile(tmp_path / "blind.yaml", nominal=None)
    out, metrics = tmp_path / "run", tmp_path / "textfile"
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", env["TILEOPS_PROFILE_DIR"])
    r = tileops("bench", "--op", "inflated_copy", "--quick", "--no-plot", "--profile", str(blind), "--out", str(out),
                "--textfile", str(metrics), "--metrics-detail", "full", env=env)
    assert r.returncode == exitcodes.OK, r.stdout[-3000:] + r.stderr[-3000:]
    assert "physics check NOT JUDGED on memory: 1 row(s), nominal-unknown" in r.stdout
    assert "health: NOT JUDGED" in r.stdout and "TILEOPS_DRAM_BANDWIDTH" in r.stdout
    assert "passed" not in r.stdout and "health: OK" not in r.stdout
    info = read_run_info(out)
    assert info is not None and info.exit_code == exitcodes.OK
    assert info.health["ok"] is True and info.health["state"] == "not-judged"
    (memory,) = info.health["ceilings"]
    assert memory["ceiling"] == "memory" and memory["not_judged"] == {"nominal-unknown": 1}
    assert json.loads((out / "roofline.json").read_text())["health"]["state"] == "not-judged"

    m = _metrics(metrics)
    assert "tileops_run_healthy" not in m  # neither a pass nor a failure
    assert [s.labels["state"] for s in m["tileops_run_physics_check"] if s.value == 1] == ["not-judged"]
    (judged,) = m["tileops_physics_check_judged"]
    assert (judged.labels["ceiling"], judged.labels["reason"], judged.value) == ("memory", "nominal-unknown", 0)
    assert m["tileops_row_verdict"][0].labels["physics"] == "not-judged"
    assert m["tileops_row_info"][0].labels["data_terms"] == ""  # the detail level carries the row's detail

    # `tileops roofline` on the same records (in process: the bench was the subprocess worth paying for):
    # not judged on the blind profile, the breach on a known one
    from tileops.cli import main

    assert main(["roofline", str(out), "--profile", str(blind)]) == exitcodes.OK
    text = capsys.readouterr().out
    assert "health: NOT JUDGED" in text and "passed" not in text
    known = _profile(tmp_path / "known.yaml", nominal=200e9)
    assert main(["roofline", str(out), "--profile", str(known), "--format", "json"]) == exitcodes.PHYSICS
    assert json.loads(capsys.readouterr().out)["health"]["state"] == "breached"

    # and `tileops export`, lean by default: the same state, no row detail
    assert main(["export", str(out), "--profile", str(blind)]) == exitcodes.OK
    lean = {f.name: f.samples for f in text_string_to_metric_families(capsys.readouterr().out)}
    assert "tileops_run_healthy" not in lean and "tileops_row_info" not in lean
    assert [s.labels["state"] for s in lean["tileops_run_physics_check"] if s.value == 1] == ["not-judged"]
