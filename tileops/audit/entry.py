"""``audit.jsonl``: the audit's entries (``tileops.records.AuditEntry``) written one line at a time.

``tileops export`` and ``serve`` read these lines with the same contract
(``tileops.records.read_audit``), so the names never change; fields are only
ever added.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from collections.abc import Iterable

from tileops import fsutil
from tileops.errors import TileOpsError
from tileops.fsutil import unwritable_dir, unwritable_file
from tileops.records.files import append_line
from tileops.records import AUDIT_FILE, AUDIT_PREMISE, AuditEntry, RecordFileError, iter_jsonl, to_data

#: Every verdict, worst first. PASS: measured reads within tolerance of the declared read half.
VERDICTS: tuple[str, ...] = ("ERROR", "FAIL", "WARN", "EXEMPT", "NO-VERDICT", "SKIPPED", "PASS")
#: Verdicts that make ``tileops audit`` exit 1.
FAILING: frozenset[str] = frozenset({"FAIL", "ERROR"})

#: The premises every reading rests on (§4.5); each verdict line states them.
PREMISE = AUDIT_PREMISE

__all__ = ["AUDIT_FILE", "FAILING", "PREMISE", "VERDICTS", "AuditEntry", "append_entry", "check_out_dir", "counts",
           "entry_data", "read_entries", "start_file"]


def entry_data(entry: AuditEntry) -> dict:
    """An entry as JSON-ready data, with its derived read ratio (for people and spreadsheets)."""
    return {**to_data(entry), "read_ratio": entry.read_ratio}


def check_out_dir(out_dir: Path) -> None:
    """TileOpsError naming the file, before any row is audited, when this audit may not start its file in
    ``out_dir``: the folder or its ``audit.jsonl`` (or ``.prev``) is not this user's to write, or the
    ``audit.jsonl`` there does not read as one (a line of the wrong type, a newer schema): :func:`start_file`
    would move it over the previous one, and nothing replaces a file this tileops could not read unsaid."""
    path = out_dir / AUDIT_FILE
    why = unwritable_dir(out_dir) or unwritable_file(path) or unwritable_file(out_dir / (AUDIT_FILE + ".prev"))
    if why is not None:
        raise TileOpsError(f"cannot write the audit to {out_dir}: {why}; fix the permissions, or give another "
                           "--out; nothing was written")
    if path.is_file() and path.stat().st_size:
        try:
            read_entries(path)
        except (RecordFileError, OSError) as exc:
            raise TileOpsError(f"{exc}; this audit would move it to {AUDIT_FILE}.prev, over the previous one: move "
                               "it away, or give another --out; nothing was written") from None


def start_file(out_dir: Path) -> Path:
    """An empty ``audit.jsonl`` in ``out_dir``; a previous one is kept as ``audit.jsonl.prev``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / AUDIT_FILE
    if path.exists() and path.stat().st_size:
        fsutil.replace(path, out_dir / (AUDIT_FILE + ".prev"))
    os.close(fsutil.open_write(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    fsutil.fsync_dir(out_dir)
    return path


def append_entry(path: Path, entry: AuditEntry) -> None:
    """Append one entry as one line, fsync'd, so a crash later in the run loses nothing judged; a write that
    fails is cut back (whole lines only) and its OSError raised."""
    line = json.dumps(entry_data(entry), separators=(",", ":"), allow_nan=False) + "\n"
    append_line(path, line.encode("utf-8"))


def read_entries(path: Path) -> list[AuditEntry]:
    """The entries of an ``audit.jsonl`` (or of the one in a folder)."""
    path = path / AUDIT_FILE if path.is_dir() else path
    return list(iter_jsonl(path, AuditEntry, what="audit entry",
                           fix="fix or remove that line, or re-run `tileops audit`"))


def counts(entries: Iterable[AuditEntry]) -> dict[str, int]:
    """How many rows got each verdict, worst first, verdicts with no row left out."""
    out = dict.fromkeys(VERDICTS, 0)
    for e in entries:
        out[e.verdict] = out.get(e.verdict, 0) + 1
    return {k: n for k, n in out.items() if n}
