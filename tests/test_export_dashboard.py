"""The Grafana dashboard and its provisioning, offline (the integration test runs every query for real)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import yaml

from export_support import need_binary
from tileops.export.metrics import METRICS

GRAFANA = Path(__file__).resolve().parents[1] / "exporters" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "tileops-sol.json"
WANTED = {  # the views the issue asks for, by panel title
    "Fleet SOL by SKU and op", "Measured bandwidth per device and mix", "Physics breaches (formula errors)",
    "Anomalies, blanks and errors", "SOL ratio per workload", "Run health per device",
    "Physics check per device and ceiling", "Calibration vs the device's previous run", "Devices of a SKU, ranked",
}
STRAGGLERS = GRAFANA.parent / "prometheus" / "tests" / "tileops-stragglers.test.yml"


def _dash() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def _targets() -> list[tuple[dict, dict]]:
    return [(p, t) for p in _dash()["panels"] for t in p.get("targets", [])]


def test_dashboard_structure():
    dash = _dash()
    assert dash["uid"] == "tileops-sol" and dash["title"]
    panels = dash["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    assert WANTED <= {p["title"] for p in panels}
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for p in panels:
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"] and p.get("description"), p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]


def test_queries_use_known_metrics_and_variables():
    names = set(METRICS)
    variables = {v["name"] for v in _dash()["templating"]["list"]}
    for panel, target in _targets():
        expr = target["expr"]
        used = set(re.findall(r"\b(tileops_[a-z0-9_]+)", expr))
        assert used and used <= names, f"{panel['title']}: unknown metrics {used - names}"
        assert set(re.findall(r"\$(\w+)", expr)) <= variables, panel["title"]
        # a device seen through the Pushgateway and through `serve` must count once
        assert "without (job, instance" in expr or "max by (" in expr, f"{panel['title']}: dedupe job/instance"


def test_queries_read_only_the_lean_metric_set():
    """Every panel works on what the exporters send by default (`--metrics-detail lean`)."""
    for panel, target in _targets():
        for metric in set(re.findall(r"\b(tileops_[a-z0-9_]+)", target["expr"])):
            assert METRICS[metric].detail == "lean", f"{panel['title']}: {metric} is exported only at full detail"


def test_queries_parse_as_promql(tmp_path: Path):
    """promtool parses each query (as a recording rule, with the variables set to All)."""
    exe = need_binary("promtool")
    rules = [{"record": f"dashboard:query_{i}", "expr": re.sub(r"\$\w+", ".*", t["expr"])}
             for i, (_, t) in enumerate(_targets())]
    path = tmp_path / "dashboard-queries.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    res = subprocess.run([exe, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_provisioning_points_at_the_dashboard_and_prometheus():
    dash_prov = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "tileops.yaml").read_text())
    (provider,) = dash_prov["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/var/lib/grafana/dashboards")
    ds_prov = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "tileops.yaml").read_text())
    (ds,) = ds_prov["datasources"]
    assert ds["type"] == "prometheus" and ds["url"].startswith("http://prometheus:")


def test_the_straggler_panel_ranks_the_synthetic_fleet(tmp_path: Path):
    """The panel's two queries on the promtool straggler tests' fleet: each device against its SKU's median, the
    straggler and the noisy device below 1, the healthy ones at 1; SOL sorted worst first."""
    exe = need_binary("promtool")
    (panel,) = [p for p in _dash()["panels"] if p["title"] == "Devices of a SKU, ranked"]
    sol, copy = (re.sub(r"\$modelName", ".*", t["expr"]) for t in panel["targets"])
    assert sol.startswith("sort(") and 'mix="copy"' in copy
    fleet = yaml.safe_load(STRAGGLERS.read_text())["tests"]
    by_name = {case["name"]: case for case in fleet}
    sol_case = by_name["the straggler fires after its third run below and until it recovers; the noisy device never"]
    copy_case = by_name["the copy straggler fires after its third calibration below; the noisy device never"]

    def samples(values: dict[str, float], l4: tuple[str, ...] = ()) -> list[dict]:
        return [{"labels": f'{{Hostname="n{ord(u[-1]) - 96}",UUID="{u}",modelName="NVIDIA {"L4" if u in l4 else "H200"}"}}',
                 "value": v} for u, v in values.items()]

    doc = {"rule_files": [], "evaluation_interval": "1h", "tests": [
        {"interval": "1h", "input_series": sol_case["input_series"], "promql_expr_test": [
            {"expr": sol, "eval_time": "73h", "exp_samples": samples(
                {"GPU-a": 1, "GPU-b": 1, "GPU-c": 1, "GPU-d": 0.94, "GPU-e": 0.93, "GPU-f": 2 / 3, "GPU-g": 4 / 3},
                l4=("GPU-f", "GPU-g"))}]},
        {"interval": "1h", "input_series": copy_case["input_series"], "promql_expr_test": [
            {"expr": copy, "eval_time": "504h", "exp_samples": samples(
                {"GPU-a": 1, "GPU-b": 1, "GPU-c": 1, "GPU-d": 0.94, "GPU-e": 0.94, "GPU-f": 0.94, "GPU-g": 1})}]},
    ]}
    path = tmp_path / "panel.test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    res = subprocess.run([exe, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "SUCCESS" in res.stdout + res.stderr, res.stdout + res.stderr
