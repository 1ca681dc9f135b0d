#!/usr/bin/env python3
"""Judges what a scripts/device-check step left behind, so a step that recorded an error fails.

A command can exit 0 and still have measured nothing worth keeping: a bench row that fell back to
CUDA events (its SOL blank), an audit whose rows all say ERROR. This reads the files and exits:

    0  the step did what it is for
    1  it recorded an error (each one printed)
    3  this machine cannot measure it: its runtime gives ncu no counters (LibraryNotLoaded, gVisor);
       every row says so, which is the behaviour wanted there (device-check reports it as skipped)

    python3 scripts/device_check_verify.py records RUN_DIR        # every row ok, timed by CUPTI, with its
                                                                  # interval and the GPU's conditions
    python3 scripts/device_check_verify.py audit AUDIT_DIR --rows N [--dry-run]
    python3 scripts/device_check_verify.py ncu LOG                # the ncu smoke test's output

Standard library only (it runs on the device machine's Python before anything is known to work).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

NOT_MEASURABLE = 3
NO_COUNTERS = "LibraryNotLoaded"


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def check_records(run_dir: Path) -> int:
    path = run_dir / "records.jsonl"
    if not path.exists():
        print(f"device_check_verify: {path} does not exist: the bench wrote no record")
        return 1
    records = _lines(path)
    problems = []
    for r in records:
        who = f"{r['op']} [{r['label']} {r['dtype']} {r['backend']}]"
        t = r.get("timing") or {}
        if r["status"] != "ok":
            problems.append(f"{who}: {r['status']}: {(r.get('error') or {}).get('message') or r.get('skip_reason')}")
        elif t.get("timer") != "cupti" or t.get("fallback_reason"):
            problems.append(f"{who}: timed by {t.get('timer')}, not CUPTI: {t.get('fallback_reason')}")
        elif not t.get("median_ci_s") or not (r.get("conditions") or {}).get("gpu"):
            problems.append(f"{who}: no interval (timing.median_ci_s) or no GPU conditions: the bench's blocks or "
                            "its sensors did not run")
        else:
            span = t.get("span_s")
            ratio = f", span {span * 1e6:.1f} us = {span / t['median_s']:.2f}x busy" if span else ""
            lo, hi = t["median_ci_s"]
            level = t.get("level_ci_s") or [lo, hi]
            fast = t.get("fast_ci_s")
            print(f"device_check_verify: {who}: {t['median_s'] * 1e6:.1f} us by CUPTI{ratio}, this run's level "
                  f"{level[0] * 1e6:.1f}-{level[1] * 1e6:.1f} us, a rerun within {lo * 1e6:.1f}-{hi * 1e6:.1f} us"
                  + (f", fastest {fast[0] * 1e6:.1f}-{fast[1] * 1e6:.1f} us" if fast else "")
                  + f", visits {t.get('visits_s')}; {_conditions(r['conditions'])}")
    if not records:
        problems.append(f"{path} holds no record")
    run = run_dir / "run.json"
    noise = json.loads(run.read_text(encoding="utf-8")).get("host_noise") if run.exists() else None
    if noise:  # the second pass on this GPU: how far the device moved between visits (evidence, not a check)
        seen = noise.get("rows_by_kind") or {}
        parts = [f"{kind} between visits sigma {e['sigma']:.4f} ({e['source']})"
                 for kind, e in (noise.get("between_visits") or {}).items() if kind in seen]
        print(f"device_check_verify: host noise over {noise.get('pairs')} row(s) visited twice: "
              f"{'; '.join(parts) or 'none pooled'}; second pass shift {noise.get('second_pass_shift')}; "
              f"kept first: {noise.get('kept_first') or 'none'}")
    for p in problems:
        print(f"device_check_verify: FAILED: {p}")
    return 1 if problems else 0


def _conditions(c: dict) -> str:
    """The GPU's state over the row as NVML read it (each figure, or why it is blank): the evidence that the
    sensors work on this device."""
    g = c["gpu"]
    blank = g.get("blank") or {}
    parts = []
    for key, show in (("sm_mhz_min", lambda: f"SM {g['sm_mhz_min']:.0f}-{g['sm_mhz_max']:.0f} MHz"),
                      ("power_w", lambda: f"{g['power_w']:.0f} W of {g.get('power_limit_w') or '?'} W"),
                      ("temperature_c_max", lambda: f"{g['temperature_c_max']:.0f} C"),
                      ("energy_j", lambda: f"{g['energy_j']:.2f} J"),
                      ("other_processes", lambda: f"other processes {g['other_processes']}")):
        parts.append(show() if g.get(key) is not None else f"{key} blank ({blank.get(key, 'no reason given')})")
    events = ", ".join(g.get("clock_events") or []) or "none"
    return "; ".join(parts) + f"; clock events {events}; contended {c.get('contended')}, throttled {c.get('throttled')}"


def check_audit(out_dir: Path, rows: int, dry_run: bool) -> int:
    path = out_dir / "audit.jsonl"
    if not path.exists():
        print(f"device_check_verify: {path} does not exist: the audit wrote nothing")
        return 1
    entries = _lines(path)
    for e in entries:
        print(f"device_check_verify: {e['op']} [{e['label']} {e['dtype']}]: {e['verdict']} "
              f"{e.get('error_kind') or ''} {e.get('read_ratio') or ''}".rstrip())
    if len(entries) != rows:
        print(f"device_check_verify: FAILED: {len(entries)} audited row(s), the step plans {rows}")
        return 1
    if dry_run:  # no GPU: every row is an ERROR saying so, which is right; the plan is what is checked
        return 0
    if all(e["verdict"] == "ERROR" and e.get("error_kind") == "counters-unavailable" for e in entries):
        print("device_check_verify: this runtime gives ncu no counters (LibraryNotLoaded): every row says so")
        return NOT_MEASURABLE
    bad = [e for e in entries if e["verdict"] in ("ERROR", "FAIL")]
    for e in bad:
        print(f"device_check_verify: FAILED: {e['op']} [{e['label']}]: {e['verdict']}: {e['reason'][:400]}")
    return 1 if bad else 0


def check_ncu(log: Path) -> int:
    text = log.read_text(encoding="utf-8", errors="replace")
    if NO_COUNTERS in text:
        print("device_check_verify: ncu cannot load its profiler library here (LibraryNotLoaded): this runtime "
              "gives it no counters")
        return NOT_MEASURABLE
    if "==ERROR==" in text or "gpu__time_duration.sum" not in text:
        print("device_check_verify: FAILED: ncu reported an error or no kernel duration")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    sub.add_parser("records").add_argument("dir", type=Path)
    a = sub.add_parser("audit")
    a.add_argument("dir", type=Path)
    a.add_argument("--rows", type=int, required=True)
    a.add_argument("--dry-run", action="store_true")
    sub.add_parser("ncu").add_argument("log", type=Path)
    args = ap.parse_args(argv)
    if args.what == "records":
        return check_records(args.dir)
    if args.what == "audit":
        return check_audit(args.dir, args.rows, args.dry_run)
    return check_ncu(args.log)


if __name__ == "__main__":
    sys.exit(main())
