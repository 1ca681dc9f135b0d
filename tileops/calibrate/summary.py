"""Rich tables for a profile: theoretical, calibration and effective side by side.

Shared by ``tileops profile show`` and the end of ``tileops calibrate`` (which
adds the run's raw measurements and methods).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from tileops.ledger import DeviceCalibration
from tileops.profiles import MIXES, PeakBasis, Profile, Provenance

if TYPE_CHECKING:
    from tileops.ceilings.check import CheckReport
    from tileops.ceilings.facts import FactsReading


def piped_width() -> int:
    """How wide a profile's tables are drawn when output is not a terminal (logs, pipes): $COLUMNS, else 120,
    so they stay whole."""
    return int(os.environ.get("COLUMNS", "0") or 0) or 120


def make_console(*, stderr: bool = False) -> Console:
    """A console :func:`piped_width` wide when output is not a terminal, so tables stay whole."""
    c = Console(stderr=stderr)
    if not c.is_terminal:
        c = Console(stderr=stderr, width=piped_width())
    return c


def fmt_rate(value: float | None, unit: str) -> str:
    """3.35e12, "B/s" -> "3.35 TB/s"; None -> "-"."""
    if value is None:
        return "-"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e6:.3g} us" if s < 1e-3 else f"{s * 1e3:.3g} ms"


def fmt_frac(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def fmt_source(p: Provenance | None) -> str:
    if p is None:
        return "-"
    bits: list[str] = [p.source]
    if p.run_id:
        bits.append(p.run_id)
    if p.date:
        bits.append(str(p.date))
    return " ".join(bits)


def memory_table(profile: Profile, run: DeviceCalibration | None = None) -> RenderableType:
    mem = profile.memory
    if mem is None:
        return Text("memory: no roof in this profile (bandwidth readings price blank)", style="yellow")
    nominal = fmt_rate(mem.theoretical, "B/s") if mem.theoretical else "unknown"
    title = f"memory: theoretical {nominal} ({fmt_source(mem.theoretical_source)})"
    if not mem.measured:
        return Text(f"{title}: uncalibrated, bandwidth readings price blank")
    t = Table(title=title, title_justify="left")
    t.add_column("mix")
    t.add_column("measured", justify="right")
    t.add_column("fraction", justify="right")
    t.add_column("envelope")  # the best mix sets the memory roof's calibration (docs/profiles.md)
    best = max(mem.measured, key=mem.measured.__getitem__) if mem.measured else None
    for mix in MIXES:
        if mix not in mem.measured and mix not in mem.mixes:
            continue
        row = [mix, fmt_rate(mem.measured.get(mix), "B/s"), fmt_frac(mem.mixes.get(mix)),
               "best: the calibration" if mix == best else ""]
        t.add_row(*row)
    eff = mem.effective
    lines: list[RenderableType] = [t]
    if run is not None and run.mixes:
        m0 = next(iter(run.mixes.values()))
        kernels = {k: m.kernel for k, m in run.mixes.items()}
        shared = {k.partition(" [")[2] for k in kernels.values()}
        common = f" [{shared.pop()}" if len(shared) == 1 and "" not in shared else ""
        lines.append(Text("kernels: " + "; ".join(f"{k} {v.removesuffix(common)}" for k, v in kernels.items())
                          + common + f" over {m0.array_bytes >> 20} MiB fp32 arrays, best of {m0.reps}; bytes "
                          "counted as STREAM counts them (no write-allocate)", style="dim"))
    if mem.theoretical is None:
        lines.append(Text(f"nominal bandwidth unknown ({mem.theoretical_source.note or 'not given'}); "
                          f"effective = measured envelope {fmt_rate(eff, 'B/s')}; every reading priced on it "
                          "says so, and the physics check cannot judge bandwidth", style="yellow"))
    else:
        lines.append(Text(f"calibration {fmt_frac(mem.calibration)} (envelope) -> effective {fmt_rate(eff, 'B/s')}"
                          + ("" if mem.calibration is not None else ": uncalibrated, bandwidth prices blank")))
    if mem.suspect:
        lines.append(Text(f"memory SUSPECT: {mem.suspect}", style="yellow"))
    return Group(*lines)


def compute_table(profile: Profile, run: DeviceCalibration | None = None) -> RenderableType:
    t = Table(title="compute roofs", title_justify="left")
    for col in ("roof", "theoretical", "calibration", "effective"):
        t.add_column(col, justify="left" if col == "roof" else "right")
    if run is not None:
        t.add_column("measured", justify="right")
    notes: list[str] = []
    sources: dict[str, list[str]] = {}
    for key, roof in profile.compute.items():
        row = [key, fmt_rate(roof.theoretical, "FLOP/s"), fmt_frac(roof.calibration),
               fmt_rate(roof.effective, "FLOP/s") if roof.effective else "uncalibrated"]
        src = roof.theoretical_source
        if roof.peak is None:  # an estimate's factors get their own lines (peak_lines)
            sources.setdefault(fmt_source(src) + (f" ({src.note or src.ref})" if src.note or src.ref else ""),
                               []).append(key)
        if run is not None:
            m = run.roofs.get(key)
            row.append(fmt_rate(m.flops_per_s, "FLOP/s") if m else "-")
            notes.append(f"{key}: measured by {m.method}" if m else
                         f"{key}: {run.not_measured.get(key, 'not measured in this run')}")
        t.add_row(*row)
    if run is not None:
        for key in sorted(set(run.roofs) - set(profile.compute)):
            m = run.roofs[key]
            t.add_row(key, "-", "-", "no theoretical", fmt_rate(m.flops_per_s, "FLOP/s"))
            notes.append(f"{key}: measured by {m.method}")
        for key in sorted(set(run.not_measured) - set(profile.compute)):
            notes.append(f"{key}: not measured: {run.not_measured[key]}")
    notes = [f"theoretical {', '.join(keys)}: {src}" for src, keys in sources.items()] + notes
    parts: list[RenderableType] = [t]
    if profile.roof_aliases:
        parts.append(Text("priced through: " + ", ".join(f"{k} -> {v}" for k, v in profile.roof_aliases.items())))
    parts += [Text(n, style="dim") for n in dict.fromkeys(notes)]
    parts += peak_lines(profile)
    for key, roof in profile.compute.items():
        if roof.suspect:
            parts.append(Text(f"{key} SUSPECT: {roof.suspect}", style="yellow"))
    return Group(*parts)


def peak_lines(profile: Profile) -> list[Text]:
    """How each estimated peak was reached: its clock (measured or stated, and where from), its FMA units per
    core (the table's row and source, or the calibration that overruled it), and whether the physics check
    judges against it. One block per distinct peak (a CPU's roofs share one)."""
    blocks: list[tuple[PeakBasis, list[str]]] = []
    for key, roof in profile.compute.items():
        if roof.peak is not None:
            same = [keys for peak, keys in blocks if peak == roof.peak]
            if same:
                same[0].append(key)
            else:
                blocks.append((roof.peak, [key]))
    out: list[Text] = []
    for peak, keys in blocks:
        stated = (f"stated {peak.stated_ghz:.4g} GHz ({peak.stated_source})" if peak.stated_ghz is not None
                  else "no clock stated")
        if peak.measured_ghz is not None:
            clock = (f"clock {peak.ghz:.4g} GHz, {peak.ghz_source}: the highest of measured "
                     f"{peak.measured_ghz:.4g} GHz and {stated}; measured by {peak.measurement}")
        else:
            clock = f"clock {peak.ghz:.4g} GHz, {stated}; not measured: {peak.not_measured or 'no reason recorded'}"
        units = (f"FMA units per core: {peak.fma_units}, from the table: {peak.fma_table}"
                 if peak.fma_units_source == "table" else
                 f"FMA units per core: {peak.fma_units}, {peak.fma_units_source} (table: {peak.fma_table})")
        roof = profile.compute[keys[0]]
        why = roof.not_a_bound
        judged = ("the physics check judges against it (its clock is a bound)" if why is None else
                  f"the physics check does NOT JUDGE against it (estimate): {why}; it still prices rows")
        out.append(Text(f"peak of {', '.join(keys)}: {peak.explain()}", style="bold"))
        out += [Text(f"  {line}", style="yellow" if line is judged and why else "")
                for line in (clock, units, judged)]
    return out


def host_text(run: DeviceCalibration) -> str:
    """The host as the calibration saw it, in a few words (the reasons, when contended, are said by the refusal
    or the mark)."""
    h = run.host
    assert h is not None
    if h.contended:
        return f"host: contended ({len(h.reasons)} reason(s))"
    share = f", other processes {h.others_busy:.0%} of its {len(h.cpus)} CPU(s)" if h.others_busy is not None else ""
    return f"host: quiet{share}"


def profile_view(profile: Profile, run: DeviceCalibration | None = None) -> RenderableType:
    head = Text()
    head.append(f"{profile.name}", style="bold")
    head.append(f" ({profile.kind}) matches: {', '.join(profile.match)}")
    if profile.source_path:
        head.append(f"\nfile: {profile.source_path}")
    extra = [f"L2/LLC: {profile.l2_bytes / 2**20:g} MiB" if profile.l2_bytes else "L2/LLC: unknown",
             f"latency floor: {fmt_seconds(profile.latency_floor_s)}"
             + (f" ({fmt_source(profile.latency_floor_source)})" if profile.latency_floor_source else "")]
    if run is not None and (run.power_state or run.power_blank):
        extra.append(power_text(run))
    if run is not None and run.host is not None:
        extra.append(host_text(run))
    parts: list[RenderableType] = [head, memory_table(profile, run), compute_table(profile, run),
                                   Text("; ".join(extra))]
    if profile.memory_note:
        parts.append(Text(profile.memory_note, style="yellow"))
    if profile.calibration_marked:
        parts.append(Text(f"MARKED: {profile.calibration_marked}", style="bold yellow"))
    if profile.notes:
        parts.append(Text(profile.notes, style="dim"))
    return Group(*parts)


def run_view(run: DeviceCalibration) -> RenderableType:
    """A device's raw measurements, with no theoretical figures (the child side of --all-devices)."""
    t = Table(title=f"{run.name} [{run.device_key}] raw measurements", title_justify="left")
    t.add_column("measurement")
    t.add_column("rate", justify="right")
    t.add_column("how")
    for mix, m in run.mixes.items():
        t.add_row(f"bandwidth {mix}", fmt_rate(m.bytes_per_s, "B/s"), m.kernel)
    for key, r in run.roofs.items():
        t.add_row(key, fmt_rate(r.flops_per_s, "FLOP/s"), r.method)
    for key, why in run.not_measured.items():
        t.add_row(key, "-", f"not measured: {why}")
    t.add_row("latency floor", fmt_seconds(run.latency_floor_s), run.latency_method or "-")
    if run.kind == "cpu":
        c = run.clock
        t.add_row("clock under FMA load", f"{c.ghz:.4g} GHz" if c else "-",
                  c.method if c else f"not measured: {run.clock_not_measured or 'no reason recorded'}")
    if run.power_state or run.power_blank:
        t.add_row("power state", run.power_state or "-", power_text(run).removeprefix("power state: "))
    return t


def power_text(run: DeviceCalibration) -> str:
    """``power state: uncapped (SM clock 1980-1980 MHz, 512 W of 700 W)``, or why there is none."""
    if run.power_state is None:
        return f"power state: none ({run.power_blank or 'not read'})"
    g = run.conditions.gpu if run.conditions is not None else None
    bits = []
    if g is not None and g.sm_mhz_min is not None and g.sm_mhz_max is not None:
        bits.append(f"SM clock {g.sm_mhz_min:.0f}-{g.sm_mhz_max:.0f} MHz")
    if g is not None and g.power_w is not None:
        bits.append(f"{g.power_w:.0f} W" + (f" of {g.power_limit_w:.0f} W" if g.power_limit_w is not None else ""))
    if g is not None and g.clock_events:
        bits.append(", ".join(g.clock_events))
    return f"power state: {run.power_state}" + (f" ({'; '.join(bits)})" if bits else "")


def devices_table(runs: list[DeviceCalibration]) -> RenderableType:
    """One row per device: the fleet's view of a single weak device among its model."""
    keys = sorted({k for r in runs for k in r.roofs})
    clocks = any(r.kind == "cpu" for r in runs)  # a CPU's clock under FMA load: what its peak assumes
    t = Table(title="per-device results", title_justify="left")
    for col in ["device", "model", "best mix", *keys, *(["clock"] if clocks else []), "latency floor"]:
        t.add_column(col)
    for r in runs:
        best = max(r.mixes.values(), key=lambda m: m.bytes_per_s) if r.mixes else None
        clock = [f"{r.clock.ghz:.4g} GHz" if r.clock else "not measured"] if clocks else []
        t.add_row(r.device_key, r.name, fmt_rate(best.bytes_per_s if best else None, "B/s"),
                  *[fmt_rate(r.roofs[k].flops_per_s, "FLOP/s") if k in r.roofs else "-" for k in keys],
                  *clock, fmt_seconds(r.latency_floor_s))
    return t


def profiles_table(profiles: list[Profile], store: Path) -> Table:
    """``tileops profile list``: each profile's match, memory figures, calibrated roofs and where it is from."""
    from tileops.profiles import is_store_profile

    t = Table(title=f"device profiles (store: {store})", title_justify="left")
    for col in ("name", "kind", "matches", "memory nominal", "effective", "roofs calibrated", "floor", "from"):
        t.add_column(col, no_wrap=col == "name")
    for p in profiles:
        mem = p.memory
        nominal = "-" if mem is None else (fmt_rate(mem.theoretical, "B/s") if mem.nominal_known else "unknown")
        eff = "-" if mem is None or mem.effective is None else fmt_rate(mem.effective, "B/s")
        calibrated = sum(r.calibration is not None for r in p.compute.values())
        t.add_row(p.name, p.kind, "\n".join(p.match), nominal, eff, f"{calibrated}/{len(p.compute)}",
                  fmt_seconds(p.latency_floor_s), "store" if is_store_profile(p) else "shipped")
    return t


def check_table(report: CheckReport, device: FactsReading) -> Table:
    """``tileops profile check``: each profile's ceilings, what it states, what the device's facts give, how
    far apart."""
    source = (f"this GPU's own ({device.facts.origin}) for the profile naming it, else those recorded per SKU"
              if device.facts is not None else f"those recorded per SKU ({device.why_not})")
    t = Table(title=f"profile check: theoretical figures against the ceilings the device's facts give; facts: {source}",
              title_justify="left")
    for col in ("profile", "ceiling", "profile states", "facts give", "off", "state"):
        t.add_column(col, no_wrap=col in ("profile", "ceiling"), justify="right" if col == "off" else "left")
    for p in report.profiles:
        if p.not_checked:
            t.add_row(p.profile, "-", "-", "-", "-", "not checked")
        for c in p.ceilings:
            off = "-" if c.ratio is None else f"{round((c.ratio - 1) * 100, 1) + 0.0:+.1f} %"
            state = {"defect": "[red]DEFECT[/]", "agrees": "agrees"}.get(c.state, "not checked")
            t.add_row(p.profile, c.ceiling, fmt_rate(c.stated, c.unit), fmt_rate(c.derived.value, c.unit), off, state)
    return t
