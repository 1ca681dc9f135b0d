"""Reading an Nsight Compute report: per-kernel DRAM bytes and duration, summed over the call.

Two readers of the same ``.ncu-rep``:

* the ``ncu_report`` module (the ``ncu-report`` package, in the ``gpu`` extra,
  or ``extras/python`` of an Nsight Compute installation), imported only when
  present; and
* ncu's own export, ``ncu --import FILE --csv --page raw --print-units base``:
  a header row (``"ID","Process ID",...,"Kernel Name",...,<metric>,...``), a
  units row, then one row per kernel. ncu formats numbers in the host's locale,
  so ``1,048,576``, ``1.048.576``, ``1 048 576`` and ``1'048'576`` all mean
  1048576 bytes; :func:`parse_count` reads each of them.

Values are bytes and nanoseconds. A byte metric in any unit other than bytes
is refused rather than scaled (``--print-units base`` guarantees bytes): a
misread unit would be a factor of 1000 in a verdict.

A read metric can be missing for two unlike reasons, each its own ERROR kind:
**not requested** (the report has no such metric at all: the ncu command that
wrote it did not list it in ``--metrics``; a report from another command) and
**not collectable** (ncu was asked and reports no value, ``n/a``: this GPU or
this ncu cannot collect it).
"""

from __future__ import annotations

import csv
import glob
import importlib
import io
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Iterable

READ = "dram__bytes_read.sum"
WRITE = "dram__bytes_write.sum"
DURATION = "gpu__time_duration.sum"
METRICS: tuple[str, ...] = (READ, WRITE, DURATION)

_BYTE_UNITS = {"byte", "bytes", "B"}
_TIME_UNITS = {"ns": 1.0, "nsecond": 1.0, "nsec": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
               "s": 1e9, "second": 1e9}
_MISSING = {"", "n/a", "N/A", "-", "nan"}
_GROUPING = {",", ".", "'", " ", "\u00a0", "\u202f", "\u2009"}
#: ERROR kinds of a missing read metric (module docstring).
NOT_REQUESTED = "metric-not-requested"
NOT_COLLECTABLE = "metric-not-collectable"


class ReportError(Exception):
    """A report that cannot give the call's reads; ``kind`` names the ERROR class, the message the fix."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class KernelReading:
    name: str
    read_bytes: int | None  # None: not collectable (ncu was asked and reports no value)
    write_bytes: int | None
    duration_ns: float | None


@dataclass(frozen=True)
class Measurement:
    """One call's DRAM traffic: every kernel ncu profiled inside its NVTX range, summed."""

    read_bytes: int
    write_bytes: int | None  # None when any kernel lacks the metric
    duration_ns: float | None
    kernels: int
    kernel_names: tuple[str, ...] = field(default=())


# --------------------------------------------------------------------------- numbers


def _split_number(text: str) -> tuple[str, str]:
    """(integer digits, fraction digits) of a locale-formatted number; ValueError when it is not one.

    ncu prints counters and nanoseconds as whole numbers with thousands
    separators, so a single separator followed by exactly three digits groups
    thousands; where two different separators appear, the last one is the
    decimal point.
    """
    s = text.strip()
    body = s[1:] if s[:1] in "+-" else s
    if not body or not (body[0].isdigit()):
        raise ValueError(f"{text!r} is not a number")
    seps = [(i, ch) for i, ch in enumerate(body) if not ch.isdigit()]
    if any(ch not in _GROUPING for _, ch in seps):
        raise ValueError(f"{text!r} is not a number")
    kinds = {ch for _, ch in seps}
    if not seps:
        return body, ""
    if len(kinds) > 2:
        raise ValueError(f"{text!r} mixes {len(kinds)} separators")
    last_i, last_ch = seps[-1]
    decimal: str | None = None
    if len(kinds) == 2:
        decimal = last_ch
    elif len(seps) == 1 and last_ch in ".," and len(body) - last_i - 1 != 3:
        decimal = last_ch  # "12.5", "0,25": not a thousands group
    if decimal is not None:
        int_part, frac = body[:last_i], body[last_i + 1:]
        if not frac.isdigit() or decimal in int_part:
            raise ValueError(f"{text!r} is not a number")
    else:
        int_part, frac = body, ""
    groups = re.split("[" + re.escape("".join(_GROUPING)) + "]", int_part)
    if len(groups) > 1 and (not 1 <= len(groups[0]) <= 3 or any(len(g) != 3 for g in groups[1:])):
        raise ValueError(f"{text!r}: thousands separators do not group by three")
    sign = "-" if s[:1] == "-" else ""
    return sign + "".join(groups), frac


def parse_count(text: str) -> int | None:
    """A counter value (bytes) as ncu printed it; None for a blank or ``n/a``. A fraction is refused."""
    if text.strip() in _MISSING:
        return None
    whole, frac = _split_number(text)
    if frac.strip("0"):
        raise ValueError(f"{text!r} is not a whole number of bytes")
    return int(whole)


def parse_number(text: str) -> float | None:
    """Any numeric value as ncu printed it (durations); None for a blank or ``n/a``."""
    if text.strip() in _MISSING:
        return None
    whole, frac = _split_number(text)
    return float(f"{whole}.{frac or 0}")


def _time_ns(value: float | None, unit: str) -> float | None:
    if value is None:
        return None
    scale = _TIME_UNITS.get(unit.strip())
    if scale is None:
        raise ReportError("metric", f"{DURATION} is in {unit!r}, not a time unit this reader knows")
    return value * scale


def _check_byte_unit(metric: str, unit: str) -> None:
    if unit.strip() not in _BYTE_UNITS:
        raise ReportError("metric", f"{metric} is in {unit!r}, not bytes; export with --print-units base "
                                    "(the audit does), or re-export the report with it")


# --------------------------------------------------------------------------- the raw-page CSV


def read_raw_csv(text: str) -> list[KernelReading]:
    """Kernels of ``ncu --csv --page raw --print-units base`` output (``==PROF==`` lines ignored)."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("==")]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    start = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "ID" in r), None)
    if start is None:
        raise ReportError("report", "not ncu raw-page CSV: no header row with \"ID\" and \"Kernel Name\"")
    header = rows[start]
    col = {name: i for i, name in enumerate(header)}
    if READ not in col:
        raise not_requested(f"the raw page has no {READ} column")
    body = rows[start + 1:]
    units: list[str] = [""] * len(header)
    if body and not (body[0][col["ID"]] if col["ID"] < len(body[0]) else "").strip():
        units = body[0] + [""] * (len(header) - len(body[0]))  # the units row: blank under the ID columns
        body = body[1:]
    for metric in (READ, WRITE):
        if metric in col:
            _check_byte_unit(metric, units[col[metric]])
    out: list[KernelReading] = []
    for r in body:
        if len(r) != len(header):
            raise ReportError("report", f"a kernel row has {len(r)} fields, the header {len(header)}: {r[:3]}...")

        def cell(metric: str, row: list[str] = r) -> str:
            return row[col[metric]] if metric in col else ""

        try:
            read = parse_count(cell(READ))
            write = parse_count(cell(WRITE))
        except ValueError as exc:
            raise ReportError("report", f"kernel {r[col['Kernel Name']][:80]!r}: {exc}") from None
        try:  # informational (a profiled kernel's time is not a timing): unreadable is blank, not an error
            dur = _time_ns(parse_number(cell(DURATION)), units[col[DURATION]] if DURATION in col else "ns")
        except (ValueError, ReportError):
            dur = None
        out.append(KernelReading(r[col["Kernel Name"]], read, write, dur))
    return out


# --------------------------------------------------------------------------- the ncu_report module


def not_requested(where: str) -> ReportError:
    """The read metric absent from a report: never asked for, which is not ncu failing to collect it."""
    return ReportError(NOT_REQUESTED, f"{where}: {READ} was not requested when the report was written (the ncu "
                                      "command's --metrics must name it, as `tileops audit`'s does: this report "
                                      "came from another command); re-run `tileops audit` on the row")


def import_ncu_report(ncu: str | None = None, version: str | None = None) -> Any | None:
    """The ``ncu_report`` module: installed, or from ``extras/python`` of the Nsight Compute installation
    that ``ncu`` runs (:func:`ncu_install_dirs`); None when neither."""
    try:
        return importlib.import_module("ncu_report")
    except ImportError:
        pass
    for root in ncu_install_dirs(ncu, version) if ncu else ():
        extras = root / "extras" / "python"
        if (extras / "ncu_report.py").exists() or (extras / "ncu_report").is_dir():
            sys.path.insert(0, str(extras))
            try:
                return importlib.import_module("ncu_report")
            except ImportError:
                sys.path.remove(str(extras))
    return None


#: Where Nsight Compute installs itself when a wrapper names no folder: the standalone packages, and the
#: CUDA toolkit's copy beside its bin/ (``<cuda>/nsight-compute-<version>``).
NCU_INSTALL_GLOBS = ("/opt/nvidia/nsight-compute/*", "/usr/local/NVIDIA-Nsight-Compute*",
                     "/usr/local/cuda*/nsight-compute-*")
_WRAPPER_PATH = re.compile(r"[^\s\"'`;=]*[Nn]sight[-_ ]?[Cc]ompute[^\s\"'`;]*")


def ncu_install_dirs(ncu: str, version: str | None = None) -> list[Path]:
    """The folders that may be the Nsight Compute installation ``ncu`` runs, likeliest first.

    ``ncu`` on PATH is often not the tool but a wrapper: the CUDA toolkit's
    ``bin/ncu`` is a shell script that runs ``../nsight-compute-<version>/ncu``,
    and that one is a script too. So: the folders above ``ncu`` itself (a
    symlink resolved), then every path naming an Nsight Compute folder in the
    wrapper's text (relative ones, and ones after a ``$(dirname "$0")``-style
    prefix, taken from the wrapper's folder), then the usual install places;
    where ``version`` (``2025.3.1.0``) is known, folders naming it come first.
    """
    path = Path(ncu)
    found: list[Path] = []
    for p in (path, path.resolve()):
        found += [p.parent, p.parent.parent]
    try:
        head = path.resolve().read_bytes()[:65536]
    except OSError:
        head = b""
    if head.startswith(b"#!"):
        here = path.resolve().parent
        for token in _WRAPPER_PATH.findall(head.decode("utf-8", "replace")):
            tail = re.split(r"[})]", token)[-1]  # after ${VAR} / $(dirname ...): relative to the wrapper
            cand = Path(tail) if tail.startswith("/") and tail == token else here / tail.lstrip("/")
            for c in (cand, cand.parent):
                found.append(c)
    for pattern in NCU_INSTALL_GLOBS:
        found += sorted((Path(p) for p in glob.glob(pattern)), reverse=True)  # the newest version first
    out: list[Path] = []
    for c in found:
        try:
            c = c.resolve()
        except OSError:
            continue
        if c.is_dir() and c not in out:
            out.append(c)
    if version:
        short = ".".join(version.split(".")[:3])
        out.sort(key=lambda c: short not in str(c))  # stable: the named version first, the order kept otherwise
    return out


def _metric_value(metric: Any) -> float | int | None:
    if metric is None or (hasattr(metric, "has_value") and not metric.has_value()):
        return None
    kind = metric.kind()
    if kind in (getattr(metric, "ValueKind_UINT64", -1), getattr(metric, "ValueKind_UINT32", -1)):
        return int(metric.as_uint64())
    return float(metric.as_double())


def _count(value: float | int | None, metric: str) -> int | None:
    if value is None:
        return None
    if float(value) != int(value):
        raise ReportError("report", f"{metric} = {value} is not a whole number of bytes")
    return int(value)


def read_ncu_rep(path: Path, module: Any) -> list[KernelReading]:
    """Kernels of a ``.ncu-rep`` through ``ncu_report`` (``load_report``, ranges, actions, metrics)."""
    try:
        ctx = module.load_report(str(path))
    except Exception as exc:  # the module raises plain exceptions for unreadable files
        raise ReportError("report", f"{path}: ncu_report cannot load it: {exc}") from None
    if ctx.num_ranges() == 0:  # what load_report makes of a file it cannot parse (or of an empty report)
        raise ReportError("report", f"{path}: ncu_report finds no profiling range in it")
    out: list[KernelReading] = []
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            action = rng.action_by_idx(a)
            values = {}
            for metric in METRICS:
                m = action.metric_by_name(metric)
                if m is None and metric == READ:
                    raise not_requested(f"{path}, kernel {str(action.name())[:80]!r}")
                if m is not None and metric != DURATION:
                    _check_byte_unit(metric, m.unit())
                values[metric] = (m, _metric_value(m))
            dur_m, dur = values[DURATION]
            out.append(KernelReading(
                name=str(action.name()),
                read_bytes=_count(values[READ][1], READ),
                write_bytes=_count(values[WRITE][1], WRITE),
                duration_ns=_time_ns(dur, dur_m.unit()) if dur_m is not None else None))
    return out


# --------------------------------------------------------------------------- one call


def summarize(kernels: Iterable[KernelReading]) -> Measurement:
    """Sum every kernel of the call; a kernel without a read reading makes the call unmeasured."""
    ks = list(kernels)
    if not ks:
        raise ReportError("no-kernel", "ncu profiled no kernel inside the call's NVTX range: the call launched "
                                       "none on the GPU, or the range filter matched nothing")
    missing = [k.name for k in ks if k.read_bytes is None]
    if missing:
        raise ReportError(NOT_COLLECTABLE, f"ncu was asked for {READ} and reports no value for {len(missing)} of "
                                           f"{len(ks)} kernels (first: {missing[0][:80]}): this GPU or this ncu "
                                           "cannot collect it (`ncu --query-metrics` lists what it can); use an "
                                           "Nsight Compute that supports the GPU")
    writes = [k.write_bytes for k in ks]
    durs = [k.duration_ns for k in ks]
    return Measurement(
        read_bytes=sum(k.read_bytes or 0 for k in ks),
        write_bytes=None if any(w is None for w in writes) else sum(w or 0 for w in writes),
        duration_ns=None if any(d is None for d in durs) else sum(d or 0.0 for d in durs),
        kernels=len(ks), kernel_names=tuple(k.name for k in ks))
