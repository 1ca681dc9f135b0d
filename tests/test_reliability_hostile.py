"""Issue 27's hostile inputs: each a sentence and exit 2 (or its documented code), never a hang or a traceback.

Every case here hung, crashed or misread on the code before it was fixed; the
rows of docs/reliability.md's table name these tests. A command that could
hang runs in a subprocess with a timeout, so a regression fails the test
instead of stalling CI; the others run in process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from export_support import profile, record, start_pushgateway, stop, write_profile_file, write_run

from tileops.cli import main
from tileops.records import RecordFileError, iter_records, to_json
from cli_support import tileops_argv

REPO = Path(__file__).resolve().parents[1]

BILLION_LAUGHS = """\
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def _tileops(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(tileops_argv(*args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace", cwd=REPO,
                            env={**os.environ, **(env or {})})


def _finish(procs: list[subprocess.Popen], timeout_s: float = 120) -> list[tuple[int, str, str]]:
    """Wait for every process (started together: they run side by side); a hang fails, killed."""
    out = []
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            o, e = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"`{' '.join(map(str, p.args[3:]))}` still ran after {timeout_s:.0f} s: it hangs")
        out.append((p.returncode, o, e))
    return out


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty profile store of this test's own, plus the profile the export_support records match."""
    s = tmp_path / "store"
    s.mkdir()
    write_profile_file(s / "testcpu.yaml", profile())
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(s))
    return s


# --------------------------------------------------------------------------- 1. a FIFO where records belong


def test_1_a_fifo_records_file_is_refused_by_the_parallel_reader(tmp_path: Path, store: Path) -> None:
    """roofline, export and roofline --baseline read a large file in several processes; the span
    planner opened a FIFO with a plain open() and waited for a writer forever (`--jobs 1` refused it).
    `export --textfile` read a FIFO left where its previous file belongs, for the last-success time."""
    good, fifo = tmp_path / "good", tmp_path / "fifo"
    write_run(good, [record()])
    fifo.mkdir()
    os.mkfifo(fifo / "records.jsonl")
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    os.mkfifo(textfile / "tileops_cpu-node-a.prom")  # where the previous exposition is read from
    env = {"TILEOPS_PROFILE_DIR": str(store)}
    *results, (rc, _, err) = _finish([
        _tileops("roofline", str(fifo), "--jobs", "2", env=env),
        _tileops("export", str(fifo), env=env),
        _tileops("roofline", str(good), "--baseline", str(fifo), "--jobs", "2", env=env),
        _tileops("export", str(good), "--textfile", str(textfile), env=env)])
    assert rc == 0, err  # the FIFO is not read for the last success; the new file replaces it
    assert (textfile / "tileops_cpu-node-a.prom").is_file()
    for rc, out, err in results:
        assert rc == 2, err
        assert f"{fifo / 'records.jsonl'}: a FIFO, not a regular file" in err and "Traceback" not in err
        assert out == ""


# --------------------------------------------------------------------------- 2. a lone surrogate in a record


@pytest.fixture
def surrogate_run(tmp_path: Path) -> Path:
    run = tmp_path / "sur"
    write_run(run, [record(label="ok-row"), record(label="bad-row")])
    text = (run / "records.jsonl").read_text()
    (run / "records.jsonl").write_text(text.replace('"label":"bad-row"', '"label":"bad\\ud800row"'))
    return run


@pytest.mark.parametrize("fmt", ["table", "json", "md", "csv"])
def test_2_a_lone_surrogate_is_a_located_error_in_every_format(surrogate_run: Path, store: Path, fmt: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`"\\ud800"` is valid JSON but not text: every format died with UnicodeEncodeError writing it."""
    assert main(["roofline", str(surrogate_run), "--format", fmt]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""  # nothing half-written
    assert f"{surrogate_run / 'records.jsonl'}:2: not a valid record (label: holds a lone UTF-16 surrogate" in cap.err


def test_2_export_and_serve_name_the_line_without_a_traceback(surrogate_run: Path, store: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from tileops.export.server import DirectorySource
    from tileops.profiles import ProfileChooser

    assert main(["export", str(surrogate_run)]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "records.jsonl:2: not a valid record (label: holds a lone" in cap.err
    logged: list[str] = []
    chooser = ProfileChooser.resolve(None)
    source = DirectorySource(surrogate_run.parent, lambda: chooser, log=logged.append)
    source.metrics()
    _, health = source.health()
    assert "lone UTF-16 surrogate" in health["unreadable"]["sur"]
    assert not any("Traceback" in m for m in logged), logged


# --------------------------------------------------------------------------- 3. the audit's --config


def test_3_audit_config_alias_bomb_and_fifo_are_refused_at_once(tmp_path: Path) -> None:
    """The EXEMPT loader built every alias (its line map walked the expanded tree) and read a FIFO."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BILLION_LAUGHS)
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    outs = [tmp_path / "out-bomb", tmp_path / "out-fifo"]
    results = _finish([_tileops("audit", "--config", str(bomb), "--op", "relu", "--out", str(outs[0])),
                       _tileops("audit", "--config", str(fifo), "--op", "relu", "--out", str(outs[1]))])
    (rc1, _, err1), (rc2, _, err2) = results
    assert rc1 == 2 and f"{bomb}:1: the document's aliases expand to more than 200,000 nodes" in err1
    assert rc2 == 2 and f"{fifo}: a FIFO, not a regular file" in err2
    assert "Traceback" not in err1 + err2 and not any(o.exists() for o in outs)  # nothing written


# --------------------------------------------------------------------------- 4. a stored device result


def test_4_calibrate_and_export_refuse_an_alias_bomb_in_a_stored_result(tmp_path: Path, store: Path) -> None:
    """`calibrate --max-age` read the device's stored result and its summary expanded the tree; export
    and serve read every stored result (the calibration metrics)."""
    (store / "devices").mkdir()
    (store / "devices" / "cpu-hostile-host.yaml").write_text(BILLION_LAUGHS)
    run = tmp_path / "run"
    write_run(run, [record()])
    env = {"TILEOPS_PROFILE_DIR": str(store), "TILEOPS_HOSTNAME": "hostile-host"}
    results = _finish([_tileops("calibrate", "--quick", "--no-write", "--max-age", "7d", "--device", "cpu",
                                env=env),
                       _tileops("export", str(run), env=env)])
    (rc_cal, _, err_cal), (rc_exp, out_exp, err_exp) = results
    assert rc_cal == 0, err_cal  # the unreadable result is stale: the device is measured again
    assert "the stored calibration is unreadable" in err_cal and "aliases expand to more than" in err_cal
    assert rc_exp == 0 and "tileops_device_time_seconds" in out_exp, err_exp  # the run still exports


# --------------------------------------------------------------------------- 5. ncu's bytes and its --version


STUB = """#!/bin/sh
if [ "$1" = "--version" ]; then
  if [ -n "$NCU_STUB_HANG" ]; then exec sleep 60; fi
  printf 'NVIDIA (R) Nsight Compute \\377\\376\\nVersion 2025.3.1.0 (build 1) \\377\\n'
  exit 0
fi
printf '==PROF== Connected \\377\\376\\n==ERROR== profiling failed: \\377\\376 \\300\\n'
exit 1
"""


def _stub_ncu(tmp_path: Path) -> Path:
    ncu = tmp_path / "bin" / "ncu"
    ncu.parent.mkdir()
    ncu.write_text(STUB)
    ncu.chmod(0o755)
    return ncu


def test_5_ncu_output_that_is_not_utf8_gives_error_rows(tmp_path: Path, capsys) -> None:
    """`ncu --version` read as UTF-8 crashed the audit before its first row: exit 1, an empty audit.jsonl."""
    from tileops.audit.entry import AUDIT_FILE, read_entries

    out = tmp_path / "out"
    rc = main(["audit", "--op", "relu", "--dtype", "float32", "--ncu", str(_stub_ncu(tmp_path)), "--out", str(out)])
    assert rc == 1
    rows = read_entries(out / AUDIT_FILE)
    assert rows and {r.verdict for r in rows} == {"ERROR"}
    assert rows[0].ncu_version == "2025.3.1.0"
    assert all(r.error_kind == "ncu-failed" and "profiling failed" in r.reason for r in rows)


def test_5_ncu_version_is_bounded_by_the_row_timeout(tmp_path: Path, monkeypatch) -> None:
    """`ncu --version` had a fixed 60 s timeout outside --row-timeout."""
    from tileops.audit.entry import AUDIT_FILE, read_entries

    monkeypatch.setenv("NCU_STUB_HANG", "1")
    out = tmp_path / "out"
    t0 = time.monotonic()
    rc = main(["audit", "--op", "relu", "--dtype", "float32", "--ncu", str(_stub_ncu(tmp_path)), "--out", str(out),
               "--row-timeout", "2"])
    assert time.monotonic() - t0 < 40  # 60 s and more before
    assert rc == 1 and all(r.ncu_version is None for r in read_entries(out / AUDIT_FILE))


# --------------------------------------------------------------------------- 6. codegen and duplicate keys


MYOP = """\
myop:
  family: elementwise
  ref_api: torch.relu
  status: implemented
  signature:
    inputs: [{name: x, shape: "[N]", dtype: float32}]
    outputs: [{name: y, shape: "[N]", dtype: same_as(x)}]
  workloads: [{label: a, indices: {N: 16}, dtypes: [float32], tags: [cpu]}]
  roofline: {func: tileops.ops.formulas.FUNC}
"""


@pytest.mark.parametrize("func", ["no_such_formula", "CheckedCall"])
def test_6_codegen_leaves_out_an_entry_whose_func_does_not_resolve(tmp_path: Path, func: str, capsys) -> None:
    """codegen emitted the entry and the generated module then failed to import (every run stopped)."""
    import importlib.util

    d = tmp_path / "extra"
    d.mkdir()
    (d / "mine.yaml").write_text(MYOP.replace("FUNC", func))
    assert main(["codegen", "--manifest", str(d)]) == 1
    assert "skipped myop: 1 defect(s)" in capsys.readouterr().err
    spec = importlib.util.spec_from_file_location("hostile_gen_" + func, d / "_roofline_gen.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # it imports
    assert "myop" not in mod.ENTRIES


def test_6_a_key_given_twice_is_refused_by_every_reader(tmp_path: Path) -> None:
    """YAML and JSON keep the last of a key given twice, silently: a profile, an EXEMPT file, a stored result
    and a record line each say which key, on which line."""
    from tileops.audit.config import ConfigError, load_config
    from tileops.ledger import read_device_result
    from tileops.ops.catalog import load_entries
    from tileops.profiles import ProfileError, load_profile

    prof = tmp_path / "p.yaml"
    prof.write_text("name: a\nkind: cpu\nname: b\nmatch: [x]\n")
    with pytest.raises(ProfileError, match=r"p\.yaml:3: key 'name' is declared twice in one mapping \(lines 1 and 3\)"):
        load_profile(prof)
    cfg = tmp_path / "exempt.yaml"
    cfg.write_text("exempt: []\nexempt: []\n")
    with pytest.raises(ConfigError, match=r"exempt\.yaml:2: key 'exempt' is declared twice"):
        load_config(cfg, load_entries(), ["relu"])
    res = tmp_path / "cpu-h.yaml"
    res.write_text("run_id: a\nrun_id: b\n")
    with pytest.raises(ProfileError, match=r"cpu-h\.yaml:2: key 'run_id' is declared twice"):
        read_device_result(res)
    line = to_json(record()).replace('"flops":', '"flops":1,"flops":')
    (tmp_path / "records.jsonl").write_text(line + "\n")
    with pytest.raises(RecordFileError, match=r"records\.jsonl:1: not a valid record \(flops: declared twice"):
        list(iter_records(tmp_path / "records.jsonl"))


# --------------------------------------------------------------------------- 7. push URL, empty export, host name


def test_7_a_dot_segment_instance_is_base64_in_the_push_url(tmp_path: Path, store: Path) -> None:
    """`--instance ..` went into the URL as `/instance/..`, which a client or the gateway resolves away."""
    from tileops.export.push import group_url

    assert group_url("gw:9091", "tileops", {"instance": "..", "UUID": "."}) == \
        "http://gw:9091/metrics/job/tileops/instance@base64/Li4=/UUID@base64/Lg=="
    run = tmp_path / "run"
    write_run(run, [record()])
    proc, url = start_pushgateway(tmp_path)
    try:
        assert main(["export", str(run), "--push", url, "--instance", ".."]) == 0
        import urllib.request

        with urllib.request.urlopen(f"{url}/api/v1/metrics", timeout=10) as resp:
            groups = json.load(resp)["data"]
        assert [g["labels"]["instance"] for g in groups] == [".."]
    finally:
        stop(proc)


def test_7_export_of_an_empty_records_file_says_no_records(tmp_path: Path, store: Path, capsys) -> None:
    run = tmp_path / "empty"
    run.mkdir()
    (run / "records.jsonl").write_text("")
    assert main(["export", str(run)]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and f"results {run}: no records" in cap.err


def test_7_a_host_name_that_cannot_be_a_file_name_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (rc, _, err), = _finish([_tileops("calibrate", "--quick", "--profile-dir", str(store),
                                      env={"TILEOPS_HOSTNAME": "../../x"})])
    assert rc == 2 and "host name '../../x' (from $TILEOPS_HOSTNAME)" in err and "nothing written" in err
    assert not store.exists() or not any(store.rglob("*"))


# --------------------------------------------------------------------------- 8. a closed pipe


def test_8_roofline_into_head_stops_quietly(tmp_path: Path, store: Path) -> None:
    """`tileops roofline big --format json | head -3` printed a BrokenPipeError traceback and exited 1."""
    run = tmp_path / "big"
    write_run(run, [record(label=f"row-{i}") for i in range(2000)])  # a JSON report far beyond a pipe's buffer
    p = _tileops("roofline", str(run), "--format", "json", "--jobs", "1", env={"TILEOPS_PROFILE_DIR": str(store)})
    assert p.stdout is not None
    head = [p.stdout.readline() for _ in range(3)]
    p.stdout.close()  # what head does after its lines
    (rc, _, err), = _finish([p])
    assert head[0].startswith("{") and rc == 141  # 128 + SIGPIPE, as a shell reports a filter stopped by it
    assert "Traceback" not in err and "BrokenPipe" not in err and err.strip() == ""
