"""Durations as a person writes them (``12h``, ``7d``, ``1d12h``) and reads them back (``3d 4h``).

Foundation: the command line parses ``--calibration-max-age`` with it, the
calibration store words a stored result's age with it, and ``bench --list`` its budget.
"""

from __future__ import annotations

import datetime as dt
import re

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)([smhdw]))+")


def parse_duration(text: str) -> dt.timedelta:
    """``90m``, ``12h``, ``7d``, ``2w`` or a sum such as ``1d12h``, as a positive timedelta."""
    s = text.strip().lower()
    if not _DURATION.fullmatch(s):
        raise ValueError(f"{text!r} is not a duration: give a number and a unit (s, m, h, d, w), e.g. 12h, 7d, 1d12h")
    seconds = sum(float(n) * _UNITS[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)([smhdw])", s))
    if seconds <= 0:
        raise ValueError(f"{text!r} is not a positive duration (to recalibrate every time, leave --max-age out)")
    return dt.timedelta(seconds=seconds)


def format_age(age: dt.timedelta) -> str:
    """``3d 4h``, ``2h 5m``, ``40s``: the two largest units, for a person."""
    s = max(int(age.total_seconds()), 0)
    parts = [(s // 86400, "d"), (s % 86400 // 3600, "h"), (s % 3600 // 60, "m"), (s % 60, "s")]
    shown = [f"{n}{u}" for n, u in parts if n][:2]
    return " ".join(shown) or "0s"


def format_budget(seconds: float) -> str:
    """``under 1 s``, ``45 s``, ``12 min``, ``3 h 20 min``: a budget, not a measurement, so never ``0 s`` for a
    budget that is not nothing."""
    if seconds <= 0:
        return "0 s"
    if seconds < 1:
        return "under 1 s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    if minutes < 90:
        return f"{minutes:.0f} min"
    return str(dt.timedelta(seconds=round(seconds))).rsplit(":", 1)[0].replace(":", " h ", 1) + " min"
