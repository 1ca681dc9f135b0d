"""The sinks without external servers: atomic textfile, push retry/failure, `tileops serve`, `tileops export`."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from export_support import T0, env, free_port, profile, record, write_profile_file, write_run
from tileops import exitcodes
from tileops.cli import main
from tileops.profiles import ProfileChooser
from tileops.pipeline.export import Sinks, export_run
from tileops.export.push import RetryPolicy, group_url, push_snapshot
from tileops.export.server import DirectorySource, make_http_server
from tileops.export.snapshot import load_run
from tileops.export.textfile import BUILD_FILE, textfile_path, write_textfile

FAST = RetryPolicy(attempts=3, backoff_s=0.01, timeout_s=2)


def samples(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def digest(run: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run.iterdir()) if p.is_file()}


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A profile store holding the test profile (so `tileops export` prices like the unit tests)."""
    d = tmp_path / "store"
    d.mkdir()
    write_profile_file(d / "testcpu.yaml", profile())
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(d))
    return d


# --------------------------------------------------------------------------- textfile


def test_textfile_is_written_atomically_per_device_and_keeps_the_last_success(tmp_path: Path):
    out = tmp_path / "textfile"
    good = write_run(tmp_path / "good", [record(e=env(run_id="good"))], start=T0)
    bad = write_run(tmp_path / "bad", [record("add", "inflated", bytes_=80_000_000_000, e=env(run_id="bad"))],
                    start=T0 + timedelta(hours=1))
    (g,) = load_run(good, ProfileChooser.only(profile()))
    path = write_textfile(out, g)
    assert path == textfile_path(out, g.device) and path.name == "tileops_cpu-node-a.prom"
    success = (T0 + timedelta(minutes=2)).timestamp()
    assert samples(path.read_text())["tileops_run_last_success_timestamp_seconds"][0].value == success

    (b,) = load_run(bad, ProfileChooser.only(profile()))
    write_textfile(out, b)
    m = samples(path.read_text())
    assert m["tileops_run_healthy"][0].value == 0
    # an unhealthy run keeps publishing the previous success, read back from the old file
    assert m["tileops_run_last_success_timestamp_seconds"][0].value == success
    assert m["tileops_run_last_healthy_timestamp_seconds"][0].value == success
    # a run nothing could be judged on (no profile) is a success, but not a healthy run (issue 37)
    unjudged = write_run(tmp_path / "unjudged", [record(e=env(run_id="unjudged"))], start=T0 + timedelta(hours=2))
    (u,) = load_run(unjudged, ProfileChooser.only(None))
    write_textfile(out, u)
    m = samples(path.read_text())
    assert "tileops_run_healthy" not in m
    assert m["tileops_run_last_success_timestamp_seconds"][0].value == (T0 + timedelta(hours=2, minutes=2)).timestamp()
    assert m["tileops_run_last_healthy_timestamp_seconds"][0].value == success
    # no temporary file left behind, build info in its own file (node_exporter rejects duplicates across files)
    assert sorted(p.name for p in out.iterdir()) == sorted([path.name, BUILD_FILE])
    assert "tileops_build_info" not in m
    assert "tileops_build_info" in samples((out / BUILD_FILE).read_text())


def test_two_devices_get_two_files(tmp_path: Path):
    run = write_run(tmp_path / "r", [record(), record(e=env(device="NVIDIA H200", uuid="GPU-1/2", kind="cuda"))])
    for snap in load_run(run, ProfileChooser([profile()])):
        write_textfile(tmp_path / "tf", snap)
    assert sorted(p.name for p in (tmp_path / "tf").glob("*.prom")) == sorted(
        ["tileops_GPU-1_2.prom", BUILD_FILE, "tileops_cpu-node-a.prom"])


# --------------------------------------------------------------------------- push


def test_push_to_nothing_fails_after_retries_and_loses_nothing(tmp_path: Path, store: Path):
    run = write_run(tmp_path / "run", [record()])
    before = digest(run)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    logs: list[str] = []
    rc = export_run(run, Sinks(push_url=url, textfile_dir=tmp_path / "tf", push_attempts=3, push_backoff_s=0.01,
                               push_timeout_s=1), log=logs.append).exit_code
    assert rc == exitcodes.PUSH == 4
    assert digest(run) == before  # the records are untouched
    assert (tmp_path / "tf" / "tileops_cpu-node-a.prom").exists()  # the textfile is still written
    assert sum("retry" in line for line in logs) == 2
    assert any("failed after 3 attempt(s)" in line and "tileops export" in line for line in logs)
    logs.clear()  # the hint re-pushes the same group: the run's job, instance and detail
    rc = export_run(run, Sinks(push_url=url, job="nightly", instance="gpu-07", detail="full", push_attempts=1,
                               push_backoff_s=0, push_timeout_s=1), log=logs.append).exit_code
    assert rc == exitcodes.PUSH
    assert any(f"`tileops export {run} --push {url} --job nightly --instance gpu-07 --metrics-detail full`" in line
               for line in logs), logs


class _Flaky(http.server.BaseHTTPRequestHandler):
    """A real HTTP endpoint that answers 503 a number of times, then 200; records what it got."""

    fail_first = 2
    status_after = 200
    calls: list[tuple[str, str, bytes]] = []

    def do_PUT(self) -> None:  # stdlib naming
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).calls.append(("PUT", self.path, body))
        code = 503 if len(type(self).calls) <= type(self).fail_first else type(self).status_after
        self.send_response(code)
        self.end_headers()
        self.wfile.write(b"nope" if code >= 400 else b"")

    def do_GET(self) -> None:  # the last-success read-back: an empty gateway
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"status":"success","data":[]}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def flaky():
    class Handler(_Flaky):
        calls: list = []

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield server, Handler
    finally:
        server.shutdown()
        server.server_close()


def test_push_retries_server_errors_then_succeeds(tmp_path: Path, flaky):
    server, handler = flaky
    (snap,) = load_run(write_run(tmp_path / "r", [record()]), ProfileChooser.only(profile()))
    url = f"http://127.0.0.1:{server.server_address[1]}"
    res = push_snapshot(url, snap, policy=FAST)
    assert res.ok and res.attempts == 3
    assert [c[1] for c in handler.calls] == ["/metrics/job/tileops/instance/node-a/UUID/cpu-node-a"] * 3
    assert b"tileops_sol_ratio{" in handler.calls[-1][2]


def test_push_does_not_retry_a_client_error(tmp_path: Path, flaky):
    server, handler = flaky
    handler.fail_first, handler.status_after = 0, 400
    (snap,) = load_run(write_run(tmp_path / "r", [record()]), ProfileChooser.only(profile()))
    res = push_snapshot(f"127.0.0.1:{server.server_address[1]}", snap, policy=FAST)
    assert not res.ok and res.attempts == 1 and "HTTP 400" in res.error and "nope" in res.error


def test_group_url_escapes_like_the_pushgateway_wants():
    assert group_url("gw:9091/", "tileops", {"instance": "h", "UUID": "GPU-1"}) == \
        "http://gw:9091/metrics/job/tileops/instance/h/UUID/GPU-1"
    # a slash needs base64 (Pushgateway >= 0.9), an empty value too
    assert group_url("http://gw", "j", {"UUID": "a/b", "instance": ""}) == \
        "http://gw/metrics/job/j/UUID@base64/YS9i/instance@base64/="


# --------------------------------------------------------------------------- serve


@pytest.fixture
def served(tmp_path: Path):
    root = tmp_path / "results"
    root.mkdir()
    source = DirectorySource(root, lambda: ProfileChooser([profile()]), log=lambda msg: None)
    server = make_http_server(source, "127.0.0.1", 0)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_serve_publishes_the_newest_run_per_device_and_follows_changes(served):
    root, url = served
    code, body = get(url + "/healthz")
    assert code == 200 and json.loads(body)["runs"] == 0
    write_run(root / "a", [record(e=env(run_id="a"))], start=T0)
    m = samples(get(url + "/metrics")[1])
    assert m["tileops_run_info"][0].labels["run_id"] == "a"
    assert m["tileops_run_healthy"][0].value == 1

    # a newer, unhealthy run of the same device replaces it; the last success stays the older run's
    write_run(root / "host" / "b", [record("add", "inflated", bytes_=80_000_000_000, e=env(run_id="b"))],
              start=T0 + timedelta(hours=2))
    m = samples(get(url + "/metrics")[1])
    assert [s.labels["run_id"] for s in m["tileops_run_info"]] == ["b"]
    assert m["tileops_run_healthy"][0].value == 0
    assert m["tileops_row_verdict"][0].labels["physics"] == "breach"
    assert m["tileops_run_last_success_timestamp_seconds"][0].value == (T0 + timedelta(minutes=2)).timestamp()

    # another device shows beside it
    write_run(root / "gpu", [record(e=env(run_id="g", device="NVIDIA H200", uuid="GPU-9", kind="cuda"))])
    m = samples(get(url + "/metrics")[1])
    assert {s.labels["UUID"] for s in m["tileops_run_physics_check"]} == {"cpu-node-a", "GPU-9"}


def test_serve_skips_an_unreadable_run_and_reports_it(served):
    root, url = served
    write_run(root / "good", [record()])
    (root / "broken").mkdir()
    (root / "broken" / "records.jsonl").write_text('{"op": 1}\n{"op": 2}\n')
    code, body = get(url + "/metrics")
    assert code == 200 and "tileops_run_healthy{" in body
    raw = get(url + "/healthz")[1]
    health = json.loads(raw)
    assert list(health["unreadable"]) == ["broken"]  # named relative to the served directory
    assert health["unreadable"]["broken"].startswith("records.jsonl:1: ")
    assert str(root) not in raw and health["status"] == "degraded"


def test_serve_healthz_fails_without_the_directory(served):
    root, url = served
    root.rmdir()
    code, body = get(url + "/healthz")
    assert code == 503 and "not a readable directory" in body
    assert get(url + "/nope")[0] == 404


def test_serve_gzips_when_asked(served):
    import gzip

    root, url = served
    write_run(root / "a", [record()])
    req = urllib.request.Request(url + "/metrics", headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.headers["Content-Encoding"] == "gzip"
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert b"tileops_sol_ratio" in gzip.decompress(resp.read())


# --------------------------------------------------------------------------- tileops export


def test_export_command_prints_the_exposition(tmp_path: Path, store: Path, capsysbinary):
    run = write_run(tmp_path / "r", [record()])
    assert main(["export", str(run)]) == 0
    m = samples(capsysbinary.readouterr().out.decode())
    assert m["tileops_sol_ratio"][0].labels["op"] == "relu"
    assert m["tileops_run_info"][0].labels["profile"] == "TestCPU"


def test_export_command_exit_codes(tmp_path: Path, store: Path, capsys):
    run = write_run(tmp_path / "r", [record()])
    assert main(["export", str(tmp_path / "missing")]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert main(["export", str(run), "--profile", "no-such-profile"]) == 2
    assert main(["export", str(run), "--push", f"http://127.0.0.1:{free_port()}", "--push-attempts", "2",
                 "--push-backoff", "0"]) == 4
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    assert main(["export", str(run), "--textfile", str(not_a_dir)]) == 2
    assert "cannot write the textfile" in capsys.readouterr().err


def test_serve_reprices_when_a_profile_appears_and_not_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from tileops.export.server import CachedProfiles

    store = tmp_path / "store"
    store.mkdir()
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(store))
    root = tmp_path / "results"
    write_run(root / "a", [record()])
    profiles = CachedProfiles()
    source = DirectorySource(root, profiles, log=lambda msg: None)
    (before,) = source.scan()
    assert before.health.blanks_by_reason == {"no-profile": 1}
    assert profiles() is profiles()  # unchanged files: no re-read
    write_profile_file(store / "testcpu.yaml", profile())  # a calibration lands in the store
    (after,) = source.scan()
    assert after.profile is not None and after.profile.name == "TestCPU"
    assert after.health.by_verdict.get("blank", 0) == 0 and after.health.rows == 1


def test_the_last_success_is_read_from_its_own_lines_of_a_large_file(tmp_path: Path) -> None:
    """An export reads the previous file's last success from that family's lines only (a 100,000-row file
    parsed whole took over a minute); the value is the one a whole parse gives, and a malformed one is None."""
    from prometheus_client.parser import text_string_to_metric_families

    from tileops.export.textfile import previous_last_success

    name = "tileops_run_last_success_timestamp_seconds"
    rows = "".join(f'tileops_row_sol_ratio{{op="relu",label="r{i}",note="{name} 1"}} 0.5\n' for i in range(3000))
    text = (f"# HELP tileops_row_sol_ratio SOL\n# TYPE tileops_row_sol_ratio gauge\n{rows}"
            f"# HELP {name} The last time a healthy run finished.\n# TYPE {name} gauge\n"
            f'{name}{{device="a"}} 1700000000.0\n{name}_other 5.0\n')
    path = tmp_path / "tileops_a.prom"
    path.write_text(text)
    whole = [s.value for f in text_string_to_metric_families(text) if f.name == name for s in f.samples]
    assert previous_last_success(path) == max(whole) == 1700000000.0
    path.write_text(text.replace("1700000000.0", "soon"))
    assert previous_last_success(path) is None
    path.write_text(text.replace(f'{name}{{device="a"}} 1700000000.0\n', ""))
    assert previous_last_success(path) is None
    assert previous_last_success(tmp_path / "missing.prom") is None
