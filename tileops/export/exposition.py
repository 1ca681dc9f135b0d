"""The Prometheus text exposition format (0.0.4), written fast.

prometheus_client's ``generate_latest`` validates and escapes every label
*name* of every sample, which at 10,000 series is several times a scrape's
budget (``benchmarks/exposition.py``; docs/architecture.md, "Figures behind the code"). Our
label names are fixed by the catalogue, so they are checked once (in the
catalogue's test) and written as prepared prefixes here; only label *values*
are escaped per sample. A test parses this output with prometheus_client's
parser and requires it to equal ``generate_latest`` of the same metrics.
"""

from __future__ import annotations

import math
from operator import add
from typing import Protocol
from collections.abc import Iterable, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Spec(Protocol):
    """A metric's name, help text and label names (``tileops.export.metrics.MetricSpec``), read only."""

    @property
    def name(self) -> str: ...

    @property
    def help(self) -> str: ...

    @property
    def labels(self) -> tuple[str, ...]: ...


def _escape_value(v: str) -> str:
    if "\\" in v or "\n" in v or '"' in v:
        return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return v


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def format_value(v: float) -> str:
    """A sample value as Prometheus reads it: ``+Inf``, ``-Inf``, ``NaN``, else Python's shortest repr."""
    if math.isfinite(v):
        return repr(v)
    if math.isnan(v):
        return "NaN"
    return "+Inf" if v > 0 else "-Inf"


def format_samples(items: Iterable[tuple[_Spec, Sequence[tuple[tuple[str, ...], float]]]]) -> bytes:
    """``# HELP`` / ``# TYPE gauge`` and one line per sample, for each (spec, samples) pair."""
    out: list[str] = []
    append = out.append
    # A row's label set repeats across a dozen metrics: render each (names, values) once.
    cache: dict[tuple[str, ...], dict[tuple[str, ...], str]] = {}
    for spec, rows in items:
        name = spec.name
        append(f"# HELP {name} {_escape_help(spec.help)}\n# TYPE {name} gauge\n")
        names = tuple(spec.labels)
        keys = [f'{label}="' for label in names]
        bodies = cache.setdefault(names, {})
        for labels, value in rows:
            body = bodies.get(labels)
            if body is None:
                if not names:
                    body = ""
                else:
                    raw = "".join(labels)  # one scan decides whether any value needs escaping
                    vals = [_escape_value(v) for v in labels] if ("\\" in raw or "\n" in raw or '"' in raw) else labels
                    body = "{" + '",'.join(map(add, keys, vals)) + '"}'
                bodies[labels] = body
            # value - value is 0 for every finite float, NaN for inf and NaN
            append(f"{name}{body} {repr(value) if value - value == 0 else format_value(value)}\n")
    return "".join(out).encode("utf-8")
