"""Read, price and report a run of any size in one pass, in parallel where the machine allows.

Records stream from the files (``tileops.records.iter_records``) through the
roofline tool (``price_iter``) into *sinks*: objects that take one priced row
at a time (``add``) and keep only what their output needs — a report's text,
the summary's counts (``RunFacts``), a baseline's per-row times
(``TimeIndex``). No record outlives its row.

Parsing JSON is most of the work, so a large file is cut at line starts into
one span per CPU (``jsonl_spans``) and each span is read by a forked worker
with its own sinks, handed back through a file (``_work``); the parent merges
them in file order, so the output is
the one a single pass gives, and a bad line anywhere still stops the command
with its file:line before anything is written.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Any, Protocol
from collections.abc import Callable, Iterable, Sequence

from tileops import fsutil
from tileops.profiles import ProfileChooser
from tileops.records import iter_records, jsonl_spans, read_audit, resolve_records_path
from tileops.roofline import Priced, audit_index, price_iter

#: A span smaller than this is not worth a process (start-up and sending the result back).
MIN_SPAN_BYTES = 4 << 20


class Sink(Protocol):
    """Takes one priced row at a time, and merges a sink of its own kind filled from a later part of the run."""

    def add(self, p: Priced) -> None: ...

    def merge(self, later: Any) -> None: ...  # Any: each sink merges its own kind (a RunTally, a Report, ...)


Chunk = tuple[Path, "tuple[int, int] | None"]
#: Each records file's audit entries by row key (``audit.jsonl`` beside it), so its rows' gaps are split.
Audits = dict[Path, dict[tuple[str, str, str, str], list[Any]]]


def default_jobs() -> int:
    """The CPUs this process may run on (at most 8)."""
    try:
        return max(1, min(8, len(os.sched_getaffinity(0))))
    except AttributeError:  # not Linux
        return max(1, min(8, os.cpu_count() or 1))


def _fill(chunk: Chunk, chooser: ProfileChooser, sinks: Sequence[Sink], audits: Audits | None = None
          ) -> Sequence[Sink]:
    path, span = chunk
    adds = [s.add for s in sinks]
    for p in price_iter(iter_records(path, span=span), chooser, (audits or {}).get(path)):
        for add in adds:
            add(p)
    return sinks


# What a forked worker needs, inherited from the parent rather than sent to it.
_JOB: tuple[ProfileChooser, Callable[[], Sequence[Sink]], Audits] | None = None


def _work(job: tuple[Chunk, str]) -> Sequence[Sink] | str:
    """A worker's span read into its sinks, handed back through a file (its path), else through the pipe.

    Through the pipe, the parent takes a large result in pieces, one each time its
    own reading lets go of the interpreter lock: slow for the tens of MB a JSON report
    of a large run holds (docs/architecture.md, "Figures behind the code"). Read back from a
    file it is one system call.
    """
    assert _JOB is not None
    chooser, make, audits = _JOB
    chunk, out = job
    sinks = _fill(chunk, chooser, make(), audits)
    try:
        fd = fsutil.open_write(out)
        try:
            fsutil.write_all(fd, pickle.dumps(sinks, protocol=pickle.HIGHEST_PROTOCOL), out)
        finally:
            os.close(fd)
    except OSError:  # no room for it: the pipe, slower
        return sinks
    return out


def _received(part: Sequence[Sink] | str) -> Sequence[Sink]:
    if not isinstance(part, str):
        return part
    with open(part, "rb") as f:
        sinks = pickle.load(f)
    os.unlink(part)
    return sinks


def read_priced(paths: Iterable[Path | str], chooser: ProfileChooser, make: Callable[[], Sequence[Sink]], *,
                jobs: int = 1, min_span: int = MIN_SPAN_BYTES) -> Sequence[Any]:
    """Price every record of ``paths`` (run directories or records files) into the sinks ``make()`` returns.

    With ``jobs`` > 1 and a file of more than ``min_span`` bytes, its spans are
    read by this process and up to ``jobs - 1`` forked ones, each into its own
    sinks, merged in order. Raises what reading raises (FileNotFoundError,
    RecordFileError) for the first bad line in file order. Where a run directory holds ``audit.jsonl``
    (``tileops audit --out RUN_DIR``), its rows' SOL gaps are split by their entries (``Priced.gap``).
    """
    files = [resolve_records_path(p) for p in paths]
    audits: Audits = {f: audit_index(read_audit(f.parent)) for f in files}
    parallel = jobs > 1 and "fork" in multiprocessing.get_all_start_methods()
    chunks: list[Chunk] = []
    for f in files:
        spans = jsonl_spans(f, jobs, min_bytes=min_span) if parallel else []
        chunks += [(f, span) for span in spans] if len(spans) > 1 else [(f, None)]
    if not parallel or len(chunks) == 1:
        sinks = make()
        for chunk in chunks:
            _fill(chunk, chooser, sinks, audits)
        return sinks
    global _JOB
    _JOB = (chooser, make, audits)
    parts = tempfile.mkdtemp(prefix="tileops-parts-")
    try:
        with multiprocessing.get_context("fork").Pool(min(jobs, len(chunks)) - 1 or 1) as pool:
            work = [(chunk, os.path.join(parts, f"{i}.pickle")) for i, chunk in enumerate(chunks[1:])]
            later = pool.imap(_work, work)  # forked now, with the job; results come back in order
            sinks = _fill(chunks[0], chooser, make(), audits)  # this process reads the first span meanwhile
            for part in later:  # the first failure raised is the first in the files
                for mine, theirs in zip(sinks, _received(part)):
                    mine.merge(theirs)
    finally:
        _JOB = None
        shutil.rmtree(parts, ignore_errors=True)
    return sinks
