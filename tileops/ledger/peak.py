"""A CPU's peak decided after a calibration: the clock the highest of the stated and the measured one, the
FMA units raised only where a measured rate proves the table wrong for the machine (the primer's arithmetic,
``tileops.calibrate.cpupeak`` for the table and the stated figures)."""

from __future__ import annotations

from tileops.profiles import PeakBasis, Provenance

#: The peak is never raised past this many FMA units per core by a measurement: a rate needing more is a
#: broken measurement (or a clock measured far too low), not a wider core.
MAX_FMA_UNITS = 4


class PeakUnknown(ValueError):
    """The clock could not be found; the message says how to give it."""


def peak_provenance(peak: PeakBasis) -> Provenance:
    """The provenance of a CPU peak: an estimate, with its arithmetic (each factor's source is in ``peak``)."""
    return Provenance(source="estimate", ref="cores x GHz x FMA units x SIMD lanes x 2 (roofline primer)",
                      note=peak.explain())


def decide_peak(basis: PeakBasis, *, measured_ghz: float | None, measurement: str | None = None,
                not_measured: str | None = None,
                achieved_rate: float | None = None) -> tuple[PeakBasis, list[str]]:
    """The peak after a calibration: the highest of the stated and the measured clock, and the FMA units the
    calibration's achieved rate allows. Returns the basis and what the calibration should tell the user.

    ``basis`` holds the stated clock and the table's units (an earlier decision is redone from those).
    ``achieved_rate``: the best rate the calibration reached on these FMA units. When the clock is a bound
    and that rate is above the peak at the table's units, the table is wrong for this machine: the units rise
    to the smallest of the row's candidates (else a power of two, at most :data:`MAX_FMA_UNITS`) that holds
    the rate. With the clock unmeasured nothing is raised: a rate above such a peak may be turbo as well as
    units, and the peak stays an estimate the physics check does not judge against.
    """
    notes: list[str] = []
    stated = basis.stated_ghz
    ghz, source = stated, ("user" if basis.stated_by_user else "stated")
    if measured_ghz is not None and (ghz is None or measured_ghz > ghz):
        ghz, source = measured_ghz, "measured"
    if ghz is None:
        raise PeakUnknown("no clock stated and none measured: pass --cpu-ghz GHZ (the all-core clock)")
    basis = basis.model_copy(update={
        "ghz": ghz, "ghz_source": source, "measured_ghz": measured_ghz,
        "measurement": measurement if measured_ghz is not None else None,
        "not_measured": None if measured_ghz is not None else (not_measured or basis.not_measured),
        "fma_units": basis.fma_table_units, "fma_units_source": "table"})
    if measured_ghz is not None and stated and measured_ghz > stated:
        notes.append(f"the cores ran at {measured_ghz:.3g} GHz under FMA load, {measured_ghz / stated - 1:.0%} above "
                     f"the stated {stated:.4g} GHz ({basis.stated_source}): the peak uses the measured clock")
    if achieved_rate is None:
        return basis, notes
    achieved_units = achieved_rate / (basis.cores * ghz * 1e9 * basis.lanes * 2)
    table = basis.fma_table_units
    if achieved_units <= table:
        return basis, notes
    if not basis.clock_bound:
        notes.append(f"the calibration reached {achieved_units / table:.0%} of the peak on the unmeasured clock "
                     f"{ghz:.4g} GHz: that clock (turbo runs faster) or the FMA units per core are too low; the "
                     "peak stays an estimate the physics check does not judge against")
        return basis, notes
    pool = sorted({*basis.fma_candidates, *(2 ** k for k in range(MAX_FMA_UNITS.bit_length()))})
    fits = [c for c in pool if table < c <= MAX_FMA_UNITS and c >= achieved_units]
    if not fits:
        notes.append(f"the calibration reached {achieved_units:.2f} FMA per cycle per core at {ghz:.3g} GHz, more "
                     f"than {MAX_FMA_UNITS} units could issue: that measurement is not believed, the table's "
                     f"{table} stands")
        return basis, notes
    why = (f"calibration: the FMA path sustained {achieved_units:.2f} FMA per cycle per core at {ghz:.3g} GHz "
           f"({source} clock), above the table's {table}: the table is wrong for this machine, {fits[0]} units")
    notes.append(why)
    return basis.model_copy(update={"fma_units": fits[0], "fma_units_source": why}), notes
