"""Argument types for numbers and ports: a bad value is exit 2 with a sentence, from argparse itself.

``float("nan")``, ``float("inf")`` and ``-1`` all parse as floats; a timeout
of ``nan`` or ``-1`` makes every row time out, and ``inf`` overflows the
socket layer. Each flag says what it accepts, so argparse refuses the rest
before any work starts (``tileops bench: error: argument --row-timeout: ...``).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from collections.abc import Callable

#: The longest wait any flag accepts: about 11.6 days, past any row or push, below what timers can hold.
MAX_SECONDS = 1e6


def _number(text: str, what: str, example: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, e.g. {example}; got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected {what}, e.g. {example}; got {text!r} (not a finite number)")
    return value


def seconds(*, allow_zero: bool = False, example: str = "60") -> Callable[[str], float]:
    """A duration in seconds: finite, positive (or zero when allowed), at most MAX_SECONDS."""
    what = ("a number of seconds >= 0" if allow_zero else "a positive number of seconds") + f" up to {MAX_SECONDS:g}"

    def parse(text: str) -> float:
        value = _number(text, what, example)
        if value < 0 or (value == 0 and not allow_zero) or value > MAX_SECONDS:
            raise argparse.ArgumentTypeError(f"expected {what}, e.g. {example}; got {text!r}")
        return value
    parse.__name__ = "seconds"  # argparse names the type in some messages
    return parse


def fraction(text: str) -> float:
    """A non-negative finite fraction (0.10 = 10 %)."""
    value = _number(text, "a fraction >= 0 (0.10 = 10 %)", "0.10")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a fraction >= 0 (0.10 = 10 %), e.g. 0.10; got {text!r}")
    return value


def precision(text: str) -> float:
    """A relative precision: ``2%`` or ``0.02``, above 0 and at most 100 %."""
    what = "a precision above 0 and at most 100 %, as 2% or 0.02"
    value = _number(text[:-1] if text.endswith("%") else text, what, "2%")
    value = value / 100 if text.endswith("%") else value
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected {what}; got {text!r}")
    return value


def samples(text: str) -> int:
    """A sample count, 1 to 100000."""
    what = "a whole number of samples from 1 to 100000"
    return _whole(text, 1, 100_000, what, what)


def positive(text: str) -> float:
    """A positive finite number (a clock in GHz, a factor)."""
    value = _number(text, "a positive number", "3.5")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, e.g. 3.5; got {text!r}")
    return value


def _whole(text: str, low: int, high: int, expected: str, out_of_range: str) -> int:
    """A whole number in [low, high]; ``expected`` words a non-number, ``out_of_range`` a number outside."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}; got {text!r}") from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"expected {out_of_range}; got {text!r}")
    return value


def threads(text: str) -> int:
    """``--threads``: a whole number of threads, at least 1 (the bench refuses more than the CPUs this process
    may use, naming them, before anything is written)."""
    what = "a whole number of threads from 1 to the CPUs this process may use"
    return _whole(text, 1, 1 << 16, what, what)


def count(text: str) -> int:
    """A whole number from 1 to 1000 (attempts, repetitions)."""
    what = "a whole number from 1 to 1000"
    return _whole(text, 1, 1000, what, what)


def port(text: str) -> int:
    """A TCP port, 0-65535 (0: pick a free one)."""
    return _whole(text, 0, 65535, "a TCP port from 0 to 65535", "a TCP port from 0 to 65535 (0 picks a free one)")


def profile_store(text: str) -> Path:
    """``--profile-dir``: a directory, or a path where one will be made; an existing file is refused (read-only
    commands would otherwise find no profiles in it and price every row blank without a word)."""
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text} is a file, not a directory: the profile store is a folder of profile YAML files; give a "
            "directory (calibrate creates it when missing), or leave --profile-dir out for $TILEOPS_PROFILE_DIR "
            "or the default store")
    return path
