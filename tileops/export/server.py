"""``tileops serve``: an HTTP exporter of the latest results in a directory.

``/metrics`` publishes each device's newest run found under the directory
(``DIR/records.jsonl``, ``DIR/<run-id>/``, ``DIR/<host>/<run-id>/``), priced at
scrape time; ``/healthz`` answers whether the exporter can read the directory
(liveness of the exporter, not the bench's health, which is a metric).

Runs are re-read only when their files change, so a scrape of a large
results tree costs a directory walk and a few ``stat`` calls.
"""

from __future__ import annotations

import gzip
import json
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from tileops.errors import TileOpsError
from tileops.profiles import ProfileChooser
from tileops.records import AUDIT_FILE, RECORDS_FILE, RUN_FILE

from .calibration import device_calibrations
from .exposition import CONTENT_TYPE
from .metrics import DEFAULT_DETAIL, render
from .snapshot import RunSnapshot, find_run_dirs, latest_per_device, load_run

DEFAULT_PORT = 9469


def _stamp(run_dir: Path) -> tuple:
    out = []
    for name in (RECORDS_FILE, RUN_FILE, AUDIT_FILE):
        try:
            st = (run_dir / name).stat()
            out.append((name, st.st_mtime_ns, st.st_size))
        except FileNotFoundError:
            out.append((name, None, None))
    return tuple(out)


def _fingerprint(chooser: ProfileChooser) -> str:
    return "|".join(p.model_dump_json() for p in chooser.profiles)


class CachedProfiles:
    """``ProfileChooser.resolve(choice)``, re-read only when a profile file changes.

    Parsing every profile YAML takes a few hundred milliseconds; a scrape every
    15 s should not pay it when nothing changed, yet a fresh calibration must
    show at the next scrape. The stamp covers the shipped folder, the store and
    an explicit ``--profile`` file.
    """

    def __init__(self, choice: str | None = None) -> None:
        self.choice = choice
        self._stamp: tuple | None = None
        self._value = ProfileChooser()

    def _files(self) -> list[Path]:
        from tileops.profiles import shipped_dir, store_dir

        files: list[Path] = []
        for d in (shipped_dir(), store_dir()):
            if d.is_dir():
                files += sorted([*d.glob("*.yaml"), *d.glob("*.yml")])
        if self.choice and Path(self.choice).is_file():
            files.append(Path(self.choice))
        return files

    def __call__(self) -> ProfileChooser:
        stamp = []
        for f in self._files():
            try:
                st = f.stat()
                stamp.append((str(f), st.st_mtime_ns, st.st_size))
            except FileNotFoundError:
                continue
        key = tuple(stamp)
        if key != self._stamp:
            self._value = ProfileChooser.resolve(self.choice)
            self._stamp = key
        return self._value


@dataclass
class DirectorySource:
    """The snapshots to publish: each device's newest run under ``root``, cached by file stamps."""

    root: Path
    profiles: Callable[[], ProfileChooser]
    log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr, flush=True)
    _cache: dict[Path, tuple[tuple, list[RunSnapshot]]] = field(default_factory=dict)
    _failed: dict[Path, tuple[tuple, str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def scan(self) -> list[RunSnapshot]:
        with self._lock:
            profiles = self.profiles()
            calibrations = device_calibrations()
            fp = _fingerprint(profiles) + "|" + "|".join(
                f"{k}:{c.run_id}:{c.finished_at.isoformat()}" for k, c in sorted(calibrations.items()))
            dirs = find_run_dirs(self.root) if self.root.is_dir() else []
            snaps: list[RunSnapshot] = []
            for d in dirs:
                stamp = _stamp(d) + (fp,)
                hit = self._cache.get(d)
                if hit is not None and hit[0] == stamp:
                    snaps.extend(hit[1])
                    continue
                try:
                    loaded = load_run(d, profiles, calibrations)
                except (TileOpsError, OSError, ValueError) as exc:
                    if self._failed.get(d, ((), ""))[0] != stamp:
                        self.log(f"tileops serve: skipping {d}: {exc}")
                    self._failed[d] = (stamp, str(exc))
                    self._cache.pop(d, None)
                    continue
                self._failed.pop(d, None)
                self._cache[d] = (stamp, loaded)
                snaps.extend(loaded)
            for gone in set(self._cache) - set(dirs):
                del self._cache[gone]
            for gone in set(self._failed) - set(dirs):
                del self._failed[gone]
            return latest_per_device(snaps)

    def health(self) -> tuple[bool, dict]:
        ok = self.root.is_dir()
        return ok, {
            "status": "ok" if ok else "error",
            "directory": str(self.root),
            "error": None if ok else f"{self.root} is not a readable directory",
            "runs": len(self._cache),
            "unreadable": {str(k): v[1] for k, v in sorted(self._failed.items())},
        }


def make_app(source: DirectorySource, detail: str = DEFAULT_DETAIL) -> Callable:
    """The WSGI app: ``/metrics`` (text format 0.0.4, gzip when accepted, at ``detail``), ``/healthz``, ``/``."""

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            body = render(source.scan(), detail=detail)
            headers = [("Content-Type", CONTENT_TYPE)]
            if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
                body = gzip.compress(body, compresslevel=1)
                headers.append(("Content-Encoding", "gzip"))
            start_response("200 OK", headers + [("Content-Length", str(len(body)))])
            return [body]
        if path == "/healthz":
            if source.root.is_dir():
                source.scan()  # report unreadable runs as of now
            ok, body = source.health()
            start_response("200 OK" if ok else "503 Service Unavailable",
                           [("Content-Type", "application/json")])
            return [json.dumps(body).encode()]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"tileops exporter: /metrics (Prometheus), /healthz\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try /metrics or /healthz\n"]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass


def make_http_server(source: DirectorySource, host: str = "0.0.0.0", port: int = DEFAULT_PORT, *,
                     detail: str = DEFAULT_DETAIL) -> WSGIServer:
    """A threaded server bound to (host, port); ``port=0`` picks a free one (see ``server_address``)."""
    return make_server(host, port, make_app(source, detail), server_class=_Server, handler_class=_QuietHandler)
