"""The bench's backend axis (issue 16): eager, torch.compile and Triton side by side on the same rows.

Planning (which backends run, which are skipped and why), the best backend per row and its margin,
and how the table, roofline.json/csv/md, the plot and the metrics show them; then, end to end on
this CPU, `tileops bench --backend all` on a few cpu rows, a real failed compile (a C++ compiler that
refuses to compile), and the compile time limit. The end-to-end runs compile with inductor (seconds
per row on two cores), so they are marked slow and kept to a few rows.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from export_support import env, profile, record, write_profile_file, write_run
from tileops.bench.select import DEFAULT_BACKENDS, Selection, plan, wanted_backends
from tileops.device import DeviceInfo, describe_device
from tileops.errors import TileOpsError
from tileops.ops import backends
from tileops.ops.catalog import load_entries
from tileops.ops.registry import load_all
from tileops.profiles import ProfileChooser
from tileops.records import iter_records
from tileops.report import render_text
from tileops.roofline import compare_backends, price_all, race_key
from cli_support import tileops

CPU = describe_device("cpu")
GPU = DeviceInfo(kind="cuda", name="(planning only)", index=0)  # no memory figure: nothing is sized


def planned(sel: Selection, device: DeviceInfo = CPU):
    return plan(load_entries(), load_all(), sel, device)


def triton_reason() -> str:
    return "interpreter" if backends.triton_installed() else "not installed"


# --------------------------------------------------------------------------- planning


def test_the_default_is_torch_on_a_cpu_and_every_backend_on_a_gpu() -> None:
    assert {p.backend for p in planned(Selection(ops=["relu", "gemm"]))} == {"torch"}
    assert DEFAULT_BACKENDS["cuda"] == backends.BACKENDS
    gpu = planned(Selection(ops=["relu", "gemm"], tags=["cpu"]), GPU)
    by_op = {op: {p.backend for p in gpu if p.op == op} for op in ("relu", "gemm")}
    assert by_op == {"relu": {"torch", "compile", "triton"}, "gemm": {"torch", "compile"}}  # gemm has no kernel


def test_all_is_every_backend_the_op_has_side_by_side_and_triton_is_skipped_on_a_cpu() -> None:
    rows = planned(Selection(ops=["relu", "gemm"], backends=["all"]))
    relu = [p for p in rows if p.op == "relu"]
    assert [p.backend for p in relu[:3]] == ["torch", "compile", "triton"]  # one row's backends together
    assert len({(p.row.label, p.case_name) for p in relu[:3]}) == 1
    for p in rows:
        if p.backend == "triton":
            assert p.skip_reason and triton_reason() in p.skip_reason
        else:
            assert p.skip_reason is None, (p.key, p.skip_reason)
    assert {p.backend for p in rows if p.op == "gemm"} == {"torch", "compile"}


def test_a_backend_named_twice_or_with_all_runs_once_and_an_unknown_one_is_refused() -> None:
    assert wanted_backends(Selection(backends=["compile", "all"]), CPU) == backends.BACKENDS
    rows = planned(Selection(ops=["relu"], backends=["compile", "compile"]))
    assert len(rows) == len({p.key for p in rows}) and {p.backend for p in rows} == {"compile"}
    with pytest.raises(TileOpsError, match=r"cuda-graphs.*torch, compile, triton or all"):
        planned(Selection(backends=["cuda-graphs"]))
    from tileops.cli import build_parser

    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["bench", "--backend", "cuda-graphs"])
    assert info.value.code == 2
    assert build_parser().parse_args(["audit", "--backend", "all"]).backends == ["all"]


def test_the_audit_measures_eager_unless_told() -> None:
    from tileops.audit.plan import audit_plan

    rows = audit_plan(load_entries(), load_all(), Selection(ops=["relu"], labels=["cpu-512x1024"]), GPU)
    assert {p.backend for p in rows} == {"torch"}
    rows = audit_plan(load_entries(), load_all(), Selection(ops=["relu"], labels=["cpu-512x1024"],
                                                            backends=["all"]), GPU)
    assert {p.backend for p in rows} == {"torch", "compile", "triton"}


def test_resume_keeps_the_compile_cache_and_refuses_another(tmp_path: Path) -> None:
    from tileops.pipeline.bench import new_request, resume_request
    from tileops.records import RunInfo, utcnow, write_run_info

    req = new_request({"backends": ["all"], "compile_cache": "cc", "compile_timeout_s": 30.0})
    opts = req.options
    assert opts.compile_cache == str(Path("cc").absolute()) and opts.compile_timeout_s == 30.0
    run = tmp_path / "run"
    run.mkdir()
    write_run_info(run, RunInfo(run_id="r", started_at=utcnow(), selection={"backends": ["all"]}, options=opts))
    again = resume_request(run, {"compile_cache": "cc"})
    assert again.options.compile_cache == str(Path("cc").absolute()) and again.selection.backends == ["all"]
    with pytest.raises(TileOpsError, match="--compile-cache"):
        resume_request(run, {"compile_cache": str(tmp_path / "elsewhere")})


# --------------------------------------------------------------------------- the best backend per row


def race_run(tmp_path: Path) -> Path:
    """One row on three backends (compile twice as fast as eager, Triton skipped), and a row on eager only."""
    e = env()
    torch_rec = record("relu", "big", seconds=2e-3, e=e)
    compiled = record("relu", "big", seconds=1e-3, backend="compile", e=e)
    compiled = dataclasses.replace(compiled, timing=dataclasses.replace(compiled.timing, compile_s=4.5))
    skipped = dataclasses.replace(record("relu", "big", status="skipped", backend="triton", e=e),
                                  skip_reason=backends.INTERPRETER_NOT_TIMED)
    return write_run(tmp_path / "run", [torch_rec, compiled, skipped, record("add", "small", e=e)])


def priced_run(tmp_path: Path):
    from tileops.records import load_records

    return price_all(load_records([race_run(tmp_path)]), ProfileChooser.only(profile()))


def test_the_best_backend_is_the_highest_sol_and_its_margin_is_over_the_next(tmp_path: Path) -> None:
    priced = priced_run(tmp_path)
    races = compare_backends(priced)
    assert len(races) == 1  # add ran on one backend: nothing to compare
    (race,) = races.values()
    eff = {p.record.backend: p.efficiency for p in priced if p.record.op == "relu"}
    assert race.key == race_key(priced[0].record) and race.efficiency == eff
    assert (race.best, race.runner_up) == ("compile", "torch")
    assert race.margin == pytest.approx(eff["compile"] - eff["torch"]) and race.margin > 0
    assert race.speedup == pytest.approx(2.0)  # the same SOL time: the SOL ratio is the time ratio
    assert race.behind("torch") == pytest.approx(race.margin) and race.behind("compile") == 0
    assert race.behind("triton") is None and eff["triton"] is None


def test_a_best_backend_ahead_only_within_noise_is_said_to_be(tmp_path: Path) -> None:
    """compile reads 10 % faster than eager but both times are known to ±20 %: the ranking is a point's, so
    the table says "within noise", the summary counts no winner, and JSON/CSV say best_within_noise. Known
    to ±2 %, the same 10 % is a win."""
    from tileops.records import load_records

    def run(name: str, spread: float) -> list:
        e = env()
        recs = []
        for backend, seconds in (("torch", 1.1e-3), ("compile", 1e-3)):
            r = record("relu", "big", seconds=seconds, backend=backend, e=e)
            ci = [seconds * (1 - spread), seconds * (1 + spread)]
            recs.append(dataclasses.replace(r, timing=dataclasses.replace(r.timing, median_ci_s=ci)))
        return price_all(load_records([write_run(tmp_path / name, recs)]), ProfileChooser.only(profile()))

    wide, narrow = run("wide", 0.2), run("narrow", 0.02)
    (race,) = compare_backends(wide).values()
    assert (race.best, race.runner_up, race.within_noise) == ("compile", "torch", True)
    assert race.overlaps_best("torch") and not race.overlaps_best("compile")
    table = " ".join(render_text(wide, "table").split())
    assert "within noise" in table and "best backend (highest SOL)" not in table
    assert "no best backend within noise on 1 row(s)" in table
    rows = json.loads(render_text(wide, "json"))["rows"]
    assert {r["best_within_noise"] for r in rows} == {True}
    assert json.loads(render_text(wide, "json"))["backends"][0]["within_noise"] is True
    assert render_text(wide, "csv").splitlines()[1].endswith(",True")
    (clear,) = compare_backends(narrow).values()
    assert not clear.within_noise and not clear.overlaps_best("torch")
    text = " ".join(render_text(narrow, "table").split())
    assert "within noise" not in text and "best backend (highest SOL) of 1 row(s)" in text
    assert {r["best_within_noise"] for r in json.loads(render_text(narrow, "json"))["rows"]} == {False}


def test_a_tie_keeps_the_first_and_one_priced_backend_has_no_margin(tmp_path: Path) -> None:
    e = env()
    recs = [record("relu", "a", e=e), record("relu", "a", backend="compile", e=e),
            record("neg", "b", e=e), record("neg", "b", status="error", backend="compile", e=e)]
    from tileops.records import load_records

    priced = price_all(load_records([write_run(tmp_path / "r", recs)]), ProfileChooser.only(profile()))
    races = {k[1]: r for k, r in compare_backends(priced).items()}
    assert (races["relu"].best, races["relu"].margin) == ("torch", 0.0)
    assert (races["neg"].best, races["neg"].runner_up, races["neg"].margin) == ("torch", None, None)


def test_the_table_md_csv_and_json_show_backends_side_by_side(tmp_path: Path) -> None:
    priced = priced_run(tmp_path)
    eff = {p.record.backend: p.efficiency for p in priced if p.record.op == "relu"}
    pts = f"{(eff['compile'] - eff['torch']) * 100:.1f} pts"
    table = render_text(priced, "table")
    header = next(line for line in table.splitlines() if " label " in line)
    assert re.search(r"efficiency\s*[│┃]\s*compile time \(s\)\s*[│┃]\s*vs best\s*[│┃]\s*verdict", header), header
    assert f"best, +{pts}" in table and f"-{pts}" in table and " 4.50 " in table  # in the column's unit
    summary = " ".join(table.split())  # the summary's long lines wrap at the table's width
    assert "compile time, reported apart" in summary and "best backend (highest SOL) of 1 row(s)" in summary
    assert f"triton skipped on 1 row(s): {backends.INTERPRETER_NOT_TIMED}" in summary
    # a skipped backend is counted as skipped, not among the errors (its verdict is "error": it has no time)
    assert "4 row(s): 3 below, 1 skipped\n" in table
    assert "skipped rows: 1" in summary and "failed rows" not in summary
    md = render_text(priced, "md")
    assert "| efficiency | compile time (s) | vs best | verdict |" in md and f"best, +{pts}" in md
    rows = {(r["op"], r["backend"]): r for r in json.loads(render_text(priced, "json"))["rows"]}
    assert rows[("relu", "compile")]["compile_s"] == 4.5 and rows[("relu", "torch")]["compile_s"] is None
    assert rows[("relu", "torch")]["best_backend"] == "compile"
    assert rows[("relu", "torch")]["behind_best"] == pytest.approx(eff["compile"] - eff["torch"])
    assert rows[("add", "torch")]["best_backend"] is None
    (race,) = json.loads(render_text(priced, "json"))["backends"]
    assert (race["op"], race["best"], race["runner_up"]) == ("relu", "compile", "torch")
    assert race["efficiency"]["triton"] is None and race["speedup"] == pytest.approx(2.0)
    csv_head, *csv_rows = render_text(priced, "csv").splitlines()
    head = csv_head.split(",")
    assert head[-4:] == ["best_backend", "best_margin", "behind_best", "best_within_noise"]  # the race columns last
    at = head.index("compile_s")
    assert head[at:at + 3] == ["compile_s", "span_s", "host_bound"]


def test_a_run_on_one_backend_keeps_its_table(tmp_path: Path) -> None:
    from tileops.records import load_records

    run = write_run(tmp_path / "r", [record("relu", "a", e=env()), record("add", "a", e=env())])
    table = render_text(price_all(load_records([run]), ProfileChooser.only(profile())), "table")
    assert "vs best" not in table and "compile" not in table and "backends:" not in table


def test_the_plot_gives_each_backend_its_marker(tmp_path: Path) -> None:
    from tileops.report.plot import BACKEND_MARKER, backend_marker, write_plot

    assert len(set(BACKEND_MARKER.values())) == len(BACKEND_MARKER) == len(backends.BACKENDS)
    assert backend_marker("something-new") not in BACKEND_MARKER.values()
    _, svg = write_plot(priced_run(tmp_path), profile(), tmp_path / "plot")
    text = svg.read_text()
    assert re.search(r'id="points-torch-\w', text) and re.search(r'id="points-compile-\w', text)
    assert ">backend<" in text and ">compile<" in text  # the legend names each backend


def test_the_metrics_carry_each_backend_and_the_best_ones_lead(tmp_path: Path) -> None:
    from tileops.export.metrics import exposition
    from tileops.export.snapshot import load_run

    prof = profile()
    (snap,) = load_run(race_run(tmp_path), ProfileChooser.only(prof))
    lean = {f.name: f.samples for f in text_string_to_metric_families(exposition([snap]).decode())}
    sol = {s.labels["backend"]: s.value for s in lean["tileops_sol_ratio"] if s.labels["op"] == "relu"}
    assert set(sol) == {"torch", "compile"}  # triton was skipped: its state only
    (lead,) = lean["tileops_best_backend_margin_ratio"]
    assert (lead.labels["backend"], lead.labels["runner_up"], lead.labels["label"]) == ("compile", "torch", "big")
    assert lead.value == pytest.approx(sol["compile"] - sol["torch"])
    assert "tileops_compile_seconds" not in lean
    full = {f.name: f.samples for f in text_string_to_metric_families(exposition([snap], detail="full").decode())}
    (compiled,) = full["tileops_compile_seconds"]
    assert compiled.labels["backend"] == "compile" and compiled.value == 4.5


# --------------------------------------------------------------------------- end to end on this CPU


@pytest.mark.slow
def test_bench_all_on_the_cpu_shows_eager_and_compile_side_by_side(tmp_path: Path) -> None:
    """Issue 16's done-when on a few cpu rows: both backends timed and priced per row, Triton skipped with
    the reason, compile time apart from the timing, the best per row, the plot's markers and the metrics."""
    prof = write_profile_file(tmp_path / "cpu.yaml", profile(name="this-cpu", match=CPU.name))
    out, textfile = tmp_path / "run", tmp_path / "textfile"
    r = tileops("bench", "--backend", "all", "--quick", "--op", "relu", "--op", "rms_norm", "--dtype", "float32",
                "--profile", str(prof), "--out", str(out), "--textfile", str(textfile))
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-3000:]
    recs = {(x.op, x.label, x.backend): x for x in iter_records(out)}
    rows = {(op, label) for op, label, _ in recs}
    assert {op for op, _ in rows} == {"relu", "rms_norm"}
    for op, label in rows:
        eager, compiled, kernel = (recs[(op, label, b)] for b in ("torch", "compile", "triton"))
        assert eager.status == compiled.status == "ok", (compiled.error, eager.error)
        assert eager.timing.compile_s is None and compiled.timing.compile_s > 0
        assert kernel.status == "skipped" and triton_reason() in kernel.skip_reason
    # the plan and progress lines go to stderr, the table and its summary to stdout
    assert re.search(r"backends: torch, compile, triton; compile cache \S+; compile time is reported apart", r.stderr)
    assert re.search(r"\] relu cpu-512x1024 float32 \[compile\]: [\d.]+ [mµn]?s (±[\d.]+ %|\+[\d.]+ %/-[\d.]+ %|"
                     r"not known to within 10x .*|\(one block, its time cap reached: .*\)|"
                     r"\(no precise interval: timed in scheduler slices .*\)) .*\(n=", r.stderr)
    # progress names it, with how well its level is known (or why it has none: on a loaded host one block of a
    # cold compiled row may take the cap)
    assert re.search(r"\] relu cpu-512x1024 float32 \[compile\]: compiling its first call", r.stderr)  # and its start
    assert "compile time, reported apart" in r.stdout and "vs best" in r.stdout
    assert "triton skipped on" in r.stdout
    assert (out.parent / ".compile-cache" / "inductor").is_dir()  # beside the run, for the next one
    doc = json.loads((out / "roofline.json").read_text())
    races = {(x["op"], x["label"]): x for x in doc["backends"]}
    assert set(races) == rows
    for race in races.values():
        assert race["best"] in ("torch", "compile") and race["margin"] is not None
    svg = (out / "roofline.svg").read_text()
    assert re.search(r'id="points-torch-', svg) and re.search(r'id="points-compile-', svg) and ">backend<" in svg
    (prom,) = (f for f in textfile.glob("tileops_*.prom") if f.name != "tileops_build.prom")
    metrics = {f.name: f.samples for f in text_string_to_metric_families(prom.read_text())}
    sol = {(s.labels["op"], s.labels["label"], s.labels["backend"]) for s in metrics["tileops_sol_ratio"]}
    assert sol == {(op, label, b) for op, label in rows for b in ("torch", "compile")}
    assert len(metrics["tileops_best_backend_margin_ratio"]) == len(rows)


FAKE_CXX = """#!/bin/sh
# A C++ compiler that answers --version (so inductor finds it) and refuses every compilation.
for a in "$@"; do [ "$a" = "--version" ] && exec g++ --version; done
echo "fake-cxx: this compiler refuses to compile (a test of a failed torch.compile)" >&2
exit 1
"""


@pytest.mark.slow
def test_a_failed_compile_is_an_error_record_and_the_other_backends_still_run(tmp_path: Path) -> None:
    cxx = tmp_path / "fake-g++"
    cxx.write_text(FAKE_CXX)
    cxx.chmod(0o755)
    out = tmp_path / "run"
    r = tileops("bench", "--backend", "torch", "--backend", "compile", "--quick", "--op", "relu", "--op", "abs",
                "--label", "cpu-512x1024", "--dtype", "float32", "--no-plot", "--calibrate", "never",
                "--compile-cache", str(tmp_path / "cc"), "--out", str(out),
                env={"CXX": str(cxx), "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"})
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]  # rows failed: their error records are written
    recs = {(x.op, x.backend): x for x in iter_records(out)}
    assert set(recs) == {(op, b) for op in ("relu", "abs") for b in ("torch", "compile")}
    for op in ("relu", "abs"):
        assert recs[(op, "torch")].status == "ok"
        err = recs[(op, "compile")].error
        assert recs[(op, "compile")].status == "error" and err.kind == "compile"
        assert f"{op}: the compile backend failed on its first call" in err.message
        assert "fake-cxx" in err.message or "fake-g++" in err.message  # the cause, not just "it failed"
    assert "2 row(s) failed" in r.stderr


@pytest.mark.slow
def test_a_compile_past_its_limit_is_a_timeout_that_names_the_flag(tmp_path: Path) -> None:
    """The first call of a compiled backend has its own limit (--compile-timeout); the worker is replaced and
    the next row runs."""
    from tileops.bench.environment import run_environment
    from tileops.bench.execute import Task
    from tileops.bench.interval import QUICK_BLOCKS
    from tileops.bench.worker import Worker

    env_ = run_environment(CPU, "run-t", 2)
    worker = Worker(threads=2, env=backends.cache_env(tmp_path / "cc"))
    try:
        def task(backend: str) -> Task:
            return Task(op="relu", label="cpu-512x1024", case="float32", case_name="float32", backend=backend,
                        device=CPU, rule=QUICK_BLOCKS, env=env_)

        slow = worker.run(task("compile"), "elementwise", timeout_s=60, compile_timeout_s=0.2)
        assert slow.restarted and slow.record.status == "error" and slow.record.error.kind == "timeout"
        assert "compile backend's first call" in slow.record.error.message
        assert "--compile-timeout" in slow.record.error.message
        fine = worker.run(task("torch"), "elementwise", timeout_s=60, compile_timeout_s=0.2)
        assert fine.record.status == "ok"  # eager has no compile: the row timeout alone applies
    finally:
        worker.close()
