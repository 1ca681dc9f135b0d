"""``tileops serve DIR`` composed: an HTTP Prometheus exporter of the newest run per device under DIR.

The profiles are checked before the server binds (a bad ``--profile`` is exit
2, not a failed first scrape); the server (``tileops.export.server``) prices
at scrape time and runs until interrupted (Ctrl-C or SIGTERM: exit 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tileops import interrupts
from tileops.defaults import METRICS_DETAIL, SERVE_HOST, SERVE_MAX_FILE_BYTES, SERVE_PORT
from tileops.errors import TileOpsError
from tileops.pipeline.outcome import exit_code

if TYPE_CHECKING:
    from tileops.report.printer import Printer


@dataclass(frozen=True)
class ServeOptions:
    directory: Path = Path("results")
    host: str = SERVE_HOST
    port: int = SERVE_PORT  # 0 picks a free one
    max_file_bytes: int = SERVE_MAX_FILE_BYTES  # a larger records or audit file is left out (and listed)
    profile: str | None = None  # None: each device's profile, re-read at each scrape
    detail: str = METRICS_DETAIL


@dataclass(frozen=True)
class Served:
    """The server ran until it was stopped; stopping it is how it ends well."""

    url: str

    @property
    def exit_code(self) -> int:
        return exit_code()


def serve(opts: ServeOptions, printer: Printer | None = None) -> Served:
    """Check the profiles, bind, say where, and serve until interrupted. TileOpsError (exit 2) for a bad
    profile or an address that cannot be bound; warnings on stderr for profiles left out and a results
    directory that does not exist yet (through ``printer``; default: plain lines)."""
    from tileops.export.server import CachedProfiles, DirectorySource, make_http_server
    from tileops.report.printer import make_printer

    printer = printer if printer is not None else make_printer("log")

    profiles = CachedProfiles(opts.profile)
    profiles()  # fail now, not at the first scrape (TileOpsError)
    for name, problem in profiles.problems.items():  # served without them, and listed in /healthz
        printer.say(f"tileops serve: warning: profile {name} skipped: {problem}", kind="warning", bare=True)
    if not opts.directory.is_dir():
        printer.say(f"tileops serve: warning: {opts.directory} does not exist yet; /healthz answers 503 until it "
                    "does", kind="warning", bare=True)
    source = DirectorySource(opts.directory, profiles, max_file_bytes=opts.max_file_bytes)
    try:
        server = make_http_server(source, opts.host, opts.port, detail=opts.detail)
    except OSError as exc:
        raise TileOpsError(f"cannot listen on {opts.host}:{opts.port}: {exc.strerror or exc}") from None
    host, port = server.server_address[:2]
    url = f"http://{host!s}:{port}/metrics"  # an IPv4/IPv6 address as text (socketserver declares str | bytes)
    printer.say(f"tileops serve: {url} (results in {opts.directory})", result=True)
    try:
        with interrupts.handled():  # SIGTERM (docker stop, Kubernetes) stops it like Ctrl-C: exit 0
            server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return Served(url)
