"""Exceptions shared across the package, and the one way an error names a value that names nothing."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

#: Up to this many valid values, an error lists them all; above, it names the likely ones, the count and the
#: command that lists them (``--label nosuch`` listed every one of about 110 labels).
LIST_AT_MOST = 12


def unknown_value(value: str, known: Iterable[str], *, noun: str, lister: str, likely: Iterable[str] = (),
                  listed_as: str = "valid", at_most: int = LIST_AT_MOST) -> str:
    """What follows "X matches nothing": the likely values (``likely`` first, then the close spellings, then those
    containing ``value``), and every valid one when they are few, else their count and ``lister``, the command
    that shows them (``; did you mean relu?; 34 ops: `tileops ops` lists them``); ``at_most`` moves that limit."""
    names = sorted(set(known))
    lower = {v.lower(): v for v in names}  # case is no part of a likely name (h200 for H200)
    close = [v for v in likely if v in names] \
        or [lower[v] for v in difflib.get_close_matches(value.lower(), lower, n=3, cutoff=0.6)] \
        or [v for v in names if value and value.lower() in v.lower()][:3]
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    if len(names) <= at_most:
        return f"{hint}; {listed_as}: {', '.join(names) or '(none)'}"
    return f"{hint}; {len(names)} {noun}: `{lister}` lists them"


class TileOpsError(Exception):
    """Base for errors the CLI reports as a clear message rather than a traceback, with ``exit_code``
    (``tileops.exitcodes``: 2, bad input, unless a subclass says otherwise)."""

    exit_code: int = 2  # tileops.exitcodes.USAGE


class OpNotAvailableError(TileOpsError):
    """The op cannot answer this question for this call: no completed call yet, or a
    value-reading formula asked about a call on ``meta`` tensors (§4.4.4)."""


class SignatureError(TileOpsError, ValueError):
    """A call does not fit the op's signature: names the op, the tensor and what was expected."""


class ManifestError(TileOpsError):
    """The manifest cannot serve a request (unknown op, unclean entry)."""


class BackendUnavailableError(TileOpsError):
    """This backend cannot run this call here (no such backend for the op, a device, dtype or shape
    its implementation does not cover, a missing dependency): names the op, the backend and why."""


class CompileError(TileOpsError):
    """A backend's compilation failed (torch.compile, a Triton kernel's JIT): names the op and the cause."""
