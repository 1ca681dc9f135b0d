"""Issue 39's two SOLs through the exporter: the device's state (the reference probe) and SOL against it.

The rows are priced by the real roofline tool; the probe fields, which the bench's probe fills, are set on the
priced rows here as the contract (``tileops.roofline.Priced``) states them. The lean set stays at its series per
row: the device's state is published per device (the run's median per probe kind), a row's own probe ratio and
its SOL against it only at full detail.
"""

from __future__ import annotations

import dataclasses
import pickle
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from export_support import profile, record, write_run
from tileops.export.metrics import METRICS, exposition
from tileops.export.rowseries import from_plain, row_series, to_plain
from tileops.export.snapshot import RunTally, build_snapshots
from tileops.profiles import ProfileChooser
from tileops.records import read_run_info
from tileops.roofline import Priced, price


def _parse(body: bytes) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(body.decode("utf-8"))}


def _probed(p: Priced, kind: str, ratio: float, ci: tuple[float, float] | None) -> Priced:
    """A priced row as the bench's probe leaves it: the device's state during the row and SOL against it."""
    assert p.efficiency is not None
    state_ci = None if p.sol_ci is None or ci is None else (p.sol_ci[0] / ci[1], p.sol_ci[1] / ci[0])
    return dataclasses.replace(p, probe_ratio=ratio, probe_ratio_ci=ci, probe_kind=kind,
                               state_efficiency=p.efficiency / ratio, state_efficiency_ci=state_ci)


def _run(tmp_path: Path) -> tuple[list[Priced], list]:
    """Four rows of one CPU: three memory rows probed (ratios 0.8, 0.9, 1.0, one without an interval), one
    compute row probed by the FMA probe, one row without a probe; and their snapshot."""
    prof = profile()
    specs = [("relu", "a", "memory", 0.8, (0.78, 0.82)), ("add", "b", "memory", 0.9, (0.88, 0.93)),
             ("mul", "c", "memory", 1.0, None), ("linear", "d", "fma", 0.95, (0.94, 0.97)),
             ("neg", "e", None, None, None)]
    records = [record(op, label) for op, label, *_ in specs]
    run = write_run(tmp_path / "run", records)
    priced = []
    for rec, (_, _, kind, ratio, ci) in zip(records, specs):
        p = price(rec, prof)
        priced.append(p if kind is None else _probed(p, kind, ratio, ci))
    snaps = build_snapshots(run, read_run_info(run), priced, ProfileChooser.only(prof))
    return priced, snaps


def test_the_device_state_is_one_lean_series_per_kind_and_the_rows_add_none(tmp_path: Path) -> None:
    priced, snaps = _run(tmp_path)
    lean, full = _parse(exposition(snaps)), _parse(exposition(snaps, detail="full"))
    run = {s.labels["kind"]: s.value for s in lean["tileops_run_probe_ratio"]}
    assert run == pytest.approx({"memory": 0.9, "fma": 0.95})  # the median of 0.8, 0.9, 1.0; the one FMA row
    upper = {s.labels["kind"]: s.value for s in lean["tileops_run_probe_ratio_upper"]}
    assert upper == pytest.approx({"memory": (0.82 + 0.93) / 2, "fma": 0.97})  # rows with an interval only
    assert all(s.labels["UUID"] and "op" not in s.labels for s in lean["tileops_run_probe_ratio"])
    # the lean set per row is what it was before the probe: no row series names the device's state
    assert "tileops_sol_state_ratio" not in lean and "tileops_row_probe_ratio" not in lean
    bare = _parse(exposition(build_snapshots(snaps[0].run_dir, None, [dataclasses.replace(
        p, probe_ratio=None, probe_ratio_ci=None, probe_kind=None, state_efficiency=None,
        state_efficiency_ci=None) for p in priced], ProfileChooser.only(profile()))))
    row_metrics = {n for n, spec in METRICS.items() if spec.scope == "row"}
    assert {n: len(v) for n, v in lean.items() if n in row_metrics} == \
        {n: len(v) for n, v in bare.items() if n in row_metrics}
    assert "tileops_run_probe_ratio" not in bare  # no probe, no device state: absent, never 1
    # full: each probed row's own probe ratio (of its kind) and its SOL against the device's state
    rows = {s.labels["op"]: (s.labels["kind"], s.value) for s in full["tileops_row_probe_ratio"]}
    assert rows == {"relu": ("memory", 0.8), "add": ("memory", 0.9), "mul": ("memory", 1.0),
                    "linear": ("fma", 0.95)}
    sol = {s.labels["op"]: s.value for s in full["tileops_sol_ratio"]}
    state = {s.labels["op"]: s.value for s in full["tileops_sol_state_ratio"]}
    assert set(state) == {"relu", "add", "mul", "linear"}
    for op, (_, ratio) in rows.items():
        assert state[op] == pytest.approx(sol[op] / ratio)
    assert METRICS["tileops_run_probe_ratio"].detail == "lean" == METRICS["tileops_run_probe_ratio_upper"].detail
    assert METRICS["tileops_sol_state_ratio"].detail == "full" == METRICS["tileops_row_probe_ratio"].detail


def test_the_probe_survives_the_workers_plain_round_trip(tmp_path: Path) -> None:
    """A large run's rows come back from forked workers as plain tuples (and pickled): the probe with them."""
    priced, _ = _run(tmp_path)
    rows = [row_series(p) for p in priced]
    back = from_plain(pickle.loads(pickle.dumps(to_plain(rows))))
    assert back == rows
    assert back[0].probe == ("memory", 0.8, 0.82)
    assert back[2].probe == ("memory", 1.0, None) and back[4].probe is None
    assert back[0].sol_state_ratio == pytest.approx(priced[0].efficiency / 0.8)
    tally = RunTally()  # a worker's tally, pickled back (its rows travel as plain tuples)
    for p in priced:
        tally.add(p)
    (device,) = pickle.loads(pickle.dumps(tally)).devices.values()
    assert device.rows == rows


@pytest.mark.slow
def test_the_exported_state_reaches_the_shipped_rules_in_a_real_prometheus(tmp_path: Path) -> None:
    """The series as the exporter writes them, pushed to a real Pushgateway and scraped by a real Prometheus with
    the shipped rules: each memory-bound row gets its device's memory state (the run's median, 0.9), and its SOL
    against that state is its SOL over it; the rules read the names and labels the exporter writes."""
    import subprocess

    import yaml

    from export_support import free_port, need_binary, start_pushgateway, stop, wait_http
    from tileops.export.push import push_snapshot

    prometheus = need_binary("prometheus")
    priced, snaps = _run(tmp_path)
    procs = []
    try:
        pgw_proc, pgw = start_pushgateway(tmp_path)
        procs.append(pgw_proc)
        (snap,) = snaps
        assert push_snapshot(pgw, snap).ok
        rules = Path(__file__).resolve().parents[1] / "exporters" / "prometheus" / "rules"
        config = tmp_path / "prometheus.yml"
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules / "*.rules.yml")],
            "scrape_configs": [{"job_name": "tileops-pushgateway", "honor_labels": True,
                                "static_configs": [{"targets": [pgw.removeprefix("http://")]}]}]}))
        port = free_port()
        log = open(tmp_path / "prometheus.log", "wb")
        procs.append(subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'db'}",
                                       f"--web.listen-address=127.0.0.1:{port}"], stdout=log,
                                      stderr=subprocess.STDOUT))
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/-/ready", 60, procs[-1])

        def query(promql: str) -> dict[str, float]:
            return {r["metric"].get("op", r["metric"].get("kind", "")): float(r["value"][1])
                    for r in _api(base, promql)}

        # each row's device state as the regression rule joins it: on the device and the row's bound
        row_state = ("max by (Hostname, UUID, modelName, op, label, dtype, backend) (max without (job, instance) "
                     "(tileops_row_verdict) * on (Hostname, UUID, modelName, bound) group_left () "
                     "tileops:probe_ratio:device)")
        alert = yaml.safe_load((rules / "tileops-alerts.rules.yml").read_text())
        (regression,) = [r["expr"] for g in alert["groups"] for r in g["rules"]
                         if r.get("alert") == "TileOpsSOLRegression"]
        assert row_state.replace("(max without", "( max without").replace("tileops:probe_ratio:device)",
                                                                            "tileops:probe_ratio:device )") \
            in " ".join(regression.split())
        deadline = time.monotonic() + 120
        while not query(row_state) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert query("tileops:probe_ratio:device") == pytest.approx({"memory": 0.9, "fma": 0.95})
        bounds = {r["metric"]["kind"]: r["metric"]["bound"] for r in _api(base, "tileops:probe_ratio:device")}
        assert bounds == {"memory": "memory", "fma": "compute"}
        # every row here is memory-bound (the elementwise record), so each reads the memory probe
        sol = {p.record.op: p.efficiency for p in priced if p.efficiency is not None}
        assert query(row_state) == pytest.approx({op: 0.9 for op in sol})
        state_sol = f"max without (job, instance) (tileops_sol_ratio) / on (Hostname, UUID, modelName, op, label, " \
                    f"dtype, backend) {row_state}"
        assert query(state_sol) == pytest.approx({op: s / 0.9 for op, s in sol.items()})
    finally:
        for p in reversed(procs):
            stop(p)


def _api(base: str, promql: str) -> list[dict]:
    """Prometheus's answer to an instant query."""
    import json
    import urllib.parse
    import urllib.request

    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as resp:
        doc = json.load(resp)
    assert doc["status"] == "success", doc
    return doc["data"]["result"]
