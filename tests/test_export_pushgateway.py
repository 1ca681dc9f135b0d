"""Pushing to a real Pushgateway (Debian's prometheus-pushgateway on 127.0.0.1, a free port).

Skips locally when the binary is missing; fails under CI=true.
"""

from __future__ import annotations

import json
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from export_support import T0, env, profile, record, start_pushgateway, stop, write_run
from tileops.profiles import ProfileChooser
from tileops.export.push import RetryPolicy, push_snapshot
from tileops.export.snapshot import load_run

POLICY = RetryPolicy(attempts=3, backoff_s=0.05, timeout_s=5)


@pytest.fixture
def gateway(tmp_path: Path):
    proc, url = start_pushgateway(tmp_path)
    try:
        yield url
    finally:
        stop(proc)


def scrape(url: str) -> dict[str, list]:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text) if f.name.startswith("tileops_")}


def test_push_groups_by_device_and_replaces_the_group(tmp_path: Path, gateway: str):
    first = write_run(tmp_path / "1", [record("relu", "small", e=env(run_id="1")),
                                       record("neg", "small", e=env(run_id="1"))], start=T0)
    (snap,) = load_run(first, ProfileChooser.only(profile()))
    res = push_snapshot(gateway, snap, policy=POLICY)
    assert res.ok and res.attempts == 1

    m = scrape(gateway)
    sol = {s.labels["op"]: s for s in m["tileops_sol_ratio"]}
    assert set(sol) == {"relu", "neg"}
    assert {k: sol["relu"].labels[k] for k in ("job", "instance", "UUID", "Hostname", "modelName")} == {
        "job": "tileops", "instance": "node-a", "UUID": "cpu-node-a", "Hostname": "node-a",
        "modelName": "Test CPU 9000"}
    success = (T0 + timedelta(minutes=2)).timestamp()
    assert m["tileops_run_last_success_timestamp_seconds"][0].value == success

    # the next run drops a row and breaches: PUT replaces the group, the last success survives
    second = write_run(tmp_path / "2", [record("relu", "small", bytes_=80_000_000_000, e=env(run_id="2"))],
                       start=T0 + timedelta(hours=1))
    (snap2,) = load_run(second, ProfileChooser.only(profile()))
    assert push_snapshot(gateway, snap2, policy=POLICY).ok
    m = scrape(gateway)
    assert {s.labels["op"] for s in m["tileops_sol_ratio"]} == {"relu"}  # neg is gone
    assert m["tileops_run_healthy"][0].value == 0
    assert m["tileops_row_verdict"][0].labels["physics"] == "breach"
    assert [s.value for s in m["tileops_run_last_success_timestamp_seconds"]] == [success]
    assert [s.value for s in m["tileops_run_last_healthy_timestamp_seconds"]] == [success]

    # a run nothing could be judged on (no profile): a success, never a healthy run (issue 37)
    third = write_run(tmp_path / "3", [record("relu", "small", e=env(run_id="3"))], start=T0 + timedelta(hours=2))
    (snap3,) = load_run(third, ProfileChooser.only(None))
    assert push_snapshot(gateway, snap3, policy=POLICY).ok
    m = scrape(gateway)
    assert "tileops_run_healthy" not in m
    later = (T0 + timedelta(hours=2, minutes=2)).timestamp()
    assert [s.value for s in m["tileops_run_last_success_timestamp_seconds"]] == [later]
    assert [s.value for s in m["tileops_run_last_healthy_timestamp_seconds"]] == [success]


def test_each_device_is_its_own_group(tmp_path: Path, gateway: str):
    run = write_run(tmp_path / "r", [record(), record(e=env(device="NVIDIA H200", uuid="GPU-77", kind="cuda"))])
    for snap in load_run(run, ProfileChooser([profile()])):
        assert push_snapshot(gateway, snap, policy=POLICY).ok
    with urllib.request.urlopen(gateway + "/api/v1/metrics", timeout=5) as resp:
        groups = [g["labels"] for g in json.load(resp)["data"]]
    assert sorted(groups, key=lambda g: g["UUID"]) == [
        {"job": "tileops", "instance": "node-a", "UUID": "GPU-77"},
        {"job": "tileops", "instance": "node-a", "UUID": "cpu-node-a"}]


def test_an_audit_has_its_own_group_beside_the_run(tmp_path: Path, gateway: str):
    """The audit goes to job tileops-audit: a run pushed without an audit keeps the audit's verdicts, and an audit
    pushed alone keeps the run's series (each PUT replaces only its own group)."""
    from tileops.export.sinks import export_snapshots
    from tileops.export.snapshot import latest_per_device, load_results

    audited = write_run(tmp_path / "1", [record(e=env(run_id="1"))], start=T0, audit=[
        {"op": "relu", "label": "small", "dtype": "float32", "backend": "torch", "verdict": "FAIL",
         "finished_at": T0.isoformat()}])
    chooser = ProfileChooser.only(profile())
    assert export_snapshots(load_run(audited, chooser), gateway, policy=POLICY, log=lambda m: None).ok

    def groups() -> dict[str, set[str]]:
        with urllib.request.urlopen(gateway + "/api/v1/metrics", timeout=5) as resp:
            return {g["labels"]["job"]: {k for k in g if k.startswith("tileops_")} for g in json.load(resp)["data"]}

    g = groups()
    assert set(g) == {"tileops", "tileops-audit"}
    assert "tileops_audit_verdict" not in g["tileops"] and "tileops_run_info" in g["tileops"]
    assert "tileops_audit_verdict" in g["tileops-audit"] and not any("_run_" in k for k in g["tileops-audit"])

    # the next run, not audited: its group is replaced, the audit's stays
    plain = write_run(tmp_path / "2", [record(e=env(run_id="2"))], start=T0 + timedelta(hours=1))
    assert export_snapshots(load_run(plain, chooser), gateway, policy=POLICY, log=lambda m: None).ok
    m = scrape(gateway)
    assert [s.labels["run_id"] for s in m["tileops_run_info"]] == ["2"]
    (fail,) = m["tileops_audit_verdict"]
    assert (fail.labels["job"], fail.labels["verdict"], fail.labels["UUID"]) == ("tileops-audit", "FAIL", "cpu-node-a")

    # a newer audit in a folder of its own replaces the audit group only
    folder = tmp_path / "audit"
    folder.mkdir()
    (folder / "audit.jsonl").write_text(json.dumps(
        {"op": "relu", "label": "small", "dtype": "float32", "backend": "torch", "verdict": "PASS",
         "hostname": "node-a", "device_uuid": "cpu-node-a", "device_name": "Test CPU 9000",
         "finished_at": (T0 + timedelta(hours=2)).isoformat()}) + "\n")
    snaps = latest_per_device(load_results(folder, chooser))
    assert export_snapshots(snaps, gateway, policy=POLICY, log=lambda m: None).ok
    m = scrape(gateway)
    assert [s.labels["run_id"] for s in m["tileops_run_info"]] == ["2"]
    assert [s.labels["verdict"] for s in m["tileops_audit_verdict"]] == ["PASS"]
