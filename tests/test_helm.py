"""The Helm chart, linted and rendered by Helm's own library (the helm-python-sdk wheel)."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance_support import REPO, unavailable

CHART = REPO / "helm" / "tileops"
DOCS = REPO / "docs" / "deploy.md"


@pytest.fixture(scope="module")
def helm():
    try:
        import helm_python
    except ImportError:
        unavailable("helm-python-sdk is not installed (the project's `test` extra)")
    helm_python.disable_logging()
    return helm_python


def render(helm, values: dict[str, Any] | None = None, chart: Path = CHART) -> list[dict[str, Any]]:
    with helm.Chart.load(str(chart)) as c:
        manifests = c.render(values or {}, name="tileops", namespace="gpu")
    return [doc for path, text in manifests.items() if path.endswith((".yaml", ".yml"))
            for doc in yaml.safe_load_all(text) if doc]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj["spec"]["jobTemplate"]["spec"] if obj["kind"] == "CronJob" else obj["spec"]
    return spec["template"]["spec"]


def docs_example() -> dict[str, Any]:
    """The three-SKU values example in docs/deploy.md (so the documented example is the tested one)."""
    blocks = re.findall(r"```yaml\n(# values-three-skus\.yaml\n.*?)```", DOCS.read_text(), re.S)
    assert blocks, "docs/deploy.md must hold the ```yaml block starting '# values-three-skus.yaml'"
    return yaml.safe_load(blocks[0])


def test_lint_passes(helm) -> None:
    report = helm.lint(str(CHART), strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_lint_really_lints(helm, tmp_path: Path) -> None:
    broken = tmp_path / "tileops"
    shutil.copytree(CHART, broken)  # symlinks followed: a self-contained copy
    (broken / "templates" / "broken.yaml").write_text("apiVersion: v1\nkind: ConfigMap\n{{ .Values.nope.deeper }}\n")
    report = helm.lint(str(broken), strict=True)
    assert report["errors"] or any(m["severity"] == 3 for m in report["messages"])


def test_default_values_meet_the_schema(helm) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    with helm.Chart.load(str(CHART)) as c:
        c.validate_schema(values)


def test_one_cronjob_and_one_calibration_job_per_sku(helm) -> None:
    values = docs_example()
    skus = values["skus"]
    assert len(skus) == 3
    docs = render(helm, values)
    crons, jobs = of_kind(docs, "CronJob"), of_kind(docs, "Job")
    assert len(crons) == len(jobs) == 3
    by_sku = {c["metadata"]["labels"]["tileops.dev/sku"]: c for c in crons}
    jobs_by_sku = {j["metadata"]["labels"]["tileops.dev/sku"]: j for j in jobs}
    for sku in skus:
        cron, job = by_sku[sku["name"]], jobs_by_sku[sku["name"]]
        assert len(cron["metadata"]["name"]) <= 52 and len(job["metadata"]["name"]) <= 63
        assert cron["spec"]["schedule"] == sku["schedule"]
        assert cron["spec"]["concurrencyPolicy"] == "Forbid"
        for obj in (cron, job):
            spec = pod_spec(obj)
            assert spec["nodeSelector"]["nvidia.com/gpu.product"] == sku["product"]
            assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == sku["gpus"]
            assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])
            assert spec["restartPolicy"] == "Never"
            assert spec.get("runtimeClassName") == values.get("runtimeClassName")
        bench_args = pod_spec(cron)["containers"][0]["args"]
        assert bench_args[0] == "bench"
        assert bench_args[bench_args.index("--push") + 1] == values["pushgateway"]["url"]
        assert pod_spec(job)["containers"][0]["args"][:2] == ["calibrate", "--all-devices"]


def test_pods_are_non_root_and_read_only(helm) -> None:
    for obj in of_kind(render(helm), "CronJob") + of_kind(render(helm), "Job"):
        spec = pod_spec(obj)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 10001
        c = spec["containers"][0]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
        mounts = {m["mountPath"] for m in c["volumeMounts"]}
        assert {"/tmp", "/dev/shm", "/data/results", "/data/profiles"} <= mounts  # the writable places


def test_shared_gpus_excluded_unless_allowed(helm) -> None:
    values = {"skus": [{"name": "a", "product": "NVIDIA-L4", "schedule": "@daily", "gpus": 1},
                       {"name": "b", "product": "NVIDIA-L4", "schedule": "@daily", "gpus": 1,
                        "allowSharedGPUs": True}]}
    crons = {c["metadata"]["labels"]["tileops.dev/sku"]: c for c in of_kind(render(helm, values), "CronJob")}
    terms = pod_spec(crons["a"])["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    for term in terms:  # every way onto a node excludes time-slicing and MPS
        assert {"key": "nvidia.com/gpu.sharing-strategy", "operator": "NotIn",
                "values": ["time-slicing", "mps"]} in term["matchExpressions"]
    replicas = [e for t in terms for e in t["matchExpressions"] if e["key"] == "nvidia.com/gpu.replicas"]
    assert {e["operator"] for e in replicas} == {"DoesNotExist", "In"}
    assert all(e.get("values", ["1"]) == ["1"] for e in replicas)
    assert "affinity" not in pod_spec(crons["b"])
    everyone = render(helm, {**values, "allowSharedGPUs": True})
    assert all("affinity" not in pod_spec(c) for c in of_kind(everyone, "CronJob"))


def test_long_names_are_cut_and_stay_distinct(helm) -> None:
    long = "gpu-pool-with-a-rather-long-name-number"  # 39 characters
    values = {"fullnameOverride": "tileops-benchmarks-for-the-production-a",
              "skus": [{"name": f"{long}1", "product": "NVIDIA-H200", "schedule": "@daily", "gpus": 8},
                       {"name": f"{long}2", "product": "NVIDIA-H200", "schedule": "@daily", "gpus": 8}]}
    docs = render(helm, values)
    cron_names = [c["metadata"]["name"] for c in of_kind(docs, "CronJob")]
    job_names = [j["metadata"]["name"] for j in of_kind(docs, "Job")]
    assert all(len(n) <= 52 for n in cron_names) and all(len(n) <= 63 for n in job_names)
    assert len(set(cron_names)) == 2 and len(set(job_names)) == 2
    dns = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    assert all(dns.match(n) for n in cron_names + job_names)


def test_duplicate_sku_names_fail(helm) -> None:
    sku = {"name": "h200", "product": "NVIDIA-H200", "schedule": "@daily", "gpus": 8}
    with pytest.raises(helm.HelmError, match="appears twice"):
        render(helm, {"skus": [sku, dict(sku, schedule="@hourly")]})


GOOD_SKU = {"name": "h200", "product": "NVIDIA-H200", "schedule": "0 3 * * *", "gpus": 8}


@pytest.mark.parametrize("change, field", [
    ({"skus": [{k: v for k, v in GOOD_SKU.items() if k != "product"}]}, "product"),
    ({"skus": [dict(GOOD_SKU, gpus=0)]}, "gpus"),
    ({"skus": [dict(GOOD_SKU, gpus="8")]}, "gpus"),
    ({"skus": [dict(GOOD_SKU, name="H200_SXM")]}, "name"),
    ({"skus": [dict(GOOD_SKU, schedule="daily")]}, "schedule"),
    ({"skus": [dict(GOOD_SKU, gpu=8)]}, "gpu"),
    ({"skus": []}, "skus"),
    ({"podSecurityContext": {"runAsNonRoot": False}}, "runAsNonRoot"),
    ({"pushgateway": {"url": "pushgateway:9091"}}, "url"),
    ({"image": {"repository": "tileops", "pullPolicy": "Sometimes"}}, "pullPolicy"),
])
def test_schema_rejects_bad_values(helm, change: dict[str, Any], field: str) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values.update(copy.deepcopy(change))
    with helm.Chart.load(str(CHART)) as c, pytest.raises(helm.HelmValuesError, match=field):
        c.validate_schema(values)
    with pytest.raises(helm.HelmValuesError):  # install/template enforce it too
        render(helm, values)


def test_prometheus_rule_carries_our_alert_rules(helm) -> None:
    assert not of_kind(render(helm), "PrometheusRule")
    rule = of_kind(render(helm, {"prometheusRule": {"enabled": True, "labels": {"release": "kps"}}}),
                   "PrometheusRule")
    assert len(rule) == 1 and rule[0]["metadata"]["labels"]["release"] == "kps"
    ours = [g for f in sorted((REPO / "exporters" / "prometheus" / "rules").glob("*.rules.yml"))
            for g in yaml.safe_load(f.read_text())["groups"]]
    assert sorted(rule[0]["spec"]["groups"], key=lambda g: g["name"]) == sorted(ours, key=lambda g: g["name"])


def test_grafana_dashboard_configmap(helm) -> None:
    assert not [c for c in of_kind(render(helm), "ConfigMap")]
    cms = of_kind(render(helm, {"grafanaDashboard": {"enabled": True}}), "ConfigMap")
    assert len(cms) == 1 and cms[0]["metadata"]["labels"]["grafana_dashboard"] == "1"
    for f in (REPO / "exporters" / "grafana" / "dashboards").glob("*.json"):
        assert json.loads(cms[0]["data"][f.name]) == json.loads(f.read_text())


def test_persistence(helm) -> None:
    names = lambda docs: {pod_spec(c)["volumes"][0].get("persistentVolumeClaim", {}).get("claimName")  # noqa: E731
                          for c in of_kind(docs, "CronJob")}
    plain = render(helm)
    assert not of_kind(plain, "PersistentVolumeClaim") and names(plain) == {None}
    kept = render(helm, {"persistence": {"enabled": True}})
    assert {p["metadata"]["name"] for p in of_kind(kept, "PersistentVolumeClaim")} == {"tileops-results",
                                                                                        "tileops-profiles"}
    assert names(kept) == {"tileops-results"}
    given = render(helm, {"persistence": {"enabled": True, "results": {"existingClaim": "fleet-results"}}})
    assert {p["metadata"]["name"] for p in of_kind(given, "PersistentVolumeClaim")} == {"tileops-profiles"}
    assert names(given) == {"fleet-results"}


def test_calibration_can_be_off(helm) -> None:
    assert not of_kind(render(helm, {"calibration": {"enabled": False}}), "Job")
