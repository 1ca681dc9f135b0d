"""`tileops serve` under load, and a run whose files go bad while it is served (issue 38 item 3).

The load test is ``benchmarks/serve_load.py`` briefly (50 clients for 5 s): a real
server on loopback, a second process rewriting and planting bad versions of a run's
files, a writer appending records with the bench's own writer, and every scrape
parsed (the distinct pages also by promtool). The other tests run a real server in a
subprocess and scrape it over HTTP while a run's files are replaced by malformed or
half-written versions: the run stays served as its last good version, and the page
says so itself (``tileops_serve_read_error``, ``tileops_serve_last_good_timestamp_seconds``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).parent))
from cli_support import tileops_argv
from export_support import env, need_binary, profile, record, wait_http, write_profile_file, write_run

from tileops.records import to_json

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "serve_load.py"


@pytest.mark.slow
def test_fifty_scrapers_meet_no_5xx_and_no_torn_page_while_the_files_churn(tmp_path: Path) -> None:
    need_binary("promtool")
    res = subprocess.run([sys.executable, str(BENCH), "--clients", "50", "--seconds", "5", "--bench", "replay",
                          "--promtool-max", "25", "--json"], capture_output=True, text=True, timeout=240,
                         env={**os.environ, "TMPDIR": str(tmp_path)})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    s = json.loads(res.stdout.strip().splitlines()[-1])
    assert s["5xx"] == 0 and not s["connection_errors"] and s["unparseable"] == 0, s
    assert s["promtool_checked"] > 0 and s["promtool_failures"] == 0, s
    assert s["metrics_scrapes"] >= 50 and s["healthz"] > 0 and s["status"] == {"200": s["requests"]}, s
    # the churn was seen, and the churned device stayed in every page: its last good version was served
    bad = {k: v for k, v in s["planted"].items() if k != "good"}
    assert len(bad) >= 5 and all(v > 0 for v in bad.values()), s["planted"]
    assert s["scrapes_with_read_error"] > 0 and s["scrapes_without_churned_device"] == 0, s
    assert s["writer"]["rows"] > 0 and s["distinct_pages"] > 1 and s["server_tracebacks"] == 0, s
    assert 0 < s["p50_s"] <= s["p99_s"] <= s["max_s"], s
    assert "p99" in res.stdout and "goal: 0 5xx, 0 unparseable or torn scrapes" in res.stdout


# --------------------------------------------------------------------------- a run that goes bad


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real `tileops serve` over ``results/`` (one good run, ``a``), its base URL and the results folder."""
    root = tmp_path / "results"
    write_run(root / "a", [record(label="first"), record(label="second")])
    store = tmp_path / "store"
    store.mkdir()
    write_profile_file(store / "testcpu.yaml", profile())
    out_file = tmp_path / "serve.log"
    with open(out_file, "w") as out:
        proc = subprocess.Popen(tileops_argv("serve", str(root), "--host", "127.0.0.1", "--port", "0"),
                                env={**os.environ, "TILEOPS_PROFILE_DIR": str(store)}, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "/metrics" not in out_file.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, out_file.read_text()
            time.sleep(0.05)
        base = "http://" + out_file.read_text().split("http://", 1)[1].split("/metrics", 1)[0]
        wait_http(base + "/", 60, proc)
        yield base, root
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "Traceback" not in out_file.read_text()


def scrape(base: str) -> dict[str, list]:
    with urllib.request.urlopen(base + "/metrics", timeout=30) as resp:
        assert resp.status == 200
        text = resp.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def healthz(base: str) -> dict:
    with urllib.request.urlopen(base + "/healthz", timeout=30) as resp:
        assert resp.status == 200
        return json.loads(resp.read())


def labels_of(m: dict[str, list], name: str) -> set[str]:
    return {s.labels["label"] for s in m.get(name, [])}


def value(m: dict[str, list], name: str, **labels: str) -> float | None:
    hits = [s.value for s in m.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) <= 1, hits
    return hits[0] if hits else None


def _replace(path: Path, data: bytes) -> None:
    """As another tool might write it: a new file renamed over the old one (a new inode, a new stamp)."""
    tmp = path.with_name(f".{path.name}.new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@pytest.mark.parametrize("plant, says", [
    (lambda run: _replace(run / "run.json", (run / "run.json").read_bytes()[:40]), "run.json"),
    (lambda run: (run / "run.json").write_text("{"), "run.json"),  # written in place, cut short
    (lambda run: _replace(run / "records.jsonl", (run / "records.jsonl").read_bytes() + b'{"op": "relu"}\n'),
     "records.jsonl:3"),
    (lambda run: _replace(run / "records.jsonl", b"\xff" + (run / "records.jsonl").read_bytes()), "records.jsonl"),
    (lambda run: _replace(run / "audit.jsonl", b"{not json\n"), "audit.jsonl"),
    (lambda run: (run / "records.jsonl").unlink() or os.mkfifo(run / "records.jsonl"), "FIFO"),
], ids=["run.json-cut", "run.json-in-place", "bad-record-line", "records-not-utf8", "audit-not-json", "fifo"])
def test_a_run_whose_files_go_bad_is_served_as_its_last_good_version_with_an_error_series(
        served: tuple[str, Path], plant, says: str) -> None:
    base, root = served
    run = root / "a"
    before = time.time()
    good = scrape(base)
    after = time.time()
    assert labels_of(good, "tileops_sol_ratio") == {"first", "second"} and "tileops_serve_read_error" not in good

    plant(run)
    m = scrape(base)  # 200, not 500 (scrape asserts it), and the same run as before
    assert labels_of(m, "tileops_sol_ratio") == {"first", "second"}
    assert m["tileops_sol_ratio"] == good["tileops_sol_ratio"] and m["tileops_run_info"] == good["tileops_run_info"]
    assert value(m, "tileops_serve_read_error", path="a") == 1
    read_at = value(m, "tileops_serve_last_good_timestamp_seconds", path="a")
    assert read_at is not None and before - 1 <= read_at <= after + 1  # the version read at the first scrape
    problem = healthz(base)["unreadable"]["a"]
    assert says in problem and "serving its last good version" in problem and str(root) not in problem

    if (run / "records.jsonl").is_fifo():
        (run / "records.jsonl").unlink()
    (run / "audit.jsonl").unlink(missing_ok=True)
    (run / "records.jsonl").unlink(missing_ok=True)
    write_run(run, [record(label="third")])  # a good version again: served at once, the error gone
    m = scrape(base)
    assert labels_of(m, "tileops_sol_ratio") == {"third"} and "tileops_serve_read_error" not in m
    assert "tileops_serve_last_good_timestamp_seconds" not in m and healthz(base)["unreadable"] == {}


def test_a_run_never_read_whole_is_left_out_with_its_error_and_no_last_good_time(served: tuple[str, Path]) -> None:
    base, root = served
    other = write_run(root / "b", [record(e=env(hostname="node-b", run_id="run-b"))])
    (other / "run.json").write_text('{"run_id": ')  # half-written before the server ever read it
    m = scrape(base)
    assert {s.labels["Hostname"] for s in m["tileops_run_info"]} == {"node-a"}  # b is left out, a stays
    assert value(m, "tileops_serve_read_error", path="b") == 1
    assert value(m, "tileops_serve_last_good_timestamp_seconds", path="b") is None
    assert "serving" not in healthz(base)["unreadable"]["b"]


def test_a_torn_last_record_is_one_being_appended_the_whole_lines_are_served_without_error(
        served: tuple[str, Path]) -> None:
    base, root = served
    line = to_json(record(label="third")) + "\n"
    with open(root / "a" / "records.jsonl", "a") as f:  # the first half of an append, as a reader can catch it
        f.write(line[: len(line) // 2])
    m = scrape(base)
    assert labels_of(m, "tileops_sol_ratio") == {"first", "second"} and "tileops_serve_read_error" not in m
    with open(root / "a" / "records.jsonl", "a") as f:
        f.write(line[len(line) // 2:])
    assert labels_of(scrape(base), "tileops_sol_ratio") == {"first", "second", "third"}
