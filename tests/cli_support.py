"""The one way a test runs the command line as a user does: ``python -m tileops.cli`` in a child process.

A test that needs a command's exit code and output calls :func:`tileops` (this interpreter, the environment it
is given, the output captured); one that drives the process while it runs (a signal, a stream) starts
:func:`tileops_argv` itself. A file's own helper (a store, a column width) is a line over these.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def tileops_argv(*args: str) -> list[str]:
    """The argument vector of ``tileops ARGS`` run by this interpreter."""
    return [sys.executable, "-m", "tileops.cli", *args]


def tileops(*args: str, env: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None,
            timeout: float = 600, cwd: str | Path | None = None, check: bool = False
            ) -> subprocess.CompletedProcess[str]:
    """Run ``tileops ARGS`` to its end, its output captured as text.

    ``env``: variables set over this process's environment; ``environ``: the child's whole environment instead
    (a test that removes a variable). ``check``: raise on a non-zero exit, with the output in the error."""
    full = dict(environ) if environ is not None else {**os.environ, **(env or {})}
    res = subprocess.run(tileops_argv(*args), capture_output=True, text=True, env=full, timeout=timeout, cwd=cwd)
    if check and res.returncode != 0:
        raise AssertionError(f"tileops {' '.join(args)} exited {res.returncode}:\n{res.stdout[-3000:]}"
                             f"\n{res.stderr[-3000:]}")
    return res
