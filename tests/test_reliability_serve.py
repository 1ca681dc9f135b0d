"""`tileops serve` degrades per item: bad files cost their own run or profile, never the endpoints.

The exporter runs for real (``python -m tileops.cli serve`` in a subprocess) over
a results tree that holds one good run beside a FIFO, a link to ``/dev/zero``,
an oversized file and a malformed one, with a profile store holding a profile
whose ceiling is infinite. /metrics and /healthz must answer 200 at once, the
good run must be priced with the good profile, and /healthz must list every bad
item by its relative name, without absolute paths or tracebacks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from export_support import profile, record, wait_http, write_profile_file, write_run

from tileops.export.server import DirectorySource
from tileops.profiles import ProfileChooser
from cli_support import tileops_argv


def get(url: str, timeout: float = 20) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.status, resp.read().decode()


@pytest.fixture
def hostile_tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "results"
    write_run(root / "good", [record()])
    for name in ("fifo", "zero", "big", "badline"):
        (root / name).mkdir(parents=True)
    os.mkfifo(root / "fifo" / "records.jsonl")  # read, it would block every scrape
    (root / "zero" / "records.jsonl").symlink_to("/dev/zero")  # read, it would never end
    with open(root / "big" / "records.jsonl", "wb") as f:  # 2 MiB (sparse), over a 1 MB bound
        f.truncate(2 * 2**20)
    (root / "badline" / "records.jsonl").write_text('{"op": "relu"}\n')
    store = tmp_path / "store"
    store.mkdir()
    write_profile_file(store / "testcpu.yaml", profile())
    (store / "infinite.yaml").write_text(
        "name: Infinite\nkind: gpu\nmatch: [Imaginary GPU]\n"
        "memory: {theoretical: .inf, theoretical_source: {source: datasheet}}\n", encoding="utf-8")
    (store / "nonutf.yaml").write_bytes(b"name: \xff\n")
    return root, store


def test_serve_leaves_out_bad_runs_and_profiles_and_names_them(tmp_path: Path, hostile_tree) -> None:
    root, store = hostile_tree
    port_file = tmp_path / "out.txt"
    env = {**os.environ, "TILEOPS_PROFILE_DIR": str(store)}
    with open(port_file, "w") as out:
        proc = subprocess.Popen(tileops_argv("serve", str(root), "--host", "127.0.0.1", "--port", "0",
                                             "--max-file-mb", "1"), env=env, stdout=out, stderr=subprocess.STDOUT,
                                text=True)
    try:
        url = None
        for _ in range(600):
            text = port_file.read_text()
            if "/metrics" in text:
                url = text.split("http://", 1)[1].split("/metrics", 1)[0]
                break
            assert proc.poll() is None, text
            import time
            time.sleep(0.1)
        assert url, port_file.read_text()
        base = f"http://{url}"
        wait_http(base + "/", 60, proc)

        code, metrics = get(base + "/metrics")
        assert code == 200
        assert 'tileops_run_healthy{Hostname="node-a"' in metrics
        assert 'profile="TestCPU"' in metrics  # the good run, priced by the good profile

        code, raw = get(base + "/healthz")
        health = json.loads(raw)
        assert code == 200 and health["status"] == "degraded" and health["runs"] == 1
        bad = health["unreadable"]
        assert set(bad) == {"fifo", "zero", "big", "badline"}, bad
        assert "FIFO" in bad["fifo"] and "character device" in bad["zero"]
        assert "limit" in bad["big"] and bad["badline"].startswith("records.jsonl:1: ")
        profiles = health["profiles_unreadable"]
        assert set(profiles) == {"store/infinite.yaml", "store/nonutf.yaml"}, profiles
        assert "finite" in profiles["store/infinite.yaml"] and "UTF-8" in profiles["store/nonutf.yaml"]
        assert str(tmp_path) not in raw and "Traceback" not in raw

        proc.send_signal(signal.SIGTERM)  # docker stop: a clean exit
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_a_scrape_of_an_unchanged_tree_reuses_the_rendered_page(tmp_path: Path) -> None:
    """Rendered once per change: the same bytes object until an input file changes."""
    root = tmp_path / "results"
    run = write_run(root / "a", [record()])
    chooser = ProfileChooser([profile()])
    source = DirectorySource(root, lambda: chooser, log=lambda msg: None)
    first = source.metrics()
    assert source.metrics() is first and source.metrics(gzipped=True) is source.metrics(gzipped=True)
    with open(run / "records.jsonl", "a") as f:  # a new row lands: the next scrape shows it
        from tileops.records import to_json

        f.write(to_json(record("relu", "second")) + "\n")
    second = source.metrics()
    assert second is not first and 'label="second"' in second.decode()


def test_a_profile_that_goes_bad_keeps_its_last_good_version(tmp_path: Path, monkeypatch) -> None:
    from tileops.export.server import CachedProfiles

    store = tmp_path / "store"
    store.mkdir()
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(store))
    path = write_profile_file(store / "testcpu.yaml", profile())
    profiles = CachedProfiles()
    assert profiles()("Test CPU 9000").name == "TestCPU" and not profiles.problems
    path.write_text(path.read_text().replace("theoretical: 100000000000.0", "theoretical: 1e400"))
    assert profiles()("Test CPU 9000").name == "TestCPU"  # a half-edited file does not blank the device
    (problem,) = profiles.problems.values()
    assert "last good version" in problem and "finite" in problem and str(tmp_path) not in problem
