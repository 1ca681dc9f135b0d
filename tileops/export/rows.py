"""What one priced row publishes, reduced to a plain tuple as soon as it is priced.

An exporter reading 100,000 records keeps no :class:`~tileops.records.Record` nor
:class:`~tileops.roofline.Priced`: each row becomes one tuple of the values and
label values its series carry, at both detail levels (``lean`` and ``full``), and
nothing else. A plain tuple because the rows of a large run are read by forked
workers and sent back pickled: a tuple of strings and floats pickles about five
times faster than a named tuple (or a dataclass) of the same fields. Values are
floats already (``float(x)``, as the exposition writes them), so rendering a row
converts nothing.

The fields, by index (``metrics._rows`` reads them in this order)::

    0-3    op, label, dtype, backend                    the row's labels
    4-5    device time (s), SOL ratio                   None when the row has none
    6-10   verdict, blank_reason, bound, roof, physics  tileops_row_verdict's labels ("" for none)
    11     breaches: ((ceiling, ratio), ...)
    12     host-bound ratio: span / device-busy time on a host-bound row, else None
    ---- full detail
    13-17  compile s, SOL time (s), achieved B/s, achieved FLOP/s, span (s)
    18-26  family, roof_key, roof, profile, timer, status, shapes, params, data_terms (tileops_row_info)
"""

from __future__ import annotations

import json

from tileops.roofline import Priced

#: Where the full-detail fields start.
FULL = 13


#: A short, stable rendering of shapes/params/data_terms for tileops_row_info's labels.
_dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str).encode


def _physics(p: Priced) -> str:
    """``Priced.physics`` as a label ("" for none), without a generator per row."""
    if p.breaches:
        return "breach"
    if not p.checks:
        return ""
    for c in p.checks:
        if c.not_judged is not None:
            return "not-judged"
    return "held"


def row_of(p: Priced) -> tuple:
    """One priced row as the exporter keeps it (the layout above). Every rate and ratio the roofline tool
    computes is a float already (a quotient); the two times read from the record are made floats here."""
    r = p.record
    t = r.timing
    actual = p.actual_time_s
    compile_s = t.compile_s if t is not None else None
    span_s = t.span_s if t is not None else None
    host_bound = span_s / t.median_s if p.host_bound else None  # type: ignore[operator,union-attr]
    return (r.op, r.label, r.dtype, r.backend,
            None if actual is None else float(actual), p.efficiency,
            p.verdict, p.blank_reason or "", p.bound or "", p.roof or "", _physics(p),
            tuple([(b.ceiling, b.ratio) for b in p.breaches]) if p.breaches else (),
            host_bound,
            None if compile_s is None else float(compile_s), p.sol_time_s, p.achieved_bytes_per_s,
            p.achieved_flops_per_s, None if span_s is None else float(span_s), r.family, r.roof_key or "", p.roof or "", p.profile or "",
            t.timer if t is not None else "", r.status,
            _dumps(r.shapes) if r.shapes else "", _dumps(r.params) if r.params else "",
            _dumps(r.data_terms) if r.data_terms else "")
