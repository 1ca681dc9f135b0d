"""The environment a run measures in: recorded once per run, copied into every record."""

from __future__ import annotations

import secrets
import socket
import subprocess
from datetime import datetime, timezone
from typing import Any

import torch

from tileops import __version__
from tileops.device import DeviceInfo
from tileops.paths import repo_root


def new_run_id() -> str:
    """Sortable and unique: ``20261129-114512-3fa2``."""
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def git_revision() -> str | None:
    """The checkout's commit (with ``-dirty``), or the TILEOPS_GIT_REVISION an image was built with."""
    import os

    env = os.environ.get("TILEOPS_GIT_REVISION")
    if env:
        return env
    root = repo_root()
    if root is None or not (root / ".git").exists():
        return None
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def run_environment(device: DeviceInfo, run_id: str, threads: int | None) -> dict[str, Any]:
    """The Environment fields (tileops.bench.records.Environment) fixed for a whole run."""
    return {
        **device.env_fields(),
        "threads": threads if device.kind == "cpu" else device.threads,
        "torch_version": torch.__version__,
        "tileops_version": __version__,
        "git_revision": git_revision(),
        "hostname": socket.gethostname(),
        "run_id": run_id,
    }
