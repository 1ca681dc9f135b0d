"""Benchmark (issue 34): the bench's intervals and the comparator on simulated hosts, where the truth is known.

Each scenario is a host model; a simulated host runs sweeps of ``--rows-per-sweep`` rows (half of them
memory-bound, half compute-bound) the way the bench does: every row visited twice, each pass in a worker
process of its own, each visit sampled in blocks by the bench's own rule (``interval.sample_blocks`` with
``visit_rule``), on a simulated clock. The rows' intervals come from the bench's own code
(``hostnoise.pool`` and ``row_interval``), with this host's stored prior carried from sweep to sweep as
``tileops bench`` carries it in its profile store. Then, per scenario:

* **coverage**: the share of rows whose rerun's level (the next sweep's, a new process) lies inside this
  sweep's prediction interval; goal 90-97 %;
* **width / oracle**: each row's prediction half-width (log) over the oracle's, the half-width that covers
  95 % of the reruns in this scenario (the empirical quantile of |level - rerun level|); goal median <= 1.2,
  p90 <= 1.5;
* **one x3 block**: a row's prediction width with one of its twenty blocks slowed threefold, over its width
  without; goal < 1.5 (the largest over the rows is printed);
* **false calls**: same code compared (``compare_robust.classify_all`` over a sweep's rows, the
  comparison ``tileops roofline --baseline`` makes): rows called slower or faster; goal <= 1 %;
* **power**: a quarter of the rows made slower by the change the issue names (20 % on a CPU, 15 % on a GPU),
  the share of those called slower; goal >= 90 % (CPU at 3 % drift, GPU at 1 %);
* **same**: unchanged rows called ``same``; goal >= 90 % on a quiet CPU and on a GPU;
* **unstable**: the share of rows whose level's interval is wider than the roofline's bar for a verdict (±5 %
  on a CPU, ±2 % on a GPU): shown, no goal (issue 34 saw the old ±2 % bar flip for every GPU row at 1 % drift).

Scenarios (issue 34): CPU rows with 5 % per-sample noise and 0, 3 or 10 % drift between visits; the 3 % host
plus a 5 % per-process offset; plus bursts (1 % of samples x10, 2 % of blocks x3). GPU rows with 0.5 % per
sample and 0.25, 0.5 or 1 % drift. And three beyond the issue, whose goals are shown, not held: a host whose
whole pass shifts 5 % (every row of a worker process alike), rows unlike each other (each its own drift, 11 to
27 %: the development VM's memory-bound rows), and a host whose whole run shifts 10 % (both passes alike: its
state over minutes), which the host's history of runs must carry.

    python benchmarks/interval_sim.py [--rows 2000] [--rows-per-sweep 20] [--seed 1] [--json OUT]
    python benchmarks/interval_sim.py --quick    # 200 rows a scenario: the test suite's smoke run

Exit 0 when every goal is met, 1 otherwise (the figures say which).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from dataclasses import dataclass, replace

from tileops.bench.hostnoise import HostPrior, Pair, pool, row_interval, with_reruns
from tileops.bench.interval import CPU_BLOCKS, GPU_BLOCKS, BlockRule, Visit, sample_blocks, visit_of, visit_rule
from tileops.report.compare_robust import Side, classify_all

#: A cold CPU sample's overhead beyond the op (the LLC read sweep, docs/timing.md), and a GPU sample's.
FLUSH_S = {"cpu": 3.5e-3, "cuda": 20e-6}
KINDS = ("memory", "compute")


@dataclass(frozen=True)
class Scenario:
    name: str
    device: str = "cpu"  # cpu | cuda
    noise: float = 0.05  # per-sample multiplicative noise (lognormal sigma)
    drift: float = 0.0  # sd of a row's log offset per visit (between visits)
    drift_hi: float | None = None  # rows unlike each other: row i's drift drawn once from [drift, drift_hi]
    process: float = 0.0  # sd of a row's log offset per worker process
    pass_shift: float = 0.0  # sd of a pass's log offset shared by every row (a host-wide shift)
    run_shift: float = 0.0  # sd of a run's log offset shared by both its passes (the host's state over minutes)
    sample_burst: float = 0.0  # share of samples slowed x10
    block_burst: float = 0.0  # share of blocks slowed x3
    change: float = 0.20  # the change whose power is measured
    drift_goal: bool = False  # the power goal applies here
    same_goal: bool = False  # the `same` goal applies here


SCENARIOS = (
    Scenario("cpu quiet", same_goal=True),
    Scenario("cpu drift 3 %", drift=0.03, drift_goal=True),
    Scenario("cpu drift 10 %", drift=0.10),
    Scenario("cpu 3 % + process 5 %", drift=0.03, process=0.05),
    Scenario("cpu + bursts", drift=0.03, process=0.05, sample_burst=0.01, block_burst=0.02),
    Scenario("gpu drift 0.25 %", device="cuda", noise=0.005, drift=0.0025, change=0.15, same_goal=True),
    Scenario("gpu drift 0.5 %", device="cuda", noise=0.005, drift=0.005, change=0.15, same_goal=True),
    Scenario("gpu drift 1 %", device="cuda", noise=0.005, drift=0.01, change=0.15, drift_goal=True, same_goal=True),
    Scenario("cpu pass shift 5 %", drift=0.03, pass_shift=0.05),
    Scenario("cpu rows 11-27 %", drift=0.11, drift_hi=0.27),
    Scenario("cpu run shift 10 %", drift=0.03, run_shift=0.10),
)
#: Scenarios beyond the issue's list: their figures are shown, their goals not held.
BEYOND = ("cpu pass shift 5 %", "cpu rows 11-27 %", "cpu run shift 10 %")


class SimHost:
    """A host on a simulated clock: each sample costs its duration plus a cache flush, each pause its length."""

    def __init__(self, sc: Scenario, rng: random.Random) -> None:
        self.sc, self.rng, self.t = sc, rng, 0.0
        self.op_s = 1e-4
        self.offset = 0.0  # the current visit's log offset (row, visit, process and pass parts together)
        self.block_factor = 1.0

    def advance(self, dt: float) -> None:
        self.t += dt

    def sample(self, k: int) -> list[float]:
        sc, rng = self.sc, self.rng
        self.block_factor = 3.0 if rng.random() < sc.block_burst else 1.0
        out = []
        for _ in range(k):
            d = self.op_s * math.exp(self.offset + rng.gauss(0.0, sc.noise)) * self.block_factor
            if rng.random() < sc.sample_burst:
                d *= 10.0
            out.append(d)
            self.advance(d + FLUSH_S[sc.device])
        return out


def rule_for(sc: Scenario) -> BlockRule:
    return visit_rule(CPU_BLOCKS if sc.device == "cpu" else GPU_BLOCKS)


def row_times(sc: Scenario, rows: int, rng: random.Random) -> list[float]:
    lo, hi = (100e-6, 400e-6) if sc.device == "cpu" else (10e-6, 100e-6)
    return [lo * (hi / lo) ** rng.random() for _ in range(rows)]


def drifts(sc: Scenario, rows: int, rng: random.Random) -> list[float]:
    """Each row's between-visit sd: the scenario's, or for rows unlike each other one drawn per row."""
    if sc.drift_hi is None:
        return [sc.drift] * rows
    return [rng.uniform(sc.drift, sc.drift_hi) for _ in range(rows)]


def sweep(host: SimHost, times: list[float], factors: list[float], drift: list[float]) -> list[tuple[Visit, Visit]]:
    """One sweep: every row's first visit (pass 1, one process), then every row's second (pass 2, another)."""
    sc, rng = host.sc, host.rng
    visits: list[list[Visit]] = [[] for _ in times]
    run = rng.gauss(0.0, sc.run_shift) if sc.run_shift else 0.0
    for _pass in range(2):
        shift = run + (rng.gauss(0.0, sc.pass_shift) if sc.pass_shift else 0.0)
        for i, (t, f) in enumerate(zip(times, factors)):
            host.op_s = t * f
            host.offset = shift + rng.gauss(0.0, drift[i]) + (rng.gauss(0.0, sc.process) if sc.process else 0.0)
            got = sample_blocks(host.sample, rule_for(sc), sleep=host.advance, clock=lambda: host.t)
            visits[i].append(visit_of(got.blocks))
    return [(a, b) for a, b in visits]


@dataclass
class Row:
    level: float
    lo: float  # prediction
    hi: float
    level_lo: float
    level_hi: float
    df: float


def intervals(sc: Scenario, pairs: list[tuple[Visit, Visit]], prior: HostPrior, code: str = "same"
              ) -> tuple[list[Row], HostPrior]:
    """The bench's own: the rows' pairs pooled by kind under this host's prior, each row's interval, and the
    prior as the run leaves it (its rows read against the last run of the same ``code``)."""
    kinds = [KINDS[i % 2] for i in range(len(pairs))]
    model = pool([Pair(k, a, b) for k, (a, b) in zip(kinds, pairs)], sc.device, prior)
    out, levels = [], {}
    for i, (k, (a, b)) in enumerate(zip(kinds, pairs)):
        iv = row_interval([a, b], k, model, row=f"row {i}")
        out.append(Row(iv.level_s, iv.rerun[0], iv.rerun[1], iv.level_ci[0], iv.level_ci[1], iv.df))
        levels[f"row {i}"] = (k, math.log(iv.level_s), iv.model_var, iv.model_df)
    return out, prior.updated(with_reruns(model, prior, levels, code))


def side(r: Row) -> Side:
    return Side(r.level, (r.level_lo, r.level_hi), r.df)


def burst_sensitivity(sc: Scenario, rng: random.Random, rows: int) -> float:
    """The largest ratio of a row's prediction width with one of its twenty blocks x3 to its width without."""
    worst = 1.0
    for _ in range(rows):
        host = SimHost(replace(sc, block_burst=0.0, sample_burst=0.0), rng)
        times = row_times(sc, 6, rng)
        blocks_per_row: list[list[list[list[float]]]] = []
        for t in times:
            host.op_s = t
            visits_blocks = []
            for _v in range(2):
                host.offset = rng.gauss(0.0, sc.drift)
                visits_blocks.append([host.sample(5) for _ in range(20)])
            blocks_per_row.append(visits_blocks)

        def width(blocks: list[list[list[list[float]]]]) -> float:
            pairs = [(visit_of(v[0]), visit_of(v[1])) for v in blocks]
            model = pool([Pair("memory", a, b) for a, b in pairs], sc.device, None)
            iv = row_interval(list(pairs[0]), "memory", model)
            return math.log(iv.rerun[1] / iv.level_s)

        clean = width(blocks_per_row)
        hit = [[[list(b) for b in v] for v in row] for row in blocks_per_row]
        j = rng.randrange(20)
        hit[0][0][j] = [x * 3.0 for x in hit[0][0][j]]
        worst = max(worst, width(hit) / clean if clean > 0 else 1.0)
    return worst


def run_scenario(sc: Scenario, rows: int, per_sweep: int, seed: int) -> dict:
    rng = random.Random(f"{seed}-{sc.name}")
    host = SimHost(sc, rng)
    prior = HostPrior()
    covered = total = unstable = 0
    bar = 0.05 if sc.device == "cpu" else 0.02  # the roofline's unstable bar (tileops.roofline.noise)
    ratios: list[float] = []
    deltas: list[float] = []
    false_calls = unchanged = same = same_n = changed = caught = 0
    sweeps = max(2, rows // per_sweep)
    times = row_times(sc, per_sweep, rng)
    drift = drifts(sc, per_sweep, rng)
    previous: list[Row] | None = None
    for s in range(sweeps + 1):
        # the same code: the comparison with the previous sweep counts false calls and `same`
        rows_now, prior = intervals(sc, sweep(host, times, [1.0] * per_sweep, drift), prior)
        if previous is not None:
            for a, b in zip(previous, rows_now):
                total += 1
                unstable += max(a.level_hi / a.level - 1, 1 - a.level_lo / a.level) > bar
                covered += a.lo <= b.level <= a.hi
                deltas.append(abs(math.log(b.level / a.level)))
                ratios.append(math.log(a.hi / a.level))
            for d in classify_all([(side(a), side(b)) for a, b in zip(previous, rows_now)]):
                unchanged += 1
                same_n += 1
                false_calls += d.status in ("slower", "faster")
                same += d.status == "same"
        # a change in a quarter of the rows, against this sweep: power
        factors = [1.0 + sc.change if i % 4 == 0 else 1.0 for i in range(per_sweep)]
        changed_rows, _ = intervals(sc, sweep(host, times, factors, drift), prior, code="changed")  # not this code
        for i, d in enumerate(classify_all([(side(a), side(b)) for a, b in zip(rows_now, changed_rows)])):
            if factors[i] != 1.0:
                changed += 1
                caught += d.status == "slower"
            else:
                unchanged += 1
                false_calls += d.status in ("slower", "faster")
        previous = rows_now
    oracle = sorted(deltas)[int(0.95 * len(deltas))] if deltas else math.nan
    width = sorted(r / oracle for r in ratios) if oracle > 0 else [math.nan]
    return {"scenario": sc.name, "rows": total, "coverage": covered / total if total else math.nan,
            "width_median": statistics.median(width), "width_p90": width[int(0.9 * (len(width) - 1))],
            "burst_x3": burst_sensitivity(sc, rng, max(20, rows // 50)),
            "false_calls": false_calls / unchanged if unchanged else math.nan,
            "power": caught / changed if changed else math.nan, "change": sc.change,
            "same": same / same_n if same_n else math.nan, "unstable": unstable / total if total else math.nan, "drift_goal": sc.drift_goal, "same_goal": sc.same_goal}


def goals(r: dict, beyond_issue: bool) -> list[str]:
    """The goals a scenario's figures miss (issue 34's 'Done when')."""
    missed = []
    if not 0.90 <= r["coverage"] <= 0.97:
        missed.append("coverage")
    if r["width_median"] > 1.2 or r["width_p90"] > 1.5:
        missed.append("width")
    if r["burst_x3"] >= 1.5:
        missed.append("x3 block")
    if r["false_calls"] > 0.01:
        missed.append("false calls")
    if r["drift_goal"] and r["power"] < 0.90:
        missed.append("power")
    if r["same_goal"] and r["same"] < 0.90:
        missed.append("same")
    return [] if beyond_issue else missed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2000, help="rows compared per scenario (default 2000)")
    ap.add_argument("--rows-per-sweep", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="200 rows a scenario")
    ap.add_argument("--scenario", action="append", help="only these scenarios (by name)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    rows = 200 if args.quick else args.rows
    print(f"simulated hosts: {rows} rows a scenario in sweeps of {args.rows_per_sweep}, seed {args.seed}; "
          "goals: coverage 90-97 %, width/oracle median <= 1.2 and p90 <= 1.5, one x3 block < 1.5x, "
          "false calls <= 1 %, power >= 90 % (where marked *), same >= 90 % (where marked +)")
    print(f"{'scenario':<24}{'coverage':>9}{'width':>7}{'p90':>6}{'x3 blk':>8}{'false':>7}{'power':>8}"
          f"{'same':>7}{'unstbl':>8}  missed")
    out, failed = [], False
    for sc in SCENARIOS:
        if args.scenario and sc.name not in args.scenario:
            continue
        r = run_scenario(sc, rows, args.rows_per_sweep, args.seed)
        missed = goals(r, beyond_issue=sc.name in BEYOND)
        failed |= bool(missed)
        out.append({**r, "missed": missed})
        power = f"{r['power']:.0%}{'*' if sc.drift_goal else ''}"
        same = f"{r['same']:.0%}{'+' if sc.same_goal else ''}"
        print(f"{sc.name:<24}{r['coverage']:>9.1%}{r['width_median']:>7.2f}{r['width_p90']:>6.2f}"
              f"{r['burst_x3']:>8.2f}{r['false_calls']:>7.1%}{power:>8}{same:>7}{r['unstable']:>8.0%}  "
              f"{', '.join(missed) or ('(beyond the issue)' if sc.name in BEYOND else '-')}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
