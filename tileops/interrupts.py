"""Ctrl-C and SIGTERM, handled alike: a long command stops between writes, never inside one.

``docker stop`` and Kubernetes send SIGTERM (then SIGKILL after a grace
period); a terminal sends SIGINT. Both become an exception in the main thread:
``KeyboardInterrupt`` for SIGINT and its subclass :class:`Terminated` for
SIGTERM, so every ``except KeyboardInterrupt`` that already ends a run cleanly
ends it cleanly for either. Inside :func:`deferred` (appending a record,
writing the run file) the exception waits until the block is done, so a
finished record is never lost to the signal that stops the run.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from types import FrameType
from collections.abc import Iterator

from tileops import exitcodes


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: stop like Ctrl-C, exit ``exitcodes.TERMINATED`` (143)."""

    signal_name = "SIGTERM"


def signal_name(exc: BaseException) -> str:
    """``SIGTERM`` or ``SIGINT``: which signal an interrupt came from."""
    return "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"


def exit_code(exc: BaseException) -> int:
    """143 for SIGTERM (the shell's 128 + 15, what ``docker ps`` shows), 130 for Ctrl-C."""
    return exitcodes.TERMINATED if isinstance(exc, Terminated) else exitcodes.INTERRUPTED


_depth = 0
_pending: KeyboardInterrupt | None = None


def _handler(signum: int, frame: FrameType | None) -> None:
    global _pending
    exc: KeyboardInterrupt = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
    if _depth:
        _pending = _pending or exc
        return
    raise exc


@contextmanager
def handled() -> Iterator[None]:
    """SIGINT and SIGTERM raise in the main thread while inside; the previous handlers come back after.

    Outside the main thread (a test calling a command in a thread) nothing is
    installed: Python only lets the main thread set signal handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    global _pending
    previous = {s: signal.signal(s, _handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        _pending = None


@contextmanager
def deferred() -> Iterator[None]:
    """Hold an interrupt that arrives inside until the block has finished, then raise it."""
    global _depth, _pending
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
    if _depth == 0 and _pending is not None:  # not reached when the block raised: that error wins
        exc, _pending = _pending, None
        raise exc
