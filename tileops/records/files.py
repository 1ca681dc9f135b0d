"""Files of the record contract: ``records.jsonl`` appended row by row, ``run.json``, ``audit.jsonl``.

Built for files of 100,000 records: each line is read by the one line reader
(``tileops.records.decode.line_decoder``: msgspec's mirror where installed,
the standard decoder for every line it declines), ``iter_jsonl(span=...)``
reads one part of a file (``jsonl_spans``) so a large file can be read by
several processes, and a writer killed mid-line leaves a torn tail that readers
skip and a resumed run sets aside. Errors name the file, the line and the field.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar
from collections.abc import Iterable, Iterator, Mapping

from tileops import fsutil
from tileops.fsutil import FileRefused, open_regular, read_regular, write_atomic
from tileops.records.contract import AUDIT_FILE, RECORDS_FILE, RUN_FILE, RUN_FILE_MAX_BYTES, AuditEntry, Record, \
    RunInfo, utcnow
from tileops.records.decode import Invalid, RecordFileError, line_decoder, located, parse_line, to_data, to_json

T = TypeVar("T")

def iter_jsonl(path: Path, cls: type[T], *, what: str, fix: str,
               span: tuple[int, int] | None = None, fast_json: bool = True) -> Iterator[T]:
    """Objects of one JSON Lines file, streamed.

    A torn last line — one without its newline, which is what a writer killed
    mid-line leaves — is skipped (``torn_tail`` reports it); any other line that
    is not the contract raises RecordFileError naming file:line and the field.
    ``span``: only the lines starting in this byte range (from :func:`jsonl_spans`),
    still numbered as lines of the whole file. ``fast_json``: read with msgspec where it is installed
    (``tileops.records.decode.line_decoder``); False, the standard library alone (the benchmark layer, §5.2).
    """
    read = line_decoder(cls, fast=fast_json)
    try:
        f = open_regular(path)
    except FileNotFoundError:
        raise
    except OSError as exc:  # FileRefused (a FIFO, a device), permissions
        raise RecordFileError(str(exc) if isinstance(exc, FileRefused) else
                              f"{path}: cannot read ({exc.strerror or exc}); {fix}") from None
    with f:
        first, pos, end = 1, 0, None
        if span is not None:
            pos, end = span
            first += _newlines_before(f, pos)
            f.seek(pos)
        for i, raw in enumerate(f, first):
            if end is not None:
                if pos >= end:
                    return
                pos += len(raw)
            if raw[-1:] != b"\n":
                return  # the torn tail of an interrupted write: not a record yet
            try:
                obj = read(raw)
            except UnicodeDecodeError:
                raise RecordFileError(f"{path}:{i}: not UTF-8 text; {fix}") from None
            except Invalid as exc:
                raise located(path, i, exc, what, fix) from None
            if obj is not None:
                yield obj


def _newlines_before(f: Any, offset: int) -> int:
    f.seek(0)
    count = 0
    while offset > 0:
        block = f.read(min(offset, 1 << 20))
        if not block:
            break
        count += block.count(b"\n")
        offset -= len(block)
    return count


def jsonl_spans(path: Path | str, parts: int, *, min_bytes: int = 1 << 22) -> list[tuple[int, int]]:
    """Byte ranges splitting a JSON Lines file into up to ``parts`` pieces of at least ``min_bytes``,
    each starting at the start of a line (to read a large file in parallel with ``iter_jsonl(span=...)``)."""
    try:
        f = open_regular(path)  # a FIFO would block this open forever: refused with its name instead
    except FileNotFoundError:
        raise
    except OSError as exc:  # FileRefused (a FIFO, a device), permissions
        raise RecordFileError(str(exc) if isinstance(exc, FileRefused) else
                              f"{path}: cannot read ({exc.strerror or exc})") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        n = max(1, min(parts, size // max(1, min_bytes)))
        cuts = [0]
        for k in range(1, n):
            f.seek(size * k // n)
            f.readline()  # on to the start of the next line
            pos = f.tell()
            if cuts[-1] < pos < size:
                cuts.append(pos)
    cuts.append(size)
    return list(zip(cuts, cuts[1:]))


def torn_tail(path: Path) -> bytes | None:
    """The bytes after the last newline of a JSON Lines file (an interrupted write), or None."""
    try:
        f = open_regular(path)
    except FileNotFoundError:
        return None
    except FileRefused as exc:
        raise RecordFileError(str(exc)) from None
    try:
        with f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            if size == 0:
                return None
            pos = size
            chunk = b""
            while pos > 0:
                step = min(65536, pos)
                pos -= step
                f.seek(pos)
                chunk = f.read(step) + chunk
                nl = chunk.rfind(b"\n")
                if nl >= 0:
                    tail = chunk[nl + 1:]
                    return tail or None
            return chunk or None
    except OSError as exc:
        raise RecordFileError(f"{path}: cannot read ({exc.strerror or exc})") from None


def resolve_records_path(path: Path | str) -> Path:
    """``records.jsonl`` of a run directory, or the file itself; FileNotFoundError naming the fix."""
    path = Path(path)
    if path.is_dir():
        path = path / RECORDS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path}: no records file (run `tileops bench --out DIR` first)")
    return path  # anything but a regular file is refused, with its name, when it is opened


_RECORD_FIX = "fix or remove that line, or re-run the bench for that row"


def iter_records(path: Path | str, *, span: tuple[int, int] | None = None,
                 fast_json: bool = True) -> Iterator[Record]:
    """The records of a run directory or records file, streamed (see :func:`iter_jsonl`)."""
    return iter_jsonl(resolve_records_path(path), Record, what="record", fix=_RECORD_FIX, span=span,
                      fast_json=fast_json)


@contextlib.contextmanager
def collecting_rarely() -> Iterator[None]:
    """While reading a whole run, let the cyclic garbage collector run rarely.

    Records are plain data without reference cycles, yet each full pass of the
    collector walks every live object: with a run of 100,000 records held (the
    exporter holds one) the passes were a large share of reading and pricing it
    (docs/architecture.md, "Figures behind the code"). Inside this block the objects alive at its start (the imports)
    are out of the collector's way and the first generation is collected every
    100,000 allocations instead of 700; both are restored on the way out.

    Everything frozen is unfrozen on the way out, whoever froze it: the collector cannot unfreeze only
    ours, and an object left frozen is never collected (a long-lived reader, ``tileops serve``, would keep
    every cycle alive at each read). Unfreezing is only ever slower, never wrong. Python 3.12 starts with
    objects already in the permanent generation (375 on the device's 3.12), so an earlier rule that left
    "someone else's" frozen objects frozen left all of ours frozen there.
    """
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def load_records(paths: Iterable[Path | str]) -> list[Record]:
    out: list[Record] = []
    for p in paths:
        out.extend(iter_records(p))
    return out


def parse_record(text: str, where: str = "<record>") -> Record:
    """One record from one JSON text (a worker's reply, a test)."""
    try:
        return parse_line(Record, text)
    except Invalid as exc:
        raise RecordFileError(f"{where}: not a valid record ({'.'.join(exc.path)}: {exc.message})") from None


def append_record(path: Path, record: Record) -> None:
    """Append one record as one whole line (one write, unless the disk cuts it short), then fsync.

    A write that fails (a full disk, a quota, an I/O error) or comes up short is
    undone: the file is cut back to where it was, so it holds whole lines only,
    and the OSError is raised. Only a crash between the write and the cut can
    leave a torn last line without its newline, which readers skip and a resumed
    run sets aside (:func:`set_aside_torn_tail`).
    """
    append_line(path, (to_json(record) + "\n").encode("utf-8"))


def append_line(path: Path, line: bytes) -> None:
    """Append ``line`` (one whole line, its newline included) and fsync; a write that fails or comes up short is
    undone (the file cut back to where it was, whole lines only) and the OSError raised. Only a crash between
    the write and the cut leaves a torn tail, which readers skip and a resumed run sets aside."""
    fd = fsutil.open_write(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.fstat(fd).st_size
        try:
            fsutil.write_all(fd, line, path)  # a short write goes on until the kernel says why it cannot
            fsutil.fsync(fd, path)
        except OSError:
            try:
                fsutil.truncate(fd, start, path)
            except OSError:
                pass  # the torn tail stays; readers skip it and --resume sets it aside
            raise
    finally:
        os.close(fd)


def replace_records(path: Path, updated: Mapping[tuple[str, str, str, str], Record]) -> None:
    """Put each of ``updated`` in place of the last record of its key, in one atomic rewrite of the file.

    A sweep's second pass refines rows its first pass already wrote (their intervals, from both visits): the
    file then holds one record per row, as every reader expects. Every other line is kept byte for byte; the
    new file is written beside the old one, fsync'd and renamed over it, so a crash or a full disk leaves the
    first pass's file whole (the OSError is raised). ValueError when a key has no record to replace.
    """
    lines = Path(path).read_bytes().split(b"\n")
    last: dict[tuple[str, str, str, str], int] = {}
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            key = parse_record(line.decode("utf-8"), f"{path}:{i + 1}").key
        except (RecordFileError, UnicodeDecodeError):
            continue  # not ours to judge here: kept as it is
        if key in updated:
            last[key] = i
    missing = [" ".join(k) for k in updated if k not in last]
    if missing:
        raise ValueError(f"{path}: no record to replace for {', '.join(missing)}")
    for key, i in last.items():
        lines[i] = to_json(updated[key]).encode("utf-8")
    write_atomic(path, b"\n".join(lines))


def set_aside_torn_tail(path: Path, now: datetime | None = None) -> Path | None:
    """Move a torn last line (an interrupted write) out of a JSON Lines file, before appending to it.

    Appending after a fragment would glue the next record onto it and lose both;
    so the fragment is copied, fsync'd, to ``<file>.torn-<UTC time>`` beside the
    file, and only then cut off. Returns that file, or None when the file ends
    whole. Call it only while holding the run's lock.
    """
    tail = torn_tail(path)
    if tail is None:
        return None
    stamp = (now or utcnow()).strftime("%Y%m%dT%H%M%S.%fZ")
    aside = path.with_name(f"{path.name}.torn-{stamp}")
    fd = fsutil.open_write(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        fsutil.write_all(fd, tail, aside)
        fsutil.fsync(fd, aside)
    except OSError:
        aside.unlink(missing_ok=True)  # the fragment is still where it was: the next resume tries again
        raise
    finally:
        os.close(fd)
    size = path.stat().st_size
    fd = fsutil.open_write(path, os.O_WRONLY, 0o644)
    try:
        fsutil.truncate(fd, size - len(tail), path)
        fsutil.fsync(fd, path)
    finally:
        os.close(fd)
    return aside


def write_run_info(run_dir: Path, info: RunInfo) -> None:
    """Write run.json atomically: a reader never sees half of it."""
    write_atomic(Path(run_dir) / RUN_FILE, json.dumps(to_data(info), indent=2, allow_nan=False) + "\n")


def read_run_info(run_dir: Path | str) -> RunInfo | None:
    """The run file of a run directory, or None when there is none; RecordFileError when it is bad."""
    p = Path(run_dir) / RUN_FILE
    fix = "re-run the bench, or remove the file"
    try:
        raw = read_regular(p, RUN_FILE_MAX_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:  # FileRefused, permissions
        raise RecordFileError(str(exc) if isinstance(exc, FileRefused) else
                              f"{p}: cannot read the run file ({exc.strerror or exc})") from None
    try:
        return parse_line(RunInfo, raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise RecordFileError(f"{p}: not UTF-8 text; {fix}") from None
    except Invalid as exc:
        raise located(p, None, exc, "run file", fix) from None


def read_audit(run_dir: Path | str) -> list[AuditEntry]:
    """``audit.jsonl`` beside the records, when the audit ran."""
    p = Path(run_dir) / AUDIT_FILE
    if not p.exists():
        return []
    return list(iter_jsonl(p, AuditEntry, what="audit entry",
                           fix="fix or remove that line, or re-run `tileops audit`"))
