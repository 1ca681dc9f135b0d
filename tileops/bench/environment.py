"""The environment a run measures in: recorded once per run, copied into every record."""

from __future__ import annotations

import secrets
from datetime import datetime, timezone

import torch

from tileops import __version__
from tileops.device import DeviceInfo
from tileops.records import Environment
from tileops.revision import git_revision


def new_run_id() -> str:
    """Sortable and unique: ``20261129-114512-3fa2``."""
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def run_environment(device: DeviceInfo, run_id: str, threads: int | None) -> Environment:
    """The Environment fixed for a whole run (each row adds the clocks around it)."""
    machine = device.machine_fields()
    if device.kind == "cpu":
        machine["threads"] = threads
    return Environment(
        **machine,
        torch_version=torch.__version__,
        tileops_version=__version__,
        git_revision=git_revision(check_dirty=True),
        run_id=run_id,
    )
