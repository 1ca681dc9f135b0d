"""What one priced row publishes, kept as soon as it is priced: a :class:`RowSeries`.

An exporter reading 100,000 records keeps no :class:`~tileops.records.Record` nor
:class:`~tileops.roofline.Priced`: each row becomes one named tuple of the values
and label values its series carry, at both detail levels (``lean`` and
``full``), and nothing else. Label values are grouped as the metrics write them
(``key``: op, label, dtype, backend; ``state``: tileops_row_verdict's labels;
``info``: tileops_row_info's), so rendering a row joins tuples and converts
nothing: values are floats already (``float(x)``, as the exposition writes them).

The rows of a large run are read by forked workers and sent back pickled; a
named tuple pickles several times slower than a plain tuple (docs/architecture.md,
"Figures behind the code"), so a device's rows travel as plain tuples (``to_plain`` /
``from_plain``).
"""

from __future__ import annotations

import json
from typing import NamedTuple

from tileops.roofline import GapSplit, Priced, power_state, row_energy, unstable_code

#: A short, stable rendering of shapes/params/data_terms for tileops_row_info's labels.
_dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str).encode


class RowSeries(NamedTuple):
    """One priced row's series values and label values (None: the row has no such value)."""

    key: tuple[str, str, str, str]  # op, label, dtype, backend: every row series' own labels
    device_time_s: float | None
    sol_ratio: float | None
    state: tuple[str, str, str, str, str]  # verdict, blank_reason, bound, roof, physics ("" for none)
    breaches: tuple[tuple[str, float], ...]  # (ceiling, implied / theoretical) per breached ceiling
    host_bound_ratio: float | None  # span / device-busy time on a host-bound row, else None
    # ---- full detail
    compile_s: float | None
    sol_time_s: float | None
    achieved_bytes_per_s: float | None
    achieved_flops_per_s: float | None
    span_s: float | None
    info: tuple[str, ...]  # family, roof_key, roof, profile, timer, status, shapes, params, data_terms
    # ---- lean again (issue 26; last, so the fields above keep their places)
    sol_ratio_upper: float | None = None  # the top of the SOL's 95 % interval; None without an interval
    # ---- full detail, issue 28 (:func:`conditions_series`): the gap split, energy, power state
    gap_traffic_ratio: float | None = None  # bytes moved / the formula's, where the audit measured the row
    gap_achieved_ratio: float | None = None  # the ceiling's fraction reached at the bytes moved
    energy_joules: float | None = None  # per call
    flops_per_joule: float | None = None
    bytes_per_joule: float | None = None
    power: tuple[str, str] | None = None  # (power state, ceiling basis) of a GPU row whose readings were taken
    sm_clock_min_hz: float | None = None
    power_watts: float | None = None
    # ---- lean, issue 37: why an unstable row's verdict cannot stand, one short name per reason (none otherwise)
    unstable: tuple[str, ...] = ()
    # ---- issue 39, the reference probe timed between the row's blocks: full detail per row; the lean set carries
    # the run's median per probe kind, per device (metrics.py, ``_probes``), so a row adds no lean series
    probe: tuple[str, float, float | None] | None = None  # (kind, probe ratio, the top of its 95 % interval)
    sol_state_ratio: float | None = None  # SOL against the device's state during the row: the kernel's own


def row_series(p: Priced) -> RowSeries:
    """One priced row as the exporter keeps it. Every rate and ratio the roofline tool computes is a float
    already (a quotient); the two times read from the record are made floats here."""
    r = p.record
    t = r.timing
    actual = p.actual_time_s
    compile_s = t.compile_s if t is not None else None
    span_s = t.span_s if t is not None else None
    host_bound = span_s / t.median_s if p.host_bound and t is not None and span_s is not None else None
    return _new(RowSeries, (  # the named tuple built as a tuple is: its Python __new__ costs more than the row
        (r.op, r.label, r.dtype, r.backend), None if actual is None else float(actual), p.efficiency,
        (p.verdict, p.blank_reason or "", p.bound or "", p.roof or "", p.physics or ""),
        tuple([(b.ceiling, b.ratio) for b in p.breaches]) if p.breaches else (), host_bound,
        None if compile_s is None else float(compile_s), p.sol_time_s, p.achieved_bytes_per_s,
        p.achieved_flops_per_s, None if span_s is None else float(span_s),
        (r.family, r.roof_key or "", p.roof or "", p.profile or "", t.timer if t is not None else "", r.status,
         _dumps(r.shapes) if r.shapes else "", _dumps(r.params) if r.params else "",
         _dumps(r.data_terms) if r.data_terms else ""),
        p.sol_ci[1] if p.sol_ci is not None else None, *conditions_series(p),
        tuple(dict.fromkeys(unstable_code(why) for why in p.unstable)) if p.unstable else (),
        _probe(p), p.state_efficiency))


def _probe(p: Priced) -> tuple[str, float, float | None] | None:
    """The device's state during the row as the probe read it, or None where the row carries no probe."""
    if p.probe_ratio is None or p.probe_kind is None:
        return None
    return (p.probe_kind, float(p.probe_ratio), None if p.probe_ratio_ci is None else float(p.probe_ratio_ci[1]))


def conditions_series(p: Priced) -> tuple:
    """A row's issue-28 values, in :class:`RowSeries` order: the gap split, energy per call, power state."""
    r = p.record
    g = p.gap
    split = (g.traffic_ratio, g.achieved) if isinstance(g, GapSplit) else (None, None)
    energy: tuple[float | None, float | None, float | None] = (None, None, None)
    if r.conditions is not None:
        e = row_energy(r)
        energy = (e.joules_per_call, e.flop_per_joule, e.bytes_per_joule)
    state = power_state(r)
    gpu = r.conditions.gpu if r.conditions is not None else None
    power: tuple[tuple[str, str] | None, float | None, float | None] = (None, None, None)
    if state is not None and gpu is not None:
        power = ((state, p.ceiling_basis or ""), None if gpu.sm_mhz_min is None else gpu.sm_mhz_min * 1e6,
                 None if gpu.power_w is None else float(gpu.power_w))
    return split + energy + power


_new = tuple.__new__


def to_plain(rows: list[RowSeries]) -> list[tuple]:
    """Rows as plain tuples, to pickle (a worker's rows on their way back)."""
    return [tuple(row) for row in rows]


def from_plain(rows: list[tuple]) -> list[RowSeries]:
    """:func:`to_plain`'s tuples as rows again (without calling the named tuple's Python ``__new__``)."""
    return [_new(RowSeries, row) for row in rows]
