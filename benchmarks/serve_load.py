"""`tileops serve` under load: concurrent scrapers while its files are rewritten, planted bad, and a bench writes.

Goal (issue 38 item 3): 50 clients scraping for 60 s get no 5xx and no torn
exposition (every scrape parses with prometheus_client's parser, and the
distinct pages, or a sample of them, with promtool's), p99 latency printed;
a run whose files go bad is served as its last good version with
``tileops_serve_read_error``, so its device never drops out of a scrape.

Everything runs for real, on loopback only:

- the server: ``python -m tileops.cli serve ROOT --host 127.0.0.1 --port 0``;
- the churner, a second process (this script, ``--role churn``): rewrites the
  run ``ROOT/churn`` (records.jsonl, run.json) atomically, and between good
  versions plants bad ones: a malformed record line, a run.json cut in half
  (renamed in, and written in place), an audit.jsonl that is not JSON, records
  that are not UTF-8, and a record appended in two halves (a torn tail while
  it is written);
- the writer: ``tileops bench --quick --op relu --device cpu --out ROOT/bench-N``,
  one after another (``--bench real``), or (``--bench replay``, what the test
  suite runs) this script appending records one by one with the bench's own
  writer (``tileops.records.append_record``) into ``ROOT/replay-N``;
- the scrapers: ``--clients`` threads spread over a few processes, each sending
  GET /metrics back to back (every fourth gzipped, every tenth a /healthz).

    python benchmarks/serve_load.py [--clients 50] [--seconds 60] [--bench real|replay] [--json]

Exit 1 on any 5xx, connection error, unparseable or torn scrape, a scrape
without the churned device, or a traceback in the server's log.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import http.client
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from export_support import T0, env, profile, record, write_profile_file  # records built from the contracts

from tileops.records import RunInfo, append_record, to_json, write_run_info

CHURN_HOST = "node-a"  # the churned run's device: present in every scrape, whatever its files hold
REPLAY_HOST = "node-b"
MAX_CLIENTS, MAX_SECONDS = 200, 600  # bounded: this is a load test, not a way to flood a machine


# --------------------------------------------------------------------------- the churner (a second process)


def _atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _good(run: Path, n: int, version: int) -> None:
    """A good version of the churned run: ``n`` rows, then run.json (both atomically)."""
    e = env(run_id="churn", hostname=CHURN_HOST)
    lines = "".join(to_json(record(label=f"v{version}-r{i}", seconds=1e-3 * (1 + i), e=e)) + "\n" for i in range(n))
    _atomic(run / "records.jsonl", lines.encode())
    (run / "audit.jsonl").unlink(missing_ok=True)
    write_run_info(run, RunInfo(run_id="churn", started_at=T0, finished_at=T0 + timedelta(minutes=2),
                                status="completed", exit_code=0, rows_total=n, rows_ok=n))


def _bad_versions(run: Path, pause: float) -> list[tuple[str, Callable[[], None]]]:
    """Each bad version the churner plants, as (name, how to plant it)."""
    good_lines = (run / "records.jsonl").read_bytes()
    run_json = (run / "run.json").read_bytes()

    def half_run_json_in_place() -> None:  # a writer that is not atomic: open, write half, pause, finish
        with open(run / "run.json", "wb") as f:
            f.write(run_json[: len(run_json) // 2])
            f.flush()
            time.sleep(pause)
            f.write(run_json[len(run_json) // 2:])

    def torn_tail() -> None:  # a record appended in two halves: a reader may see the first alone
        line = (to_json(record(label=f"tail-{time.time_ns()}", e=env(run_id="churn", hostname=CHURN_HOST)))
                + "\n").encode()
        with open(run / "records.jsonl", "ab") as f:
            f.write(line[: len(line) // 2])
            f.flush()
            time.sleep(pause)
            f.write(line[len(line) // 2:])

    first, rest = good_lines.split(b"\n", 1)
    return [
        ("malformed record line", lambda: _atomic(run / "records.jsonl", first + b'\n{"op": "relu"}\n' + rest)),
        ("run.json cut in half", lambda: _atomic(run / "run.json", run_json[: len(run_json) // 2])),
        ("run.json written in place", half_run_json_in_place),
        ("audit.jsonl not JSON", lambda: _atomic(run / "audit.jsonl", b"{not json\n")),
        ("records not UTF-8", lambda: _atomic(run / "records.jsonl", b"\xff\xfe" + good_lines)),
        ("torn tail while appending", torn_tail),
    ]


def churn(run: Path, until: float, pause: float) -> dict:
    """Alternate good versions and bad ones until ``until`` (time.time()); what was planted, counted."""
    planted: Counter[str] = Counter()
    version = 0
    while time.time() < until:
        for name, plant in _bad_versions(run, pause):
            if time.time() >= until:
                break
            version += 1
            _good(run, 3 + version % 4, version)
            planted["good"] += 1
            time.sleep(pause)
            plant()
            planted[name] += 1
            time.sleep(pause)
    _good(run, 3, version + 1)  # it ends good
    return dict(planted)


# --------------------------------------------------------------------------- the writer


def replay(root: Path, until: float, pause: float) -> dict:
    """Runs written as the bench writes them (run.json, then one appended record at a time) until ``until``."""
    runs = rows = 0
    while time.time() < until:
        run = root / f"replay-{runs}"
        run.mkdir(parents=True)
        e = env(run_id=f"replay-{runs}", hostname=REPLAY_HOST)
        start = T0 + timedelta(hours=runs)
        write_run_info(run, RunInfo(run_id=e.run_id, started_at=start, status="running"))
        for i in range(10):
            if time.time() >= until:
                break
            append_record(run / "records.jsonl", record(label=f"row{i}", e=e, start=start))
            rows += 1
            time.sleep(pause)
        write_run_info(run, RunInfo(run_id=e.run_id, started_at=start, finished_at=start + timedelta(minutes=1),
                                    status="completed", exit_code=0, rows_total=10, rows_ok=10))
        runs += 1
    return {"runs": runs, "rows": rows}


def real_benches(root: Path, until: float, environ: dict, log: Path) -> dict:
    """``tileops bench --quick --op relu --device cpu`` one after another; the last one stopped at ``until``."""
    runs: list[int] = []
    n = 0
    with open(log, "ab") as out:
        while time.time() < until:
            proc = subprocess.Popen([sys.executable, "-m", "tileops.cli", "bench", "--quick", "--op", "relu",
                                     "--device", "cpu", "--no-plot", "--out", str(root / f"bench-{n}")],
                                    env=environ, stdout=out, stderr=subprocess.STDOUT)
            n += 1
            while proc.poll() is None and time.time() < until:
                time.sleep(0.2)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # stopped as docker stop would: its records stay whole
            runs.append(proc.wait(timeout=120))
    rows = sum(len((root / f"bench-{i}" / "records.jsonl").read_bytes().splitlines())
               for i in range(n) if (root / f"bench-{i}" / "records.jsonl").exists())
    return {"runs": len(runs), "exit_codes": dict(Counter(runs)), "rows": rows}


# --------------------------------------------------------------------------- the scrapers


def _get(host: str, port: int, path: str, gz: bool) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.request("GET", path, headers={"Accept-Encoding": "gzip"} if gz else {})
        resp = conn.getresponse()
        body = resp.read()  # IncompleteRead when the body is shorter than its Content-Length
        if resp.getheader("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return resp.status, body
    finally:
        conn.close()


class _Tally:
    """One scraping process's results, merged across its threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latencies: dict[str, list[float]] = {"/metrics": [], "/healthz": []}
        self.status: Counter[int] = Counter()
        self.errors: Counter[str] = Counter()
        self.pages: Counter[str] = Counter()  # digest -> scrapes that got it
        self.bodies: dict[str, bytes] = {}
        self.bad_health = 0


def _client(t: _Tally, host: str, port: int, deadline: float, seed: int) -> None:
    i = seed
    while time.monotonic() < deadline:
        i += 1
        path = "/healthz" if i % 10 == 0 else "/metrics"
        t0 = time.perf_counter()
        try:
            status, body = _get(host, port, path, gz=i % 4 == 0)
        except (OSError, http.client.HTTPException, EOFError) as exc:  # EOFError: a gzip stream cut short
            with t.lock:
                t.errors[type(exc).__name__] += 1
            continue
        took = time.perf_counter() - t0
        digest = hashlib.sha1(body).hexdigest() if path == "/metrics" and status == 200 else ""
        with t.lock:
            t.latencies[path].append(took)
            t.status[status] += 1
            if digest:
                t.pages[digest] += 1
                t.bodies.setdefault(digest, body)
        if path == "/healthz" and status == 200:
            try:
                json.loads(body)
            except ValueError:
                with t.lock:
                    t.bad_health += 1


def check_page(body: bytes) -> dict:
    """What one distinct page holds: whether it parses whole, has the churned device, shows a read error."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = body.decode("utf-8")
        families = {f.name: f.samples for f in text_string_to_metric_families(text)}
    except Exception as exc:  # any parser error is an unparseable page
        return {"parses": False, "why": f"{type(exc).__name__}: {str(exc)[:200]}"}
    whole = text.endswith("\n") and "tileops_build_info" in families  # the catalogue's last series: not cut short
    device = any(s.labels.get("Hostname") == CHURN_HOST for s in families.get("tileops_run_info", []))
    return {"parses": whole, "why": "" if whole else "cut short (no tileops_build_info at its end)",
            "device": device, "read_error": "tileops_serve_read_error" in families}


def scrape_process(host: str, port: int, threads: int, seconds: float, seed: int) -> dict:
    """``threads`` clients for ``seconds``; then each distinct page is checked here, in parallel with the others."""
    t = _Tally()
    deadline = time.monotonic() + seconds
    workers = [threading.Thread(target=_client, args=(t, host, port, deadline, seed + k * 7), daemon=True)
               for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=seconds + 120)
    checks = {d: check_page(b) for d, b in t.bodies.items()}
    return {"latencies": t.latencies, "status": dict(t.status), "errors": dict(t.errors), "pages": dict(t.pages),
            "checks": checks, "bad_health": t.bad_health,
            "bodies": {d: t.bodies[d] for d in list(t.bodies)[:: max(1, len(t.bodies) // 100)]}}


# --------------------------------------------------------------------------- the run


def promtool_check(bodies: list[bytes], exe: str) -> tuple[int, list[str]]:
    """Pages promtool cannot parse (its lint warnings, such as dcgm-exporter's camelCase labels, are not failures)."""
    failures: list[str] = []
    for body in bodies:
        res = subprocess.run([exe, "check", "metrics"], input=body, capture_output=True, timeout=60)
        out = (res.stdout + res.stderr).decode(errors="replace")
        if res.returncode not in (0, 3) or "error while linting" in out or "parsing error" in out:
            failures.append(out.strip()[:300])
    return len(bodies), failures


def start_server(root: Path, environ: dict, log: Path) -> tuple[subprocess.Popen, str, int]:
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tileops.cli", "serve", str(root), "--host", "127.0.0.1",
                                 "--port", "0"], env=environ, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if "/metrics" in text:
            host, port = text.split("http://", 1)[1].split("/metrics", 1)[0].rsplit(":", 1)
            return proc, host, int(port)
        if proc.poll() is not None:
            raise SystemExit(f"tileops serve exited {proc.returncode}:\n{text}")
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("tileops serve did not say where it listens within 120 s")


def _quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def merge(parts: list[dict]) -> dict:
    status: Counter[int] = Counter()
    errors: Counter[str] = Counter()
    pages: Counter[str] = Counter()
    checks: dict[str, dict] = {}
    bodies: dict[str, bytes] = {}
    lat: dict[str, list[float]] = {"/metrics": [], "/healthz": []}
    bad_health = 0
    for p in parts:
        status.update({int(k): v for k, v in p["status"].items()})
        errors.update(p["errors"])
        pages.update(p["pages"])
        checks.update(p["checks"])
        bodies.update(p["bodies"])
        for k, v in p["latencies"].items():
            lat[k] += v
        bad_health += p["bad_health"]
    return {"status": status, "errors": errors, "pages": pages, "checks": checks, "bodies": bodies, "lat": lat,
            "bad_health": bad_health}


def summarize(m: dict, promtool: tuple[int, list[str]] | None) -> dict:
    pages, checks = m["pages"], m["checks"]
    bad_digests = [d for d, c in checks.items() if not c["parses"]]
    every = m["lat"]["/metrics"] + m["lat"]["/healthz"]
    return {
        "requests": sum(m["status"].values()) + sum(m["errors"].values()),
        "metrics_scrapes": len(m["lat"]["/metrics"]),
        "healthz": len(m["lat"]["/healthz"]),
        "status": {str(k): v for k, v in sorted(m["status"].items())},
        "5xx": sum(v for k, v in m["status"].items() if k >= 500),
        "connection_errors": dict(m["errors"]),
        "unparseable": sum(pages[d] for d in bad_digests),
        "unparseable_why": sorted({checks[d]["why"] for d in bad_digests})[:5],
        "distinct_pages": len(pages),
        "scrapes_without_churned_device": sum(pages[d] for d, c in checks.items() if c["parses"] and not c["device"]),
        "scrapes_with_read_error": sum(pages[d] for d, c in checks.items() if c.get("read_error")),
        "bad_healthz": m["bad_health"],
        "promtool_checked": promtool[0] if promtool else 0,
        "promtool_failures": len(promtool[1]) if promtool else 0,
        "promtool_first_failure": (promtool[1][:1] if promtool else []),
        "p50_s": _quantile(every, 0.50), "p99_s": _quantile(every, 0.99), "max_s": max(every, default=float("nan")),
        "metrics_p99_s": _quantile(m["lat"]["/metrics"], 0.99),
    }


def failed(s: dict) -> list[str]:
    """What breaks the goal, as sentences (empty when it holds)."""
    checks = [("5xx answers", s["5xx"]), ("connection errors", sum(s["connection_errors"].values())),
              ("unparseable or torn scrapes", s["unparseable"]), ("promtool failures", s["promtool_failures"]),
              ("scrapes without the churned device", s["scrapes_without_churned_device"]),
              ("/healthz answers that are not JSON", s["bad_healthz"]),
              ("tracebacks in the server's log", s["server_tracebacks"])]
    out = [f"{n} {what}" for what, n in checks if n]
    if s["server_exit"] != 0:
        out.append(f"the server exited {s['server_exit']} on SIGTERM (expected 0)")
    return out


def setup(root: Path, store: Path) -> dict:
    store.mkdir(parents=True)
    write_profile_file(store / "testcpu.yaml", profile())
    (root / "churn").mkdir(parents=True)
    _good(root / "churn", 3, 0)
    return {**os.environ, "TILEOPS_PROFILE_DIR": str(store), "PYTHONPATH": os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


def _find_promtool() -> str | None:
    import shutil

    found = shutil.which("promtool") or ("/usr/bin/promtool" if os.access("/usr/bin/promtool", os.X_OK) else None)
    return found


def run_load(args: argparse.Namespace, tmp: Path) -> dict:
    root, store = tmp / "results", tmp / "store"
    environ = setup(root, store)
    load_before = os.getloadavg()
    server, host, port = start_server(root, environ, tmp / "serve.log")
    procs = min(args.clients, max(1, args.processes))
    shares = [args.clients // procs + (1 if k < args.clients % procs else 0) for k in range(procs)]
    with multiprocessing.get_context("fork").Pool(procs) as pool:  # forked before any thread starts here
        until = time.time() + args.seconds
        me = [sys.executable, str(Path(__file__).resolve())]
        churner = subprocess.Popen([*me, "--role", "churn", str(root / "churn"), "--until", str(until),
                                    "--pause", str(args.pause)], env=environ, stdout=subprocess.PIPE)
        writer_out: dict = {}
        if args.bench == "replay":
            writer = subprocess.Popen([*me, "--role", "replay", str(root), "--until", str(until), "--pause",
                                       str(args.pause)], env=environ, stdout=subprocess.PIPE)
        else:
            real = threading.Thread(target=lambda: writer_out.update(real_benches(root, until, environ,
                                                                                  tmp / "bench.log")))
            real.start()
        parts = pool.starmap(scrape_process, [(host, port, n, args.seconds, k * 1000) for k, n in enumerate(shares)])
    if args.bench == "replay":
        writer_out = json.loads(writer.communicate(timeout=120)[0] or b"{}")
    else:
        real.join(timeout=180)
    planted = json.loads(churner.communicate(timeout=120)[0] or b"{}")
    load_after = os.getloadavg()
    server.send_signal(signal.SIGTERM)
    server_exit = server.wait(timeout=60)
    m = merge(parts)
    exe = None if args.no_promtool else _find_promtool()
    promtool = promtool_check(list(m["bodies"].values())[: args.promtool_max], exe) if exe else None
    log = (tmp / "serve.log").read_text(errors="replace")
    s = summarize(m, promtool)
    s.update({"clients": args.clients, "seconds": args.seconds, "processes": procs, "bench": args.bench,
              "writer": writer_out, "planted": planted, "server_exit": server_exit,
              "server_tracebacks": log.count("Traceback"), "server_skips_logged": log.count("skipping"),
              "promtool": exe or "not found", "cpus": os.cpu_count(),
              "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after]})
    return s


def report(s: dict) -> None:
    print(f"tileops serve under load: {s['clients']} clients ({s['processes']} processes) for {s['seconds']:g} s; "
          f"{s['cpus']} CPUs, load average {s['load_before'][0]} before, {s['load_after'][0]} after")
    print(f"requests {s['requests']} ({s['metrics_scrapes']} /metrics, {s['healthz']} /healthz); "
          f"status {s['status']}; 5xx {s['5xx']}; connection errors {sum(s['connection_errors'].values())}")
    print(f"unparseable or torn {s['unparseable']} of {s['metrics_scrapes']} scrapes ({s['distinct_pages']} distinct "
          f"pages, each parsed with prometheus_client); promtool: {s['promtool_checked']} pages checked, "
          f"{s['promtool_failures']} failed")
    print(f"latency p50 {s['p50_s'] * 1e3:.1f} ms, p99 {s['p99_s'] * 1e3:.1f} ms, max {s['max_s'] * 1e3:.1f} ms "
          f"(/metrics p99 {s['metrics_p99_s'] * 1e3:.1f} ms)")
    print(f"churned device in every scrape: {s['scrapes_without_churned_device']} without it; "
          f"{s['scrapes_with_read_error']} scrapes showed tileops_serve_read_error")
    print(f"planted: {s['planted']}")
    print(f"writer ({s['bench']}): {s['writer']}; server exit on SIGTERM {s['server_exit']}, "
          f"{s['server_tracebacks']} tracebacks in its log")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=50, help=f"concurrent scrapers, 1-{MAX_CLIENTS} (default 50)")
    ap.add_argument("--seconds", type=float, default=60.0, help=f"how long, up to {MAX_SECONDS} (default 60)")
    ap.add_argument("--processes", type=int, default=4, help="processes the scrapers are spread over (default 4)")
    ap.add_argument("--bench", choices=("real", "replay"), default="real",
                    help="the writer: a real CPU bench, or records appended by the bench's writer (default real)")
    ap.add_argument("--pause", type=float, default=0.02, help="seconds between the churner's writes (default 0.02)")
    ap.add_argument("--promtool-max", type=int, default=100, help="distinct pages piped through promtool")
    ap.add_argument("--no-promtool", action="store_true", help="prometheus_client's parser only")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object at the end")
    ap.add_argument("--role", choices=("churn", "replay"), help=argparse.SUPPRESS)
    ap.add_argument("target", nargs="?", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--until", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "churn":
        print(json.dumps(churn(args.target, args.until, args.pause)))
        return 0
    if args.role == "replay":
        print(json.dumps(replay(args.target, args.until, args.pause)))
        return 0
    if not 1 <= args.clients <= MAX_CLIENTS or not 0 < args.seconds <= MAX_SECONDS:
        ap.error(f"--clients takes 1-{MAX_CLIENTS} and --seconds (0, {MAX_SECONDS}]")
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        s = run_load(args, Path(tmp))
    report(s)
    problems = failed(s)
    print("goal: 0 5xx, 0 unparseable or torn scrapes, the churned device in every scrape: "
          + ("met" if not problems else "NOT MET: " + "; ".join(problems)))
    if args.json:
        print(json.dumps(s))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
