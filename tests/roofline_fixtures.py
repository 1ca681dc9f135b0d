"""Records and profiles built as data for the roofline and report tests.

Records are the bench's output contract (tileops.records), so building
them directly is building real input, not mocking: the roofline tool sees
exactly what it reads from a records.jsonl file.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import yaml

from tileops.records import DeviceIdentity, Environment, ErrorInfo, Record, Timing, append_record
from tileops.profiles import MemoryRoof, Profile, Provenance, Roof

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
DATASHEET = Provenance(source="datasheet", ref="test fixture")
CALIB = Provenance(source="calibration", run_id="fixture", date=dt.date(2026, 1, 1), tool_version="0.1.0")


def make_record(*, op: str = "relu", label: str = "row", flops: int | None = 100, bytes: int | None = 800,
                median_s: float | None = 1.0, timer: str = "cpu-wall", device_kind: str = "cpu",
                device_name: str = "Test CPU", roof_key: str | None = "cuda_core.fp32", status: str = "ok",
                dtype: str = "float32", backend: str = "torch", run_id: str = "run-1", span_s: float | None = None,
                median_ci_s: tuple[float, float] | None = None, level_ci_s: tuple[float, float] | None = None,
                ci_df: float | None = None, fast_ci_s: tuple[float, float] | None = None, **extra: Any) -> Record:
    """A record; ``median_ci_s`` where a rerun's level falls, ``level_ci_s`` this run's level's interval (with
    ``ci_df``), ``fast_ci_s`` its fast end, ``conditions=`` (in ``extra``) what surrounded it."""
    timing = None
    if median_s is not None and status == "ok":
        timing = Timing(timer=timer, median_s=median_s, min_s=median_s, mean_s=median_s, p10_s=median_s,
                        p90_s=median_s, n=10, rel_noise=0.01, warmup=2, total_s=median_s * 12,
                        stop_reason="noise target reached", span_s=span_s,
                        median_ci_s=list(median_ci_s) if median_ci_s is not None else None,
                        level_ci_s=list(level_ci_s) if level_ci_s is not None else None, ci_df=ci_df,
                        fast_ci_s=list(fast_ci_s) if fast_ci_s is not None else None)
    error = ErrorInfo(kind="exception", message="boom") if status == "error" else None
    return Record(
        run_id=run_id, op=op, family="elementwise", label=label, dtype=dtype, backend=backend, status=status,
        error=error, skip_reason="unsupported dtype" if status == "skipped" else None, timing=timing,
        flops=flops, bytes=bytes, roof_key=roof_key,
        env=Environment(device=DeviceIdentity(kind=device_kind, name=device_name, hostname="test"),
                        torch_version="2.13.0", tileops_version="0.1.0", run_id=run_id),
        started_at=T0, finished_at=T0, **extra)


def make_profile(*, name: str = "test-cpu", match: tuple[str, ...] = ("Test CPU",), kind: str = "cpu",
                 bw_theoretical: float | None = 1e9, bw_calibration: float | None = 1.0,
                 measured: dict[str, float] | None = None,
                 roofs: dict[str, tuple[float, float | None]] | None = None,
                 aliases: dict[str, str] | None = None, latency_floor_s: float | None = None,
                 memory: bool = True) -> Profile:
    """A profile: memory theoretical × calibration, and compute roofs as {key: (theoretical, calibration)}."""
    if roofs is None:
        roofs = {"cpu.fp32": (1e10, 1.0)}
    if aliases is None:
        aliases = {"cuda_core.fp32": "cpu.fp32"} if "cpu.fp32" in roofs else {}
    mem = None
    if memory:
        mixes = {"triad": bw_calibration} if (bw_calibration is not None and bw_theoretical is not None) else {}
        mem = MemoryRoof(theoretical=bw_theoretical, calibration=bw_calibration if bw_theoretical else None,
                         theoretical_source=DATASHEET,
                         calibration_source=CALIB if (bw_calibration is not None and bw_theoretical) else None,
                         mixes=mixes, measured=measured or {})
    compute = {k: Roof(theoretical=t, calibration=c, theoretical_source=DATASHEET,
                       calibration_source=CALIB if c is not None else None) for k, (t, c) in roofs.items()}
    return Profile(name=name, kind=kind, match=list(match), memory=mem, compute=compute, roof_aliases=aliases,
                   latency_floor_s=latency_floor_s,
                   latency_floor_source=CALIB if latency_floor_s is not None else None)


def write_records(path: Path, records: list[Record]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    for r in records:
        append_record(path, r)
    return path


def write_profile(path: Path, profile: Profile) -> Path:
    path.write_text(yaml.safe_dump(profile.model_dump(mode="json", exclude_none=True), sort_keys=False),
                    encoding="utf-8")
    return path
