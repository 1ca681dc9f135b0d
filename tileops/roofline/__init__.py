"""Roofline tool (M5, §4.3): price benchmark records against a device profile.

Pure functions over records and a profile. It never instantiates an op and
imports no op code (§4.4.5): every number it needs is in the record, so old
records re-price under an updated profile without running anything (§5.2).
One module per job: ``price`` (one record on one profile: SOL, verdict, the
physics check per ceiling), ``noise`` (how well a row's time is known: its SOL
interval, whether its verdict can stand), ``health`` (the run's health, decided there only),
``races`` (a row's backends side by side), ``gap`` (a row's SOL gap split by
its audit entry), ``energy`` (joules per call, FLOP/J, bytes/J) and ``power``
(a row's power state, and the burst or sustained ceiling it matches), ``state`` (a row's SOL against the
device's state during it, from its reference probe: issue 39).

CONTRACT (shared with tileops.pipeline, tileops.export and tileops.report)::

    price(record, profile) -> Priced
    price_all(records, chooser) -> list[Priced]       chooser: tileops.profiles.ProfileChooser
    price_iter(records, chooser, audit=None) -> Iterator[Priced]  the same, one at a time (a stream of records);
                                                      with audit_index(entries), each row's gap split (Priced.gap)
    row_energy(record) -> EnergyRates                 J/call, FLOP/J, bytes/J from its sensors, or why not
    power_state(record) -> str | None                 power-capped, thermal, both, uncapped; None: not read
    health(priced) -> Health                          the run's health (per ceiling: held, breached, not judged)
    HealthTally                                       the same health, counted as rows go by
    compare_backends(priced) -> {row: BackendRace}    a row's backends side by side: the best, its margin
"""

from tileops.roofline.health import (HEALTH_STATES, CeilingHealth, CeilingState, Health, HealthState, HealthTally,
                                     health)
from tileops.roofline.price import (ANOMALY, AT_CEILING, BLANK_BYTES_ZERO, BLANK_ERROR, BLANK_MEMORY_UNCALIBRATED,
                                    BLANK_NO_CUPTI, BLANK_NO_PROFILE, BLANK_NO_ROOFLINE, BLANK_NO_TIMING,
                                    BLANK_REASONS, BLANK_ROOF_ABSENT, BLANK_ROOF_UNCALIBRATED, BLANK_SKIPPED,
                                    HOST_BOUND_RATIO, NOT_JUDGED_ESTIMATE, NOT_JUDGED_NO_PROFILE,
                                    NOT_JUDGED_NO_ROOFLINE, NOT_JUDGED_NO_TIMING, NOT_JUDGED_NOMINAL_UNKNOWN,
                                    NOT_JUDGED_REASONS, NOT_JUDGED_ROOF_ABSENT, NOT_JUDGED_SUSPECT,
                                    NOT_JUDGED_NOISE, NOT_JUDGED_THEORETICAL_MISSING, NOTE_NOMINAL_UNKNOWN, VERDICTS,
                                    Bound, Breach, Check, Priced, Verdict, audit_index, host_bound, host_bound_note,
                                    price, price_all, price_iter, si, with_gap)
from tileops.roofline.noise import (CI_NO_INTERVAL, CI_REASONS, UNSTABLE_CPU, UNSTABLE_GPU, disturbances,
                                    fast_times, interval_words, rerun_interval, sliced_words, sm_clock_mhz,
                                    sol_interval, throttle_unsettles, time_interval, unstable_code, unstable_limit,
                                    unstable_reasons)
from tileops.roofline.energy import EnergyRates, energy_rates, row_energy
from tileops.roofline.gap import GapBlank, GapSplit, gap_for, split_gap
from tileops.roofline.power import Basis, power_blank, power_state, wants_sustained
from tileops.roofline.state import StateSol, quotient_interval, reference_rate, state_sol
from tileops.roofline.races import (BackendRace, RaceKey, RaceTally, backend_races, compare_backends,
                                    race_key)

__all__ = [
    "ANOMALY", "AT_CEILING", "BLANK_BYTES_ZERO", "BLANK_ERROR", "BLANK_MEMORY_UNCALIBRATED", "BLANK_NO_CUPTI",
    "BLANK_NO_PROFILE", "BLANK_NO_ROOFLINE", "BLANK_NO_TIMING", "BLANK_REASONS", "BLANK_ROOF_ABSENT",
    "BLANK_ROOF_UNCALIBRATED", "BLANK_SKIPPED", "HEALTH_STATES", "HOST_BOUND_RATIO", "NOTE_NOMINAL_UNKNOWN",
    "CI_NO_INTERVAL", "CI_REASONS", "NOT_JUDGED_NOISE", "UNSTABLE_CPU", "UNSTABLE_GPU", "sol_interval",
    "throttle_unsettles", "time_interval", "rerun_interval", "fast_times", "interval_words", "unstable_limit",
    "unstable_reasons", "unstable_code", "disturbances", "sliced_words", "sm_clock_mhz",
    "NOT_JUDGED_ESTIMATE", "NOT_JUDGED_NOMINAL_UNKNOWN", "NOT_JUDGED_NO_PROFILE", "NOT_JUDGED_NO_ROOFLINE",
    "NOT_JUDGED_NO_TIMING", "NOT_JUDGED_REASONS", "NOT_JUDGED_ROOF_ABSENT", "NOT_JUDGED_SUSPECT",
    "NOT_JUDGED_THEORETICAL_MISSING", "VERDICTS", "BackendRace", "Bound", "Breach", "CeilingHealth",
    "CeilingState", "Check", "Health", "HealthState", "HealthTally", "Priced", "RaceKey", "RaceTally", "Verdict",
    "backend_races", "compare_backends", "health", "host_bound", "host_bound_note", "price", "price_all",
    "price_iter", "race_key", "si",
    # issue 28: the gap split, energy, power state
    "Basis", "EnergyRates", "GapBlank", "GapSplit", "audit_index", "energy_rates", "gap_for", "power_blank",
    "power_state", "row_energy", "split_gap", "wants_sustained", "with_gap",
    # issue 39: two SOLs per row
    "StateSol", "quotient_interval", "reference_rate", "state_sol",
]
