"""Alerts reach a person (issue 14): the shipped Alertmanager configuration, checked and exercised for real.

    amtool check-config                  the shipped exporters/alertmanager/alertmanager.yml
    amtool config routes test            every alert of the shipped rules goes where it should
    end to end                           a run whose bytes breach the physics check, exported by
                                         `tileops export --push` to a real Pushgateway; Prometheus
                                         (the shipped rules, 1 s intervals) fires TileOpsPhysicsBreach;
                                         Alertmanager (the shipped routes, short waits) posts it to a
                                         webhook served here; the test reads the payload.

Binaries come from Debian's `prometheus`, `prometheus-pushgateway` and `prometheus-alertmanager`
(amtool is in the latter); missing, the tests skip locally and fail under CI=true. Every server
listens on 127.0.0.1 with a free port and a temporary directory, and is always stopped.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance_support import unavailable
from export_support import (env, free_port, profile, record, start_pushgateway, stop, wait_http, write_profile_file,
                            write_run)
from cli_support import tileops

REPO = Path(__file__).resolve().parents[1]
AM_CONFIG = REPO / "exporters" / "alertmanager" / "alertmanager.yml"
PROM_DIR = REPO / "exporters" / "prometheus"
RULES = PROM_DIR / "rules" / "tileops-alerts.rules.yml"

#: Who is woken, who gets a ticket (docs/deploy.md, "Alerts reach a person").
PAGES = {"TileOpsPhysicsBreach", "TileOpsAuditFail", "TileOpsNodeBelowFloor"}


def need_binary(name: str, package: str) -> str:
    """A Debian binary; missing, skip locally and fail under CI=true (.ci/run installs the package)."""
    found = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
    if not found:
        unavailable(f"{name} not installed: apt-get install {package}")
    return found


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    exe = need_binary("amtool", "prometheus-alertmanager")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)


def test_the_shipped_config_passes_amtool() -> None:
    result = amtool("check-config", str(AM_CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout and "2 receivers" in result.stdout


def test_amtool_really_checks(tmp_path: Path) -> None:
    """The same call refuses a config whose route names a receiver nobody defined."""
    cfg = yaml.safe_load(AM_CONFIG.read_text())
    cfg["route"]["routes"][0]["receiver"] = "nobody"
    bad = tmp_path / "alertmanager.yml"
    bad.write_text(yaml.safe_dump(cfg))
    result = amtool("check-config", str(bad))
    assert result.returncode != 0 and "nobody" in result.stdout + result.stderr


def alert_labels() -> dict[str, dict[str, str]]:
    """Each shipped alert's labels as Alertmanager receives them: its name, its rule's labels, and the
    labels its expression keeps that routing reads (the audit alert keeps verdict="FAIL")."""
    out = {}
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                labels = {"alertname": rule["alert"], **rule.get("labels", {})}
                if 'verdict="FAIL"' in rule["expr"]:
                    labels["verdict"] = "FAIL"
                out[rule["alert"]] = labels
    return out


def test_every_shipped_alert_is_routed_by_what_a_person_must_do() -> None:
    alerts = alert_labels()
    assert PAGES <= set(alerts) and len(alerts) > len(PAGES)
    for name, labels in alerts.items():
        result = amtool("config", "routes", "test", f"--config.file={AM_CONFIG}",
                        *(f"{k}={v}" for k, v in labels.items()))
        assert result.returncode == 0, result.stderr
        expected = "tileops-page" if name in PAGES else "tileops-tickets"
        assert result.stdout.strip() == expected, f"{name} ({labels}) went to {result.stdout.strip()}"


def test_receivers_are_placeholders_a_user_replaces() -> None:
    """Nothing is sent anywhere real until the user says where: the URLs are under .invalid."""
    cfg = yaml.safe_load(AM_CONFIG.read_text())
    urls = [w["url"] for r in cfg["receivers"] for w in r.get("webhook_configs", [])]
    assert len(urls) == 2 and all(".invalid/REPLACE-" in u for u in urls)


# --------------------------------------------------------------------------- end to end


class Webhook:
    """A webhook receiver on 127.0.0.1: every POST's path and JSON body, in arrival order."""

    def __init__(self) -> None:
        self.posts: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # the http.server protocol
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                posts.put((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def alertmanager_config(tmp: Path, hook: str) -> Path:
    """The shipped routes and receivers, each receiver posting to the local webhook (path = its name),
    with waits of a second instead of minutes."""
    cfg = yaml.safe_load(AM_CONFIG.read_text())
    for receiver in cfg["receivers"]:
        for w in receiver["webhook_configs"]:
            w["url"] = f"{hook}/{receiver['name']}"
    cfg["route"].update(group_wait="1s", group_interval="1s", repeat_interval="1m")
    path = tmp / "alertmanager.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def prometheus_config(tmp: Path, pushgateway: str, alertmanager: str) -> Path:
    """The shipped Prometheus config and rules, scraping the Pushgateway only, alerting our Alertmanager."""
    cfg = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
    cfg["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    cfg["rule_files"] = [str(PROM_DIR / pattern) for pattern in cfg["rule_files"]]
    cfg["scrape_configs"] = [dict(job, static_configs=[{"targets": [pushgateway]}])
                             for job in cfg["scrape_configs"] if job["job_name"] == "tileops-pushgateway"]
    assert cfg["scrape_configs"], "the shipped config must scrape the Pushgateway"
    (am,) = cfg["alerting"]["alertmanagers"]
    am["static_configs"] = [{"targets": [alertmanager]}]
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def inflated_run(tmp: Path) -> tuple[Path, Path]:
    """A run of two rows on host node-a: one honest, one whose bytes imply 8e15 B/s against a
    100 GB/s theoretical bandwidth (the inflated-formula case the physics check exists for)."""
    e = env(run_id="inflated", hostname="node-a")
    run_dir = write_run(tmp / "results" / "inflated", [
        record("relu", "honest", bytes_=8_000_000, seconds=1e-3, e=e),           # 8 GB/s
        record("add", "inflated", bytes_=8_000_000 * 10**6, seconds=1e-3, e=e),  # 8e15 B/s
    ])
    return run_dir, write_profile_file(tmp / "test-cpu.yaml", profile(bandwidth=100e9))


@pytest.mark.slow
def test_a_physics_breach_reaches_the_pager_webhook(tmp_path: Path) -> None:
    prometheus = need_binary("prometheus", "prometheus")
    alertmanager = need_binary("prometheus-alertmanager", "prometheus-alertmanager")
    need_binary("prometheus-pushgateway", "prometheus-pushgateway")
    procs: list[subprocess.Popen] = []
    hook = Webhook()
    try:
        pgw_proc, pgw = start_pushgateway(tmp_path)
        procs.append(pgw_proc)
        run_dir, prof = inflated_run(tmp_path)
        export = tileops("export", str(run_dir), "--profile", str(prof), "--push", pgw, timeout=120, cwd=REPO,
                         env={"TILEOPS_PROFILE_DIR": str(tmp_path / "store")})
        assert export.returncode == 0, export.stdout + export.stderr

        am_port = free_port()
        am_log = open(tmp_path / "alertmanager.log", "wb")
        procs.append(subprocess.Popen(
            [alertmanager, f"--config.file={alertmanager_config(tmp_path, hook.url)}",
             f"--storage.path={tmp_path / 'am-data'}", f"--web.listen-address=127.0.0.1:{am_port}",
             "--cluster.listen-address="], stdout=am_log, stderr=subprocess.STDOUT))
        wait_http(f"http://127.0.0.1:{am_port}/-/ready", 30, procs[-1])

        prom_port = free_port()
        prom_log = open(tmp_path / "prometheus.log", "wb")
        config = prometheus_config(tmp_path, pgw.removeprefix("http://"), f"127.0.0.1:{am_port}")
        procs.append(subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"], stdout=prom_log, stderr=subprocess.STDOUT))
        wait_http(f"http://127.0.0.1:{prom_port}/-/ready", 30, procs[-1])

        try:
            path, payload = hook.posts.get(timeout=45)
        except queue.Empty:
            raise AssertionError("no notification within 45 s; alertmanager.log:\n"
                                 + (tmp_path / "alertmanager.log").read_text()[-3000:]) from None
        assert path == "/tileops-page" and payload["receiver"] == "tileops-page"
        assert payload["status"] == "firing"
        (alert,) = payload["alerts"]
        labels = alert["labels"]
        assert labels["alertname"] == "TileOpsPhysicsBreach" and labels["severity"] == "critical"
        assert (labels["op"], labels["label"]) == ("add", "inflated")  # the inflated row, not the honest one
        assert labels["UUID"] == "cpu-node-a" and labels["Hostname"] == "node-a"
        assert labels["modelName"] == "Test CPU 9000"
        assert "add [inflated" in alert["annotations"]["summary"] and "FORMULA ERROR" in alert["annotations"][
            "description"]
        assert payload["groupLabels"] == {"alertname": "TileOpsPhysicsBreach", "op": "add",
                                          "modelName": "Test CPU 9000"}
        assert "/graph?g0.expr=" in alert["generatorURL"]  # a link back to the Prometheus expression
    finally:
        for p in reversed(procs):
            stop(p)
        hook.close()
