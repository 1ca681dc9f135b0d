"""Each eager row's first visit, kept on disk until the second pass has settled it: what a resumed run pools.

Why. The second pass pools a row's two visits from their blocks of samples
(``revisit.settle``), and a record keeps only their summary. A run stopped
before its second pass ended (Ctrl-C, SIGTERM, a full disk) would otherwise
resume as "0 to run" and never get the pass: its rows would keep the one-visit
interval of the host's prior, and ``run.json`` no drift between passes. So as
each eager row's record is appended, its first visit's blocks are appended to
``first-visits.jsonl`` beside it (one JSON line: the row's key and its blocks,
every sample as Python writes a float, so they read back exactly); a resumed
run reads them back for the rows whose second visit is owed, and the file is
removed once the pass has rewritten the records.

A line cut short by a crash is passed over (that row then keeps its first
visit alone), and a resumed run cuts it off before appending. Standard library
only (spec §5.2).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from tileops import fsutil
from tileops.records.files import append_line

#: The first visits' file, in the run directory while a second pass is owed.
FIRST_VISITS_FILE = "first-visits.jsonl"

Key = tuple[str, str, str, str]
Blocks = list[list[float]]


def append_first_visit(path: Path, key: Key, blocks: Sequence[Sequence[float]]) -> None:
    """Append one row's first visit as one line, then fsync (as its record was); OSError when it cannot be
    written, the file then cut back to whole lines."""
    line = (json.dumps({"key": list(key), "blocks": [list(map(float, b)) for b in blocks]},
                       separators=(",", ":")) + "\n").encode("utf-8")
    append_line(path, line)


def read_first_visits(path: Path, *, repair: bool = False) -> dict[Key, Blocks]:
    """Each row's newest first visit in ``path`` (none when there is no file). A line that is not one (cut short
    by a crash) is passed over; with ``repair`` (a resumed run, under the run's lock) a torn last line is cut
    off, so the next append starts a line of its own."""
    if not path.is_file():
        return {}
    raw = path.read_bytes()
    if repair and raw and not raw.endswith(b"\n"):
        whole = raw.rfind(b"\n") + 1
        fd = fsutil.open_write(path, os.O_WRONLY, 0o644)
        try:
            fsutil.truncate(fd, whole, path)
        finally:
            os.close(fd)
        raw = raw[:whole]
    out: dict[Key, Blocks] = {}
    for line in raw.split(b"\n"):
        visit = _parse(line)
        if visit is not None:
            out[visit[0]] = visit[1]
    return out


def _parse(line: bytes) -> tuple[Key, Blocks] | None:
    try:
        data = json.loads(line)
        key = tuple(str(k) for k in data["key"])
        blocks = [[float(x) for x in b] for b in data["blocks"]]
    except (ValueError, TypeError, KeyError):
        return None
    if len(key) != 4 or not blocks or not all(b and all(math.isfinite(x) and x > 0 for x in b) for b in blocks):
        return None
    return (key[0], key[1], key[2], key[3]), blocks


def remove_first_visits(run_dir: Path) -> None:
    """Remove the file once the second pass has rewritten the records (nothing is owed any more)."""
    try:
        fsutil.unlink(Path(run_dir) / FIRST_VISITS_FILE)
    except OSError:
        pass  # a read-only leftover: a resumed run finds nothing owed (run.json holds the pass)


#: What run.json's ``host_noise`` will say once the second pass's rewrite of the records is in: written before the
#: rewrite, removed once run.json says it. A run killed between the two resumes with it (:func:`settled_pass`).
SETTLED_PASS_FILE = "second-pass.json"


def write_settled_pass(run_dir: Path, host_noise: dict[str, object], settled: Sequence[Key]) -> None:
    """Keep the pass's figures and the rows it settled (each then holds two visits) beside the records, before
    they are rewritten: the rewrite and run.json are two files, and a kill between them lost the figures."""
    fsutil.write_atomic(Path(run_dir) / SETTLED_PASS_FILE,
                 json.dumps({"host_noise": host_noise, "settled": [list(k) for k in settled]}, default=str))


def settled_pass(run_dir: Path, visits: Mapping[Key, int]) -> dict[str, object] | None:
    """The pass's figures when the records were rewritten before the run stopped (every row it settled holds two
    visits now: ``visits``, each row's count in the records); None when there is nothing to take (the rewrite
    did not happen, so the pass is owed again, or the file is not one we wrote)."""
    try:  # a regular file of bounded size (a FIFO in its place would hang the resume): FileRefused is an OSError
        data = json.loads(fsutil.read_regular(Path(run_dir) / SETTLED_PASS_FILE, 1 << 22))
        noise = data["host_noise"]
        settled = [(str(a), str(b), str(c), str(d)) for a, b, c, d in data["settled"]]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if not isinstance(noise, dict) or not settled or any(visits.get(k) != 2 for k in settled):
        return None
    return noise


def remove_settled_pass(run_dir: Path) -> None:
    """Remove the file once run.json holds the pass's figures."""
    try:
        fsutil.unlink(Path(run_dir) / SETTLED_PASS_FILE)
    except OSError:
        pass  # a leftover is read only by a resumed run whose run.json lacks the figures
