"""Each row's own uncertainty, from its visits, pooled only with rows of its kind and calibrated by this host's own
reruns.

The model. A visit's centre (``tileops.bench.interval.Visit``, log space) is

    c = mu + H_pass + B_visit + e

``mu`` the row's level, ``e`` the visit's own error (its blocks say how big: the
visit's se), ``B_visit`` the row's offset in that visit (the process's page
placement, the host's state during those seconds: on the development VM
memory-bound rows move 11–27 % (sd) from process to process, compute-bound rows
2–9 %), and ``H_pass`` an offset shared by the rows of a kind in a pass (a host
that got busier, a worker process that landed badly). The sweep visits each row
twice, each pass in a worker process of its own, so B includes the per-process
part: between visits and between processes are one component here, by design.

From a sweep's pairs of visits (:func:`pool`), per kind of row (``memory`` or
``compute``: rows that behave alike, never one sigma for all):

* the **common shift** of the second pass is the median of the rows' differences
  d = c2 - c1 (robust: a few disturbed rows do not move it), kept in run.json
  and taken out of every row's d: a host 5 % slower in the second pass is one
  number, not a widening of every row;
* the **between-visit** sd is the sigma that makes the residuals r = d - shift,
  standardised by sqrt(2 sigma^2 + se1^2 + se2^2), have a robust unit scale
  (``tileops.stats.robust_scale``: a burst in a few rows neither widens the rest
  nor, as the old subtraction of a non-robust noise term did, zeroes it);
* the **host** sd of a pass's shared offset comes from the history of this
  host's shifts, one per run (:class:`HostPrior`), with this run's, about their
  mean (a second pass that always runs faster moves every run's level alike).

Each row then gets its own variance (:func:`row_interval`): its per-visit
variance is shrunk toward its kind's (partial pooling: the kind's estimate weighs
up to ``ROW_PRIOR_DF`` degrees of freedom, the row's own pair one, a moderated
variance after Smyth 2004), so a row that moves more than its kind is wider and
one that moves less is narrower, without the one-degree-of-freedom quantile of a
row judged alone. The model's variance of the row's **level** (the mean of its
visits' log centres) is V = tau^2 / 2 + sigma_H^2 / 2 (one visit: tau^2 +
sigma_H^2).

Calibrated by this host's own reruns. What the visits of one run cannot see is
how the host moves over minutes: on the development VM a whole run of
memory-bound rows once read 45 % faster than the runs around it, and in other
hours two visits of a row seven seconds apart moved in opposite directions
while the runs' levels agreed to 7 %. So the host's stored prior keeps the
newest level of every row with its model variance, and each run of the same code
reads its rows against them: per kind, the rows' d / sqrt(V_this + V_before) give
kappa, how much wider (or narrower) the reruns were than the model said
(:func:`rerun_factor`: a run whose rows all moved together is worth one degree
of freedom, not one a row). Once the history weighs ``MIN_CALIBRATION_DF``
degrees of freedom, kappa^2 scales every later run's V; until then the documented
run-level default stands beside the model (``DEFAULT_RUN``). This run's own
kappa joins the history for the *next* runs only: a code change that slowed
every row must show as a change, not widen the intervals that would show it; and
a run of other code (versions, revision) is no rerun of the stored levels. Each
row's own reruns are kept too (the sum of its z^2), and a row's factor is its
kind's weighing ``ROW_RERUN_PRIOR_DF`` reruns beside its own: a row that moves
more between runs than its kind is wider, one that moves less narrower. The
kind's factor only ever widens (at least 1): a calm past is no licence to be
narrower than this run's own visits show (on the development VM a host calm for
ten runs then moved its rows 1.5x).

Two numbers come out:

* the interval of this run's level (what the roofline's judgments and a
  comparison of two runs use): ``level +- t * sqrt(V)``;
* the prediction of a rerun under the same plan (what a reader expects next
  time): ``level +- t * sqrt(2 V)``;

with t of Welch–Satterthwaite's degrees of freedom over the parts (and kappa's).

Too few rows of a kind (under ``MIN_POOL_ROWS``) to pool: the run says so and
joins what its few rows show (one degree of freedom each) to this host's stored
prior, or on a host with none yet to the documented default of its device kind
(``DEFAULT_BETWEEN``, ``DEFAULT_HOST``, ``DEFAULT_RUN``: docs/timing.md gives
where each figure comes from), never a silent zero. ``benchmarks/interval_sim.py``
shows the coverage, width and power this reaches on simulated hosts, and
``benchmarks/reproducibility.py`` on this one. Standard library only (§5.2).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

from tileops.bench.interval import CONFIDENCE, Visit
from tileops.fsutil import write_atomic
from tileops.stats import median_variance_factor, robust_scale, satterthwaite, two_sided_t

ROW_KINDS = ("memory", "compute")
#: The fewest rows of a kind whose pairs of visits are pooled into the kind's between-visit sd on their own.
MIN_POOL_ROWS = 3
#: How many degrees of freedom the kind's estimate weighs beside a row's own pair (one) in the row's variance.
ROW_PRIOR_DF = 20.0
#: A stored prior never weighs more than this many degrees of freedom: a host that changes is learned again.
PRIOR_MAX_DF = 30.0
#: How many runs of history (shifts, rerun factors) the stored prior keeps, the newest.
HOST_HISTORY = 20
#: How many rows' newest levels the stored prior keeps (what the next run is read against).
LEVELS_KEPT = 2000
#: The degrees of freedom the host's reruns must reach before they calibrate its intervals (the documented
#: run-level default stands until then): one or two calm (or wild) reruns cannot narrow (or widen) every interval.
MIN_CALIBRATION_DF = 10.0
#: How many of a row's own reruns its kind's factor weighs as (a row that moves more between runs than its kind
#: is wider, one that moves less narrower, as the reruns pile up).
ROW_RERUN_PRIOR_DF = 10.0
#: The documented defaults (docs/timing.md, "Each row's own uncertainty"), each weighing ``DEFAULT_DF`` degrees
#: of freedom (the run-level one ``DEFAULT_RUN_DF``): a visit's between-visit sd by device kind and row kind; a
#: pass's host-wide sd; a run's, shared by both passes (until the host's own reruns calibrate it). CPU figures
#: from the development VM (memory-bound rows 11-27 % between processes, compute-bound 2-9 %; runs' levels
#: moving 15-25 %); GPU figures the drift issue 34's GPU scenarios assume, not measured here.
DEFAULT_BETWEEN: dict[str, dict[str, float]] = {"cpu": {"memory": 0.15, "compute": 0.05},
                                                "cuda": {"memory": 0.01, "compute": 0.01}}
DEFAULT_HOST = {"cpu": 0.03, "cuda": 0.003}
DEFAULT_RUN = {"cpu": 0.15, "cuda": 0.01}
DEFAULT_DF = 2.0
#: The run-level default weighs more: on the development VM it is what six to eight runs of the same rows showed
#: beyond the model (their levels' sd about 20 %, the model's 10-14 %).
DEFAULT_RUN_DF = 6.0
#: The largest ``ci_df`` a record carries (a t quantile there is the normal's to 0.1 %).
MAX_DF = 1000.0


@dataclass(frozen=True)
class Estimate:
    """A standard deviation (log space) with the degrees of freedom it is known to, and where it came from."""

    sigma: float
    df: float
    source: str  # words a person reads: "this run (12 rows)", "this host's stored prior (5 runs)", ...
    rows: int = 0  # rows of this run it was pooled from

    def as_dict(self) -> dict[str, Any]:
        return {"sigma": self.sigma, "df": min(self.df, MAX_DF), "source": self.source, "rows": self.rows}


def _combine(a: Estimate | None, b: Estimate | None, source: str, rows: int) -> Estimate | None:
    """Two variance estimates pooled by their degrees of freedom."""
    parts = [e for e in (a, b) if e is not None and e.df > 0]
    if not parts:
        return None
    df = sum(e.df for e in parts)
    var = sum(e.df * e.sigma ** 2 for e in parts) / df
    return Estimate(math.sqrt(var), df, source, rows)


@dataclass(frozen=True)
class Calibration:
    """kappa^2, how much this host's reruns varied against what the model said (1: as the model said), with the
    degrees of freedom it is known to and the runs it comes from."""

    factor2: float
    df: float
    runs: int

    @property
    def used(self) -> bool:
        """Whether it weighs enough to calibrate a run's intervals (``MIN_CALIBRATION_DF``)."""
        return self.df >= MIN_CALIBRATION_DF

    def as_dict(self) -> dict[str, Any]:
        return {"factor": math.sqrt(self.factor2), "df": self.df, "runs": self.runs, "used": self.used}


# -- the per-host prior -----------------------------------------------------------------------------------

#: A row's newest reading as the prior keeps it: (kind, ln level, the model's variance of that level, the degrees of
#: freedom that variance is known to).
Level = tuple[str, float, float, float]
#: One run read against the run before it, for one kind (:func:`rerun_factor`): the squared common part of its
#: rows' standardised differences, their own part, and how many rows there were.
Rerun = tuple[float, float, float]


@dataclass
class HostPrior:
    """What earlier runs on this device measured, per row kind: the between-visit sd, the history of the second
    pass's shifts and of the reruns' factors, and the newest level of every row with its model variance (what
    the next run is read against). Stored per device (``<profile store>/noise/<device key>.json``) and updated
    after every run that pooled rows; a file that cannot be read is ignored with a warning, never trusted."""

    between: dict[str, Estimate] = field(default_factory=dict)
    #: per kind, one ``(ln shift, its own noise variance)`` per run: the second pass against the first
    shifts: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    #: per kind, one :data:`Rerun` per run read against the run before it
    reruns: dict[str, list[Rerun]] = field(default_factory=dict)
    levels: dict[str, Level] = field(default_factory=dict)  # row (its key joined by spaces) -> its newest reading
    #: row -> (sum of its reruns' z^2, how many; at most HOST_HISTORY, older ones weighed down)
    row_reruns: dict[str, tuple[float, float]] = field(default_factory=dict)
    runs: int = 0
    code: str = ""  # the code the levels were measured with (versions, revision)

    def host(self, kind: str) -> Estimate | None:
        """sigma_H of a kind from its stored shifts (:func:`host_estimate`); None without any."""
        shifts = self.shifts.get(kind)
        return host_estimate(shifts, f"this host's last {len(shifts)} run(s)") if shifts else None

    def calibration(self, kind: str) -> Calibration | None:
        """kappa^2 of a kind from its stored reruns: the mean of their common parts (one degree of freedom a run)
        plus the pooled mean of their rows' own parts (n - 1 a run), with Welch–Satterthwaite's degrees of
        freedom over the two; None without any."""
        history = self.reruns.get(kind)
        if not history:
            return None
        common = statistics.fmean(c2 for c2, _, _ in history)
        own_df = sum(n - 1.0 for _, _, n in history)
        own = sum((n - 1.0) * o for _, o, n in history) / own_df if own_df > 0 else 0.0
        df = satterthwaite([(common, float(len(history))), (own, own_df if own_df > 0 else 1.0)])
        return Calibration(common + own, min(df, MAX_DF) if math.isfinite(df) else MAX_DF, len(history))

    def updated(self, model: HostModel) -> HostPrior:
        """The prior after a run: each kind this run pooled itself folded in (capped at PRIOR_MAX_DF), its
        shifts and rerun factors appended, its rows' levels kept as the newest (those of other code dropped). A
        run that pooled nothing leaves it as it was."""
        if not (model.own or model.own_shift):
            return self
        between = dict(self.between)
        for kind, own in model.own.items():
            old = between.get(kind)
            if old is not None and old.df > PRIOR_MAX_DF - own.df:
                old = Estimate(old.sigma, max(0.0, PRIOR_MAX_DF - own.df), old.source)
            merged = _combine(old, own, "stored", 0)
            if merged is not None:
                between[kind] = Estimate(merged.sigma, min(merged.df, PRIOR_MAX_DF), "stored")
        shifts = {k: list(v) for k, v in self.shifts.items()}
        for kind, shift in model.own_shift.items():
            shifts[kind] = (shifts.get(kind, []) + [shift])[-HOST_HISTORY:]
        reruns = {k: list(v) for k, v in self.reruns.items()}
        for kind, factor in model.own_rerun.items():
            reruns[kind] = (reruns.get(kind, []) + [factor])[-HOST_HISTORY:]
        same = model.code == self.code
        kept = dict(self.levels) if same else {}  # other code: its levels start afresh
        for row in model.levels:
            kept.pop(row, None)  # re-inserted last: the newest rows are kept
        kept.update(model.levels)
        kept = dict(list(kept.items())[-LEVELS_KEPT:])
        rows = dict(self.row_reruns) if same else {}
        for row, z2 in model.own_row_z2.items():
            total, n = rows.pop(row, (0.0, 0.0))
            if n >= HOST_HISTORY:  # forget the oldest in proportion
                total, n = total * (HOST_HISTORY - 1) / n, HOST_HISTORY - 1.0
            rows[row] = (total + z2, n + 1.0)
        rows = dict(list(rows.items())[-LEVELS_KEPT:])
        return HostPrior(between, shifts, reruns, kept, rows, self.runs + 1, model.code)

    def to_json(self) -> str:
        return json.dumps({"version": 1, "runs": self.runs, "code": self.code,
                           "between": {k: {"sigma": e.sigma, "df": e.df} for k, e in self.between.items()},
                           "shifts": {k: [list(x) for x in v] for k, v in self.shifts.items()},
                           "reruns": {k: [list(x) for x in v] for k, v in self.reruns.items()},
                           "levels": {k: list(v) for k, v in self.levels.items()},
                           "row_reruns": {k: list(v) for k, v in self.row_reruns.items()}}, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str) -> HostPrior:
        """The prior in ``text``; ValueError naming ``where`` and the field when it is not one."""
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{where}: not JSON ({exc})") from None
        if not isinstance(doc, dict) or doc.get("version") != 1:
            raise ValueError(f"{where}: expected an object with version 1 (a host noise prior)")

        r = _PriorReader(doc, where)
        between, levels, row_reruns, code = r.between(), r.levels(), r.row_reruns(), r.code()  # the order its
        # errors are reported in
        return cls(between, r.tuples("shifts", "shift, noise variance", 2),
                   r.tuples("reruns", "common part, own part, rows", 3), levels, row_reruns,
                   int(r.number(doc.get("runs", 0), "runs")), code)


class _PriorReader:
    """A stored prior's fields read one by one, each refused with ``where`` and its name when it is not one."""

    def __init__(self, doc: dict[str, Any], where: str) -> None:
        self.doc, self.where = doc, where

    def number(self, x: Any, name: str, low: float = 0.0) -> float:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < low:
            raise ValueError(f"{self.where}: {name} must be a finite number >= {low:g}, got {x!r}")
        return float(x)

    def kinds(self, name: str) -> dict[str, Any]:
        raw = self.doc.get(name, {})
        if not isinstance(raw, dict) or any(k not in ROW_KINDS for k in raw):
            raise ValueError(f"{self.where}: {name} must be an object keyed by row kind ({', '.join(ROW_KINDS)})")
        return raw

    def tuples(self, name: str, what: str, size: int) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        for kind, xs in self.kinds(name).items():
            if not isinstance(xs, list) or not all(isinstance(x, list) and len(x) == size for x in xs):
                raise ValueError(f"{self.where}: {name}.{kind} must be a list of [{what}]")
            out[kind] = [tuple(self.number(v, f"{name}.{kind}[][{i}]", -math.inf if (name, i) == ("shifts", 0) else 0.0)
                               for i, v in enumerate(x)) for x in xs][-HOST_HISTORY:]
        return out

    def between(self) -> dict[str, Estimate]:
        between = {}
        for kind, e in self.kinds("between").items():
            if not isinstance(e, dict):
                raise ValueError(f"{self.where}: between.{kind} must hold sigma and df")
            between[kind] = Estimate(self.number(e.get("sigma"), f"between.{kind}.sigma"),
                                     self.number(e.get("df"), f"between.{kind}.df"), "stored")
        return between

    def levels(self) -> dict[str, Level]:
        raw_levels = self.doc.get("levels", {})
        if not isinstance(raw_levels, dict):
            raise ValueError(f"{self.where}: levels must be an object of rows")
        levels: dict[str, Level] = {}
        for row, v in raw_levels.items():
            if not (isinstance(v, list) and len(v) == 4 and v[0] in ROW_KINDS):
                raise ValueError(f"{self.where}: levels[{row!r}] must be [row kind, ln level, its variance, its df]")
            levels[str(row)] = (str(v[0]), self.number(v[1], f"levels[{row!r}][1]", -math.inf),
                                self.number(v[2], f"levels[{row!r}][2]"),
                                self.number(v[3], f"levels[{row!r}][3]", 1.0))
        return levels

    def row_reruns(self) -> dict[str, tuple[float, float]]:
        raw_rows = self.doc.get("row_reruns", {})
        if not isinstance(raw_rows, dict) or not all(isinstance(v, list) and len(v) == 2 for v in raw_rows.values()):
            raise ValueError(f"{self.where}: row_reruns must map each row to [sum of z^2, count]")
        return {str(r): (self.number(v[0], f"row_reruns[{r!r}][0]"), self.number(v[1], f"row_reruns[{r!r}][1]"))
                for r, v in raw_rows.items()}

    def code(self) -> str:
        code = self.doc.get("code", "")
        if not isinstance(code, str):
            raise ValueError(f"{self.where}: code must be a string (the versions the levels were measured with)")
        return code


def host_estimate(shifts: Sequence[tuple[float, float]], source: str) -> Estimate:
    """sigma_H from ``(shift, its noise variance)`` pairs, one per run. A shift is the difference of a run's
    two passes' offsets plus the noise of the median it was read from. A part of it common to every run (a
    second pass that always runs faster, its worker warmer) moves every run's level alike and is no
    uncertainty: from two runs on, sigma_H^2 = (the shifts' variance about their mean - mean noise) / 2, with
    n - 1 degrees of freedom; one run cannot tell, and gives (shift^2 - noise) / 2, with one. At least 0."""
    noise = statistics.fmean(v for _, v in shifts)
    xs = [x for x, _ in shifts]
    spread = statistics.variance(xs) if len(xs) >= 2 else xs[0] ** 2
    return Estimate(math.sqrt(max(0.0, (spread - noise) / 2.0)), float(max(1, len(xs) - 1)), source)


def read_prior(path: Path) -> tuple[HostPrior | None, str | None]:
    """The stored prior at ``path`` (None when there is none yet) and a warning when the file is unusable (it
    is then ignored, and replaced by the next successful update)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot read the host noise prior {path} ({exc.strerror or exc}); the defaults stand in"
    try:
        return HostPrior.from_json(text, str(path)), None
    except ValueError as exc:
        return None, f"{exc}; the defaults stand in, and the next run replaces it"


def write_prior(path: Path, prior: HostPrior) -> None:
    """Write the prior atomically (a temporary file renamed over it); OSError when it cannot be written."""
    write_atomic(path, prior.to_json())


# -- the host model ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostModel:
    """The host's noise components as one run measured them, per row kind (run.json's ``host_noise``)."""

    device_kind: str
    between: dict[str, Estimate]  # sd of a visit's offset (between visits, between processes)
    host: dict[str, Estimate]  # sd of a pass's offset shared by the kind's rows
    calibration: dict[str, Calibration] = field(default_factory=dict)  # from the host's reruns (none: the default)
    run_default: dict[str, Estimate] = field(default_factory=dict)  # a run's offset, until reruns calibrate it
    within: dict[str, float] = field(default_factory=dict)  # median spread of a visit's blocks (log sd)
    shift: dict[str, float] = field(default_factory=dict)  # ln of the second pass's common shift
    pairs: int = 0  # rows visited twice that the components were pooled over
    own: dict[str, Estimate] = field(default_factory=dict)  # what this run alone measured (the store's)
    #: the second pass's shift of each kind this run holds rows of, with its noise variance (the store's)
    own_shift: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: this run read against the run before it, per kind (the store's; not this run's intervals')
    own_rerun: dict[str, Rerun] = field(default_factory=dict)
    own_row_z2: dict[str, float] = field(default_factory=dict)  # ... and per row, its z^2 (the store's)
    row_reruns: dict[str, tuple[float, float]] = field(default_factory=dict)  # each row's reruns so far (the prior's)
    rows_by_kind: dict[str, int] = field(default_factory=dict)  # this run's rows of each kind (visited once or twice)
    notes: tuple[str, ...] = ()  # what a person should know (too few rows, defaults in use)
    #: row -> (kind, ln level, model variance) of this run, and the code it ran: the store keeps them (not in
    #: run.json)
    levels: dict[str, Level] = field(default_factory=dict)
    code: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"device_kind": self.device_kind, "pairs": self.pairs, "rows_by_kind": dict(self.rows_by_kind),
                "within_visit": dict(self.within),
                "between_visits": {k: e.as_dict() for k, e in self.between.items()},
                "host": {k: e.as_dict() for k, e in self.host.items()},
                "reruns": {k: {**(self.calibration[k].as_dict() if k in self.calibration else {"used": False}),
                               **({} if k in self.calibration and self.calibration[k].used
                                  else {"default": self.run_default[k].as_dict()})} for k in self.between},
                "second_pass_shift": dict(self.shift),
                "rerun_factor_this_run": {k: math.sqrt(v[0] + v[1]) for k, v in self.own_rerun.items()},
                "notes": list(self.notes)}


def _default(device_kind: str, kind: str) -> Estimate:
    sigma = DEFAULT_BETWEEN.get(device_kind, DEFAULT_BETWEEN["cpu"])[kind]
    return Estimate(sigma, DEFAULT_DF, f"the documented default for a {device_kind} {kind}-bound row "
                                       "(docs/timing.md)")


def _host_default(device_kind: str) -> Estimate:
    return Estimate(DEFAULT_HOST.get(device_kind, DEFAULT_HOST["cpu"]), DEFAULT_DF,
                    f"the documented default for a {device_kind} host (docs/timing.md): no run on this host "
                    "has measured its shift between passes yet")


def _run_default(device_kind: str) -> Estimate:
    return Estimate(DEFAULT_RUN.get(device_kind, DEFAULT_RUN["cpu"]), DEFAULT_RUN_DF,
                    f"the documented default for a {device_kind} host (docs/timing.md): no rerun of the same "
                    "code on this host has calibrated it yet")


def prior_model(device_kind: str, prior: HostPrior | None = None) -> HostModel:
    """The model before any pair of visits: the stored prior where it has a figure, else the defaults."""
    between, host, calibration = {}, {}, {}
    for k in ROW_KINDS:
        stored = prior.between.get(k) if prior is not None else None
        between[k] = (Estimate(stored.sigma, stored.df, f"this host's stored prior ({prior.runs} run(s))")
                      if stored is not None and prior is not None else _default(device_kind, k))
        host[k] = (prior.host(k) if prior is not None else None) or _host_default(device_kind)
        c = prior.calibration(k) if prior is not None else None
        if c is not None:
            calibration[k] = c
    return HostModel(device_kind, between, host, calibration, {k: _run_default(device_kind) for k in ROW_KINDS},
                     row_reruns=dict(prior.row_reruns) if prior is not None else {})


@dataclass(frozen=True)
class Pair:
    """One row's two visits and its kind."""

    kind: str
    first: Visit
    second: Visit


def _fit_between(resid: Sequence[float], ses: Sequence[float]) -> float:
    """The sigma with which r_i / sqrt(2 sigma^2 + s_i) has a robust unit scale (0 when the noise alone is
    already at least that wide); ``ses`` holds each row's se1^2 + se2^2."""
    def scale(s2: float) -> float:
        z = [r / math.sqrt(max(2 * s2 + s, 1e-300)) for r, s in zip(resid, ses)]
        return robust_scale(z, 0.0)

    if scale(0.0) <= 1.0:
        return 0.0
    lo, hi = 0.0, max(abs(r) for r in resid) + 1e-12
    while scale(hi * hi) > 1.0:
        hi *= 2.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if scale(mid * mid) > 1.0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _se(v: Visit, typical_spread: float | None) -> float:
    """A visit's se, or for a one-block visit its kind's typical block spread (a median of one block)."""
    se = v.se
    if se is not None:
        return se
    return typical_spread or 0.0


def pool(pairs: Sequence[Pair], device_kind: str, prior: HostPrior | None = None,
         singles: Mapping[str, Sequence[Visit]] | None = None) -> HostModel:
    """The host model from a sweep's pairs of visits (:class:`Pair`), with this host's stored ``prior``.

    ``singles``: per kind, the visits of rows visited once (their block spreads count towards the kind's
    typical within-visit spread). A kind with fewer than ``MIN_POOL_ROWS`` rows visited twice cannot pool on
    its own: its between-visit sd is the stored prior's (or the default) joined by what its few rows show,
    weighing one degree of freedom each, so the prior of a kind every run holds two rows of still learns."""
    base = prior_model(device_kind, prior)
    notes: list[str] = []
    within: dict[str, float] = {}
    d_all = [p.second.log_centre - p.first.log_centre for p in pairs]
    overall = statistics.median(d_all) if len(d_all) >= MIN_POOL_ROWS else None
    between, host = dict(base.between), dict(base.host)
    shift: dict[str, float] = {}
    own: dict[str, Estimate] = {}
    own_shift: dict[str, tuple[float, float]] = {}
    for kind in ROW_KINDS:
        mine = [p for p in pairs if p.kind == kind]
        spreads = [v.spread for p in mine for v in (p.first, p.second) if v.spread is not None]
        spreads += [v.spread for v in (singles or {}).get(kind, ()) if v.spread is not None]
        if spreads:
            within[kind] = statistics.median(spreads)
        if not mine:
            if overall is not None:
                shift[kind] = overall
            continue
        stored, typical = base.between[kind], within.get(kind)
        d = [p.second.log_centre - p.first.log_centre for p in mine]
        ses = [_se(p.first, typical) ** 2 + _se(p.second, typical) ** 2 for p in mine]
        pooled = len(mine) >= MIN_POOL_ROWS
        if pooled:
            shift[kind] = statistics.median(d)
            sigma = _fit_between([x - shift[kind] for x in d], ses)
            df = float(len(mine) - 1)
        else:  # a few rows: the shift of every row where there is one, each row one degree of freedom
            shift[kind] = overall if overall is not None else statistics.fmean(d)
            sigma = math.sqrt(statistics.fmean(max(0.0, (x - shift[kind]) ** 2 / 2 - s / 2) for x, s in zip(d, ses)))
            df = float(len(mine) if overall is not None else len(mine) - 1)
            notes.append(f"{len(mine)} {kind}-bound row(s) visited twice, fewer than the {MIN_POOL_ROWS} a pooled "
                         f"estimate needs: their between-visit sd is {stored.source}, joined by what they show")
        if df > 0:
            own[kind] = Estimate(sigma, df, f"this run ({len(mine)} rows)", len(mine))
            if pooled and not stored.source.startswith("this host's"):
                between[kind] = own[kind]  # the run's own pool; a default does not dilute it
            else:
                capped = Estimate(stored.sigma, min(stored.df, PRIOR_MAX_DF), stored.source)
                between[kind] = _combine(capped, own[kind], f"this run ({len(mine)} rows) and {stored.source}",
                                         len(mine)) or own[kind]
        this_shift = statistics.median(d) if pooled else statistics.fmean(d)
        noise = (median_variance_factor(len(d)) * robust_scale(d, this_shift) ** 2 if pooled
                 else (2 * between[kind].sigma ** 2 + statistics.fmean(ses)) / len(d))
        own_shift[kind] = (this_shift, noise)
        history = [*(prior.shifts.get(kind, []) if prior is not None else []), own_shift[kind]]
        host[kind] = (host_estimate(history, f"this run's shift and this host's last {len(history) - 1} run(s)")
                      if len(history) >= 2 else
                      _combine(base.host[kind], host_estimate(history, "this run's shift"),
                               f"this run's shift and {base.host[kind].source}", len(mine)) or base.host[kind])
    rows_by_kind = {k: sum(p.kind == k for p in pairs) + len((singles or {}).get(k, ())) for k in ROW_KINDS}
    return replace(base, between=between, host=host, within=within, shift=shift, pairs=len(pairs), own=own,
                   own_shift=own_shift, rows_by_kind={k: n for k, n in rows_by_kind.items() if n},
                   notes=tuple(notes))


def rerun_z(rows: Mapping[str, Level], before: Mapping[str, Level], kind: str) -> dict[str, float]:
    """Each row of ``kind`` both runs measured: its difference over the sd the model gave it (sqrt of the two
    levels' variances). A variance that is itself estimated makes that too large on average by sqrt(df / (df -
    2)) (1/V is convex), which each z sheds."""
    out = {}
    for row, (k, lv, v, df) in rows.items():
        if k != kind or row not in before or before[row][0] != kind or v + before[row][2] <= 0:
            continue
        _, lv0, v0, df0 = before[row]
        both = satterthwaite([(v, df), (v0, df0)])
        jensen = math.sqrt((both - 2.0) / both) if both > 4.0 else math.sqrt(0.5)
        out[row] = (lv - lv0) / math.sqrt(v + v0) * jensen
    return out


def rerun_factor(rows: Mapping[str, Level], before: Mapping[str, Level], kind: str) -> Rerun | None:
    """One run against the run before it, for one kind (:data:`Rerun`, from :func:`rerun_z`); None without a
    shared row. The rows of a run share the host's state, so the z's are split into their common part (their
    median: c^2, one degree of freedom a run) and the rows' own (their robust spread about it, times (n - 1) / n:
    n - 1 degrees of freedom); c^2 + own is kappa^2, unbiased whatever the share."""
    z = list(rerun_z(rows, before, kind).values())
    if not z:
        return None
    n = len(z)
    c = statistics.median(z) if n > 1 else z[0]
    own = robust_scale([x - c for x in z], 0.0) ** 2 * (n - 1) / n if n > 1 else 0.0
    return c * c, own, float(n)


def with_reruns(model: HostModel, prior: HostPrior | None, rows: Mapping[str, Level], code: str) -> HostModel:
    """The model with this run's rows (``rows``: row -> (kind, ln level, model variance, its df)) and ``code``,
    and this run read against the prior's newest levels where they are of the same code, per kind and per row:
    what the store keeps for the next runs (this run's intervals were set without it)."""
    own: dict[str, Rerun] = {}
    own_rows: dict[str, float] = {}
    if prior is not None and prior.code == code:
        for kind in ROW_KINDS:
            got = rerun_factor(rows, prior.levels, kind)
            if got is not None:
                own[kind] = got
                own_rows.update({row: z * z for row, z in rerun_z(rows, prior.levels, kind).items()})
    return replace(model, own_rerun=own, own_row_z2=own_rows, levels=dict(rows), code=code)


# -- a row's interval ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowInterval:
    """A row's level and its two intervals (seconds), with the t quantile's degrees of freedom and the model's
    variance of the level before the reruns' calibration and its degrees of freedom (what the store keeps)."""

    level_s: float
    level_ci: tuple[float, float]  # this run's level: what judgments and comparisons use
    rerun: tuple[float, float]  # where a rerun's level is expected to fall (the same plan)
    df: float
    visits: tuple[float, ...]  # each visit's centre, seconds
    model_var: float = 0.0
    model_df: float = math.inf

    @property
    def log_se(self) -> float:
        """The level's standard error in log space (what a comparison combines)."""
        return math.log(self.level_ci[1] / self.level_s) / two_sided_t(CONFIDENCE, self.df)


def row_interval(visits: Sequence[Visit], kind: str, model: HostModel, confidence: float = CONFIDENCE,
                 row: str | None = None) -> RowInterval:
    """A row's level and intervals from its one or two visits under ``model`` (ValueError on none or three);
    ``row`` (its key joined by spaces) finds its own reruns of the same code in the host's history."""
    if not 1 <= len(visits) <= 2:
        raise ValueError(f"a row has one or two visits, got {len(visits)}")
    if kind not in model.between:
        raise ValueError(f"unknown row kind {kind!r}: expected one of {ROW_KINDS}")
    between = model.between[kind]
    typical = model.within.get(kind)
    host = model.host[kind]
    sigma_h2 = host.sigma ** 2
    logs = [v.log_centre for v in visits]
    level = statistics.fmean(logs)
    w = [_se(v, typical) ** 2 for v in visits]
    if len(visits) == 2:
        nu0 = min(between.df, ROW_PRIOR_DF)
        r = logs[1] - logs[0] - model.shift.get(kind, 0.0)
        prior_var = between.sigma ** 2 + statistics.fmean(w)
        if nu0 > 0:
            tau2 = (nu0 * prior_var + r * r / 2.0) / (nu0 + 1.0)
            # Satterthwaite's df of that mixture: the kind's part is known to its own df, the row's to one
            df_row = (nu0 + 1.0) ** 2 / (nu0 * nu0 / between.df + 1.0)
        else:
            tau2, df_row = r * r / 2.0, 1.0
        parts = [(tau2 / 2.0, df_row), (sigma_h2 / 2.0, host.df)]
    else:
        parts = [(between.sigma ** 2, between.df), (w[0], max(1.0, visits[0].blocks - 1.0)), (sigma_h2, host.df)]
    model_var, df_model = sum(p for p, _ in parts), min(satterthwaite(parts), MAX_DF)
    calibration = model.calibration.get(kind)
    if calibration is not None and calibration.used:  # the host's reruns scale the model
        # the kind's reruns only ever widen: a calm past is no licence to be narrower than this run's own visits
        # show (on the development VM a host calm for ten runs then moved its rows 1.5x)
        factor2, factor_df = max(1.0, calibration.factor2), calibration.df
        total, n = model.row_reruns.get(row, (0.0, 0.0)) if row is not None else (0.0, 0.0)
        if n > 0:  # the row's own reruns, against its kind's factor weighing ROW_RERUN_PRIOR_DF of them
            factor2 = (ROW_RERUN_PRIOR_DF * factor2 + total) / (ROW_RERUN_PRIOR_DF + n)
            factor_df = calibration.df + n
        var = factor2 * model_var
        df = 1.0 / (1.0 / df_model + 1.0 / factor_df)
    else:  # too few reruns of this code yet: the documented run-level default beside the model
        default = model.run_default.get(kind) or _run_default(model.device_kind)
        var, df = model_var + default.sigma ** 2, satterthwaite([*parts, (default.sigma ** 2, default.df)])
    df = min(max(df, 1.0), MAX_DF)  # a t quantile needs one degree of freedom at least (a record holds it so)
    t = two_sided_t(confidence, df)
    h, hp = t * math.sqrt(var), t * math.sqrt(2.0 * var)
    m = math.exp(level)
    return RowInterval(m, (m * math.exp(-h), m * math.exp(h)), (m * math.exp(-hp), m * math.exp(hp)), df,
                       tuple(v.centre_s for v in visits), model_var, df_model)
