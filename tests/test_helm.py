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

from appliance_support import REPO, helm_library, render_chart, unavailable

CHART = REPO / "helm" / "tileops"
DOCS = REPO / "docs" / "deploy.md"


@pytest.fixture(scope="module")
def helm():
    return helm_library()


render = render_chart


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


CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))


def test_the_docs_example_is_a_ci_values_file() -> None:
    assert docs_example() == yaml.safe_load((CHART / "ci" / "three-skus-values.yaml").read_text())


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


def test_one_cronjob_per_sku_calibrating_its_node_first(helm) -> None:
    values = docs_example()
    skus = values["skus"]
    assert len(skus) == 3
    docs = render(helm, values)
    crons = of_kind(docs, "CronJob")
    assert len(crons) == 3 and not of_kind(docs, "Job")  # calibration is in the pods, not a Job per SKU
    by_sku = {c["metadata"]["labels"]["tileops.dev/sku"]: c for c in crons}
    for sku in skus:
        cron = by_sku[sku["name"]]
        assert len(cron["metadata"]["name"]) <= 52
        assert cron["spec"]["schedule"] == sku["schedule"]
        assert cron["spec"]["concurrencyPolicy"] == "Forbid"
        spec = pod_spec(cron)
        assert spec["nodeSelector"]["nvidia.com/gpu.product"] == sku["product"]
        assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])
        assert spec["restartPolicy"] == "Never"
        assert spec.get("runtimeClassName") == values.get("runtimeClassName")
        (init,), (bench,) = spec["initContainers"], spec["containers"]
        # The init container gets the same GPUs (the device manager hands an init container's
        # devices on to the pod's containers): the devices calibrated are the devices benchmarked.
        assert init["resources"]["limits"]["nvidia.com/gpu"] == bench["resources"]["limits"]["nvidia.com/gpu"] \
            == sku["gpus"]
        assert init["args"] == ["calibrate", "--all-devices", "--max-age", values["calibration"]["maxAge"]]
        assert init["image"] == bench["image"]
        store = {m["mountPath"]: m["name"] for m in init["volumeMounts"]}
        assert store["/data/profiles"] == "profiles" == {m["mountPath"]: m["name"] for m in bench["volumeMounts"]}[
            "/data/profiles"]
        assert bench["args"][0] == "bench"
        assert bench["args"][bench["args"].index("--push") + 1] == values["pushgateway"]["url"]


def test_calibration_args_and_age(helm) -> None:
    (cron,) = of_kind(render(helm, {"calibration": {"maxAge": "12h", "args": ["--dram-bandwidth", "4.8TB/s"]}}),
                      "CronJob")
    (init,) = pod_spec(cron)["initContainers"]
    assert init["args"] == ["calibrate", "--all-devices", "--max-age", "12h", "--dram-bandwidth", "4.8TB/s"]


def test_pods_are_non_root_and_read_only(helm) -> None:
    for obj in of_kind(render(helm), "CronJob"):
        spec = pod_spec(obj)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 10001
        for c in spec["initContainers"] + spec["containers"]:
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
    assert all(len(n) <= 52 for n in cron_names)
    assert len(set(cron_names)) == 2
    dns = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    assert all(dns.match(n) for n in cron_names)


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
    ({"skus": [dict(GOOD_SKU, dramBandwidth="fast")]}, "dramBandwidth"),
    ({"calibration": {"enabled": True, "maxAge": "7"}}, "maxAge"),
    ({"calibration": {"enabled": True, "maxAge": "0d"}}, "maxAge"),
    ({"calibration": {"enabled": True, "maxAge": "7d", "backoffLimit": 1}}, "backoffLimit"),
    ({"persistence": {"enabled": True, "results": {"accessModes": ["ReadWriteSometimes"]}}}, "accessModes"),
])
def test_schema_rejects_bad_values(helm, change: dict[str, Any], field: str) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values.update(copy.deepcopy(change))
    with helm.Chart.load(str(CHART)) as c, pytest.raises(helm.HelmValuesError, match=field):
        c.validate_schema(values)
    with pytest.raises(helm.HelmValuesError):  # install/template enforce it too
        render(helm, values)


def test_a_skus_nominal_bandwidth_reaches_calibration_and_bench(helm) -> None:
    """skus[].dramBandwidth becomes TILEOPS_DRAM_BANDWIDTH in every container of that SKU's pods (the init
    container's calibration reads it), and in none of another SKU's: the physics check can judge memory."""
    other = dict(GOOD_SKU, name="l4", product="NVIDIA-L4", gpus=1)
    docs = render(helm, {"skus": [dict(GOOD_SKU, dramBandwidth="4.8TB/s"), other]})
    envs = {}
    for job in of_kind(docs, "CronJob"):
        pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        for c in pod.get("initContainers", []) + pod["containers"]:
            envs[(job["metadata"]["name"], c["name"])] = {e["name"]: e.get("value") for e in c["env"]}
    h200 = {k: v for k, v in envs.items() if "h200" in k[0]}
    assert len(h200) == 2 and all(v["TILEOPS_DRAM_BANDWIDTH"] == "4.8TB/s" for v in h200.values())
    assert all("TILEOPS_DRAM_BANDWIDTH" not in v for k, v in envs.items() if "l4" in k[0])


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


def volumes(cron: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod_spec(cron)["volumes"]}


def test_persistence_is_on_by_default_and_read_write_many(helm) -> None:
    """Results and calibrations outlive the pod: two claims every node's pods mount at once (RWX)."""
    docs = render(helm)
    claims = {p["metadata"]["name"]: p for p in of_kind(docs, "PersistentVolumeClaim")}
    assert set(claims) == {"tileops-results", "tileops-profiles"}
    for claim in claims.values():
        assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
        assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    (cron,) = of_kind(docs, "CronJob")
    vols = volumes(cron)
    assert vols["results"]["persistentVolumeClaim"]["claimName"] == "tileops-results"
    assert vols["profiles"]["persistentVolumeClaim"]["claimName"] == "tileops-profiles"


def test_results_are_kept_per_node(helm) -> None:
    """Each host's runs in their own folder of the shared claim: <claim>/<node>/<run-id>/."""
    (cron,) = of_kind(render(helm), "CronJob")
    for c in pod_spec(cron)["initContainers"] + pod_spec(cron)["containers"]:
        (mount,) = [m for m in c["volumeMounts"] if m["name"] == "results"]
        assert mount["subPathExpr"] == "$(NODE_NAME)"
        (node,) = [e for e in c["env"] if e["name"] == "NODE_NAME"]
        assert node["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_persistence_off_and_existing_claims(helm) -> None:
    off = render(helm, {"persistence": {"enabled": False}})
    assert not of_kind(off, "PersistentVolumeClaim")
    assert {n: "emptyDir" in v for n, v in volumes(of_kind(off, "CronJob")[0]).items()
            if n in ("results", "profiles")} == {"results": True, "profiles": True}
    given = render(helm, {"persistence": {"results": {"existingClaim": "fleet-results"}}})
    assert {p["metadata"]["name"] for p in of_kind(given, "PersistentVolumeClaim")} == {"tileops-profiles"}
    assert volumes(of_kind(given, "CronJob")[0])["results"]["persistentVolumeClaim"]["claimName"] == "fleet-results"


def test_calibration_can_be_off(helm) -> None:
    (cron,) = of_kind(render(helm, {"calibration": {"enabled": False}}), "CronJob")
    assert "initContainers" not in pod_spec(cron)


# --------------------------------------------------------------------------- the Kubernetes API schemas


#: Kinds that are not Kubernetes' own (a CRD): no API schema to check them against here. The
#: PrometheusRule's content is our rule files, which promtool checks (tests/test_alert_rules.py).
CRD_KINDS = {("monitoring.coreos.com/v1", "PrometheusRule")}


@pytest.fixture(scope="module")
def k8s():
    try:
        import kubernetes_validate
    except ImportError:
        unavailable("kubernetes-validate is not installed (the project's `test` extra)")
    return kubernetes_validate


def supported_versions(k8s) -> list[str]:
    """The chart's floor (Chart.yaml kubeVersion) and the newest Kubernetes the validator has schemas for."""
    floor = re.search(r">=\s*(\d+\.\d+)", yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"])[1]
    newest = k8s.latest_version()
    assert tuple(map(int, newest.split(".")[:2])) >= tuple(map(int, floor.split("."))), (floor, newest)
    return [floor, ".".join(newest.split(".")[:2])]


def schema_errors(k8s, doc: dict[str, Any], version: str) -> str | None:
    """None when ``doc`` meets the strict API schema of that Kubernetes version, else the error."""
    try:
        k8s.validate(doc, version, strict=True)  # strict: an unknown field is an error, not ignored
    except k8s.ValidationError as exc:
        return f"{'.'.join(map(str, exc.path))}: {exc.message}"
    return None


def test_the_ci_values_cover_the_chart() -> None:
    names = {p.name for p in CI_VALUES}
    assert {"default-values.yaml", "three-skus-values.yaml", "persistence-off-values.yaml",
            "existing-claim-values.yaml"} <= names


@pytest.mark.parametrize("values_file", CI_VALUES, ids=[p.name for p in CI_VALUES])
def test_rendered_chart_meets_the_kubernetes_api_schemas(helm, k8s, values_file: Path) -> None:
    values = yaml.safe_load(values_file.read_text()) or {}
    docs = render(helm, values)
    assert of_kind(docs, "CronJob")
    versions = supported_versions(k8s)
    checked = 0
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CRD_KINDS:
            continue
        for version in versions:
            error = schema_errors(k8s, doc, version)  # a kind with no schema raises: it must be listed above
            assert error is None, f"{values_file.name}: {doc['kind']}/{doc['metadata']['name']} on {version}: {error}"
            checked += 1
    assert checked >= 2 * len(versions)


@pytest.mark.parametrize("path, value, field", [
    (("initContainers", 0, "volumeMounts", 0, "subPathExprr"), "$(NODE_NAME)", "subPathExprr"),  # a typo
    (("securityContext", "runAsUser"), "root", "runAsUser"),
    (("containers", 0, "resources", "limits", "nvidia.com/gpu"), [8], "nvidia.com/gpu"),
    (("containers", 0, "env", 0, "value"), 8, "value"),
])
def test_a_broken_manifest_fails_validation(helm, k8s, path: tuple, value: Any, field: str) -> None:
    """The validator really validates: each broken pod spec is refused, naming the field."""
    (cron,) = of_kind(render(helm), "CronJob")
    version = supported_versions(k8s)[0]
    assert schema_errors(k8s, cron, version) is None
    broken = copy.deepcopy(cron)
    node = pod_spec(broken)
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    error = schema_errors(k8s, broken, version)
    assert error is not None and field in error, error


def test_a_broken_template_fails_validation(helm, k8s, tmp_path: Path) -> None:
    """A template bug that Helm renders happily (a misspelt field) is caught by the schemas."""
    broken = tmp_path / "tileops"
    shutil.copytree(CHART, broken)
    helpers = broken / "templates" / "_helpers.tpl"
    text = helpers.read_text()
    assert "fieldPath: spec.nodeName" in text
    helpers.write_text(text.replace("fieldPath: spec.nodeName", "fieldPat: spec.nodeName"))
    (cron,) = of_kind(render(helm, chart=broken), "CronJob")
    error = schema_errors(k8s, cron, supported_versions(k8s)[-1])
    assert error is not None and "fieldPat" in error


def test_the_compile_cache_persists_on_the_results_claim(helm) -> None:
    """The bench keeps torch.compile's and Triton's caches beside its runs (results/.compile-cache): in the
    chart that is the results claim, per node, so a CronJob loads last night's compiled code."""
    from tileops.bench.sweep import compile_cache_env

    (cron,) = of_kind(render(helm), "CronJob")
    spec = pod_spec(cron)
    (bench,) = spec["containers"]
    assert not any(a.startswith("--compile-cache") or a == "--out" for a in bench["args"])
    mount = next(m for m in bench["volumeMounts"] if m["mountPath"] == "/data/results")
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert "persistentVolumeClaim" in volume and mount["subPathExpr"] == "$(NODE_NAME)"
    # the image's WORKDIR is /data, so a run goes to /data/results/<run-id> and its cache beside it
    env = compile_cache_env(None, Path("/data/results/20260101-030000-abcd"))
    assert set(env) == {"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"}
    for path in env.values():
        assert Path(path).is_relative_to("/data/results/.compile-cache")


def test_node_intake_is_off_by_default_and_a_job_per_chosen_sku_when_on(helm) -> None:
    """Issue 36 item 6: `tileops calibrate --check` as a Job before a node takes work; its exit code fails it."""
    assert not of_kind(render(helm, yaml.safe_load((CHART / "ci" / "default-values.yaml").read_text())), "Job")
    values = yaml.safe_load((CHART / "ci" / "intake-values.yaml").read_text())
    (job,) = of_kind(render(helm, values), "Job")
    assert job["metadata"]["labels"]["app.kubernetes.io/component"] == "intake"
    assert job["metadata"]["labels"]["tileops.dev/sku"] == "h200" and job["spec"]["backoffLimit"] == 0
    spec = pod_spec(job)
    assert spec["nodeName"] == "gpu-node-7" and spec["restartPolicy"] == "Never"
    assert "initContainers" not in spec  # the Job's container is the calibration
    (ctr,) = spec["containers"]
    assert ctr["args"] == ["calibrate", "--all-devices", "--max-age", "7d", "--check", "--textfile", "/textfile"]
    assert {"name": "textfile", "mountPath": "/textfile"} in ctr["volumeMounts"]
    assert {"name": "textfile", "hostPath": {"path": "/var/lib/node_exporter/textfile", "type": "Directory"}} \
        in spec["volumes"]
    assert ctr["resources"]["limits"]["nvidia.com/gpu"] == 8  # the SKU's GPUs, every one checked
    values["intake"]["skus"] = ["h100"]
    with pytest.raises(Exception, match="values.intake.skus"):
        render(helm, values)
