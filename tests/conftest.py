"""What every test process shares: a data directory of its own, and no inherited terminal size.

Without this, a command a test runs without ``TILEOPS_PROFILE_DIR`` reads and writes the developer's own store
(``~/.local/share/tileops/profiles``): its calibrations and the per-host noise prior the bench keeps there. One run
of the suite then changes what the next one judges, and two test processes (``pytest -n 2``) race on one store.
``XDG_DATA_HOME`` is set for the session, before any test starts a child, so every child inherits it; a test that
names its own store still does.

``COLUMNS`` and ``LINES`` are removed: pytest-xdist's workers inherit the controller's terminal size in them, so a
table drawn in a worker would wrap at 80 columns where the same test run alone (no terminal) draws it at the
width the command chooses for a pipe. A test about widths sets them itself.

The environment is restored after each test: a command run in the test's process with ``--profile-dir`` sets
``TILEOPS_PROFILE_DIR`` for the rest of its process (one store for every lookup), and a later test in the same
worker would otherwise read and write that test's store (a file, in one case, so the later bench refused to run).

The files run longest first: ``tests/durations.json`` holds each file's seconds from an earlier whole run, and
``--dist loadfile --no-loadscope-reorder`` (the Makefile's) hands files to the two workers in collection order,
so the long files (a real bench, docker, the dry run) start early and the run does not end on one worker
finishing a long file while the other idles. ``make test-durations`` writes that file again from a whole run.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

_ISOLATED: list[str] = []
DURATIONS = Path(__file__).with_name("durations.json")
_SECONDS: defaultdict[str, float] = defaultdict(float)


def pytest_configure(config: pytest.Config) -> None:
    data_home = tempfile.mkdtemp(prefix="tileops-tests-data-")
    _ISOLATED.append(data_home)
    os.environ["XDG_DATA_HOME"] = data_home
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


def pytest_unconfigure(config: pytest.Config) -> None:
    for path in _ISOLATED:
        shutil.rmtree(path, ignore_errors=True)


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest files first (their tests in their own order): a stable sort, so every xdist worker collects the
    same order, and a file missing from the record (a new one) keeps its place after the recorded ones."""
    try:
        seconds = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    order = {f: i for i, f in enumerate(dict.fromkeys(_file_of(it.nodeid) for it in items))}
    items.sort(key=lambda it: (-float(seconds.get(_file_of(it.nodeid), 0.0)), order[_file_of(it.nodeid)]))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get("TILEOPS_TEST_DURATIONS"):
        _SECONDS[_file_of(report.nodeid)] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The controller (not an xdist worker) writes the per-file seconds when asked."""
    out = os.environ.get("TILEOPS_TEST_DURATIONS")
    if out and _SECONDS and not hasattr(session.config, "workerinput"):
        Path(out).write_text(json.dumps({f: round(s, 1) for f, s in sorted(_SECONDS.items())}, indent=0) + "\n",
                             encoding="utf-8")


@pytest.fixture(autouse=True)
def _environment_restored() -> object:
    """Each test starts with the session's environment, whatever an in-process command set."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)
