"""`tileops audit` end to end on a host without a GPU: ncu missing, ncu refusing, ncu running the child.

ncu cannot profile anything here, so stand-ins for it (tests/data/audit/ncu-stubs)
print what the real one prints in each situation, with its exit status; the
audit itself, its child process, the files it writes, `tileops export` and
promtool run for real. What a GPU is needed for (a report with numbers in it)
is tested on the documented report layout in test_audit_reports.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from export_support import T0, env, need_binary, record, write_run
from tileops.audit import ncu
from tileops.audit.child import parse_args as child_args
from tileops.audit.entry import AUDIT_FILE, AuditEntry, append_entry, read_entries
from tileops.audit.verdict import judge
from tileops.cli import main
from cli_support import tileops

REPO = Path(__file__).resolve().parents[1]
STUBS = Path(__file__).parent / "data" / "audit" / "ncu-stubs"
ROW = ["--op", "embedding", "--label", "cpu-small-2k-tokens"]  # two dtype cases: two rows
CASES = {"ids=int64,weight=float32", "ids=int32,weight=bfloat16"}


def stub_path(tmp_path: Path, stub: str) -> str:
    """A PATH whose `ncu` is the named stand-in (and nothing else of ncu's)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shutil.copy(STUBS / stub, bin_dir / "ncu")
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def audit(monkeypatch, tmp_path: Path, *args: str, stub: str | None = None) -> int:
    if stub:
        monkeypatch.setenv("PATH", stub_path(tmp_path, stub))
    return main(["audit", *args])


def test_the_profiling_command_is_the_documented_one(tmp_path: Path) -> None:
    cmd = ncu.profile_command("/opt/ncu", tmp_path / "r.ncu-rep", ["--op", "relu"], domain="tileops", python="/py")
    assert cmd[:cmd.index("/py")] == [
        "/opt/ncu", "--target-processes", "application-only", "--nvtx", "--nvtx-include", "tileops@call/",
        "--metrics", "dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum",
        "--cache-control", "all", "--clock-control", "none", "--replay-mode", "app-range",
        "--export", str(tmp_path / "r.ncu-rep"), "--force-overwrite"]
    assert cmd[cmd.index("/py"):] == ["/py", "-m", "tileops.audit.child", "--op", "relu"]
    assert ncu.nvtx_include(None) == "call/"  # torch.cuda.nvtx's default domain when the nvtx module is absent
    kernel = ncu.profile_command("/opt/ncu", tmp_path / "r", [], domain=None, replay_mode="kernel",
                                 clock_control="base")
    assert kernel[kernel.index("--clock-control"):kernel.index("--export")] == [
        "--clock-control", "base", "--replay-mode", "kernel"]
    with pytest.raises(ValueError, match="app-range, range, kernel"):
        ncu.profile_command("/opt/ncu", tmp_path / "r", [], domain=None, replay_mode="application")
    assert ncu.import_command("/opt/ncu", tmp_path / "r.ncu-rep") == [
        "/opt/ncu", "--import", str(tmp_path / "r.ncu-rep"), "--csv", "--page", "raw", "--print-units", "base"]


def test_each_replay_mode_states_its_premise_and_the_default_is_the_records() -> None:
    from tileops.records import AUDIT_PREMISE

    assert ncu.premise(ncu.DEFAULT_REPLAY_MODE) == AUDIT_PREMISE == AuditEntry(op="r", label="l", dtype="d", backend="b",
                                                                                  verdict="PASS").premise
    assert "as in a real run" in ncu.premise("app-range") and "cold caches on each kernel" in ncu.premise("kernel")
    assert all("read side only" in ncu.premise(m) for m in ncu.REPLAY_MODES)


@pytest.mark.slow
def test_the_flags_reach_ncu_and_the_entries_premise(monkeypatch, tmp_path: Path) -> None:
    """--replay-mode and --clock-control are on ncu's command line (kept in each row's log) and the entries
    state the premise of the replay they were measured under."""
    out = tmp_path / "out"
    rc = audit(monkeypatch, tmp_path, *ROW, "--replay-mode", "kernel", "--clock-control", "base", "--out", str(out),
               stub="ncu-run-app")
    assert rc == 1
    logs = sorted((out / "ncu").glob("*.log"))
    assert logs and all("--clock-control base --replay-mode kernel" in log.read_text() for log in logs)
    assert {r.premise for r in _rows(out)} == {ncu.premise("kernel")}
    doc = json.loads(tileops("audit", *ROW, "--format", "json", "--ncu", str(tmp_path / "none"), "--out",
                             str(tmp_path / "o2"), timeout=120).stdout)
    assert doc["premise"] == ncu.premise("app-range")


def test_without_the_counters_every_row_is_an_error_naming_the_runtime(monkeypatch, tmp_path: Path, capsys) -> None:
    """The device machines' gVisor runtime: ncu cannot load its profiler library. Every row is an ERROR naming
    that cause and the fix; the first row runs ncu, the rest are not run (the refusal is the host's)."""
    calls = tmp_path / "calls.log"
    monkeypatch.setenv("NCU_STUB_LOG", str(calls))
    out = tmp_path / "out"
    rc = audit(monkeypatch, tmp_path, "--op", "relu", "--dtype", "bfloat16", "--out", str(out), stub="ncu-gvisor")
    assert rc == 1
    rows = _rows(out)
    assert len(rows) >= 4 and {(r.verdict, r.error_kind) for r in rows} == {("ERROR", "counters-unavailable")}
    assert all("LibraryNotLoaded" in r.reason and "gVisor" in r.reason for r in rows)
    assert all("not run: row 1 met this refusal" in r.reason for r in rows[1:])
    assert len(calls.read_text().splitlines()) == 1  # ncu ran once, for the first row
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"{len(rows)} ERROR" in err


def _rows(out: Path) -> list[AuditEntry]:
    return read_entries(out / AUDIT_FILE)


def test_ncu_missing_gives_error_rows_with_the_fix(monkeypatch, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    rc = audit(monkeypatch, tmp_path, *ROW, "--ncu", str(tmp_path / "no-such-ncu"), "--out", str(out))
    assert rc == 1
    rows = _rows(out)
    assert {r.dtype for r in rows} == CASES and len(rows) == 2  # every row written
    for r in rows:
        assert (r.verdict, r.error_kind) == ("ERROR", "ncu-missing")
        assert "install Nsight Compute" in r.reason and "--ncu PATH" in r.reason
        assert r.premise == ncu.premise("app-range") and "read side only" in r.premise
    assert "2 ERROR" in capsys.readouterr().err


def test_ncu_refusing_the_counters_gives_error_rows_with_the_fix(monkeypatch, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert audit(monkeypatch, tmp_path, *ROW, "--out", str(out), stub="ncu-permission") == 1
    rows = _rows(out)
    assert len(rows) == 2
    for r in rows:
        assert (r.verdict, r.error_kind, r.ncu_version) == ("ERROR", "permission", "2025.2.1.0")
        assert "ERR_NVGPUCTRPERM" in r.reason and "NVreg_RestrictProfilingToAdminUsers=0" in r.reason
        assert "CAP_SYS_ADMIN" in r.reason
    assert "not run: row 1 met this refusal of the host" in rows[1].reason  # the host's refusal: ncu ran once
    logs = sorted((out / "ncu").glob("*.log"))
    assert len(logs) == 1 and "ERR_NVGPUCTRPERM" in logs[0].read_text()  # ncu's own words are kept
    assert (out / "ncu").is_dir()


def test_a_profiler_held_by_dcgm_says_how_to_pause_it(monkeypatch, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert audit(monkeypatch, tmp_path, *ROW, "--dtype", "float32", "--out", str(out), stub="ncu-busy") == 1
    (r,) = _rows(out)
    assert r.error_kind == "profiler-busy" and "dcgmi profile --pause" in r.reason and "--resume" in r.reason


def test_the_child_runs_under_ncu_and_reports_the_missing_gpu(monkeypatch, tmp_path: Path) -> None:
    """The stand-in runs the application ncu was given: the real child, on a host with no CUDA device."""
    out, argv_log = tmp_path / "out", tmp_path / "argv"
    monkeypatch.setenv("NCU_STUB_ARGV", str(argv_log))
    assert audit(monkeypatch, tmp_path, *ROW, "--dtype", "float32", "--out", str(out), stub="ncu-run-app") == 1
    (r,) = _rows(out)
    assert (r.verdict, r.error_kind) == ("ERROR", "no-cuda")
    assert "no CUDA device" in r.reason and "GPU host" in r.reason
    facts = json.loads(next((out / "ncu").glob("*.call.json")).read_text())
    assert facts["error_kind"] == "no-cuda"
    (argv,) = [line.split("\0") for line in argv_log.read_text().splitlines()]
    assert argv[argv.index("--nvtx-include") + 1] in ("tileops@call/", "call/")
    assert argv[argv.index("--cache-control") + 1] == "all" and argv[argv.index("--replay-mode") + 1] == "app-range"
    assert argv[argv.index("--clock-control") + 1] == "none"  # the clocks left alone: the device machines' rule
    app = argv[argv.index("tileops.audit.child") + 1:]
    parsed = child_args(app)
    assert (parsed.op, parsed.label, json.loads(parsed.case)) == ("embedding", "cpu-small-2k-tokens",
                                                                 {"ids": "int64", "weight": "float32"})
    assert parsed.nvtx_range == "call" and parsed.warmup == 1 and parsed.device == "cuda:0"
    report = argv[argv.index("--export") + 1]
    assert report.startswith(str(out / "ncu")) and report.endswith("-torch.ncu-rep")


def test_default_rows_are_the_ops_that_declare_a_read_half(monkeypatch, tmp_path: Path) -> None:
    """Derived-bytes entries declare their read half too (docs/manifest.md), so today that is every op."""
    out = tmp_path / "out"
    assert audit(monkeypatch, tmp_path, "--family", "moe", "--family", "embedding", "--ncu",
                 str(tmp_path / "none"), "--out", str(out)) == 1
    rows = _rows(out)
    from tileops.audit.plan import declares_read_half, manifest_entries, op_classes

    classes, entries = op_classes(), manifest_entries()
    wanted = {n for n, c in classes.items() if declares_read_half(c) and entries[n].family in ("moe", "embedding")}
    assert {r.op for r in rows} == wanted and {"embedding", "fused_experts", "moe_ffn"} <= wanted
    # every row of those ops, GPU rows included (the bench's CPU default never applies)
    assert len(rows) == sum(len(w.dtypes) for n in wanted for w in entries[n].workloads)


def test_the_device_check_command_line_lists_every_row(monkeypatch, tmp_path: Path) -> None:
    """scripts/device-check's audit step: six ops, each row of each (GPU rows included), one line each."""
    out = tmp_path / "out"
    ops = ["relu", "add", "rms_norm", "gemm", "embedding", "fused_experts"]
    rc = audit(monkeypatch, tmp_path, *[a for op in ops for a in ("--op", op)], "--out", str(out),
               "--ncu", str(tmp_path / "none"))
    assert rc == 1
    rows = _rows(out)
    from tileops.audit.plan import manifest_entries

    entries = manifest_entries()
    assert len(rows) == sum(len(w.dtypes) for op in ops for w in entries[op].workloads)
    assert {r.op for r in rows} == set(ops)


def test_bad_input_writes_nothing(monkeypatch, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    cfg = tmp_path / "exempt.yaml"
    cfg.write_text("exempt:\n  - op: wher\n    when: \"T == 1\"\n    reason: r\n    measurement: m\n")
    assert audit(monkeypatch, tmp_path, *ROW, "--config", str(cfg), "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert f"{cfg}:2: op 'wher' is not an implemented op; allowed ops:" in err
    assert audit(monkeypatch, tmp_path, "--op", "nope", "--out", str(out)) == 2
    err = capsys.readouterr().err  # the likely op and the count, not all 34 (issue 37)
    assert "--op nope: matches no implemented op (did you mean " in err and "implemented ops: `tileops ops` lists" in err
    assert not out.exists()


@pytest.mark.parametrize("fmt", ["json", "csv", "md"])
def test_formats(monkeypatch, tmp_path: Path, capsys, fmt: str) -> None:
    out = tmp_path / "out"
    audit(monkeypatch, tmp_path, *ROW, "--ncu", str(tmp_path / "none"), "--out", str(out), "--format", fmt)
    text = capsys.readouterr().out
    if fmt == "json":
        doc = json.loads(text)
        assert doc["counts"] == {"ERROR": 2} and len(doc["rows"]) == 2 and "read side only" in doc["premise"]
    elif fmt == "csv":
        import csv
        import io

        rows = list(csv.DictReader(io.StringIO(text)))
        assert {r["dtype"] for r in rows} == CASES and {r["verdict"] for r in rows} == {"ERROR"}
        assert all("cold caches" in r["premise"] for r in rows)
    else:
        assert text.startswith("| op | row | dtype | declared read (B) |") and "Premises:" in text


def test_exit_code_is_1_for_any_fail_or_error_only() -> None:
    from tileops.pipeline.audit import AuditResult

    def e(verdict: str) -> AuditEntry:
        return AuditEntry(op="x", label="l", dtype="float32", backend="torch", verdict=verdict, reason="")

    def exit_code(entries: list[AuditEntry]) -> int:
        return AuditResult(None, entries).exit_code  # type: ignore[arg-type]  # no run needed to judge

    assert exit_code([e(v) for v in ("PASS", "WARN", "EXEMPT", "SKIPPED", "NO-VERDICT")]) == 0
    assert exit_code([e("PASS"), e("FAIL")]) == 1
    assert exit_code([e("PASS"), e("ERROR")]) == 1


def test_an_interrupt_writes_every_row_not_yet_run(tmp_path: Path) -> None:
    """Ctrl-C during a row: that row and the rest are written as SKIPPED, and the run exits 130."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ncu").write_text("#!/bin/sh\n[ \"$1\" = --version ] && exit 0\nkill -INT $PPID\nsleep 5\n")
    (bin_dir / "ncu").chmod(0o755)
    out = tmp_path / "out"
    proc = tileops("audit", *ROW, "--out", str(out), env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
                   timeout=300, cwd=tmp_path)
    assert proc.returncode == 130, proc.stderr
    rows = _rows(out)
    assert len(rows) == 2 and {r.verdict for r in rows} == {"SKIPPED"}
    assert all("interrupted" in r.reason for r in rows)


def test_every_flag_is_documented_and_every_documented_flag_exists() -> None:
    from tileops.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    flags = {s for a in sub.choices["audit"]._actions for s in a.option_strings if s.startswith("--")} - {"--help"}
    doc = (REPO / "docs" / "audit.md").read_text()
    table = doc.split("## Flags", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"`(--[a-z-]+)", table))
    assert flags == documented


# --------------------------------------------------------------------------- export and alert


def _expand(template: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda m: labels[m.group(1)], template)


GPU = {"hostname": "gpu-node-1", "uuid": "GPU-5e1f", "device": "NVIDIA H200"}


def audit_on_a_gpu_host(monkeypatch, tmp_path: Path, out: Path, stub: str = "ncu-permission") -> int:
    """`tileops audit` as it runs on a GPU host: the GPU is the one thing that cannot exist here, so the device the
    audit finds stands in for it; the audit, its files, its child and ncu's answer (a stand-in) are real."""
    from tileops.audit import run as audit_run
    from tileops.device import DeviceInfo

    monkeypatch.setenv("TILEOPS_HOSTNAME", GPU["hostname"])
    monkeypatch.setattr(audit_run, "_device", lambda spec: DeviceInfo(
        kind="cuda", name=GPU["device"], index=0, uuid=GPU["uuid"], capability=(9, 0), memory_bytes=141 * 2**30))
    return audit(monkeypatch, tmp_path, *ROW, "--out", str(out), stub=stub)


def exposition(text: str) -> dict[str, list]:
    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: f.samples for f in text_string_to_metric_families(text) if f.name.startswith("tileops_")}


def export_stdout(capsys, *paths: Path) -> dict[str, list]:
    capsys.readouterr()
    assert main(["export", *map(str, paths)]) == 0
    return exposition(capsys.readouterr().out)


def serve_scrape(root: Path) -> dict[str, list]:
    """One scrape of `tileops serve ROOT`'s HTTP server (the command's own source, server and app)."""
    import threading
    import urllib.request

    from tileops.export.server import CachedProfiles, DirectorySource, make_http_server

    server = make_http_server(DirectorySource(root, CachedProfiles(), log=lambda m: None), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=30) as resp:
            return exposition(resp.read().decode())
    finally:
        server.shutdown()
        server.server_close()


#: All an audit of ERROR rows gives (a read ratio needs a measurement).
AUDIT_ONLY = {"tileops_audit_verdict", "tileops_build_info"}


def test_an_audit_folder_of_its_own_is_exported_as_its_devices_audit(monkeypatch, tmp_path: Path, capsys) -> None:
    """`tileops audit`'s default output (a folder of its own, no records) through `tileops export` and `serve`:
    the entries become the audit series of the GPU they name, and no run is invented."""
    results = tmp_path / "results"
    out = results / "audit-1"
    assert audit_on_a_gpu_host(monkeypatch, tmp_path, out) == 1
    assert not (out / "records.jsonl").exists()
    labels = {"Hostname": GPU["hostname"], "UUID": GPU["uuid"], "modelName": GPU["device"]}
    for m in (export_stdout(capsys, out), export_stdout(capsys, out / AUDIT_FILE), serve_scrape(results)):
        assert set(m) == AUDIT_ONLY  # no run health, no rows, no profile: there was no run
        verdicts = {(s.labels["dtype"], s.labels["verdict"]) for s in m["tileops_audit_verdict"]}
        assert verdicts == {(c, "ERROR") for c in CASES}
        assert all({k: s.labels[k] for k in labels} == labels for s in m["tileops_audit_verdict"])

    # The textfile sink keeps the audit in a file of its own: exporting the run later leaves it alone.
    tf = tmp_path / "textfile"
    assert main(["export", str(out), "--textfile", str(tf)]) == 0
    assert sorted(p.name for p in tf.glob("*.prom")) == ["tileops_GPU-5e1f.audit.prom", "tileops_build.prom"]
    run = write_run(results / "run-1", [record("relu", "small", e=env(kind="cuda", **GPU))])
    assert main(["export", str(run), "--textfile", str(tf)]) == 0
    assert len(exposition((tf / "tileops_GPU-5e1f.audit.prom").read_text())["tileops_audit_verdict"]) == 2
    assert "tileops_audit_verdict" not in exposition((tf / "tileops_GPU-5e1f.prom").read_text())


def test_an_audit_folder_joins_the_devices_newest_run(monkeypatch, tmp_path: Path, capsys) -> None:
    """A run and the device's audit, each in its own folder: one device, its run's series and the audit's. The run
    holds an older audit of its own (a FAIL): the newer audit replaces it, the two are not mixed."""
    results = tmp_path / "results"
    gpu = env(kind="cuda", run_id="run-1", **GPU)
    older = [{"op": "embedding", "label": "cpu-small-2k-tokens", "dtype": c, "backend": "torch", "verdict": "FAIL",
              "finished_at": T0.isoformat()} for c in CASES]
    run = write_run(results / "host" / "run-1", [record("embedding", "cpu-small-2k-tokens", dtype=c, e=gpu)
                                                   for c in CASES], audit=older)
    assert {s.labels["verdict"] for s in export_stdout(capsys, run)["tileops_audit_verdict"]} == {"FAIL"}
    other = write_run(results / "run-cpu", [record("relu", "small", e=env(run_id="cpu"))])  # another device
    out = results / "audit-1"
    assert audit_on_a_gpu_host(monkeypatch, tmp_path, out) == 1
    for m in (export_stdout(capsys, run, other, out), serve_scrape(results)):
        (info,) = [s for s in m["tileops_run_info"] if s.labels["UUID"] == GPU["uuid"]]
        assert info.labels["run_id"] == "run-1"
        assert {s.labels["UUID"] for s in m["tileops_run_info"]} == {GPU["uuid"], "cpu-node-a"}
        assert {(s.labels["UUID"], s.labels["Hostname"], s.labels["dtype"], s.labels["verdict"])
                for s in m["tileops_audit_verdict"]} == {(GPU["uuid"], GPU["hostname"], c, "ERROR") for c in CASES}
        assert len(m["tileops_run_info"]) == 2  # one run per device, none invented for the audit
        assert {s.labels["UUID"] for s in m["tileops_run_physics_check"]} == {GPU["uuid"], "cpu-node-a"}


def test_an_audit_without_a_gpu_is_published_under_its_host(monkeypatch, tmp_path: Path, capsys) -> None:
    """On a host with no CUDA device the audit names no device: its ERROR rows keep their host (an audit job
    scheduled onto the wrong node shows), with no UUID or model, and never join that host's CPU run."""
    monkeypatch.setenv("TILEOPS_HOSTNAME", "node-a")
    out = tmp_path / "audit"
    assert audit(monkeypatch, tmp_path, *ROW, "--out", str(out), stub="ncu-permission") == 1
    assert {(r.device, r.hostname) for r in _rows(out)} == {(None, "node-a")}
    cpu_run = write_run(tmp_path / "run", [record("relu", "small")])  # node-a's CPU
    m = export_stdout(capsys, cpu_run, out)
    assert {(s.labels["Hostname"], s.labels["UUID"], s.labels["modelName"]) for s in m["tileops_audit_verdict"]} \
        == {("node-a", "", "")}
    assert {s.labels["UUID"] for s in m["tileops_run_info"]} == {"cpu-node-a"}
    tf = tmp_path / "textfile"
    assert main(["export", str(out), "--textfile", str(tf)]) == 0
    assert (tf / "tileops_no-device.audit.prom").is_file()


def test_a_folder_with_neither_file_names_both(tmp_path: Path, capsys) -> None:
    assert main(["export", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no records.jsonl" in err and "no audit.jsonl" in err and "tileops audit --out DIR" in err


def test_export_and_alert_on_a_real_audit_output(monkeypatch, tmp_path: Path) -> None:
    """audit.jsonl beside a run's records, and an audit folder of its own -> `tileops export --textfile` ->
    promtool runs TileOpsAuditFail on what was written."""
    promtool = need_binary("promtool")
    gpu = env(kind="cuda", device="NVIDIA H200", uuid="GPU-5e1f", hostname="gpu-node-1")
    run = write_run(tmp_path / "run", [record("embedding", "cpu-small-2k-tokens", dtype=c, e=gpu) for c in CASES])
    # The audit of those rows, for real, on this host: ncu refuses the counters, both rows ERROR.
    assert audit(monkeypatch, tmp_path, *ROW, "--out", str(run), stub="ncu-permission") == 1
    # A FAIL as the audit writes one (the same writer, the verdict from the same judge), in an audit folder of
    # its own, as `tileops audit` writes by default: its entry names the device it ran on.
    failing = tmp_path / "audit-fail"
    failing.mkdir()
    j = judge(declared=3_000_000, measured=1_000_000, inputs=5, kernels=40)
    append_entry(failing / AUDIT_FILE, AuditEntry(op="fused_experts", label="cpu-64tok-8e-top2",
                                                  dtype="topk_ids=int64,x=float32", backend="torch", verdict=j.verdict,
                                                  reason=j.reason, expected_read_bytes=3_000_000,
                                                  measured_read_bytes=1_000_000, device=gpu.device))
    samples: list[tuple[dict[str, str], float]] = []
    from prometheus_client.parser import text_string_to_metric_families

    for n, d in enumerate((run, failing)):
        tf = tmp_path / f"textfile-{n}"
        assert main(["export", str(d), "--textfile", str(tf)]) == 0
        for f in tf.glob("tileops_GPU*.prom"):
            for fam in text_string_to_metric_families(f.read_text()):
                samples += [(s.labels, s.value) for s in fam.samples if s.name == "tileops_audit_verdict"]
    verdicts = sorted((s["op"], s["dtype"], s["verdict"]) for s, _ in samples)
    assert verdicts == sorted([("embedding", c, "ERROR") for c in CASES]
                              + [("fused_experts", "topk_ids=int64,x=float32", "FAIL")])
    assert all(s["UUID"] == "GPU-5e1f" and s["modelName"] == "NVIDIA H200" and s["Hostname"] == "gpu-node-1"
               for s, _ in samples)

    rules_dir = REPO / "exporters" / "prometheus" / "rules"
    rule = next(r for f in rules_dir.glob("*.rules.yml") for g in yaml.safe_load(f.read_text())["groups"]
                for r in g["rules"] if r.get("alert") == "TileOpsAuditFail")

    def series(labels: dict[str, str]) -> str:
        return "tileops_audit_verdict{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"

    fired = [s for s, _ in samples if s["verdict"] == "FAIL"]
    test = {
        "rule_files": [str(p) for p in sorted(rules_dir.glob("*.rules.yml"))],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": series(s), "values": f"{v:g}x10"} for s, v in samples],
            "alert_rule_test": [{
                "eval_time": "2m", "alertname": "TileOpsAuditFail",
                "exp_alerts": [{"exp_labels": {**s, **rule["labels"]},
                                "exp_annotations": {k: _expand(v, s) for k, v in rule["annotations"].items()}}
                               for s in fired]}],
        }, {
            "interval": "1m",  # the ERROR rows alone: the alert stays quiet
            "input_series": [{"series": series(s), "values": f"{v:g}x10"} for s, v in samples
                             if s["verdict"] != "FAIL"],
            "alert_rule_test": [{"eval_time": "2m", "alertname": "TileOpsAuditFail", "exp_alerts": []}],
        }],
    }
    path = tmp_path / "audit-output.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False, width=10_000))
    res = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "SUCCESS" in res.stdout + res.stderr, res.stdout + res.stderr


def test_the_exporter_reads_every_verdict_the_audit_writes(tmp_path: Path) -> None:
    from tileops.audit.entry import VERDICTS
    from tileops.records import AUDIT_VERDICTS, read_audit

    assert set(VERDICTS) == set(AUDIT_VERDICTS)
    for v in VERDICTS:
        append_entry(tmp_path / AUDIT_FILE, AuditEntry(op="relu", label="r", dtype="float32", backend="torch",
                                                       verdict=v, reason="", expected_read_bytes=100,
                                                       measured_read_bytes=150))
    read = read_audit(tmp_path)
    assert [a.verdict for a in read] == list(VERDICTS) and read[0].read_ratio == 1.5


def test_diagnosis_of_ncu_output() -> None:
    perm = (STUBS / "ncu-permission").read_text()
    assert ncu.diagnose(perm).kind == "permission"
    assert ncu.diagnose(perm, generic=False).kind == "permission"
    assert ncu.diagnose((STUBS / "ncu-busy").read_text()).kind == "profiler-busy"
    assert ncu.diagnose((STUBS / "ncu-gvisor").read_text(), generic=False).kind == "counters-unavailable"
    metric = ncu.diagnose("==PROF== Connected to process 7 (/usr/bin/python3)\n"
                        "==ERROR== Failed to find metric regex:^dram__bytes_read.sum(.*)$\n")
    assert metric.kind == "metric-not-collectable" and "Failed to find metric" in metric.message and "--query-metrics" in metric.message
    # The application's own failure is the child's to explain, not ncu's.
    assert ncu.diagnose("==ERROR== The application returned an error code (1).\n") is None
    assert ncu.diagnose("==ERROR== Unknown option: --nvtx-includ\n").kind == "ncu-failed"
    assert ncu.diagnose("==ERROR== Unknown option: --nvtx-includ\n", generic=False) is None
    assert ncu.diagnose("==PROF== Disconnected from process 7\n==WARNING== No kernels were profiled.\n") is None
