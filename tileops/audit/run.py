"""The audit's driver: each selected row under ncu in its own process, judged and written at once.

A row's files live in ``<out>/ncu/``: ``<stem>.ncu-rep`` (the report ncu
exported), ``<stem>.log`` (ncu's own output), ``<stem>.call.json`` (the call
the child measured) and, when the ``ncu_report`` module is missing,
``<stem>.csv`` (ncu's raw-page export, which was read instead). Nothing stops
the sweep: a row that cannot be measured is an ERROR entry saying why and what
to do, a crash in the driver itself is an ERROR entry for that row, and an
interrupt writes every row not yet run as SKIPPED before it propagates.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from collections.abc import Callable
from typing import Any

from tileops.audit.ncu import (CLOCK_CONTROLS, DEFAULT_REPLAY_MODE, FIX_MISSING, HOST_PROBLEMS, NVTX_RANGE, diagnose,
                               find_ncu, import_command, log_tail, ncu_version, nvtx_domain_available, nvtx_include,
                               premise, profile_command)
from tileops.audit.config import ExemptConfig, load_config
from tileops.audit.entry import AUDIT_FILE, AuditEntry, append_entry, check_out_dir, start_file
from tileops.audit.facts import CallFacts
from tileops.audit.reports import Measurement, ReportError, import_ncu_report, read_ncu_rep, read_raw_csv, summarize
from tileops.audit.plan import audit_plan, case_arg, manifest_entries, op_classes
from tileops.audit.verdict import Judgement, judge
from tileops.bench.select import Planned, Selection
from tileops.device import DeviceInfo, cuda_available, describe_device, host_name
from tileops.defaults import AUDIT_DEVICE, AUDIT_WARMUP
from tileops.defaults import AUDIT_ROW_TIMEOUT_S as DEFAULT_ROW_TIMEOUT_S
from tileops.errors import TileOpsError, unknown_value
from tileops import fsutil
from tileops.fsutil import write_atomic
from tileops.records import DeviceIdentity

REPORTS_DIR = "ncu"


@dataclass
class AuditOptions:
    selection: Selection = field(default_factory=Selection)
    device: str = AUDIT_DEVICE
    out: Path | None = None
    config: Path | None = None  # EXEMPT configuration (file or folder); default the shipped audit/
    ncu: str | None = None  # path or name of the ncu executable; default ncu on PATH
    row_timeout_s: float = DEFAULT_ROW_TIMEOUT_S
    warmup: int = AUDIT_WARMUP
    replay_mode: str = DEFAULT_REPLAY_MODE  # tileops.audit.ncu.REPLAY_MODES
    clock_control: str = CLOCK_CONTROLS[0]  # none: the clocks left alone


@dataclass
class AuditRun:
    out_dir: Path
    entries: list[AuditEntry]
    ncu: str | None
    ncu_version: str | None
    device: DeviceInfo | None
    config: ExemptConfig


class AuditWriteError(TileOpsError):
    """An audit file could not be written (exit 2); the message names it, what is kept, and the fix."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _stem(i: int, p: Planned) -> str:
    raw = f"{i:03d}-{p.op}-{p.row.label}-{p.case_name}-{p.backend}"
    return re.sub(r"[^A-Za-z0-9_-]+", "_", raw)[:150]  # no dots: the extensions are the only ones


def _device(spec: str) -> DeviceInfo | None:
    """The GPU the rows are planned for, or None on a host without one (every row then says why)."""
    if not cuda_available():
        return None
    try:
        return describe_device(spec)
    except ValueError as exc:
        raise TileOpsError(str(exc)) from None


def _planning_device(device: DeviceInfo | None) -> DeviceInfo:
    # Without a GPU, plan as for one with no known limits: every row is listed, none skipped, each then
    # reports why it could not be measured.
    return device or DeviceInfo(kind="cuda", name="(no CUDA device)")


def run_audit(opts: AuditOptions, on_row: Callable[[int, int, AuditEntry], None] | None = None) -> AuditRun:
    """Audit every selected row into ``opts.out`` (default ``results/audit-<run-id>/``).

    Raises TileOpsError (exit 2) before writing anything for a bad selection or
    an invalid EXEMPT configuration; after that every selected row is written.
    """
    from tileops.bench.environment import new_run_id

    entries, classes = manifest_entries(), op_classes()
    implemented = [n for n, e in entries.items() if e.status == "implemented" and n in classes]
    config = load_config(opts.config, entries, implemented)
    unknown = sorted(set(opts.selection.ops) - set(implemented))
    if unknown:
        raise TileOpsError("; ".join(f"--op {v}: matches no implemented op" + unknown_value(
            v, implemented, noun="implemented ops", lister="tileops ops") for v in unknown))
    if opts.out:  # a folder of someone else's, or an audit file this tileops cannot read: said before any row
        check_out_dir(Path(opts.out))
    device = _device(opts.device)
    planned = audit_plan(entries, classes, opts.selection, _planning_device(device))
    if not planned:
        raise TileOpsError("no workload row matches the selection (without --op, only ops that declare a read "
                           "half are audited); list rows with `tileops ops NAME`")
    run_id = new_run_id()
    out_dir = Path(opts.out) if opts.out else Path("results") / f"audit-{run_id}"
    try:
        return _audit_rows(opts, planned, config, device, run_id, out_dir, on_row)
    except OSError as exc:  # a full disk, a failing drive, permissions: what is written stays whole
        raise AuditWriteError(f"cannot write {exc.filename or out_dir}: {exc.strerror or exc}; the entries "
                              f"already in {out_dir / AUDIT_FILE} are whole and kept (the audit before, if any, "
                              f"in {AUDIT_FILE}.prev); free space (or fix the permissions), then run `tileops "
                              "audit` again") from None


def _audit_rows(opts: AuditOptions, planned: list[Planned], config: ExemptConfig, device: DeviceInfo | None,
                run_id: str, out_dir: Path, on_row: Callable[[int, int, AuditEntry], None] | None) -> AuditRun:
    """Each row under ncu, its entry appended as it finishes; OSError when a file cannot be written."""
    jsonl = start_file(out_dir)
    (out_dir / REPORTS_DIR).mkdir(exist_ok=True)
    ncu = find_ncu(opts.ncu)
    version = ncu_version(ncu, opts.row_timeout_s) if ncu else None
    domain = nvtx_domain_available()
    common = {"run_id": run_id, "hostname": host_name(), "ncu_version": version,
              "device": device.identity if device else None,
              "premise": premise(opts.replay_mode)}
    done: list[AuditEntry] = []
    host_problem: AuditEntry | None = None  # a refusal of the host (permission, no counters): it speaks for every row
    i = 0
    try:
        for i, p in enumerate(planned, 1):
            started = _now()
            if host_problem is not None and not p.skip_reason:
                entry = _entry(p, judge(declared=None, measured=None, error=f"{host_problem.reason} (not run: row "
                                        f"{done.index(host_problem) + 1} met this refusal of the host, which "
                                        "every row would)"), error_kind=host_problem.error_kind)
                _finish(entry, common, started)
                append_entry(jsonl, entry)
                done.append(entry)
                if on_row:
                    on_row(i, len(planned), entry)
                continue
            try:
                entry = _audit_row(p, i, out_dir, ncu, domain, device, config, opts, version)
            except OSError:  # a file of the row that cannot be written: the next rows' could not be either
                raise
            except Exception as exc:  # a driver bug must not lose the sweep: this row says so, the rest run
                entry = _entry(p, judge(declared=None, measured=None, error=f"the audit itself failed on this "
                                        f"row: {type(exc).__name__}: {exc}"), error_kind="internal")
            if entry.error_kind in HOST_PROBLEMS:
                host_problem = entry
            _finish(entry, common, started)
            append_entry(jsonl, entry)
            done.append(entry)
            if on_row:
                on_row(i, len(planned), entry)
    except KeyboardInterrupt:
        for p in planned[len(done):]:
            entry = _entry(p, judge(declared=None, measured=None, skip_reason="interrupted before this row ran"))
            _finish(entry, common, _now())
            append_entry(jsonl, entry)
            done.append(entry)
        raise
    return AuditRun(out_dir, done, ncu, version, device, config)


def _finish(entry: AuditEntry, common: dict, started: str) -> None:
    for k, v in common.items():
        if k == "premise" or getattr(entry, k) is None:
            setattr(entry, k, v)
    if entry.device is not None:
        entry.hostname = None  # the device names its host; an entry keeps it once
    entry.started_at, entry.finished_at = started, _now()


def _entry(p: Planned, j: Judgement, **extra: Any) -> AuditEntry:
    lim = j.limits
    extra.setdefault("params", dict(p.row.params))
    return AuditEntry(op=p.op, label=p.row.label, dtype=p.case_name, backend=p.backend, verdict=j.verdict,
                      reason=j.reason, fail_below_bytes=lim.fail_below if lim else None,
                      warn_above_bytes=lim.warn_above if lim else None, **extra)


def _no_cuda_hint(device: DeviceInfo | None) -> str:
    return "" if device else "; this host has no CUDA device either: the audit runs only on a GPU host"


def _audit_row(p: Planned, i: int, out_dir: Path, ncu: str | None, domain: str | None,
               device: DeviceInfo | None, config: ExemptConfig, opts: AuditOptions,
               version: str | None = None) -> AuditEntry:
    if p.skip_reason:
        return _entry(p, judge(declared=None, measured=None, skip_reason=p.skip_reason))
    if ncu is None:
        return _entry(p, judge(declared=None, measured=None, error=FIX_MISSING + _no_cuda_hint(device)),
                      error_kind="ncu-missing")
    stem = out_dir / REPORTS_DIR / _stem(i, p)
    report, log_path, facts_path = (stem.parent / (stem.name + ext) for ext in (".ncu-rep", ".log", ".call.json"))
    rc, log = _profile_row(p, ncu, report, facts_path, log_path, domain, device, opts)
    rel = str(report.relative_to(out_dir)) if report.exists() else None
    facts = CallFacts.read(facts_path) if facts_path.exists() else None
    failure = _run_failure(rc, log, facts, log_path.name, opts)
    if failure is not None:
        return _error_entry(p, *failure, rel, facts, device)
    if facts is None:
        message = (f"the audited process left no call facts (ncu exit {rc}); last of ncu's output: "
                   f"{log_tail(log)}; full output: {REPORTS_DIR}/{log_path.name}")
        return _error_entry(p, "ncu-failed", message, rel, None, device)
    failure = _report_failure(report, log, rc, domain)
    if failure is not None:
        return _error_entry(p, *failure, rel, facts, device)
    try:
        m = _measure(report, ncu, stem.parent / (stem.name + ".csv"), version)
    except ReportError as exc:
        return _error_entry(p, exc.kind, str(exc), rel, facts, device)
    e = judged_entry(p, facts, m, config, device)
    e.report = rel
    return e


def _profile_row(p: Planned, ncu: str, report: Path, facts_path: Path, log_path: Path, domain: str | None,
                 device: DeviceInfo | None, opts: AuditOptions) -> tuple[int | None, str]:
    """The row's call run once under ncu in a child process (no report or facts left from before): its exit
    code (None: killed at the row's timeout) and ncu's output."""
    for f in (report, facts_path):
        fsutil.unlink(f)
    child = ["--op", p.op, "--label", p.row.label, "--case", case_arg(p.case), "--backend", p.backend,
             "--device", device.torch_device if device else opts.device, "--warmup", str(opts.warmup),
             "--nvtx-domain", domain or "", "--nvtx-range", NVTX_RANGE, "--facts", str(facts_path)]
    cmd = profile_command(ncu, report, child, domain=domain, replay_mode=opts.replay_mode,
                          clock_control=opts.clock_control)
    return _run(cmd, log_path, opts.row_timeout_s)


def _run_failure(rc: int | None, log: str, facts: CallFacts | None, log_name: str,
                 opts: AuditOptions) -> tuple[str, str] | None:
    """Why the profiled run failed (its error kind and message), the profiler's own refusals first since they
    explain the rest; None when nothing says it did."""
    if rc is None:
        return ("timeout", f"the row ran past --row-timeout {opts.row_timeout_s:g} s under ncu and was "
                           "killed (ncu runs the call once per metric pass, and --replay-mode kernel replays each "
                           "kernel: a call "
                           f"with many kernels is slow); raise "
                           f"--row-timeout or audit fewer rows; ncu's output: {REPORTS_DIR}/{log_name}")
    problem = diagnose(log, generic=False)
    if problem is not None:
        return problem.kind, problem.message
    if facts is not None and facts.error_kind is not None:
        return facts.error_kind, facts.error or facts.error_kind
    problem = diagnose(log)
    if problem is not None:
        return problem.kind, f"{problem.message}; full output: {REPORTS_DIR}/{log_name}"
    return None


def _report_failure(report: Path, log: str, rc: int | None, domain: str | None) -> tuple[str, str] | None:
    """Why a run that left its call facts left no report to measure; None when it left one."""
    if report.exists():
        return None
    if "No kernels were profiled" in log:
        return ("no-kernel", f"ncu profiled no kernel inside the NVTX range {nvtx_include(domain)}: the "
                             "call launched no GPU kernel, or the range filter matched nothing")
    return "ncu-failed", f"ncu wrote no report (exit {rc}): {log_tail(log)}"


def _error_entry(p: Planned, kind: str, message: str, report: str | None, facts: CallFacts | None,
                 device: DeviceInfo | None) -> AuditEntry:
    """A row that could not be measured: its error, with what its call facts say where it left them."""
    e = _entry(p, judge(declared=None, measured=None, error=message), error_kind=kind)
    e.report = report
    if facts is not None:
        e.params = dict(facts.params) or dict(p.row.params)
        e.data_terms, e.device = facts.data_terms, facts_device(facts, device)
        if facts.error_kind is None:
            e.expected_read_bytes = facts.read_bytes
    return e


def judged_entry(p: Planned, facts: CallFacts, m: Measurement, config: ExemptConfig,
                 device: DeviceInfo | None = None) -> AuditEntry:
    """The entry of a measured row: its call's declared read half against the kernels' summed reads.

    The EXEMPT configuration is consulted for the op's rules, its ``when``
    evaluated on this call; it matters only for a shortfall.
    """
    exemption, note = config.match(p.op, facts) if facts.read_bytes else (None, None)
    j = judge(declared=facts.read_bytes, measured=m.read_bytes, inputs=facts.inputs, kernels=m.kernels,
              exemption=exemption, exemption_note=note)
    return _entry(p, j, expected_read_bytes=facts.read_bytes, measured_read_bytes=m.read_bytes,
                  measured_write_bytes=m.write_bytes, kernels=m.kernels, duration_ns=m.duration_ns,
                  exemption=exemption.where if (exemption and j.verdict == "EXEMPT") else None,
                  params=dict(facts.params) or dict(p.row.params), data_terms=facts.data_terms,
                  device=facts_device(facts, device))


def facts_device(facts: CallFacts, device: DeviceInfo | None) -> DeviceIdentity | None:
    """The device the audited call ran on, as its own process named it (None: it named none). The audit
    runs CUDA devices only; the index and host are the planned device's, or this host's."""
    if facts.device_name is None and facts.device_uuid is None:
        return None
    return DeviceIdentity(kind="cuda", name=facts.device_name or "", uuid=facts.device_uuid,
                          index=device.index if device else None, hostname=device.hostname if device else host_name())


def _measure(report: Path, ncu: str, csv_path: Path, version: str | None = None) -> Measurement:
    """The call's reads from its report: ncu_report when importable, else ncu's raw-page CSV (kept).

    A report the module cannot load (a module older than the ncu that wrote it)
    is read through ncu's own CSV export before giving up.
    """
    module = import_ncu_report(ncu, version)
    if module is not None:
        try:
            return summarize(read_ncu_rep(report, module))
        except ReportError as exc:
            if exc.kind != "report":
                raise
    cmd = import_command(ncu, report)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ReportError("report", f"`{' '.join(cmd)}` failed: {exc}") from None
    write_atomic(csv_path, out.stdout)
    if out.returncode != 0:
        raise ReportError("report", f"`{' '.join(cmd)}` exited {out.returncode}: {log_tail(out.stdout + out.stderr)}")
    return summarize(read_raw_csv(out.stdout))


def _run(cmd: list[str], log_path: Path, timeout_s: float) -> tuple[int | None, str]:
    """Run ``cmd`` with its output (stdout and stderr) in ``log_path``; (None, log) when it timed out."""
    fd = fsutil.open_write(log_path)
    try:
        fsutil.write_all(fd, ("$ " + " ".join(cmd) + "\n").encode("utf-8"), log_path)
        try:
            proc = subprocess.Popen(cmd, stdout=fd, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        except OSError as exc:
            fsutil.write_all(fd, f"==ERROR== cannot start {cmd[0]}: {exc}\n".encode(), log_path)
            return 127, log_path.read_text(encoding="utf-8", errors="replace")
        try:
            rc: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            rc = None
        except BaseException:
            _kill_group(proc)
            raise
    finally:
        os.close(fd)
    return rc, log_path.read_text(encoding="utf-8", errors="replace")


def _kill_group(proc: subprocess.Popen) -> None:
    """End ncu and the audited process it started (one session, one group), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + 10
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
