"""Benchmark (issue 26): does a row's interval cover what a rerun of the row gives? Back-to-back beside blocks.

Each plan is judged by its *coverage*: the share of rows whose rerun's median lies inside the first
run's interval (the goal of issue 26: 90 % or more), beside the interval's median half-width (its
price).

* back to back: the bench's sampling before blocks (``StoppingRule`` on the order-statistic interval of
  samples taken back to back, ``tileops.bench.stopping``), interval = median ± its precision;
* blocks: ``tileops.bench.interval`` (blocks spread over the row by pauses, the rerun interval from
  the block medians, the stopping rule on that interval);
* blocks, two passes: a sweep visits every row twice (``visit_rules``), the interval from both
  visits' blocks;
* two passes + drift: those intervals widened by the host's drift, which the rows' two visits show
  when pooled over the sweep (``visit_drift``, ``widen``).

``--simulate`` (the default): a simulated host, so the truth is known and the run takes seconds.
Each scenario is a model of what makes a rerun differ, seeded, so a run prints the same figures:
  stationary  independent samples, multiplicative noise (the textbook case);
  drift       the host's speed drifts on the time scale of a row (an Ornstein-Uhlenbeck log-speed);
  slow-drift  it drifts over a minute, far slower than a row: one visit cannot see it, two see a part;
  bursts      other jobs come and go; while one runs most samples wait a scheduler slice (bimodal).
A rerun is the same row a sweep later (120 simulated seconds); the sweep plans run sweeps of 20 rows
(ops of 100-400 µs) on one host. Time is simulated: each sample costs its duration plus a
cold-cache flush, each pause its length.

``--real``: relu, add and softmax (512x1024 fp32) on this CPU, through the bench's own path
(``Op.prepare``, the LLC read sweep before every sample); ``--rounds`` rounds, each measuring every
row by each plan, interleaved (the two-pass plan visits every row a second time after the round's
first passes); coverage counts round r+1 against round r. It prints the load average before and
after: on a shared host the figures say as much about the neighbours as the plan.

    python benchmarks/interval_coverage.py [--simulate] [--rows 400] [--real] [--rounds 6] [--threads N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from tileops.bench.interval import (CPU_BLOCKS, BlockRule, BlockSampling, sample_blocks, visit_drift,
                                    visit_rules, widen)
from tileops.bench.stopping import CPU_RULE, StoppingRule, median_precision

#: Where a rerun happens, in simulated seconds after the first run: a sweep later.
RERUN_AFTER_S = 120.0
#: A cold CPU sample's overhead beyond the op: the LLC read sweep (docs/timing.md measured ~3.5 ms).
FLUSH_S = 3.5e-3


# -- the simulated host --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    noise: float = 0.05  # per-sample multiplicative noise (lognormal sigma)
    drift: float = 0.0  # stationary sigma of the log-speed drift
    drift_tau_s: float = 1.0  # its correlation time
    busy_share: float = 0.0  # long-run share of time another job runs
    busy_mean_s: float = 1.0  # how long one runs
    slice_prob: float = 0.0  # while one runs: the chance a sample waits a slice
    slice_factor: float = 40.0


SCENARIOS = (
    Scenario("stationary"),
    Scenario("drift", drift=0.12, drift_tau_s=0.5),
    Scenario("slow-drift", drift=0.12, drift_tau_s=60.0),
    Scenario("bursts", noise=0.05, busy_share=0.15, busy_mean_s=0.6, slice_prob=0.6),
)


class SimHost:
    """A host whose speed drifts and whose neighbours come and go; time moves only forward."""

    def __init__(self, scenario: Scenario, seed: int, op_s: float = 150e-6) -> None:
        self.sc = scenario
        self.rng = random.Random(seed)
        self.op_s = op_s
        self.t = 0.0
        self.x = self.rng.gauss(0.0, scenario.drift) if scenario.drift else 0.0
        self.busy = self.rng.random() < scenario.busy_share

    def advance(self, dt: float) -> None:
        sc, rng = self.sc, self.rng
        if sc.drift:
            a = math.exp(-dt / sc.drift_tau_s)
            self.x = self.x * a + sc.drift * math.sqrt(max(0.0, 1.0 - a * a)) * rng.gauss(0.0, 1.0)
        if sc.busy_share:
            mean = sc.busy_mean_s if self.busy else sc.busy_mean_s * (1 - sc.busy_share) / sc.busy_share
            if dt > 5 * mean:
                self.busy = rng.random() < sc.busy_share
            elif rng.random() > math.exp(-dt / mean):
                self.busy = not self.busy
        self.t += dt

    def sample(self, k: int) -> list[float]:
        out = []
        for _ in range(k):
            d = self.op_s * math.exp(self.x + self.rng.gauss(0.0, self.sc.noise))
            if self.busy and self.rng.random() < self.sc.slice_prob:
                d *= self.sc.slice_factor
            out.append(d)
            self.advance(d + FLUSH_S)
        return out


# -- the two plans on a simulated host -------------------------------------------------------------------


Interval = tuple[float, float, float]  # (median, lo, hi)


def back_to_back(host: SimHost, rule: StoppingRule = CPU_RULE) -> Interval:
    """The bench's loop before blocks: batches growing by half, ``rule.decide`` after each."""
    t0 = host.t
    samples: list[float] = []
    batch = 1
    while True:
        samples.extend(host.sample(batch))
        if rule.decide(samples, host.t - t0):
            break
        batch = max(1, min(len(samples) // 2, 64, rule.max_samples - len(samples)))
    med = statistics.median(samples)
    p = median_precision(samples)
    return med, med * (1 - p), med * (1 + p)


def blocks(host: SimHost, rule: BlockRule = CPU_BLOCKS, prior: Sequence[Sequence[float]] = ()
           ) -> tuple[Interval, list[list[float]]]:
    got = sample_blocks(host.sample, rule, prior=prior, sleep=host.advance, clock=lambda: host.t)
    iv = got.interval
    assert iv is not None
    return (iv.median_s, iv.lo_s, iv.hi_s), got.blocks


PLANS: dict[str, Callable[[SimHost], Interval]] = {
    "back to back": back_to_back,
    "blocks": lambda h: blocks(h)[0],
}
#: Plans over a whole sweep: each row visited twice (a sweep's two passes), then, for the second, every row's
#: interval widened by the drift the rows' two visits show, pooled (``interval.visit_drift`` and ``widen``).
SWEEP_PLANS = ("blocks, two passes", "two passes + drift")


def sweep(host: SimHost, ops_s: Sequence[float], rule: BlockRule = CPU_BLOCKS) -> dict[str, list[Interval]]:
    """One sweep on one host: every row's first visit, then every row's second; the intervals of each sweep plan."""
    first_rule, second_rule = visit_rules(rule)
    firsts = []
    for op_s in ops_s:
        host.op_s = op_s
        firsts.append(blocks(host, first_rule)[1])
    pooled: list[Interval] = []
    pairs = []
    ivs = []
    for op_s, first in zip(ops_s, firsts):
        host.op_s = op_s
        got = sample_blocks(host.sample, second_rule, prior=first, sleep=host.advance, clock=lambda: host.t)
        assert got.interval is not None
        ivs.append(got.interval)
        pairs.append((first, got.blocks[len(first):]))
        pooled.append((got.interval.median_s, got.interval.lo_s, got.interval.hi_s))
    drift = visit_drift(pairs) or 0.0
    widened = [widen(iv, drift) for iv in ivs]
    return {"blocks, two passes": pooled, "two passes + drift": [(w.median_s, w.lo_s, w.hi_s) for w in widened]}


@dataclass
class Coverage:
    covered: int = 0
    rows: int = 0
    half_widths: list[float] | None = None
    row_s: list[float] | None = None

    @property
    def share(self) -> float:
        return self.covered / self.rows if self.rows else math.nan


def simulate(scenario: Scenario, plan: Callable[[SimHost], Interval], rows: int, seed: int = 1) -> Coverage:
    """Coverage of a rerun's median by the first run's interval, over ``rows`` simulated rows."""
    cov = Coverage(half_widths=[], row_s=[])
    for i in range(rows):
        host = SimHost(scenario, seed=seed * 100_003 + i)
        t0 = host.t
        med, lo, hi = plan(host)
        cov.row_s.append(host.t - t0)
        host.advance(RERUN_AFTER_S)
        again, _, _ = plan(host)
        cov.rows += 1
        cov.covered += lo <= again <= hi
        cov.half_widths.append((hi - lo) / (2 * med))
    return cov


def simulate_sweeps(scenario: Scenario, rows: int, per_sweep: int = 20, seed: int = 1) -> dict[str, Coverage]:
    """Coverage of the sweep plans: sweeps of ``per_sweep`` rows (ops of 100-400 µs) on one host, each rerun
    ``RERUN_AFTER_S`` after its sweep ended."""
    out = {p: Coverage(half_widths=[], row_s=[]) for p in SWEEP_PLANS}
    for k in range(max(1, rows // per_sweep)):
        host = SimHost(scenario, seed=seed * 7_919 + k)
        ops = [100e-6 * (1 + 3 * i / max(1, per_sweep - 1)) for i in range(per_sweep)]
        t0 = host.t
        first = sweep(host, ops)
        row_s = (host.t - t0) / per_sweep
        host.advance(RERUN_AFTER_S)
        again = sweep(host, ops)
        for plan in SWEEP_PLANS:
            cov = out[plan]
            for (m, lo, hi), (m2, _, _) in zip(first[plan], again[plan]):
                cov.rows += 1
                cov.covered += lo <= m2 <= hi
                cov.half_widths.append((hi - lo) / (2 * m))
                cov.row_s.append(row_s)
    return out


def run_simulation(rows: int) -> dict:
    out: dict = {}
    print(f"simulated host: {rows} rows per scenario, a rerun {RERUN_AFTER_S:.0f} s later; coverage = share of "
          "reruns whose median lies in the first run's interval (goal >= 90 %)")
    print(f"{'scenario':<12} {'plan':<20} {'coverage':>9} {'median ±':>9} {'row time':>9}")
    for sc in SCENARIOS:
        covs = {name: simulate(sc, plan, rows) for name, plan in PLANS.items()}
        covs.update(simulate_sweeps(sc, rows))
        for name, cov in covs.items():
            hw = statistics.median(cov.half_widths or [math.nan])
            row_s = statistics.fmean(cov.row_s or [math.nan])
            out.setdefault(sc.name, {})[name] = {"coverage": cov.share, "median_half_width": hw, "row_s": row_s}
            print(f"{sc.name:<12} {name:<20} {cov.share:>8.1%} {hw:>8.2%} {row_s:>8.2f}s")
    return out


# -- the real rows ---------------------------------------------------------------------------------------


REAL_ROWS = [("relu", "cpu-512x1024"), ("add", "cpu-512x1024"), ("softmax", "cpu-512x1024")]


def _real_row(op_name: str, label: str) -> tuple[Callable[[], object], object]:
    from tileops.bench.timers import CacheFlusher, CpuWallTimer
    from tileops.device import cpu_llc_bytes
    from tileops.ops.catalog import load_entries
    from tileops.ops.workload import bind_row, build_inputs, instantiate

    entry = load_entries()[op_name]
    row = next(w for w in entry.workloads if w.label == label)
    op = instantiate(entry, row)
    fn = op.prepare(**build_inputs(op, bind_row(entry, row, "float32"), "cpu")).run
    return fn, CpuWallTimer(CacheFlusher("cpu", cpu_llc_bytes()))


def run_real(rounds: int) -> dict:
    import torch

    print(f"real rows on this CPU ({os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads), {rounds} rounds; "
          f"load before: {os.getloadavg()}")
    rows = {f"{op} {label}": _real_row(op, label) for op, label in REAL_ROWS}
    plans = ("back to back", "blocks", "blocks, two passes", "two passes + drift")
    got: dict[str, dict[str, list[Interval]]] = {p: {k: [] for k in rows} for p in plans}
    wall: dict[str, list[float]] = {p: [] for p in plans[:3]}  # the drift plan reuses the two passes' samples
    first_rule, second_rule = visit_rules(CPU_BLOCKS)

    def by_blocks(plan: str, key: str, rule: BlockRule, prior: Sequence[Sequence[float]] = ()) -> BlockSampling:
        fn, timer = rows[key]
        fn()
        t0 = time.perf_counter()
        res = sample_blocks(lambda k: timer.sample(fn, k), rule, rewarm=fn, prior=prior)
        wall[plan].append(time.perf_counter() - t0)
        if prior or plan != "blocks, two passes":
            assert res.interval is not None
            got[plan][key].append((res.interval.median_s, res.interval.lo_s, res.interval.hi_s))
        return res

    for _ in range(rounds):
        first_pass = {}
        for key, (fn, timer) in rows.items():
            t0 = time.perf_counter()
            got["back to back"][key].append(_b2b_interval(fn, timer))
            wall["back to back"].append(time.perf_counter() - t0)
            by_blocks("blocks", key, CPU_BLOCKS)
            first_pass[key] = by_blocks("blocks, two passes", key, first_rule).blocks
        second = {}
        for key in rows:  # the second pass: each row again, after every other row's first
            second[key] = by_blocks("blocks, two passes", key, second_rule, prior=first_pass[key])
        drift = visit_drift([(first_pass[k], second[k].blocks[len(first_pass[k]):]) for k in rows]) or 0.0
        for key in rows:
            iv = second[key].interval
            assert iv is not None
            w = widen(iv, drift)
            got["two passes + drift"][key].append((w.median_s, w.lo_s, w.hi_s))
    out: dict = {}
    print(f"{'plan':<20} {'coverage':>9} {'median ±':>9} {'wall/row':>9}   per row: medians (µs)")
    for plan, per_row in got.items():
        covered = total = 0
        widths = []
        for key, ivs in per_row.items():
            for (m, lo, hi), (again, _, _) in zip(ivs, ivs[1:]):
                covered += lo <= again <= hi
                total += 1
            widths += [(hi - lo) / (2 * m) for m, lo, hi in ivs]
        share = covered / total if total else math.nan
        out[plan] = {"coverage": share, "median_half_width": statistics.median(widths),
                     "wall_per_row_s": sum(wall.get(plan) or wall["blocks, two passes"]) / (rounds * len(rows)),
                     "medians_us": {k: [round(m * 1e6, 1) for m, _, _ in v] for k, v in per_row.items()}}
        print(f"{plan:<20} {share:>8.1%} {statistics.median(widths):>8.2%} "
              f"{out[plan]['wall_per_row_s']:>8.2f}s   " + "; ".join(
                  f"{k.split()[0]} " + " ".join(f"{m * 1e6:.0f}" for m, _, _ in v) for k, v in per_row.items()))
    print(f"load after: {os.getloadavg()}\n(two passes + drift: the drift is pooled over a round's {len(rows)} rows "
          "only; a sweep pools all of its rows)")
    return out


def _b2b_interval(fn: Callable[[], object], timer: object) -> Interval:
    """The bench's loop before blocks (``StoppingRule`` with the CPU rule, batches back to back) on a real row,
    its median ± its precision: :func:`back_to_back` with the real clock and timer for the simulated host's."""

    class RealHost:
        @property
        def t(self) -> float:
            return time.perf_counter()

        def sample(self, k: int) -> list[float]:
            return timer.sample(fn, k)  # type: ignore[attr-defined,no-any-return]

    fn()  # warm, as the bench's warm-up does
    return back_to_back(RealHost())  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--simulate", action="store_true", help="the simulated host (the default without --real)")
    ap.add_argument("--rows", type=int, default=400, help="simulated rows per scenario and plan")
    ap.add_argument("--real", action="store_true", help="real CPU rows (relu, add, softmax 512x1024 fp32)")
    ap.add_argument("--rounds", type=int, default=6, help="rounds of the real rows")
    ap.add_argument("--threads", type=int, help="torch threads for the real rows (default: torch's, as the bench)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    figures: dict = {}
    if args.simulate or not args.real:
        figures["simulated"] = run_simulation(args.rows)
    if args.real:
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        figures["real"] = run_real(args.rounds)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
