"""Push a run to a Prometheus Pushgateway: one group per device, replaced on each run.

The grouping key is ``job`` / ``instance`` (the host) / ``UUID`` (the device), so
a host with eight GPUs keeps eight groups and each run replaces only its own
(HTTP PUT: a row that vanished from the bench vanishes from Prometheus too).
A device's read-side bytes audit goes to its own group, job ``<job>-audit``
(``AUDIT_JOB_SUFFIX``): a bench run without an audit never erases the audit's
verdicts, and an audit exported alone never erases the run. Every rule and
panel aggregates ``without (job, instance)``, so the two groups read as one.

A push that fails is retried with exponential backoff; transport errors and
5xx/429 answers are retried, other 4xx answers are not (the request itself is
wrong, and a retry would send the same bytes). Nothing here touches the
records: a failed push loses nothing, and the caller's exit code says so.

The last-success and last-healthy timestamps must survive an unhealthy run, yet
PUT replaces the whole group; so before pushing, the group's current values are
read back (``/api/v1/metrics``) and carried into the new group.
"""

from __future__ import annotations

import base64
import json
import math
import random
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from collections.abc import Callable
from urllib.parse import quote, urlparse

from tileops.defaults import PUSH_ATTEMPTS, PUSH_BACKOFF_S, PUSH_TIMEOUT_S
from tileops.defaults import PUSH_JOB as DEFAULT_JOB

from .exposition import CONTENT_TYPE
from .metrics import DEFAULT_DETAIL, exposition
from .snapshot import AuditSnapshot, DeviceLabels, Snapshot

#: The audit's group is ``job=<job>-audit`` beside the run's ``job=<job>``.
AUDIT_JOB_SUFFIX = "-audit"
LAST_SUCCESS = "tileops_run_last_success_timestamp_seconds"
LAST_HEALTHY = "tileops_run_last_healthy_timestamp_seconds"
#: The timestamps a new run carries over from the group it replaces (a later run may be neither).
CARRIED = (LAST_SUCCESS, LAST_HEALTHY)


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try: ``attempts`` in all, sleeping ``backoff_s × 2^k`` (±20 %, capped) between them."""

    attempts: int = PUSH_ATTEMPTS
    backoff_s: float = PUSH_BACKOFF_S
    max_backoff_s: float = 30.0
    timeout_s: float = PUSH_TIMEOUT_S

    def delay(self, attempt: int) -> float:
        base = min(self.max_backoff_s, self.backoff_s * (2 ** attempt))
        return base * random.uniform(0.8, 1.2)


@dataclass(frozen=True)
class PushResult:
    device: DeviceLabels
    url: str
    ok: bool
    attempts: int
    error: str | None = None
    job: str = DEFAULT_JOB  # the group's job: ``<job>-audit`` for an audit


def gateway_base(url: str) -> str:
    """``host:9091`` or ``http://host:9091/`` → ``http://host:9091``."""
    parsed = urlparse(url)
    if not parsed.scheme or parsed.scheme not in ("http", "https"):
        url = f"http://{url}"
    return url.rstrip("/")


def check_gateway_url(url: str) -> str:
    """The Pushgateway base URL of ``--push URL``; ValueError with a sentence when it cannot be one.

    Checked before any work starts: a typo found only at the end of a long
    bench would cost the push (the records are kept either way).
    """
    fix = "write e.g. http://pushgateway:9091 or pushgateway:9091"
    try:
        base = gateway_base(url)
        parsed = urlparse(base)
        _ = parsed.port  # raises ValueError for a port that is not a number in 0-65535
    except ValueError as exc:
        raise ValueError(f"--push {url!r} is not a usable URL ({exc}); {fix}") from None
    if not parsed.hostname:
        raise ValueError(f"--push {url!r} names no host; {fix}")
    return base


def grouping_key(device: DeviceLabels, instance: str | None = None) -> dict[str, str]:
    """The group beside ``job``: ``instance`` = the host (or an override), ``UUID`` = the device."""
    return {"instance": instance or device.hostname, "UUID": device.uuid}


def _path_segment(name: str, value: str) -> str:
    """One ``/name/value`` pair of a Pushgateway URL; base64 (``name@base64``) when the value has a slash, is
    empty, or is a dot segment (``.``, ``..``: a client or the gateway would resolve it, and the push would
    land in another group or none)."""
    if value in ("", ".", "..") or "/" in value:
        enc = base64.urlsafe_b64encode(value.encode("utf-8")).decode("ascii") or "="
        return f"/{name}@base64/{enc}"
    return f"/{name}/{quote(value, safe='')}"


def group_url(url: str, job: str, key: dict[str, str]) -> str:
    """The group's URL: ``<gateway>/metrics/job/<job>/instance/<host>/UUID/<uuid>``."""
    return (gateway_base(url) + "/metrics" + _path_segment("job", job)
            + "".join(_path_segment(k, v) for k, v in key.items()))


def put_group(url: str, body: bytes, timeout_s: float) -> None:
    """Replace the group at ``url`` with ``body`` (text format); raises urllib's errors."""
    req = urllib.request.Request(url, data=body, method="PUT", headers={"Content-Type": CONTENT_TYPE})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        resp.read()


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code >= 500 or exc.code == 429
    return isinstance(exc, OSError)  # URLError, connection refused, timeouts


def _describe(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        body = ""
        try:
            body = exc.read().decode("utf-8", "replace").strip()
        except Exception:  # the body is a courtesy
            pass
        return f"HTTP {exc.code} {exc.reason}" + (f": {body[:300]}" if body else "")
    if isinstance(exc, urllib.error.URLError):
        return f"cannot reach the Pushgateway ({exc.reason})"
    return f"{type(exc).__name__}: {exc}"


def previous_last_success(url: str, job: str, key: dict[str, str], timeout_s: float = 5.0) -> float | None:
    """The group's current last-success timestamp on the Pushgateway, or None (absent or unreachable)."""
    return previous_times(url, job, key, timeout_s).get(LAST_SUCCESS)


def previous_times(url: str, job: str, key: dict[str, str], timeout_s: float = 5.0) -> dict[str, float]:
    """The group's current :data:`CARRIED` timestamps on the Pushgateway, by name (one request; a name absent
    or the gateway unreachable: not in the answer)."""
    want = {"job": job, **key}
    try:
        with urllib.request.urlopen(f"{gateway_base(url)}/api/v1/metrics", timeout=timeout_s) as resp:
            doc = json.load(resp)
    except (OSError, ValueError):
        return {}
    # What a gateway answers is read defensively: anything but the documented shape means "no value known",
    # never a crash (a proxy's error page, another server on that port, a future API).
    groups = doc.get("data") if isinstance(doc, dict) else None
    for group in groups if isinstance(groups, list) else []:
        if not isinstance(group, dict) or group.get("labels") != want:
            continue
        found = {}
        for name in CARRIED:
            value = _newest_value(group.get(name))
            if value is not None:
                found[name] = value
        return found
    return {}


def _newest_value(fam: object) -> float | None:
    """The largest finite value of one metric family of a gateway's answer; None for anything else."""
    metrics = fam.get("metrics") if isinstance(fam, dict) else None
    values = []
    for m in metrics if isinstance(metrics, list) else []:
        try:
            v = float(m["value"])
        except (TypeError, KeyError, ValueError, OverflowError):
            continue
        if math.isfinite(v):
            values.append(v)
    return max(values) if values else None


def push_snapshot(url: str, snapshot: Snapshot, *, job: str = DEFAULT_JOB, instance: str | None = None,
                  policy: RetryPolicy = RetryPolicy(), log: Callable[[str], None] = lambda msg: None,
                  detail: str = DEFAULT_DETAIL) -> PushResult:
    """PUT one device's group (metrics at ``detail``), retrying with backoff. Never raises for a network failure.

    A run's audit is not pushed with it: split it off first (``snapshot.split_audit``; ``export_snapshots``
    does) and push the :class:`AuditSnapshot` on its own, which goes to the ``<job>-audit`` group.
    """
    key = grouping_key(snapshot.device, instance)
    if isinstance(snapshot, AuditSnapshot):
        job = job + AUDIT_JOB_SUFFIX
        snap: Snapshot = snapshot
    else:
        before = previous_times(url, job, key, policy.timeout_s)
        snap = snapshot.with_last_success(before.get(LAST_SUCCESS), before.get(LAST_HEALTHY))
    body = exposition([snap], detail=detail)
    base = gateway_base(url)
    target = group_url(base, job, key)
    error: str | None = None
    for attempt in range(1, policy.attempts + 1):
        try:
            put_group(target, body, policy.timeout_s)
            return PushResult(snapshot.device, base, True, attempt, job=job)
        except Exception as exc:  # every failure is reported, none may lose the run
            error = _describe(exc)
            if not _retryable(exc) or attempt == policy.attempts:
                return PushResult(snapshot.device, base, False, attempt, error, job=job)
            wait = policy.delay(attempt - 1)
            log(f"push to {base} failed ({error}); retry {attempt + 1}/{policy.attempts} in {wait:.1f} s")
            time.sleep(wait)
    return PushResult(snapshot.device, base, False, policy.attempts, error, job=job)
