"""`tileops serve` binds this machine only unless told otherwise (issue 15 §4); the image tells it 0.0.0.0."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from appliance_support import REPO
from cli_support import tileops_argv


def first_line(tmp_path: Path, *extra: str, env_host: str | None = None) -> str:
    """Start a real `tileops serve` on a free port, return the line saying where it listens, stop it."""
    env = {k: v for k, v in os.environ.items() if k != "TILEOPS_SERVE_HOST"}
    if env_host is not None:
        env["TILEOPS_SERVE_HOST"] = env_host
    env["TILEOPS_PROFILE_DIR"] = str(tmp_path / "store")
    (tmp_path / "results").mkdir(exist_ok=True)
    proc = subprocess.Popen(tileops_argv("serve", str(tmp_path / "results"), "--port", "0", *extra),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO)
    try:
        return proc.stdout.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize("extra, env_host, bound", [
    ((), None, "127.0.0.1"),                           # a host's CLI: this machine only
    ((), "0.0.0.0", "0.0.0.0"),                         # the image's ENV TILEOPS_SERVE_HOST
    (("--host", "127.0.0.1"), "0.0.0.0", "127.0.0.1"),  # the flag wins
])
def test_bind_address(tmp_path: Path, extra: tuple[str, ...], env_host: str | None, bound: str) -> None:
    line = first_line(tmp_path, *extra, env_host=env_host)
    assert line.startswith(f"tileops serve: http://{bound}:"), line

