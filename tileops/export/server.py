"""``tileops serve``: an HTTP exporter of the latest results in a directory.

``/metrics`` publishes each device's newest run found under the directory
(``DIR/records.jsonl``, ``DIR/<run-id>/``, ``DIR/<host>/<run-id>/``), priced
against the current profiles, with the device's newest audit (beside a run, or
in an audit folder of its own such as ``DIR/audit-<run-id>/``); ``/healthz`` answers whether the exporter can
read the directory (liveness of the exporter, not the bench's health, which is
a metric), and lists what it had to leave out.

It degrades per item, never as a whole: a run whose files are malformed or
half-written, not regular files (a FIFO would hang the scrape, a link to
``/dev/zero`` would fill memory) or over the size bound is served as the last
version of it that read whole (left out when none did) and listed under
``unreadable``; a malformed profile is skipped (or, if it was good before, its
last good version kept) and listed under ``profiles_unreadable``. Either way
``/metrics`` says so itself (``tileops_serve_read_error``, and
``tileops_serve_last_good_timestamp_seconds`` for a run), because a scraper
never reads ``/healthz`` and a stale page must not pass for a fresh one. Names
in ``/healthz`` and in those series are relative to the served directory,
never absolute paths or tracebacks (those go to the exporter's log).

The exposition is rendered once per change: the rendered bytes are kept, keyed
by the stamps (mtime, size, inode) of every input file, so a scrape of an
unchanged tree costs a directory walk and a few ``stat`` calls.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from socketserver import ThreadingMixIn
from collections.abc import Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from tileops.ledger import profile_chooser
from tileops.defaults import SERVE_MAX_FILE_BYTES as DEFAULT_MAX_FILE_BYTES
from tileops.defaults import SERVE_PORT as DEFAULT_PORT
from tileops.errors import TileOpsError
from tileops.fsutil import FileRefused, check_regular
from tileops.profiles import (Profile, ProfileChooser, ProfileError, load_profile, shipped_dir, store_dir,
                              store_problem)
from tileops.records import AUDIT_FILE, RECORDS_FILE, RUN_FILE, RUN_FILE_MAX_BYTES

from .calibration import device_calibrations
from .exposition import CONTENT_TYPE, format_samples
from .metrics import DEFAULT_DETAIL, Samples, collect_samples, exposition
from .snapshot import Snapshot, find_run_dirs, latest_per_device, load_results

_Stamp = tuple


def _file_stamp(path: Path) -> tuple | None:
    """(mode, mtime, size, inode) of what ``path`` points to, or None when it is absent."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a loop of links, permissions: the run is refused when it is read
        return ("error", exc.errno)
    return (st.st_mode, st.st_mtime_ns, st.st_size, st.st_ino)


class CachedProfiles:
    """``ProfileChooser.resolve(choice)``, re-read only when a profile file (or a device's calibration)
    changes, never failing a scrape.

    Parsing every profile YAML takes a few hundred milliseconds; a scrape every
    15 s should not pay it when nothing changed, yet a fresh calibration must
    show at the next scrape. The stamp covers the shipped folder, the store and
    an explicit ``--profile`` file. A file that fails to load is skipped (the
    devices it would price stay blank) or, when it loaded before, its last good
    version is kept; either way it is listed in :attr:`problems`.
    """

    def __init__(self, choice: str | None = None) -> None:
        self.choice = choice
        self._stamp: tuple | None = None
        self._value = ProfileChooser()
        self._good: dict[Path, Profile] = {}  # the last version of each file that loaded
        self.problems: dict[str, str] = {}  # file (as "store/NAME.yaml") -> why it is not used as it is

    def _dirs(self) -> list[tuple[str, Path]]:
        return [("shipped", shipped_dir()), ("store", store_dir())]

    def _files(self) -> list[Path]:
        files: list[Path] = []
        for _, d in self._dirs():
            if d.is_dir():
                files += sorted([*d.glob("*.yaml"), *d.glob("*.yml")])
        devices = store_dir() / "devices"  # each device's own calibration prices its rows (§5.1)
        if devices.is_dir():
            files += sorted(devices.glob("*.yaml"))
        if self.choice and Path(self.choice).exists():
            files.append(Path(self.choice))
        return files

    def _name(self, path: Path | str | None) -> str:
        if path is None:
            return "--profile"
        path = Path(path)
        for label, d in self._dirs():
            if path == d:  # the folder itself (a store that is a file)
                return label
            if path.parent == d:
                return f"{label}/{path.name}"
        return "--profile" if self.choice and path == Path(self.choice) else path.name

    def _problem(self, exc: ProfileError, kept: bool = False) -> None:
        name = self._name(exc.file)
        text = str(exc).replace(str(exc.file), Path(exc.file).name) if exc.file else str(exc)
        self.problems[name] = text + ("; serving its last good version" if kept else "")

    def _read(self, path: Path) -> Profile:
        try:
            prof = load_profile(path)
        except ProfileError as exc:
            good = self._good.get(path)
            if good is None:
                raise
            self._problem(exc, kept=True)
            return good
        self._good[path] = prof
        return prof

    def __call__(self) -> ProfileChooser:
        key = tuple((str(f), _file_stamp(f)) for f in self._files()) + (("store", _file_stamp(store_dir())),)
        if key != self._stamp:
            self.problems = {}
            try:
                bad_store = store_problem(store_dir())  # a file where the store belongs: the caller's error
                if bad_store is not None:
                    raise bad_store
                self._value = profile_chooser(self.choice, read=self._read, on_error=self._problem)
            except ProfileError as exc:
                if self._stamp is None:  # the first read: a bad --profile is the caller's error (exit 2)
                    raise
                self._problem(exc, kept=True)  # it went bad since: keep the chooser we had
            self._stamp = key
        return self._value


@dataclass
class DirectorySource:
    """The snapshots to publish: each device's newest run and audit under ``root``, cached by file stamps."""

    root: Path
    profiles: Callable[[], ProfileChooser]
    log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr, flush=True)
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    #: each folder's last version that read whole: its stamp and snapshots; kept while the folder is unreadable
    _cache: dict[Path, tuple[_Stamp, list[Snapshot]]] = field(default_factory=dict)
    _read_at: dict[Path, float] = field(default_factory=dict)  # when that version was read (Unix time)
    _failed: dict[Path, tuple[_Stamp, str]] = field(default_factory=dict)
    _chooser: ProfileChooser | None = None
    _profiles_version: int = 0
    _rendered: dict[str, tuple[_Stamp, bytes, bytes | None]] = field(default_factory=dict)  # by detail
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ------------------------------------------------------------------ names and refusals

    def name(self, run_dir: Path) -> str:
        """A run as /healthz names it: its path relative to the served directory."""
        try:
            rel = Path(run_dir).relative_to(self.root)
        except ValueError:
            return Path(run_dir).name
        return str(rel) if str(rel) != "." else "."

    def _short(self, run_dir: Path, text: str) -> str:
        """An error message without the served directory's absolute (or given) path in it."""
        for prefix in {str(run_dir.absolute()), str(run_dir)}:
            text = text.replace(prefix + os.sep, "").replace(prefix, self.name(run_dir))
        return text.splitlines()[0] if text else text

    def _refusal(self, run_dir: Path) -> str | None:
        """Why a run's files are not read at all: not regular files, or over the size bound."""
        for name, limit in ((RECORDS_FILE, self.max_file_bytes), (RUN_FILE, RUN_FILE_MAX_BYTES),
                            (AUDIT_FILE, self.max_file_bytes)):
            path = run_dir / name
            try:
                check_regular(name, os.stat(path), limit)
            except FileNotFoundError:
                continue
            except FileRefused as exc:
                return str(exc)
            except OSError as exc:
                return f"{name}: cannot read ({exc.strerror or exc})"
        return None

    # ------------------------------------------------------------------ scanning

    def _inputs(self) -> tuple[ProfileChooser, dict, str]:
        profiles = self.profiles()
        if profiles is not self._chooser:  # a new chooser: every run is priced again
            self._chooser = profiles
            self._profiles_version += 1
        calibrations = device_calibrations()
        cal_fp = "|".join(f"{k}:{c.run_id}:{c.finished_at.isoformat()}" for k, c in sorted(calibrations.items()))
        return profiles, calibrations, cal_fp

    def _scan(self) -> tuple[list[Snapshot], _Stamp]:
        """Every run's snapshots (cached per run by file stamps), and the stamp of all inputs together.

        A run that cannot be read as it is now (a half-written ``run.json``, a bad line) contributes its last
        version that read whole, so a writer that is not atomic, or a tool that plants a bad file, costs the
        page its freshness for that run, never the run itself."""
        profiles, calibrations, cal_fp = self._inputs()
        dirs = find_run_dirs(self.root) if self.root.is_dir() else []
        snaps: list[Snapshot] = []
        stamps = []
        for d in dirs:
            stamp = tuple(_file_stamp(d / n) for n in (RECORDS_FILE, RUN_FILE, AUDIT_FILE)) + (
                self._profiles_version, cal_fp)
            stamps.append((str(d), stamp))
            hit = self._cache.get(d)
            if hit is not None and hit[0] == stamp:
                self._failed.pop(d, None)  # back to the version it had (a render that failed drops it)
            else:
                failed = self._failed.get(d)
                if failed is None or failed[0] != stamp:
                    self._load(d, stamp, profiles, calibrations)
                hit = self._cache.get(d)  # what it read now, or its last good version, or nothing
            if hit is not None:
                snaps.extend(hit[1])
        for gone in set(self._cache) - set(dirs):
            del self._cache[gone]
            self._read_at.pop(gone, None)
        for gone in set(self._failed) - set(dirs):
            del self._failed[gone]
        problems = tuple(sorted((getattr(self.profiles, "problems", None) or {}).items()))
        return latest_per_device(snaps), (self._profiles_version, cal_fp, tuple(stamps), problems)

    def _load(self, d: Path, stamp: _Stamp, profiles: ProfileChooser, calibrations: dict) -> None:
        """Read one folder into the cache, or record why it cannot be read (its last good version stays)."""
        try:
            why = self._refusal(d)
            if why is not None:
                raise FileRefused(why)
            loaded = load_results(d, profiles, calibrations)
        except (TileOpsError, OSError, ValueError) as exc:
            self._fail(d, stamp, self._short(d, str(exc)))
            return
        except Exception as exc:  # a bug must cost one run, not the exporter; the log keeps the traceback
            self.log(f"tileops serve: internal error reading {d}:\n{traceback.format_exc()}")
            self._fail(d, stamp, f"internal error ({type(exc).__name__}); see the exporter's log")
            return
        self._failed.pop(d, None)
        self._cache[d] = (stamp, loaded)
        self._read_at[d] = time.time()

    def _fail(self, run_dir: Path, stamp: _Stamp, message: str, *, keep_last_good: bool = True) -> None:
        if self._failed.get(run_dir, ((), ""))[0] != stamp:
            kept = "; serving its last good version" if keep_last_good and run_dir in self._cache else ""
            self.log(f"tileops serve: skipping {self.name(run_dir)}: {message}{kept}")
        self._failed[run_dir] = (stamp, message)
        if not keep_last_good:
            self._cache.pop(run_dir, None)
            self._read_at.pop(run_dir, None)

    def scan(self) -> list[Snapshot]:
        """Each device's newest run, as published now."""
        with self._lock:
            return self._scan()[0]

    # ------------------------------------------------------------------ the exposition

    def _render(self, snaps: list[Snapshot], detail: str) -> bytes:
        """The exposition; a snapshot that cannot be rendered is left out (and listed), not the whole page."""
        try:
            return self._exposition(snaps, detail)
        except Exception:  # find the one that fails, publish the rest
            good = []
            for s in snaps:
                try:
                    exposition([s], detail=detail)
                    good.append(s)
                except Exception as exc:
                    self.log(f"tileops serve: cannot render {s.results_dir}:\n{traceback.format_exc()}")
                    stamp = self._cache.get(s.results_dir, ((),))[0]
                    self._fail(s.results_dir, stamp, f"cannot be rendered ({type(exc).__name__}); see the "
                               "exporter's log", keep_last_good=False)
            return self._exposition(good, detail)

    def _exposition(self, snaps: list[Snapshot], detail: str) -> bytes:
        """The snapshots' series and the exporter's own: what it could not read, and how old what it serves is."""
        fam = collect_samples(snaps, detail=detail)
        self._read_errors(fam)
        return format_samples(fam.items())

    def _read_errors(self, fam: Samples) -> None:
        for d in sorted(self._failed):
            name = self.name(d)
            fam.add("tileops_serve_read_error", (name,), 1)
            fam.add("tileops_serve_last_good_timestamp_seconds", (name,), self._read_at.get(d))
        for name in sorted(getattr(self.profiles, "problems", None) or {}):
            fam.add("tileops_serve_read_error", (name,), 1)

    def metrics(self, gzipped: bool = False, detail: str = DEFAULT_DETAIL) -> bytes:
        """The exposition of the newest run per device at ``detail``, rendered only when an input changed."""
        with self._lock:
            cached = self._rendered.get(detail)
            snaps, key = self._scan()
            if cached is None or cached[0] != key:
                cached = (key, self._render(snaps, detail), None)
            if gzipped and cached[2] is None:
                cached = (cached[0], cached[1], gzip.compress(cached[1], compresslevel=1))
            self._rendered[detail] = cached
            return cached[2] if gzipped and cached[2] is not None else cached[1]

    def health(self) -> tuple[bool, dict]:
        """Whether the directory is readable, and what is left out or served from its last good version."""
        with self._lock:  # scrapes change what it reads: a dict changing size mid-read would be a 500
            ok = self.root.is_dir()
            problems = dict(getattr(self.profiles, "problems", {}) or {})
            degraded = bool(self._failed or problems)
            unreadable = {}
            for k, (_, message) in sorted(self._failed.items()):
                read_at = self._read_at.get(k)
                unreadable[self.name(k)] = message if read_at is None else (
                    f"{message}; serving its last good version, read at "
                    f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(read_at))}")
            return ok, {
                "status": "error" if not ok else ("degraded" if degraded else "ok"),
                "error": None if ok else "the results directory is not a readable directory",
                "runs": len(self._cache),
                "unreadable": unreadable,
                "profiles_unreadable": problems,
            }


def make_app(source: DirectorySource, detail: str = DEFAULT_DETAIL) -> Callable:
    """The WSGI app: ``/metrics`` (text format 0.0.4, gzip when accepted, at ``detail``), ``/healthz``, ``/``."""

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        try:
            if path == "/metrics":
                gz = "gzip" in environ.get("HTTP_ACCEPT_ENCODING", "")
                body = source.metrics(gzipped=gz, detail=detail)
                headers = [("Content-Type", CONTENT_TYPE)] + ([("Content-Encoding", "gzip")] if gz else [])
                start_response("200 OK", headers + [("Content-Length", str(len(body)))])
                return [body]
            if path == "/healthz":
                if source.root.is_dir():
                    source.scan()  # report unreadable runs as of now
                ok, doc = source.health()
                start_response("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "application/json")])
                return [json.dumps(doc).encode()]
        except Exception:  # the traceback is the operator's (log), not the scraper's
            source.log(f"tileops serve: error answering {path}:\n{traceback.format_exc()}")
            start_response("500 Internal Server Error", [("Content-Type", "text/plain")])
            return [b"internal error; see the exporter's log\n"]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"tileops exporter: /metrics (Prometheus), /healthz\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try /metrics or /healthz\n"]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    #: connections waiting to be accepted (socketserver's default is 5): when 50 scrapers connect at once, the
    #: rest would have their SYN dropped and retried a second later, a second of latency for nothing
    request_queue_size = 128


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # stdlib signature
        pass


def make_http_server(source: DirectorySource, host: str = "0.0.0.0", port: int = DEFAULT_PORT, *,
                     detail: str = DEFAULT_DETAIL) -> WSGIServer:
    """A threaded server bound to (host, port); ``port=0`` picks a free one (see ``server_address``)."""
    return make_server(host, port, make_app(source, detail), server_class=_Server, handler_class=_QuietHandler)
