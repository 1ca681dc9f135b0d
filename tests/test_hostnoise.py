"""Each row's own uncertainty (tileops.bench.hostnoise): the host's components pooled from a sweep's pairs of
visits by row kind, the per-host stored prior, and a row's level with its two intervals.

Deterministic visits are built by hand (a visit's centre and spread are what the pooling reads); the coverage,
width and power on simulated hosts are benchmarks/interval_sim.py's, run small at the end."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tileops.bench.hostnoise import (DEFAULT_BETWEEN, DEFAULT_HOST, DEFAULT_RUN, MIN_CALIBRATION_DF, MIN_POOL_ROWS,
                                     HostPrior, Pair, host_estimate, pool, prior_model, read_prior, row_interval,
                                     with_reruns, write_prior)
from tileops.stats import robust_scale
from tileops.bench.interval import Visit
from tileops.stats import two_sided_t

ROOT = Path(__file__).resolve().parents[1]


def _v(centre: float, spread: float | None = 0.01, blocks: int = 8) -> Visit:
    return Visit(centre_s=centre, spread=spread, blocks=blocks, n=blocks * 5)


def _pairs(kind: str, offsets: list[float], shift: float = 0.0, base: float = 1e-3) -> list[Pair]:
    """Rows whose second visit is exp(offset + shift) times the first."""
    return [Pair(kind, _v(base), _v(base * math.exp(o + shift))) for o in offsets]


# -- pooling -----------------------------------------------------------------------------------------------


def test_a_shift_common_to_every_row_is_one_number_not_a_widening() -> None:
    """Issue 34: the old spread about zero read a 5 % shift of the whole second pass as per-row drift (±15.5 %
    on every row). Taken about the median, the rows agree: no between-visit spread, the shift kept apart."""
    offsets = [0.01, -0.01, 0.0, 0.005, -0.005, 0.002]
    model = pool(_pairs("memory", offsets, shift=math.log(1.05)), "cpu")
    assert model.shift["memory"] == pytest.approx(math.log(1.05) + 0.001, abs=1e-3)
    assert model.between["memory"].sigma < 0.01 and model.between["memory"].source == "this run (6 rows)"
    plain = pool(_pairs("memory", offsets), "cpu")
    assert model.between["memory"].sigma == pytest.approx(plain.between["memory"].sigma, abs=1e-9)


def test_the_between_visit_sd_is_net_of_the_visits_own_noise() -> None:
    rng = random.Random(1)
    offsets = [rng.gauss(0.0, 0.1 * math.sqrt(2)) for _ in range(400)]  # sigma 0.1 a visit
    model = pool(_pairs("memory", offsets), "cpu")
    assert model.between["memory"].sigma == pytest.approx(0.1, rel=0.1)
    # visits whose own blocks already explain the differences: nothing left between them
    noisy = [Pair("memory", _v(1e-3, spread=0.3), _v(1e-3 * math.exp(rng.gauss(0, 0.05)), spread=0.3))
             for _ in range(50)]
    assert pool(noisy, "cpu").between["memory"].sigma == 0.0


def test_a_burst_in_a_few_rows_neither_widens_the_rest_nor_zeroes_the_drift() -> None:
    """Issue 34: with 10 % of the rows slowed threefold the old estimate was always 0."""
    rng = random.Random(2)
    offsets = [rng.gauss(0.0, 0.05 * math.sqrt(2)) for _ in range(60)]
    calm = pool(_pairs("memory", offsets), "cpu").between["memory"].sigma
    burst = pool(_pairs("memory", offsets[:54] + [math.log(3.0)] * 6), "cpu").between["memory"].sigma
    assert calm == pytest.approx(0.05, rel=0.25) and burst == pytest.approx(calm, rel=0.3) and burst > 0.02


def test_rows_are_pooled_only_with_rows_of_their_kind() -> None:
    rng = random.Random(3)
    memory = _pairs("memory", [rng.gauss(0, 0.2 * math.sqrt(2)) for _ in range(40)])
    compute = _pairs("compute", [rng.gauss(0, 0.02 * math.sqrt(2)) for _ in range(40)], shift=0.1)
    model = pool(memory + compute, "cpu")
    assert model.between["memory"].sigma == pytest.approx(0.2, rel=0.2)
    assert model.between["compute"].sigma == pytest.approx(0.02, rel=0.3)
    assert model.shift["compute"] == pytest.approx(0.1, abs=0.01) and abs(model.shift["memory"]) < 0.06
    assert model.rows_by_kind == {"memory": 40, "compute": 40} and model.pairs == 80


def test_too_few_rows_of_a_kind_say_so_and_use_the_stored_prior_or_the_documented_default() -> None:
    few = _pairs("compute", [0.3, -0.3])
    model = pool(few + _pairs("memory", [0.0, 0.01, -0.01]), "cpu")
    assert MIN_POOL_ROWS == 3
    shift = model.shift["compute"]
    assert shift == model.shift["memory"]  # the shift of every row stands in
    own = math.sqrt(sum(max(0.0, (x - shift) ** 2 / 2 - 0.01 ** 2 * 0.2) for x in (0.3, -0.3)) / 2)
    default = DEFAULT_BETWEEN["cpu"]["compute"]
    assert model.between["compute"].sigma == pytest.approx(math.sqrt((2 * default ** 2 + 2 * own ** 2) / 4), rel=0.02)
    assert "documented default" in model.between["compute"].source and model.between["compute"].df == 4
    assert any("2 compute-bound row(s) visited twice, fewer than the 3" in n for n in model.notes)
    stored = HostPrior(between={"compute": _est(0.07, 12.0)}, runs=4)
    model = pool(few, "cpu", stored)  # two rows, no shift of every row: their mean, one degree of freedom
    assert model.between["compute"].df == 13 and "stored prior (4 run(s))" in model.between["compute"].source
    assert "documented default" in model.host["compute"].source  # no shift of this kind stored yet
    gpu = prior_model("cuda")
    assert gpu.between["memory"].sigma == DEFAULT_BETWEEN["cuda"]["memory"]


def _est(sigma: float, df: float):  # a stored estimate
    from tileops.bench.hostnoise import Estimate

    return Estimate(sigma, df, "stored")


def test_a_run_with_enough_rows_weighs_its_own_beside_the_stored_prior() -> None:
    rng = random.Random(4)
    offsets = [rng.gauss(0, 0.05 * math.sqrt(2)) for _ in range(11)]
    prior = HostPrior(between={"memory": _est(0.2, 30.0)}, runs=9)
    model = pool(_pairs("memory", offsets), "cpu", prior)
    own = model.own["memory"]
    assert own.df == 10 and "this run (11 rows) and this host's stored prior (9 run(s))" in model.between["memory"].source
    expected = math.sqrt((30 * 0.04 + 10 * own.sigma ** 2) / 40)
    assert model.between["memory"].sigma == pytest.approx(expected)


# -- the host's shift -------------------------------------------------------------------------------------


def test_the_hosts_reruns_calibrate_the_next_runs_and_never_the_run_itself() -> None:
    """What one run's visits cannot see (the host over minutes) shows when a run of the same code is read
    against the one before it: the rows' differences over the sd the model gave them, split into what the
    rows share and what is each row's own. Once the reruns weigh MIN_CALIBRATION_DF degrees of freedom, they
    scale the next runs' variances; this run's own reading is never used for itself (a code change that
    slowed every row must show as a change), nor is a run of other code."""
    var = 0.01 ** 2
    before = {f"r{i}": ("memory", 0.0, var, 30.0) for i in range(6)}
    prior = HostPrior(levels=before, code="v1")
    offsets = [0.06, 0.03, 0.05, 0.01, 0.04, 0.02]  # together 3.5 % up, each its own 1-2 % about that
    now = {f"r{i}": ("memory", o, var, 30.0) for i, o in enumerate(offsets)}
    model = with_reruns(pool(_pairs("memory", [0.0] * 6), "cpu", prior), prior, now, "v1")
    c2, own, n = model.own_rerun["memory"]
    jensen = math.sqrt(58 / 60)  # each z sheds the bias of an estimated variance: Satterthwaite's df 60
    z = [o / math.sqrt(2 * var) * jensen for o in offsets]
    centre = __import__("statistics").median(z)
    assert (c2, n) == (pytest.approx(centre ** 2), 6.0)
    assert own == pytest.approx(robust_scale([x - centre for x in z], 0.0) ** 2 * 5 / 6)
    assert "memory" not in model.calibration  # this run's own reading: not used for itself
    after = prior.updated(model)
    assert after.reruns["memory"] == [(c2, own, 6.0)] and after.code == "v1" and after.levels["r0"][1] == 0.06
    c = after.calibration("memory")
    assert c is not None and c.factor2 == pytest.approx(c2 + own) and c.runs == 1
    assert c.df < MIN_CALIBRATION_DF  # one run whose rows moved together: too little to calibrate on
    ten = replace(after, reruns={"memory": [(c2, own, 6.0)] * 10})
    nxt = pool(_pairs("memory", [0.0] * 6), "cpu", ten)
    assert nxt.calibration["memory"].df >= MIN_CALIBRATION_DF
    one = row_interval([_v(1e-3, spread=0.0)], "memory", nxt)
    assert math.log(one.level_ci[1] / one.level_s) / two_sided_t(0.95, one.df) == pytest.approx(
        math.sqrt((c2 + own) * one.model_var))
    early = row_interval([_v(1e-3, spread=0.0)], "memory", pool(_pairs("memory", [0.0] * 6), "cpu", after))
    assert early.level_ci[1] / early.level_s - 1 > 0.2  # the documented run-level default stands meanwhile
    other = with_reruns(pool(_pairs("memory", [0.0] * 6), "cpu", prior), prior, now, "v2")
    assert other.own_rerun == {} and prior.updated(other).code == "v2"  # other code: its levels start afresh
    assert set(prior.updated(other).levels) == set(now)


def test_a_run_whose_rows_all_moved_together_is_worth_one_degree_of_freedom() -> None:
    """Reruns weighed naively by their rows would let calm runs (rows independent, many degrees of freedom)
    outweigh wild ones (a whole run shifted, its rows alike): the common part is one degree of freedom a run,
    averaged over the runs, the rows' own part pooled apart."""
    wild, calm = (16.0, 0.5, 10.0), (0.0, 1.0, 10.0)
    prior = HostPrior(reruns={"memory": [wild, calm, calm, calm]})
    c = prior.calibration("memory")
    assert c is not None and c.factor2 == pytest.approx(16.0 / 4 + (0.5 + 3 * 1.0) / 4)
    common, own = 4.0, 0.875
    assert c.df == pytest.approx((common + own) ** 2 / (common ** 2 / 4 + own ** 2 / 36))


def test_the_hosts_sd_comes_from_its_history_of_shifts_about_their_mean_net_of_their_noise() -> None:
    """A second pass that always runs 20 % faster moves every run's level alike: no uncertainty; only the
    shifts' spread about their mean is."""
    assert host_estimate([(0.1, 0.0), (-0.1, 0.0)], "x").sigma == pytest.approx(0.1)  # variance 0.02, / 2
    assert host_estimate([(0.2, 0.0), (0.2, 0.0), (0.2, 0.0)], "x").sigma == 0.0  # always the same shift
    assert host_estimate([(0.1, 0.0)], "x").sigma == pytest.approx(0.1 / math.sqrt(2))  # one run cannot tell
    assert host_estimate([(0.01, 0.001)], "x").sigma == 0.0  # all noise
    prior = HostPrior(shifts={"memory": [(0.08, 0.0), (-0.12, 0.0), (0.1, 0.0)]}, runs=3)
    h = prior.host("memory")
    assert h is not None and h.df == 2
    assert h.sigma == pytest.approx(math.sqrt(__import__("statistics").variance([0.08, -0.12, 0.1]) / 2))
    assert prior.host("compute") is None


# -- the stored prior ----------------------------------------------------------------------------------------


def test_the_prior_is_updated_by_a_run_and_round_trips(tmp_path: Path) -> None:
    rng = random.Random(5)
    model = pool(_pairs("memory", [rng.gauss(0, 0.07) for _ in range(8)], shift=0.03), "cpu")
    prior = HostPrior().updated(model)
    assert prior.runs == 1 and set(prior.between) == {"memory"} and prior.between["memory"].df == 7
    assert prior.shifts["memory"][0][0] == pytest.approx(model.shift["memory"])
    again = prior.updated(model)
    assert again.runs == 2 and again.between["memory"].df == 14 and len(again.shifts["memory"]) == 2
    path = tmp_path / "noise" / "cpu-x.json"
    write_prior(path, again)
    back, warning = read_prior(path)
    assert warning is None and back is not None and back.to_json() == again.to_json()
    # a run that pooled nothing leaves it as it was
    assert HostPrior().updated(pool([], "cpu")).runs == 0


def test_the_prior_forgets_beyond_its_cap() -> None:
    rng = random.Random(6)
    model = pool(_pairs("memory", [rng.gauss(0, 0.07) for _ in range(25)]), "cpu")
    prior = HostPrior()
    for _ in range(5):
        prior = prior.updated(model)
    assert prior.between["memory"].df == 30  # PRIOR_MAX_DF
    assert len(HostPrior(shifts={"memory": [(0.0, 0.0)] * 20}).updated(model).shifts["memory"]) == 20


@pytest.mark.parametrize("text, words", [
    ("not json", "not JSON"), ('{"version": 2}', "version 1"), ('{"version": 1, "between": []}', "row kind"),
    ('{"version": 1, "between": {"gpu": {"sigma": 1, "df": 1}}}', "row kind"),
    ('{"version": 1, "between": {"memory": {"sigma": -1, "df": 1}}}', "between.memory.sigma"),
    ('{"version": 1, "shifts": {"memory": [0.1]}}', "shift, noise variance"),
    ('{"version": 1, "shifts": {"memory": [[0.1, -1]]}}', "shifts.memory[][1]"),
    ('{"version": 1, "levels": {"r": ["gpu", 0.1, 0.01, 3]}}', "row kind, ln level"),
    ('{"version": 1, "reruns": {"memory": [[-1, 3, 4]]}}', "reruns.memory[][0]"),
    ('{"version": 1, "reruns": {"memory": [[1, 3]]}}', "common part, own part, rows"),
    ('{"version": 1, "code": 3}', "code must be a string")])
def test_an_unusable_prior_is_named_and_the_defaults_stand_in(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "cpu.json"
    path.write_text(text)
    prior, warning = read_prior(path)
    assert prior is None and warning is not None and words in warning and str(path) in warning
    assert "defaults stand in" in warning
    assert read_prior(tmp_path / "none.json") == (None, None)


# -- a row's interval -----------------------------------------------------------------------------------------


def test_a_row_visited_twice_by_hand() -> None:
    """Its level is the geometric mean of its visits; its per-visit variance the kind's (weighing 15 degrees of
    freedom here) and its own pair's (one) mixed; the level's interval t * sqrt(V), the rerun's t * sqrt(2 V)."""
    from tileops.bench.hostnoise import ROW_PRIOR_DF, Estimate, HostModel

    from tileops.bench.hostnoise import Calibration

    zero = {"memory": Estimate(0.0, 5.0, "x"), "compute": Estimate(0.0, 5.0, "x")}
    model = HostModel("cpu", {"memory": Estimate(0.1, 15.0, "x"), "compute": Estimate(0.02, 15.0, "x")},
                      host=zero, calibration={"memory": Calibration(1.0, math.inf, 9)}, shift={"memory": 0.05})
    a, b = _v(1e-3, spread=0.0), _v(1.2e-3, spread=0.0)
    iv = row_interval([a, b], "memory", model)
    assert iv.level_s == pytest.approx(math.sqrt(1e-3 * 1.2e-3)) and iv.visits == (1e-3, 1.2e-3)
    r = math.log(1.2) - 0.05
    nu0 = min(15.0, ROW_PRIOR_DF)
    tau2 = (nu0 * 0.01 + r * r / 2) / (nu0 + 1)
    df = (nu0 + 1) ** 2 / (nu0 * nu0 / 15.0 + 1)
    h = two_sided_t(0.95, df) * math.sqrt(tau2 / 2)
    assert iv.df == pytest.approx(df)
    assert iv.level_ci == pytest.approx((iv.level_s * math.exp(-h), iv.level_s * math.exp(h)))
    assert iv.rerun == pytest.approx((iv.level_s * math.exp(-h * math.sqrt(2)), iv.level_s * math.exp(h * math.sqrt(2))))
    assert iv.log_se == pytest.approx(math.sqrt(tau2 / 2))
    # a row whose pair disagrees more than its kind is wider than one that agrees: its own uncertainty
    wild = row_interval([a, _v(2e-3, spread=0.0)], "memory", model)
    calm = row_interval([a, _v(1.05e-3, spread=0.0)], "memory", model)
    assert math.log(wild.rerun[1] / wild.level_s) > math.log(calm.rerun[1] / calm.level_s)


def test_a_row_visited_once_takes_its_kinds_between_visit_sd() -> None:
    model = prior_model("cpu")
    one = row_interval([_v(1e-3, spread=0.0)], "compute", model)
    b, h, r = DEFAULT_BETWEEN["cpu"]["compute"] ** 2, DEFAULT_HOST["cpu"] ** 2, DEFAULT_RUN["cpu"] ** 2
    assert math.log(one.level_ci[1] / one.level_s) == pytest.approx(two_sided_t(0.95, one.df) * math.sqrt(b + h + r))
    assert one.df == pytest.approx((b + h + r) ** 2 / (b * b / 2 + h * h / 2 + r * r / 6))  # defaults: 2, 2, 6 df
    with pytest.raises(ValueError, match="one or two visits"):
        row_interval([], "memory", model)
    with pytest.raises(ValueError, match="row kind"):
        row_interval([_v(1e-3)], "io", model)


# -- the simulation, small -------------------------------------------------------------------------------------


def _sim():
    name = "benchmarks_interval_sim"
    if name not in sys.modules:  # registered first: its dataclasses look their module up while being built
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "interval_sim.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


@pytest.mark.parametrize("scenario", ["cpu drift 3 %", "gpu drift 1 %"])
def test_the_simulated_hosts_coverage_and_power(scenario: str) -> None:
    """benchmarks/interval_sim.py on 400 rows (the first sweeps, on a host with no history, stand on the defaults): a rerun's level inside the prediction most of the time, a real
    regression called slower, the same code never called changed (the full figures are the benchmark's)."""
    sim = _sim()
    sc = next(s for s in sim.SCENARIOS if s.name == scenario)
    r = sim.run_scenario(sc, rows=400, per_sweep=20, seed=1)
    assert 0.85 <= r["coverage"] <= 1.0
    assert r["width_median"] < 1.4 and r["burst_x3"] < 1.5
    assert r["false_calls"] <= 0.02 and r["power"] >= 0.8
    json.dumps(r)  # the benchmark's --json writes it


def test_a_row_known_to_under_one_degree_of_freedom_is_held_to_one_and_its_record_reads_back() -> None:
    """A host whose reruns were read on one row once, and a row whose model rests on little: the mixture's
    degrees of freedom fall under one, which no t quantile (and no record: timing.ci_df >= 1) takes. Seen on
    the development VM, where the bench then could not rewrite its records."""
    from roofline_fixtures import make_record

    from tileops.bench import revisit
    from tileops.bench.hostnoise import Calibration
    from tileops.records import Timing, parse_record, to_json

    model = replace(prior_model("cpu"), calibration={"memory": Calibration(4.0, 10.0, 1)})
    model = replace(model, within={}, host={k: replace(e, df=1.0) for k, e in model.host.items()})
    iv = row_interval([_v(1e-3, spread=0.2, blocks=2)], "memory", model)
    assert iv.df >= 1.0
    rec = revisit.finish(make_record(median_s=1e-3), [_v(1e-3, spread=0.2, blocks=2)], "memory", model)
    assert rec.timing.ci_df >= 1.0 and Timing.contract_check(rec.timing) is None
    assert parse_record(to_json(rec), "x").timing == rec.timing


def test_a_row_that_moves_more_between_runs_than_its_kind_is_wider_and_the_kinds_factor_never_narrows() -> None:
    """Each row's own reruns (the sum of its z^2) weigh beside its kind's factor (ROW_RERUN_PRIOR_DF reruns'
    worth): a row that moved 3 sd a rerun is wider, one that barely moved narrower. The kind's factor is held
    at 1 at least: a calm past is no licence to be narrower than this run's own visits show."""
    from tileops.bench.hostnoise import ROW_RERUN_PRIOR_DF, Calibration

    base = replace(prior_model("cpu"), calibration={"memory": Calibration(1.0, 50.0, 10)},
                   row_reruns={"wild": (9.0 * 10, 10.0), "calm": (0.04 * 10, 10.0)})
    visit = [_v(1e-3, spread=0.01)]
    plain = row_interval(visit, "memory", base)
    wild = row_interval(visit, "memory", base, row="wild")
    calm = row_interval(visit, "memory", base, row="calm")
    h = lambda iv: math.log(iv.level_ci[1] / iv.level_s) / two_sided_t(0.95, iv.df)
    assert h(wild) == pytest.approx(math.sqrt((ROW_RERUN_PRIOR_DF + 90) / 20 * plain.model_var))
    assert h(calm) == pytest.approx(math.sqrt((ROW_RERUN_PRIOR_DF + 0.4) / 20 * plain.model_var))
    assert h(calm) < h(plain) < h(wild)
    narrow = replace(base, calibration={"memory": Calibration(0.3, 50.0, 10)})
    assert h(row_interval(visit, "memory", narrow)) == pytest.approx(h(plain))  # held at 1
    rows = HostPrior(row_reruns={"r": (2.0, 3.0)})
    back = HostPrior.from_json(rows.to_json(), "x")
    assert back.row_reruns == {"r": (2.0, 3.0)}


def test_the_prior_keeps_each_rows_reruns_and_forgets_the_oldest() -> None:
    var = 0.01 ** 2
    before = {f"r{i}": ("memory", 0.0, var, 1000.0) for i in range(4)}
    prior = HostPrior(levels=before, code="v1", row_reruns={"r0": (40.0, 20.0)})
    now = {f"r{i}": ("memory", 0.02, var, 1000.0) for i in range(4)}
    model = with_reruns(pool(_pairs("memory", [0.0] * 4), "cpu", prior), prior, now, "v1")
    z2 = (0.02 / math.sqrt(2 * var)) ** 2 * (1998 / 2000)
    assert model.own_row_z2["r1"] == pytest.approx(z2)
    after = prior.updated(model)
    assert after.row_reruns["r1"] == (pytest.approx(z2), 1.0)
    assert after.row_reruns["r0"] == (pytest.approx(40.0 * 19 / 20 + z2), 20.0)  # the oldest weighed down
    other = with_reruns(pool(_pairs("memory", [0.0] * 4), "cpu", prior), prior, now, "v2")
    assert prior.updated(other).row_reruns == {}  # other code: afresh
