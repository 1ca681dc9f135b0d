"""What every test process shares: a data directory of its own, and no inherited terminal size.

Without this, a command a test runs without ``TILEOPS_PROFILE_DIR`` reads and writes the developer's own store
(``~/.local/share/tileops/profiles``): its calibrations and the per-host noise prior the bench keeps there. One run
of the suite then changes what the next one judges, and two test processes (``pytest -n 2``) race on one store.
``XDG_DATA_HOME`` is set for the session, before any test starts a child, so every child inherits it; a test that
names its own store still does.

``COLUMNS`` and ``LINES`` are removed: pytest-xdist's workers inherit the controller's terminal size in them, so a
table drawn in a worker would wrap at 80 columns where the same test run alone (no terminal) draws it at the
width the command chooses for a pipe. A test about widths sets them itself.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

_ISOLATED: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    data_home = tempfile.mkdtemp(prefix="tileops-tests-data-")
    _ISOLATED.append(data_home)
    os.environ["XDG_DATA_HOME"] = data_home
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


def pytest_unconfigure(config: pytest.Config) -> None:
    for path in _ISOLATED:
        shutil.rmtree(path, ignore_errors=True)
