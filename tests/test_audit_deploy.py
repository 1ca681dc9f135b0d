"""Deploying the audit: the Helm chart's audit Job (rendered by Helm's own library), compose's
`audit` service, and what docs/deploy.md tells an operator. The audit is the only workload with
profiling permission, and it is off unless asked for."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from appliance_support import REPO, helm_library, render_chart

CHART = REPO / "helm" / "tileops"
THREE = {"skus": [{"name": "h100-sxm", "product": "NVIDIA-H100-80GB-HBM3", "schedule": "0 2 * * *", "gpus": 8},
                  {"name": "h200", "product": "NVIDIA-H200", "schedule": "30 2 * * *", "gpus": 8},
                  {"name": "l40s", "product": "NVIDIA-L40S", "schedule": "0 3 * * *", "gpus": 4}]}


@pytest.fixture(scope="module")
def helm():
    return helm_library()


def render(helm, values: dict[str, Any]) -> list[dict[str, Any]]:
    return render_chart(helm, values)


def pods(docs: list[dict[str, Any]], component: str) -> dict[str, dict[str, Any]]:
    """Pod specs of one component, by SKU."""
    out = {}
    for d in docs:
        labels = d["metadata"]["labels"]
        if labels.get("app.kubernetes.io/component") != component:
            continue
        spec = d["spec"]["jobTemplate"]["spec"] if d["kind"] == "CronJob" else d["spec"]
        out[labels["tileops.dev/sku"]] = {"name": d["metadata"]["name"], **spec["template"]["spec"]}
    return out


def test_off_by_default(helm) -> None:
    assert pods(render(helm, THREE), "audit") == {}
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["audit"]["enabled"] is False


def test_one_audit_job_per_sku_and_the_only_pods_with_profiling_permission(helm) -> None:
    docs = render(helm, {**THREE, "audit": {"enabled": True, "args": ["--family", "moe"]}})
    audits = pods(docs, "audit")
    assert set(audits) == {"h100-sxm", "h200", "l40s"}
    for sku in THREE["skus"]:
        spec = audits[sku["name"]]
        assert len(spec["name"]) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", spec["name"])
        c = spec["containers"][0]
        assert c["args"] == ["audit", "--device", "cuda:0", "--family", "moe"]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == 1  # the audit runs on one GPU
        assert spec["nodeSelector"]["nvidia.com/gpu.product"] == sku["product"]
        assert spec["securityContext"]["runAsUser"] == 0 and spec["securityContext"]["runAsNonRoot"] is False
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
    for component in ("bench", "calibrate"):  # everything else keeps the non-root, capability-free pod
        for spec in pods(docs, component).values():
            c = spec["containers"][0]
            assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 10001
            assert "add" not in c["securityContext"]["capabilities"]


def test_driver_permission_keeps_the_pod_unprivileged(helm) -> None:
    docs = render(helm, {**THREE, "audit": {"enabled": True, "skus": ["h200"], "profilingPermission": "driver"}})
    (spec,) = pods(docs, "audit").values()
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 10001
    assert spec["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_a_new_command_is_a_new_job(helm) -> None:
    a = pods(render(helm, {**THREE, "audit": {"enabled": True}}), "audit")["h200"]["name"]
    b = pods(render(helm, {**THREE, "audit": {"enabled": True, "args": ["--op", "gemm"]}}), "audit")["h200"]["name"]
    assert a != b and a.startswith("tileops-audit-h200-") and b.startswith("tileops-audit-h200-")


def test_unknown_audit_sku_and_bad_values_are_refused(helm) -> None:
    with pytest.raises(helm.HelmError, match=r'values.audit.skus: "h300" is not a SKU of values.skus'):
        render(helm, {**THREE, "audit": {"enabled": True, "skus": ["h300"]}})
    for bad, field in (({"profilingPermission": "privileged"}, "profilingPermission"), ({"gpus": 0}, "gpus"),
                       ({"enable": True}, "enable")):
        with pytest.raises(helm.HelmValuesError, match=field):
            render(helm, {**THREE, "audit": bad})


def test_compose_audit_service_is_opt_in_and_privileged_alone() -> None:
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    svc = compose["services"]["audit"]
    assert svc["command"][0] == "audit" and svc["profiles"] == ["audit"]
    assert svc["cap_add"] == ["SYS_ADMIN"] and svc["user"] == "0:0"
    assert [n for n, s in compose["services"].items() if s.get("cap_add")] == ["audit"]


def test_deploy_docs_say_what_the_host_needs() -> None:
    doc = (REPO / "docs" / "deploy.md").read_text()
    section = doc.split("## The audit", 1)[1]
    for needed in ("NVreg_RestrictProfilingToAdminUsers=0", "CAP_SYS_ADMIN", "dcgmi profile --pause",
                   "dcgmi profile --resume", "audit.enabled", "profilingPermission"):
        assert needed in section, needed
