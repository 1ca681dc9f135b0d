"""A device model's profile from its devices' calibrations: the theoretical ceilings with measured
fractions (the median over devices), and a CPU's peak decided by what the calibration measured."""

from __future__ import annotations

import statistics
from typing import Any
from collections.abc import Callable

from tileops.ledger.model import MAX_FRACTION, DeviceCalibration
from tileops.ledger.peak import decide_peak, peak_provenance
from tileops.profiles import MIXES, MemoryRoof, Profile, Provenance, Roof

# --------------------------------------------------------------------------- building the profile


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def _decide_cpu_peak(base: Profile, runs: list[DeviceCalibration]) -> tuple[Profile, list[str]]:
    """``base`` with its CPU peak decided by ``runs`` (``cpupeak.decide_peak``): the clock the highest of the
    stated one and the one measured under FMA load, the FMA units overruled by a rate the table cannot hold.
    The CPU's roofs share one peak; a profile without a peak's factors (a GPU, a user's figure) is unchanged."""
    keys = [k for k, r in base.compute.items() if r.peak is not None and r.theoretical_source.source == "estimate"]
    if not keys:
        return base, []
    basis = base.compute[keys[0]].peak
    assert basis is not None
    measured = [r for r in runs if r.clock is not None]
    best = max(measured, key=lambda r: r.clock.ghz if r.clock else 0.0) if measured else None
    rates = [_median([r.roofs[k].flops_per_s for r in runs if k in r.roofs]) for k in keys
             if any(k in r.roofs for r in runs)]
    why_not = next((r.clock_not_measured for r in runs if r.clock_not_measured), None) or (
        "this calibration did not measure it (a result written before tileops measured the clock)")
    decided, notes = decide_peak(
        basis, measured_ghz=best.clock.ghz if best and best.clock else None,
        measurement=(f"{best.clock.method}; calibration {best.run_id} on {best.device_key}, "
                     f"{best.finished_at.date()}") if best and best.clock else None,
        not_measured=why_not, achieved_rate=max(rates) if rates else None)
    if not decided.clock_bound:
        notes.append(f"the clock was not measured ({decided.not_measured}): the peak is an estimate on the stated "
                     f"{decided.ghz:.4g} GHz ({decided.stated_source}), which turbo can exceed, so the physics check "
                     "will not judge FLOPs against it (NOT JUDGED, estimate); give a C compiler with OpenMP (the "
                     "clock kernel is C) and calibrate again, or state the all-core clock with --cpu-ghz")
    label = ", ".join(keys)
    compute = dict(base.compute)
    for k in keys:
        compute[k] = compute[k].model_copy(update={"theoretical": decided.peak_flops, "peak": decided,
                                                   "theoretical_source": peak_provenance(decided)})
    return base.model_copy(update={"compute": compute}), [f"{label} peak: {n}" for n in notes]


def build_profile(base: Profile, runs: list[DeviceCalibration]) -> tuple[Profile, list[str]]:
    """The calibrated profile: ``base``'s theoretical figures with fractions from ``runs``.

    Several runs (devices of one model) give the median of each measurement, so
    one weak device neither sets nor drags the model's ceiling. A CPU's peak is
    decided here, from the runs' measured clocks and rates (``_decide_cpu_peak``).
    Returns the profile and the warnings about numbers that could not be stored
    or ceilings in doubt.
    """
    if not runs:
        raise ValueError("build_profile needs at least one run")
    base, warnings = _decide_cpu_peak(base, runs)
    first = runs[0]
    date = first.finished_at.date()
    devices = ", ".join(r.device_key for r in runs)
    quick = (" quick run (smaller sizes, fewer repetitions): a first figure, which `tileops calibrate` "
             "replaces with the full one;" if any(r.quick for r in runs) else "")

    def prov(method: str) -> Provenance:
        return Provenance(source="calibration", run_id=first.run_id, date=date, tool_version=first.tool_version,
                          ref=f"{len(runs)} device(s): {devices}",
                          note=(quick + " " + method).strip() + (" (median over devices)" if len(runs) > 1 else ""))

    data = base.model_dump()
    data.pop("memory", None)
    memory = data["memory"] = _memory_roof(base.memory, runs, prov, warnings)
    if memory.suspect:
        warnings.append(f"memory ceiling suspect: {memory.suspect}")
    if memory.theoretical is None:
        data["memory_note"] = ("nominal memory bandwidth unknown (" + (memory.theoretical_source.note
                                                                        or "not given") + "): readings "
                               "are priced on the measured envelope and the physics check cannot judge bandwidth; "
                               "give it with `tileops calibrate --dram-bandwidth`")
    data["compute"] = _compute_roofs(base, runs, prov, warnings)
    data["calibration_marked"] = marked_note(runs)

    l2 = [r.l2_bytes for r in runs if r.l2_bytes]
    if l2:
        data["l2_bytes"] = int(_median([float(x) for x in l2]))
    floors = [r.latency_floor_s for r in runs if r.latency_floor_s]
    if floors:
        data["latency_floor_s"] = _median(floors)
        data["latency_floor_source"] = prov(first.latency_method or "trivial op")
    return Profile.model_validate(data), warnings


def marked_note(runs: list[DeviceCalibration]) -> str | None:
    """The note every row priced on ``runs`` carries when any of them was stored marked (contended, or below
    the stored calibration beyond noise, and stored anyway); None when none was."""
    marked = [r.marked.sentence(r.run_id, r.device_key) for r in runs if r.marked is not None]
    return " | ".join(marked) or None


def _memory_roof(mem: MemoryRoof | None, runs: list[DeviceCalibration], prov: Callable[[str], Provenance],
                 warnings: list[str]) -> MemoryRoof:
    """The memory roof: each mix's median over the runs, as fractions of the theoretical figure where it is
    known and above every mix (a mix above it says the figure is wrong: left uncalibrated, with a warning)."""
    measured = {m: _median([r.mixes[m].bytes_per_s for r in runs if m in r.mixes])
                for m in MIXES if any(m in r.mixes for r in runs)}
    theo = mem.theoretical if mem is not None else None
    theo_src = mem.theoretical_source if mem is not None else Provenance(
        source="unknown", note="no nominal bandwidth known for this device")
    memory_kw: dict[str, Any] = {"theoretical": theo, "theoretical_source": theo_src, "measured": measured}
    if theo is not None and measured:
        fractions = {m: v / theo for m, v in measured.items()}
        if max(fractions.values()) > MAX_FRACTION:
            worst = max(fractions, key=fractions.__getitem__)
            warnings.append(f"memory: the {worst} mix measured {fractions[worst]:.2f}x the theoretical "
                            f"{theo / 1e9:.1f} GB/s, so that figure is not a ceiling; memory left uncalibrated "
                            "(fix the theoretical: --dram-bandwidth, or the profile's memory.theoretical)")
        else:
            memory_kw.update(mixes=fractions, calibration=max(fractions.values()),
                             calibration_source=prov("envelope (max) over the STREAM-counted mixes "
                                                     + ", ".join(fractions)))
    if mem is not None:
        memory_kw.update(_kept_sustained("memory", mem.sustained, mem.sustained_source,
                                         memory_kw.get("calibration"), warnings))
    return MemoryRoof(**memory_kw)


def _compute_roofs(base: Profile, runs: list[DeviceCalibration], prov: Callable[[str], Provenance],
                   warnings: list[str]) -> dict[str, Roof]:
    """Each compute roof's fraction: the runs' median rate over its theoretical figure (above 1 it says the
    figure is wrong: left uncalibrated, with a warning); a roof measured that the profile lacks is warned of."""
    compute: dict[str, Roof] = {}
    for key, roof in base.compute.items():
        got = [r.roofs[key] for r in runs if key in r.roofs]
        if not got:
            compute[key] = roof
            continue
        rate = _median([g.flops_per_s for g in got])
        frac = rate / roof.theoretical
        if frac > MAX_FRACTION:
            warnings.append(f"{key}: measured {rate / 1e12:.3g} TFLOP/s is {frac:.2f}x the theoretical "
                            f"{roof.theoretical / 1e12:.3g}: the theoretical figure is wrong; roof left uncalibrated")
            compute[key] = roof.model_copy(update={"calibration": None, "calibration_source": None,
                                                   "sustained": None, "sustained_source": None})
            continue
        compute[key] = Roof(theoretical=roof.theoretical, theoretical_source=roof.theoretical_source,
                            calibration=frac, calibration_source=prov(got[0].method), peak=roof.peak,
                            **_kept_sustained(key, roof.sustained, roof.sustained_source, frac, warnings))
        if compute[key].suspect:
            warnings.append(f"{key} ceiling suspect: {compute[key].suspect}")
    for key in sorted({k for r in runs for k in r.roofs} - set(base.compute)):
        warnings.append(f"{key}: measured, but profile {base.name} has no theoretical figure for it, "
                        "so no fraction can be stored (the raw rate is in the per-device result)")
    return compute


def _kept_sustained(ceiling: str, sustained: float | None, source: Provenance | None, burst: float | None,
                    warnings: list[str]) -> dict[str, Any]:
    """A ceiling's sustained fraction (measured under the power cap, docs/profiles.md) carried over a new burst
    calibration while it is still at most the burst one; dropped with a warning otherwise."""
    if sustained is None:
        return {}
    if burst is not None and sustained <= burst:
        return {"sustained": sustained, "sustained_source": source}
    warnings.append(f"{ceiling}: the profile's sustained fraction {sustained:.3f} (under the power cap) is "
                    + (f"above the new burst calibration {burst:.3f}" if burst is not None else
                       "left without a burst calibration")
                    + ", so it is dropped; measure it again under the cap")
    return {}


