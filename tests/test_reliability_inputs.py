"""Bad input is a located error or exit 2 with a sentence; numbers stay finite; writes are whole or absent.

The in-process half of docs/reliability.md (the subprocess half is
tests/test_reliability.py): profile and calibration numbers, the argument
types, a gateway's unexpected answers, the run-directory lock, the record
append on a full disk, the torn-tail repair, signals deferred around a write,
and the readers' refusal of FIFOs and devices.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from export_support import T0, profile, record, write_run
from reliability_support import fill, tmpfs

from tileops.cli import main
from tileops.errors import TileOpsError
from tileops.profiles import Profile, ProfileChooser, ProfileError, load_profile
from tileops.records import (MAX_COUNT, RecordFileError, RunInfo, append_record, iter_records,
                             read_run_info, set_aside_torn_tail, to_json, utcnow, write_run_info)

# --------------------------------------------------------------------------- profiles: finite and bounded

GOOD = {
    "name": "P", "kind": "cpu", "match": ["Some CPU"],
    "memory": {"theoretical": 1e11, "calibration": 0.8, "theoretical_source": {"source": "user"},
               "calibration_source": {"source": "calibration"}, "mixes": {"triad": 0.8},
               "measured": {"triad": 8e10}},
    "compute": {"cpu.fp32": {"theoretical": 1e12, "calibration": 0.5, "theoretical_source": {"source": "user"},
                             "calibration_source": {"source": "calibration"}}},
    "latency_floor_s": 1e-6,
}


def _with(path: tuple[str, ...], value: str) -> str:
    """GOOD as YAML with one value replaced by a raw YAML token (so .inf, .nan and 1e400 reach the parser)."""
    data = json.loads(json.dumps(GOOD))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = "@@"
    return yaml.safe_dump(data).replace("'@@'", value)


@pytest.mark.parametrize("path", [("memory", "theoretical"), ("compute", "cpu.fp32", "theoretical"),
                                  ("memory", "calibration"), ("compute", "cpu.fp32", "calibration"),
                                  ("memory", "measured", "triad"), ("latency_floor_s",)])
@pytest.mark.parametrize("token", [".inf", "-.inf", ".nan", "1e400"])
def test_a_non_finite_profile_number_is_a_located_error(tmp_path: Path, path: tuple[str, ...], token: str) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(_with(path, token))
    with pytest.raises(ProfileError) as err:
        load_profile(f)
    e = err.value
    assert e.file == str(f) and str(f) in str(e)
    assert e.field is not None and e.field.startswith(path[0]) and e.fix
    assert ".".join(path) in str(e)


@pytest.mark.parametrize(("path", "value"), [(("memory", "theoretical"), "1e25"), (("memory", "theoretical"), "0.5"),
                                             (("compute", "cpu.fp32", "calibration"), "1e-12"),
                                             (("memory", "measured", "triad"), "1e30"), (("latency_floor_s",), "5")])
def test_an_impossible_ceiling_is_refused(tmp_path: Path, path: tuple[str, ...], value: str) -> None:
    """Finite but absurd: a rate outside [1, 1e24] per second, a calibration fraction of 1e-12, a 5 s floor."""
    f = tmp_path / "p.yaml"
    f.write_text(_with(path, value))
    with pytest.raises(ProfileError, match=".".join(path)):
        load_profile(f)


def test_a_profile_in_range_loads(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(GOOD))
    assert load_profile(f).memory.effective == pytest.approx(8e10)


def test_profile_files_that_are_not_text_or_not_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"name: P\nkind: \xff\n")
    with pytest.raises(ProfileError, match=r"bad.yaml:2: not UTF-8 .* save the file as UTF-8"):
        load_profile(bad)
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ProfileError, match="a FIFO, not a regular file"):
        load_profile(fifo)
    zero = tmp_path / "zero.yaml"
    zero.symlink_to("/dev/zero")
    with pytest.raises(ProfileError, match="a character device"):
        load_profile(zero)


def test_a_calibration_result_with_an_infinite_measurement_is_refused(tmp_path: Path) -> None:
    from tileops.ledger import read_device_result

    doc = {"run_id": "c", "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:01:00+00:00",
           "tool_version": "t", "torch_version": "t", "quick": True, "kind": "cpu", "name": "Some CPU",
           "hostname": "h", "mixes": {"triad": {"bytes_per_s": "@@", "bytes": 1, "array_bytes": 1, "best_s": 1.0,
                                                "reps": 1, "kernel": "k"}}}
    f = tmp_path / "cpu-h.yaml"
    f.write_text(yaml.safe_dump(doc).replace("'@@'", ".inf"))
    with pytest.raises(ProfileError, match="finite"):
        read_device_result(f)


def test_serve_reads_around_a_bad_profile_but_a_bad_choice_is_the_callers_error(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "good.yaml").write_text(yaml.safe_dump(GOOD))
    (store / "bad.yaml").write_text(_with(("memory", "theoretical"), ".inf").replace("name: P", "name: Q"))
    with pytest.raises(ProfileError):
        ProfileChooser.resolve(store_path=store)  # the commands: a bad file is an error
    seen: list[ProfileError] = []
    chooser = ProfileChooser.resolve(store_path=store, on_error=seen.append)  # serve: skipped and reported
    assert chooser("Some CPU").name == "P" and [Path(e.file).name for e in seen] == ["bad.yaml"]
    with pytest.raises(ProfileError):
        ProfileChooser.resolve(str(store / "bad.yaml"), store_path=store, on_error=seen.append)


@pytest.mark.parametrize("argv", [["profile", "list"], ["profile", "match", "Some CPU"], ["export", "RUN"],
                                  ["roofline", "RUN"]])
def test_a_profile_store_that_is_a_file_is_named_not_ignored(argv: list[str], tmp_path: Path, monkeypatch,
                                                             capsys: pytest.CaptureFixture) -> None:
    """TILEOPS_PROFILE_DIR naming a file: every reader says so (exit 2, the variable and the fix) instead of
    finding no store profile in it and pricing every row blank."""
    run = write_run(tmp_path / "run", [record()])
    store = tmp_path / "profiles.yaml"
    store.write_text(yaml.safe_dump(GOOD))  # a profile where the store's folder belongs: an easy slip
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(store))
    assert main([str(run) if a == "RUN" else a for a in argv]) == 2
    err = capsys.readouterr().err
    assert f"{store}: TILEOPS_PROFILE_DIR={store} is a file, not a directory" in err
    assert "point TILEOPS_PROFILE_DIR (or --profile-dir) at a directory" in err


@pytest.mark.parametrize("argv", [["profile", "--profile-dir", "FILE", "list"],
                                  ["calibrate", "--profile-dir", "FILE", "--no-write"],
                                  ["fleet", "bench", "--profile-dir", "FILE"]])
def test_a_profile_dir_flag_naming_a_file_is_exit_2_naming_the_flag(argv: list[str], tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture) -> None:
    store = tmp_path / "p.yaml"
    store.write_text("x: 1\n")
    with pytest.raises(SystemExit) as exc:
        main([str(store) if a == "FILE" else a for a in argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --profile-dir: {store} is a file, not a directory" in err and "give a directory" in err


def test_serve_refuses_a_store_that_is_a_file_at_start_and_keeps_its_profiles_if_it_becomes_one(
        tmp_path: Path, monkeypatch) -> None:
    from tileops.export.server import CachedProfiles

    store = tmp_path / "store"
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(store))
    store.write_text("")
    with pytest.raises(ProfileError, match="is a file, not a directory"):
        CachedProfiles()()  # `tileops serve` exits 2 with this at start
    store.unlink()
    store.mkdir()
    (store / "good.yaml").write_text(yaml.safe_dump(GOOD))
    cached = CachedProfiles()
    assert cached()("Some CPU").name == "P" and not cached.problems
    (store / "good.yaml").unlink()
    store.rmdir()
    store.write_text("")  # it went bad while serving: the last good chooser stays, and /healthz says why
    assert cached()("Some CPU").name == "P"
    assert list(cached.problems) == ["store"] and "is a file, not a directory" in cached.problems["store"]


# --------------------------------------------------------------------------- numbers at the bounds


def test_counts_and_times_at_their_bounds_price_and_export_finite() -> None:
    """2**63-1 FLOPs and bytes in a picosecond, against the smallest and the largest ceilings a profile may
    hold: every priced number is finite, roofline.json is strict JSON, the exposition has no Inf/NaN."""
    import math

    from tileops.export.metrics import exposition
    from tileops.export.snapshot import build_snapshots
    from tileops.report import render_text
    from tileops.roofline import health, price_all

    recs = [record("relu", "huge", bytes_=MAX_COUNT, flops=MAX_COUNT, seconds=1.1e-12),
            record("relu", "slow", bytes_=1, flops=1, seconds=5e7)]
    for rate, cal in ((1.0, 1e-9), (1e24, 1.5)):  # the smallest and the largest ceilings a profile may hold
        roof = {"theoretical": rate, "calibration": cal, "theoretical_source": {"source": "user"},
                "calibration_source": {"source": "calibration"}}
        prof = Profile.model_validate({"name": "Edge", "kind": "cpu", "match": ["Test CPU 9000"], "memory": roof,
                                       "compute": {"cpu.fp32": roof}, "roof_aliases": {"cuda_core.fp32": "cpu.fp32"},
                                       "latency_floor_s": 1.0})
        chooser = ProfileChooser.only(prof)
        priced = price_all(recs, chooser)
        for p in priced:
            for name in ("sol_time_s", "efficiency", "memory_time_s", "compute_time_s", "achieved_bytes_per_s"):
                v = getattr(p, name)
                assert v is None or math.isfinite(v), (name, v)
        json.loads(render_text(priced, "json", health=health(priced)),
                   parse_constant=lambda c: pytest.fail(f"{c} in roofline.json"))
        body = exposition(build_snapshots(Path("."), None, priced, chooser)).decode()
        assert "Inf" not in body and "NaN" not in body


# --------------------------------------------------------------------------- the command line


@pytest.mark.parametrize("argv", [
    ["bench", "--row-timeout", "nan"], ["bench", "--row-timeout", "-1"], ["bench", "--row-timeout", "0"],
    ["bench", "--row-timeout", "inf"], ["roofline", "x", "--threshold", "nan"], ["roofline", "x", "--threshold", "-1"],
    ["serve", "--port", "99999"], ["serve", "--port", "-1"], ["serve", "--max-file-mb", "0"],
    ["export", "x", "--push-timeout", "inf"], ["export", "x", "--push-attempts", "0"],
    ["export", "x", "--push-backoff", "nan"], ["calibrate", "--cpu-ghz", "nan"], ["calibrate", "--cpu-ghz", "0"],
])
def test_a_number_out_of_range_is_exit_2_with_a_sentence(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "expected" in err and "Traceback" not in err, err


@pytest.mark.parametrize("url", ["http://[::1", "http://host:99999", "http://:9091", "http://host:port"])
def test_a_push_url_that_cannot_be_one_is_exit_2_before_any_work(url: str, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture) -> None:
    run = write_run(tmp_path / "r", [record()])
    assert main(["export", str(run), "--push", url]) == 2
    err = capsys.readouterr().err
    assert "--push" in err and "e.g. http://pushgateway:9091" in err


class _Gateway(BaseHTTPRequestHandler):
    answer = b"{}"

    def do_GET(self) -> None:  # stdlib
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(type(self).answer)

    def do_PUT(self) -> None:  # stdlib
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("answer", [b"[]", b'"up"', b"null", b'{"data": {"x": 1}}', b'{"data": ["x", 3]}',
                                    b'{"data": [{"labels": {"job": "tileops", "instance": "node-a", '
                                    b'"UUID": "cpu-node-a"}, "tileops_run_last_success_timestamp_seconds": '
                                    b'{"metrics": [{"value": "soon"}, {"value": "1e999"}, 7]}}]}',
                                    b"<html>proxy error</html>"])
def test_a_gateway_answering_unexpected_json_still_gets_the_push(tmp_path: Path, answer: bytes) -> None:
    from tileops.export.push import RetryPolicy, previous_last_success, push_snapshot
    from tileops.export.snapshot import load_run

    _Gateway.answer = answer
    server = HTTPServer(("127.0.0.1", 0), _Gateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        key = {"instance": "node-a", "UUID": "cpu-node-a"}
        assert previous_last_success(url, "tileops", key) is None
        (snap,) = load_run(write_run(tmp_path / "r", [record()]), ProfileChooser.only(profile()))
        res = push_snapshot(url, snap, policy=RetryPolicy(attempts=1, timeout_s=5))
        assert res.ok, res.error
    finally:
        server.shutdown()
        server.server_close()


# --------------------------------------------------------------------------- files: whole or absent, never hanging


def test_the_run_directory_lock_names_its_holder(tmp_path: Path) -> None:
    import socket

    from tileops.bench.rundir import RunDirBusy, lock_run_dir

    held = lock_run_dir(tmp_path)
    try:
        with pytest.raises(RunDirBusy) as err:
            lock_run_dir(tmp_path)  # another open file description: refused like another process
        msg = str(err.value)
        assert f"pid {os.getpid()} on host {socket.gethostname()}" in msg and "--resume" in msg
        held.reserve()
        assert (tmp_path / "run.lock").stat().st_size > 64 * 1024
    finally:
        held.release()
    assert (tmp_path / "run.lock").stat().st_size < 4096  # the reserve goes with the run
    lock_run_dir(tmp_path).release()  # free again


def test_an_append_to_a_full_disk_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "size=64k") as disk:
        path = disk / "records.jsonl"
        append_record(path, record())
        before = path.read_bytes()
        fill(disk)
        big = record("relu", "x" * 20000)  # cannot fit in what is left of the file's page
        with pytest.raises(OSError) as err:
            append_record(path, big)
        assert "No space left" in str(err.value)
        assert path.read_bytes() == before and len(list(iter_records(path))) == 1


def test_a_torn_tail_is_set_aside_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    whole = (to_json(record()) + "\n").encode()
    path.write_bytes(whole + b'{"op": "re')
    aside = set_aside_torn_tail(path, now=T0)
    assert aside is not None and aside.name == "records.jsonl.torn-20260105T120000.000000Z"
    assert aside.read_bytes() == b'{"op": "re' and path.read_bytes() == whole
    assert set_aside_torn_tail(path) is None  # whole now: nothing to do


@pytest.mark.parametrize("make", ["fifo", "zero"])
def test_readers_refuse_what_is_not_a_regular_file(tmp_path: Path, make: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for name in ("records.jsonl", "run.json"):
        p = run / name
        if make == "fifo":
            os.mkfifo(p)
        else:
            p.symlink_to("/dev/zero")
    with pytest.raises(RecordFileError, match="not a regular file"):
        list(iter_records(run / "records.jsonl"))
    with pytest.raises(RecordFileError, match="not a regular file"):
        read_run_info(run)
    with pytest.raises(RecordFileError, match="not a regular file"):
        set_aside_torn_tail(run / "records.jsonl")


def test_an_interrupt_waits_for_the_write_in_progress() -> None:
    from tileops import interrupts

    done = []
    with interrupts.handled():
        with pytest.raises(interrupts.Terminated):
            with interrupts.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):  # the handler runs between bytecodes: give it many chances
                    pass
                done.append("write finished")
    assert done == ["write finished"]
    assert interrupts.exit_code(interrupts.Terminated()) == 143
    assert interrupts.exit_code(KeyboardInterrupt()) == 130


def test_a_cpu_allocation_failure_is_an_oom() -> None:
    import torch

    from tileops.bench.execute import error_kind

    with pytest.raises(RuntimeError) as err:
        torch.empty(2**58, dtype=torch.float32)  # an exbibyte: the allocator refuses
    assert error_kind(err.value) == "oom"
    assert error_kind(MemoryError()) == "oom"
    assert error_kind(RuntimeError("shape mismatch")) == "exception"


# --------------------------------------------------------------------------- resume: the run's own options


def test_resume_restores_the_options_and_an_old_run_file_still_reads(tmp_path: Path) -> None:
    from tileops.pipeline.bench import new_request, resume_request

    req = new_request({"ops": ["relu"], "quick": True, "row_timeout_s": 5.0, "plot": False, "profile": "p.yaml",
                       "textfile_dir": "prom", "calibrate": "never"})
    out = tmp_path / "run"
    out.mkdir()
    write_run_info(out, RunInfo(run_id="r", started_at=utcnow(), selection={"ops": ["relu"], "device": "cpu"},
                                options=req.options))
    back = resume_request(out, {"quick": True})
    o = back.options
    assert back.selection.ops == ["relu"] and o.quick and o.row_timeout_s == 5.0
    assert o.device == "cpu" and not o.plot and o.calibrate == "never"
    assert o.profile == str(Path("p.yaml").absolute())  # a file is kept absolute
    assert back.sinks.textfile_dir == Path("prom").absolute()
    with pytest.raises(TileOpsError, match=r"--no-plot \(the run: --no-plot\)|--calibrate \(the run: never\)"):
        resume_request(out, {"calibrate": "auto"})
    with pytest.raises(TileOpsError, match="--out"):
        resume_request(out, {}, out=tmp_path / "elsewhere")

    # A run file from before the options were stored: it reads, and resumes with the defaults.
    data = json.loads((out / "run.json").read_text())
    del data["options"], data["reason"]
    (out / "run.json").write_text(json.dumps(data))
    old = resume_request(out, {})
    assert old.selection.ops == ["relu"] and not old.options.quick and old.options.plot


def test_run_info_reads_its_new_fields_strictly(tmp_path: Path) -> None:
    write_run_info(tmp_path, RunInfo(run_id="r", started_at=utcnow()))
    data = json.loads((tmp_path / "run.json").read_text())
    data["options"]["row_timeout_s"] = -1
    (tmp_path / "run.json").write_text(json.dumps(data))
    with pytest.raises(RecordFileError, match="options.row_timeout_s"):
        read_run_info(tmp_path)


def test_unwritable_dir_names_the_reason(tmp_path: Path) -> None:
    from tileops.fsutil import unwritable_dir

    assert unwritable_dir(tmp_path / "new" / "deeper") is None
    f = tmp_path / "f"
    f.write_text("x")
    assert unwritable_dir(f / "sub") == f"{f} is not a directory"


def test_an_unwritable_output_is_refused_before_the_work(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """calibrate checks its profile store before minutes of measuring; bench --resume names a non-directory."""
    f = tmp_path / "f"
    f.write_text("x")
    assert main(["calibrate", "--device", "cpu", "--quick", "--profile-dir", str(f / "store")]) == 2
    err = capsys.readouterr().err
    assert f"{f} is not a directory" in err and "--profile-dir" in err
    assert main(["bench", "--resume", str(f)]) == 2
    assert "no run.json, so nothing to resume" in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--profile", "nosuch"], ["--push", "http://[::1"],
                                   ["--textfile", "/proc/version/prom"], ["--device", "cuda:99"],
                                   ["--op", "no_such_op"]])
def test_bench_checks_every_input_before_it_opens_a_run(tmp_path: Path, flags: list[str],
                                                        capsys: pytest.CaptureFixture) -> None:
    """A bad --profile, sink, device or selection is exit 2 before the run directory exists (so before any row)."""
    out = tmp_path / "run"
    assert main(["bench", "--quick", "--calibrate", "never", "--out", str(out), *flags]) == 2
    assert "error:" in capsys.readouterr().err and not out.exists()
