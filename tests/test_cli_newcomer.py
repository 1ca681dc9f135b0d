"""What a tritonbench or nvbench user expects of the CLI: their own shape from the command line, the
plan before the run, errors that name the filter, progress a log can follow, and output that reads (the
profile and calibration views).

Each case runs the real command (in process, or a subprocess where a row is measured); nothing here
computes a FLOP or a byte: an ad-hoc row's counts are held equal to what the op's own generated formula
gives for the same call.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from tileops.cli import main
from tileops.device import describe_device
from tileops.ops.catalog import load_entries
from tileops.records import iter_records


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty profile store, and a working directory where a stray results/ would show."""
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(tmp_path / "store"))
    monkeypatch.chdir(tmp_path)


def _eval_on_meta(op_name: str, label: str, shapes: dict[str, list[int]], case: str) -> tuple[int, int]:
    """The op's own (flops, bytes) for a call on meta tensors of ``shapes`` (its generated evaluator)."""
    import torch

    from tileops.ops.registry import op_class

    op = op_class(op_name)(backend="torch")
    op(**{name: torch.empty(shape, dtype=getattr(torch, case), device="meta") for name, shape in shapes.items()})
    return op.eval_roofline()


# --------------------------------------------------------------------------- --shape


@pytest.mark.slow
def test_a_shape_from_the_command_line_is_timed_priced_by_the_ops_formula_and_resumable(tmp_path: Path) -> None:
    from tileops.bench.sweep import plan_rows
    from tileops.pipeline.bench import resume_request

    out = tmp_path / "run"
    rc = main(["bench", "--op", "gemm", "--shape", "M=64,N=128,K=32", "--dtype", "float32", "--quick",
               "--calibrate", "never", "--no-plot", "--out", str(out)])
    assert rc == 0
    (rec,) = list(iter_records(out))
    assert (rec.op, rec.label, rec.dtype, rec.status, rec.tags) == ("gemm", "M=64,N=128,K=32", "float32", "ok",
                                                                     ["shape"])
    assert rec.shapes == {"a": [64, 32], "b": [32, 128]}  # M x K and K x N: gemm's K of b set with K
    assert (rec.flops, rec.bytes) == _eval_on_meta("gemm", rec.label, rec.shapes, "float32")
    # the run keeps its shapes: --resume plans the same ad-hoc row again
    req = resume_request(out, {})
    assert req.selection.shapes == ["M=64,N=128,K=32"]
    (p,) = plan_rows(req.selection, describe_device("cpu"))
    assert p.key == rec.key


def test_a_shape_takes_params_from_the_row_label_names(capsys) -> None:
    assert main(["bench", "--op", "gemm", "--shape", "M=64,N=96,K=32", "--label", "cpu-256x512x512-nt",
                 "--list"]) == 0
    out = capsys.readouterr().out
    assert "M=64,N=96,K=32" in out and "float32" in out and "1 to run" in out
    from tileops.bench.adhoc import adhoc_row

    row, _ = adhoc_row(load_entries()["gemm"], "M=64,N=96,K=32", ["cpu-256x512x512-nt"])
    assert row.params == {"trans_b": True} and row.indices == {"A0": 64, "A1": 32, "B0": 96, "B1": 32}  # b is N x K


@pytest.mark.parametrize("args, said", [
    (["--op", "gemm", "--shape", "M=64,Q=3"], "gemm has no dimension 'Q'; its dimensions: A0, A1, B0, B1, M, K, Kb, N"),
    (["--op", "gemm", "--shape", "M=64;N=3"], "is not NAME=SIZE"),
    (["--op", "gemm", "--shape", "M=0"], "M must be a size from 1 to 2^40"),
    (["--shape", "M=64"], "--shape needs --op NAME"),
    (["--op", "gemm", "--shape", "A1=64,B0=32", "--dtype", "float32"], "input 'b' has K = 32"),  # the op refuses
    (["--op", "gemm", "--shape", "M=64", "--label", "nope"], "--label nope: matches no row of the selected ops"),
])
def test_a_shape_the_op_cannot_take_is_exit_2_naming_it(args: list[str], said: str, capsys) -> None:
    assert main(["bench", *args, "--list"]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


# --------------------------------------------------------------------------- --list / --dry-run


@pytest.mark.parametrize("flag", ["--list", "--dry-run"])
def test_the_plan_before_the_run(flag: str, tmp_path: Path, capsys) -> None:
    """Rows per backend (a backend the CPU cannot run is a skip with its reason), the time budget, nothing
    written: no results directory, no calibration in the store."""
    assert main(["bench", "--op", "relu", "--op", "softmax", "--backend", "all", flag]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert any("relu" in line and "cpu-512x1024" in line and "torch" in line and "run" in line for line in lines)
    assert any("triton" in line and "skip:" in line for line in lines)  # the reason the op class gives
    summary = next(line for line in lines if line.endswith(")") and "to run" in line)
    assert "torch" in summary and "compile" in summary and "triton 0 to run" in summary
    assert any(line.startswith("timing: each visit stops once its level is known to ±2.0%") for line in lines)
    assert any(line.startswith("limit: a row is stopped after --row-timeout 60 s") and "--compile-timeout 600 s"
               in line for line in lines)
    assert "the 4 eager row(s) are visited twice" in out  # the second pass (relu and softmax, fp32 and bf16)
    assert not (tmp_path / "results").exists() and not (tmp_path / "store").exists()


# --------------------------------------------------------------------------- errors that name the filter


@pytest.mark.parametrize("args, said", [
    (["--dtype", "fp16"], "--dtype fp16: matches no dtype of the selected ops' rows (did you mean float16?); valid: "),
    (["--op", "nosuch"], "--op nosuch: matches no implemented op; "),
    (["--op", "relu", "--op", "rleu"], "--op rleu: matches no implemented op (did you mean relu?)"),
    (["--family", "gemms"], "--family gemms: matches no family (did you mean gemm?)"),
    (["--op", "relu", "--label", "square-8192"], "--label square-8192: matches no row of the selected ops"),
    (["--op", "gemm", "--dtype", "float16"],
     "no workload row matches --op gemm with --dtype float16: on a CPU only rows tagged `cpu` run"),
])
def test_a_selection_that_matches_nothing_names_the_filter(args: list[str], said: str, capsys) -> None:
    assert main(["bench", *args, "--list"]) == 2
    err = capsys.readouterr().err
    assert said in err, err
    if "fp16" in args:
        assert "float16" in err.split("valid: ", 1)[1]  # the valid values are listed


def test_a_backend_the_op_lacks_is_the_cause_named_before_the_cpu_tag_rule(capsys) -> None:
    """`--op gemm --backend triton` blamed the CPU's `cpu` tag and suggested --all-rows, which cannot give gemm a
    Triton kernel: the backend is named first, with the backends gemm has and the ops that have one."""
    from tileops.ops.registry import load_all

    classes = load_all()
    assert main(["bench", "--op", "gemm", "--backend", "triton", "--list"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"gemm has no Triton kernel (its backends: {', '.join(classes['gemm'].backends)})" in err, err
    assert "--all-rows" not in err and "tagged `cpu`" not in err
    with_triton = [n for n, c in classes.items() if "triton" in c.backends]
    assert f"{len(with_triton)} ops have one" in err
    # named beside an op that has one: the run goes on, and the plan says why gemm has no rows
    assert main(["bench", "--op", "gemm", "--op", "relu", "--backend", "triton", "--list",
                 "--output-format", "log"]) == 0
    out = capsys.readouterr()
    assert "--op gemm: gemm has no Triton kernel" in out.err + out.out


@pytest.mark.parametrize("flag, value, noun, lister", [
    ("--label", "nosuch", "labels", "`tileops ops OP` lists them"),
    ("--op", "nosuch", "implemented ops", "`tileops ops` lists them"),
    ("--label", "llama3-8b", "labels", "`tileops ops OP` lists them"),
    ("--family", "nosuch", None, None),
    ("--tag", "nosuch", None, None),
    ("--dtype", "nosuch", None, None),
])
def test_a_value_that_names_nothing_gets_a_did_you_mean_and_a_count_not_a_flood(
        flag: str, value: str, noun: str | None, lister: str | None, capsys) -> None:
    """`--label nosuch` printed every one of about 110 labels: a long list names its count and the command that
    lists it; a short one (families, tags, dtypes) is still listed whole."""
    from tileops.errors import LIST_AT_MOST
    from tileops.ops.registry import load_all

    assert main(["bench", flag, value, "--list"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{flag} {value}: matches no " in err and len(err) < 400, err
    implemented = [e for n, e in load_entries().items() if e.status == "implemented" and n in load_all()]
    if noun is None:
        assert "; valid: " in err and len(err.split("; valid: ", 1)[1].split(", ")) <= LIST_AT_MOST
        return
    count = len(implemented) if flag == "--op" else len({r.label for e in implemented for r in e.workloads})
    assert count > LIST_AT_MOST and f"; {count} {noun}: {lister}" in err and "valid:" not in err
    if value == "llama3-8b":  # a part of a label: the labels holding it are the likely ones
        hint = err.split("(did you mean ", 1)[1].split("?)", 1)[0].split(" or ")
        assert hint and all(value in label for label in hint)


def test_a_profile_that_names_nothing_gets_a_did_you_mean_in_list_and_run_alike(capsys) -> None:
    """`--profile h100-sxn`: the likely profile named (case aside), the same from --list as from the run."""
    assert main(["bench", "--op", "relu", "--profile", "h100-sxn", "--list"]) == 2
    listed = capsys.readouterr().err
    assert "no profile named or matching 'h100-sxn' (did you mean H100-SXM?); known profiles: " in listed
    assert main(["bench", "--op", "relu", "--profile", "h100-sxn"]) == 2
    assert capsys.readouterr().err == listed


# --------------------------------------------------------------------------- progress a log can follow


def test_a_compile_row_is_announced_when_it_starts_in_a_log() -> None:
    """On a terminal the bar shows the row in flight; in a log (stderr not a terminal) a row printed only when
    it finished left a first compile of 45 s silent. Compiled rows say so when they start."""
    from tileops.bench.select import Planned
    from tileops.pipeline.progress import RowProgress
    from tileops.report.printer import ConsolePrinter

    from roofline_fixtures import make_record

    row = load_entries()["relu"].workloads[0]
    buf = io.StringIO()
    err = Console(file=buf, width=60)  # narrower than every line: a log line is never folded at the width
    assert not err.is_terminal
    compiled = Planned("relu", row, "float32", "compile")
    noisy = make_record(op="relu", label=row.label, backend="compile", median_s=1e-3, median_ci_s=(5e-5, 3e-2),
                        level_ci_s=(5e-5, 3e-2), ci_df=20)  # a busy host: its interval in words, a long line
    with ConsolePrinter(Console(file=io.StringIO()), err).rows(2) as events:
        progress = RowProgress(events)
        progress.row_started(1, 2, Planned("relu", row, "float32", "torch"))
        progress.row_started(2, 2, compiled)
        progress.row_finished(2, 2, compiled, noisy)
    lines = buf.getvalue().splitlines()
    assert lines[0] == (f"[2/2] relu {row.label} float32 [compile]: compiling its first call (up to "
                        "--compile-timeout); its time follows")
    assert len(lines) == 2 and lines[1].startswith(f"[2/2] relu {row.label} float32 [compile]: 1 ms not known")
    assert "(n=10, " in lines[1]


# --------------------------------------------------------------------------- readable output elsewhere


def test_profile_show_takes_its_options_after_the_name_too(capsys) -> None:
    """`tileops profile show NAME --format yaml` was refused (the options were the parent parser's only)."""
    import yaml

    assert main(["profile", "show", "H100-SXM", "--format", "yaml"]) == 0
    after = yaml.safe_load(capsys.readouterr().out)
    assert main(["profile", "--format", "yaml", "show", "H100-SXM"]) == 0
    before = yaml.safe_load(capsys.readouterr().out)
    assert after == before and after["name"] == "H100-SXM"
    assert main(["profile", "list", "--format", "json"]) == 0
    assert any(p["name"] == "H100-SXM" for p in json.loads(capsys.readouterr().out))


def test_profile_match_takes_a_device_name_unquoted(capsys) -> None:
    """`tileops profile match NVIDIA H200` gave the top-level usage (argparse took H200 for an unknown argument):
    the words are one name, as quoted; `show` and `check` likewise."""
    assert main(["profile", "match", "NVIDIA", "H200", "--format", "json"]) == 0
    unquoted = json.loads(capsys.readouterr().out)
    assert main(["profile", "match", "NVIDIA H200", "--format", "json"]) == 0
    assert unquoted == json.loads(capsys.readouterr().out) and unquoted["device_name"] == "NVIDIA H200"
    assert unquoted["profile"] == "H200"
    assert main(["profile", "show", "NVIDIA", "H200", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "H200"
    assert main(["profile", "match", "NVIDIA", "GeForce", "256"]) == 1  # nothing matches: exit 1, not usage
    assert "NVIDIA GeForce 256" in capsys.readouterr().out


def test_the_calibration_tables_columns_are_all_labelled() -> None:
    from tileops.calibrate.summary import memory_table
    from tileops.profiles import MemoryRoof, Profile, Provenance

    src = Provenance(source="calibration")
    prof = Profile(name="p", kind="cpu", match=["x"], memory=MemoryRoof(
        theoretical=1e11, theoretical_source=Provenance(source="user"), calibration=0.8, calibration_source=src,
        mixes={"copy": 0.7, "triad": 0.8}, measured={"copy": 7e10, "triad": 8e10}))
    console = Console(record=True, width=160, file=io.StringIO())
    console.print(memory_table(prof))
    text = console.export_text()
    header = next(line for line in text.splitlines() if "mix" in line and "measured" in line)
    cells = [c.strip() for c in header.strip("┃│ ").split("┃")]
    assert cells == ["mix", "measured", "fraction", "envelope"], cells
    triad = next(line for line in text.splitlines() if "triad" in line)
    assert "best: the calibration" in triad
