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
    ---- full detail
    12-15  compile s, SOL time (s), achieved B/s, achieved FLOP/s
    16-23  family, roof_key, roof, profile, timer, status, shapes, params, data_terms (tileops_row_info)
"""

from __future__ import annotations

import json

from tileops.roofline import Priced

#: Where the full-detail fields start.
FULL = 12


def compact(obj: object) -> str:
    """A short, stable rendering of shapes/params/data_terms for an _info label."""
    if not obj:
        return ""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def row_of(p: Priced) -> tuple:
    """One priced row as the exporter keeps it (the layout above)."""
    r = p.record
    t = r.timing
    actual, eff, sol = p.actual_time_s, p.efficiency, p.sol_time_s
    bps, fps = p.achieved_bytes_per_s, p.achieved_flops_per_s
    compile_s = t.compile_s if t is not None else None
    return (r.op, r.label, r.dtype, r.backend,
            None if actual is None else float(actual), None if eff is None else float(eff),
            p.verdict, p.blank_reason or "", p.bound or "", p.roof or "", p.physics or "",
            tuple((b.ceiling, float(b.ratio)) for b in p.breaches) if p.breaches else (),
            None if compile_s is None else float(compile_s), None if sol is None else float(sol),
            None if bps is None else float(bps), None if fps is None else float(fps),
            r.family, r.roof_key or "", p.roof or "", p.profile or "", t.timer if t is not None else "", r.status,
            compact(r.shapes), compact(r.params), compact(r.data_terms))
