"""What the bench tells a person once per host rather than on every run.

A fact of the host that no run changes, such as a CPU whose RAPL energy counter
a VM hides, would otherwise repeat its whole sentence (where it looked, what
to do) under every summary. The summary keeps a short count
("energy: 0 row(s) with joules per call; none for 5 row(s): no RAPL energy
counter"); the whole sentence is said the first time a run on the host meets
it, and each row's ``energy_blank`` keeps it. What was said is remembered in
the profile store, beside the host's noise prior
(``<store>/said/<device key>.json``). A new fact is said again, such as a
permission that changed or a driver that was loaded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from tileops.device import DeviceInfo
from tileops.fsutil import write_atomic
from tileops.roofline import Priced, row_energy

#: The most sentences remembered per host: a host's facts are few, and the file stays small.
REMEMBERED = 64


def said_path(device: DeviceInfo) -> Path:
    """Where this host remembers what it was told: in the profile store, as its noise prior is."""
    from tileops.profiles.store import store_dir

    return store_dir() / "said" / f"{device.key}.json"


def _topic(sentence: str) -> str:
    """What a sentence is about, its numbers aside (a window's length changes from row to row)."""
    return re.sub(r"\d+(?:\.\d+)?", "#", sentence.split(" (", 1)[0])


def energy_reasons(priced: Iterable[Priced]) -> list[str]:
    """Why the run's rows have no joules per call, each reason once, in the order met."""
    seen: dict[str, str] = {}
    for p in priced:
        r = p.record
        if r.status == "ok" and r.timing is not None and r.conditions is not None:
            why = row_energy(r).blank.get("joules_per_call")
            if why:
                seen.setdefault(_topic(why), why)
    return list(seen.values())


def not_yet_said(path: Path, sentences: Iterable[str]) -> list[str]:
    """The sentences this host has not been told yet, remembered as told from now on.

    Memory that cannot be read or written says them all: a sentence said twice is better than one never said.
    """
    try:
        said = json.loads(path.read_text(encoding="utf-8")).get("said", [])
        said = [s for s in said if isinstance(s, str)]
    except (OSError, ValueError, AttributeError):
        said = []
    new = [s for s in sentences if _topic(s) not in said]
    if new:
        try:
            kept = (said + [_topic(s) for s in new])[-REMEMBERED:]
            write_atomic(path, json.dumps({"said": kept}, indent=1) + "\n")
        except OSError:
            pass  # said now, and again next time
    return new
