"""Issue 28 items 3-5 through the roofline tool: a power-capped row priced on its profile's sustained fraction
(and marked), energy per call from a record's conditions, and the SOL gap split of a run with audit entries,
in `tileops roofline`'s table, JSON and CSV. The conditions come from the bench's sensors reading a fake NVML
and a fake sysfs (the only things that cannot exist on this VM); the rest is the real pipeline on files."""

from __future__ import annotations

import dataclasses

import csv
import io
import json
from pathlib import Path

import pytest

from tileops.audit.entry import append_entry
from tileops.device import DeviceInfo, NvmlSession
from tileops.pipeline.roofline import RooflineOptions, run_roofline
from tileops.profiles import ProfileError, parse_profile
from tileops.records import AUDIT_FILE, AuditEntry, CpuConditions, DeviceIdentity, GpuConditions, RowConditions
from tileops.roofline import price, row_energy

from roofline_fixtures import CALIB, DATASHEET, make_profile, make_record, write_profile, write_records
from sensors_support import Clock, FakeNvml, FakeProc, fake_rapl

#: The GPU the fake NVML knows (by its uuid).
GPU_DEVICE = DeviceInfo(kind="cuda", name="NVIDIA H200", index=0, uuid="GPU-1")

H200 = "NVIDIA H200"
BW, BURST, SUSTAINED = 4.8e12, 0.90, 0.80  # bytes/s; the fractions measured at full clocks and under the cap


def _profile(*, sustained: float | None = SUSTAINED, bf16_sustained: float | None = None):
    p = make_profile(name="h200-test", match=(H200,), kind="gpu", bw_theoretical=BW, bw_calibration=BURST,
                     roofs={"tensor_core.bf16": (9.895e14, 0.75)}, aliases={})
    assert p.memory is not None
    mem = p.memory.model_copy(update={"sustained": sustained, "sustained_source": CALIB if sustained else None})
    roof = p.compute["tensor_core.bf16"].model_copy(
        update={"sustained": bf16_sustained, "sustained_source": CALIB if bf16_sustained else None})
    return p.model_copy(update={"memory": mem, "compute": {"tensor_core.bf16": roof}})


def _gpu(*, power_capped: bool = False, thermal: bool = False, energy_j: float | None = 60.0,
         blank: dict[str, str] | None = None) -> RowConditions:
    events = (["sw_power_cap"] if power_capped else []) + (["sw_thermal_slowdown"] if thermal else [])
    return RowConditions(window_s=2.0, throttled=power_capped or thermal, power_capped=power_capped,
                         thermal=thermal,
                         gpu=GpuConditions(sm_mhz_min=1500.0 if power_capped else 1980.0, sm_mhz_max=1980.0,
                                           sm_mhz_readings=20, clock_events=events,
                                           clock_event_mask=(0x4 if power_capped else 0) | (0x20 if thermal else 0),
                                           power_w=690.0,
                                           power_limit_w=700.0, temperature_c_max=71.0, energy_j=energy_j,
                                           blank=blank or {}))


def _row(median_s: float = 1e-3, **kw):
    """A memory-bound GPU row of 1 GB (half of it reads), timed by CUPTI (n=10 samples after 2 warm-up calls)."""
    args: dict = dict(op="relu", label="llama3-8b", flops=0, bytes=1_000_000_000, read_bytes=500_000_000,
                      roof_key=None, dtype="bfloat16", timer="cupti", device_kind="cuda", device_name=H200)
    return make_record(**{**args, **kw}, median_s=median_s)


# -- power state: which fraction prices the row --------------------------------------------------------------


def test_a_power_capped_row_is_priced_on_the_sustained_fraction_and_says_so() -> None:
    prof = _profile()
    capped = price(_row(conditions=_gpu(power_capped=True)), prof)
    free = price(_row(conditions=_gpu()), prof)
    old = price(_row(), prof)  # a record written before the sensors: burst, as before
    assert capped.ceiling_basis == "sustained" and capped.effective_bandwidth == pytest.approx(BW * SUSTAINED)
    assert free.ceiling_basis == "burst" and free.effective_bandwidth == pytest.approx(BW * BURST)
    assert old.ceiling_basis == "burst" and old.efficiency == free.efficiency
    assert capped.efficiency == pytest.approx(free.efficiency * BURST / SUSTAINED)
    assert not any("power cap" in n for n in capped.notes)


def test_a_thermal_row_stays_on_burst_and_a_profile_without_sustained_says_why() -> None:
    thermal = price(_row(conditions=_gpu(thermal=True)), _profile())
    both = price(_row(conditions=_gpu(power_capped=True, thermal=True)), _profile())
    assert thermal.ceiling_basis == both.ceiling_basis == "burst"
    assert thermal.effective_bandwidth == pytest.approx(BW * BURST)
    none = price(_row(conditions=_gpu(power_capped=True)), _profile(sustained=None))
    assert none.ceiling_basis == "burst" and none.effective_bandwidth == pytest.approx(BW * BURST)
    assert any("no sustained fraction for memory" in n for n in none.notes)


def test_a_compute_bound_capped_row_uses_its_roofs_sustained_fraction() -> None:
    gemm = dict(op="matmul", flops=10**12, bytes=10**8, read_bytes=None, roof_key="tensor_core.bf16",
                dtype="bfloat16", timer="cupti", device_kind="cuda", device_name=H200, median_s=3e-3)
    got = price(make_record(**gemm, conditions=_gpu(power_capped=True)), _profile(bf16_sustained=0.708))
    assert got.bound == "compute" and got.ceiling_basis == "sustained"
    assert got.effective_peak == pytest.approx(9.895e14 * 0.708)
    mem_only = price(make_record(**gemm, conditions=_gpu(power_capped=True)), _profile())
    assert mem_only.ceiling_basis == "burst" and any("tensor_core.bf16" in n for n in mem_only.notes)
    # the physics check stays on the theoretical, whatever fraction priced the row
    assert [c.theoretical_per_s for c in got.checks] == [c.theoretical_per_s for c in mem_only.checks]


def test_a_gpu_row_whose_clock_events_were_not_read_has_no_power_state(tmp_path: Path) -> None:
    """NVML absent: the sensors leave every GPU field blank with the reason, and the row is neither capped nor
    uncapped, but priced on burst with the reason in power_blank."""
    from tileops.bench.sensors import RowSensors
    from tileops.report.columns import raw
    from tileops.roofline import power_blank, power_state

    FakeProc(tmp_path / "proc")
    s = RowSensors(GPU_DEVICE, proc=tmp_path / "proc", sys=tmp_path / "sys", nvml=None, poll_s=None)
    s.start()
    rec = _row(conditions=s.stop())
    assert power_state(rec) is None and power_blank(rec) == "no NVML given"
    got = price(rec, _profile())
    assert got.ceiling_basis == "burst" and raw(got)["power_blank"] == "no NVML given"


@pytest.mark.parametrize("memory, words", [
    ({"sustained": 0.8}, "sustained_source"),
    ({"sustained": 0.95, "sustained_source": {"source": "calibration"}}, "above the burst calibration"),
])
def test_a_profile_refuses_a_sustained_fraction_it_cannot_stand_behind(tmp_path: Path, memory: dict,
                                                                       words: str) -> None:
    data = {"name": "x", "kind": "gpu", "match": [H200],
            "memory": {"theoretical": BW, "calibration": 0.9, "mixes": {"triad": 0.9},
                       "theoretical_source": DATASHEET.model_dump(exclude_none=True),
                       "calibration_source": {"source": "calibration"}, **memory}}
    with pytest.raises(ProfileError, match=words) as info:
        parse_profile(data, tmp_path / "x.yaml")
    assert "x.yaml" in str(info.value) and info.value.field == "memory"


# -- calibration: the same power state ------------------------------------------------------------------------


def test_a_calibration_under_a_power_cap_records_it_and_warns(tmp_path: Path) -> None:
    """The calibration's window read by the sensors on a fake NVML that reports the power cap: kept in the
    device's result (written and read back as the store keeps it), with a warning that its fractions are
    sustained ones."""
    from tileops.bench.gpusensors import SW_POWER_CAP
    from tileops.ledger import DeviceCalibration, read_device_result, write_device_result
    from tileops.calibrate.run import power_warnings
    from tileops.records import Machine

    cond = _sensed_gpu(tmp_path, [SW_POWER_CAP])
    (warning,) = power_warnings(cond)
    assert "measured power-capped under a 700 W limit (sw_power_cap" in warning and "sustained" in warning
    assert power_warnings(_sensed_gpu(tmp_path / "free", [0x1])) == []
    machine = Machine(device=DeviceIdentity(kind="cuda", name=H200, uuid="GPU-1", hostname="h"), torch_version="2.11",
                      tileops_version="0")
    run = DeviceCalibration(run_id="cal-1", started_at="2026-01-01T00:00:00Z", finished_at="2026-01-01T00:01:00Z",
                            quick=True, machine=machine, conditions=cond, power_state=cond.power_state(),
                            power_blank=cond.power_blank(), warnings=[warning])
    back = read_device_result(write_device_result(run, path=tmp_path / "GPU-1.yaml"))
    assert back.power_state == "power-capped" and back.power_blank is None and back.conditions == cond
    assert back.conditions is not None and back.conditions.gpu is not None
    assert back.conditions.gpu.power_limit_w == 700.0 and back.conditions.gpu.energy_j == pytest.approx(500.0)
    from tileops.calibrate.summary import power_text

    assert power_text(back) == "power state: power-capped (SM clock 1980-1980 MHz; 350 W of 700 W; sw_power_cap)"


# -- energy ------------------------------------------------------------------------------------------------


def _sensed_gpu(tmp_path: Path, reasons: list[int]) -> RowConditions:
    """A GPU row's conditions as the bench's sensors read them: a fake NVML, 500 J over 2 s."""
    from tileops.bench.sensors import RowSensors

    FakeProc(tmp_path / "proc")
    clock = Clock()
    s = RowSensors(GPU_DEVICE, proc=tmp_path / "proc", sys=tmp_path / "sys",
                   nvml=NvmlSession(FakeNvml(reasons=reasons, energy_mj=[1_000_000, 1_500_000])),
                   own_pids=set(), poll_s=None, clock=clock)
    s.start()
    clock.t += 2.0
    return s.stop()


def test_energy_per_call_from_the_sensors_window(tmp_path: Path) -> None:
    from tileops.bench.gpusensors import SW_POWER_CAP

    cond = _sensed_gpu(tmp_path, [SW_POWER_CAP])
    assert cond.power_capped and cond.gpu is not None and cond.gpu.energy_j == pytest.approx(500.0)
    e = row_energy(_row(conditions=cond))
    assert e.joules_per_call == pytest.approx(500.0 / 12)  # 10 samples + 2 warm-up calls in the window
    # a window that counts its own calls (re-warm calls, or one visit of two) shares its energy among them
    counted = row_energy(_row(conditions=dataclasses.replace(cond, calls=20)))
    assert counted.joules_per_call == pytest.approx(500.0 / 20)
    assert e.bytes_per_joule == pytest.approx(1e9 / (500.0 / 12)) and e.flop_per_joule is None
    assert "moves data only" in e.blank["flop_per_joule"]


def test_energy_blank_with_its_reason(tmp_path: Path) -> None:
    why = "NVML has no total energy counter for this GPU (Volta or newer has one)"
    assert row_energy(_row(conditions=_gpu(energy_j=None, blank={"energy_j": why}))).blank["joules_per_call"] == why
    assert "no conditions" in row_energy(_row()).blank["joules_per_call"]
    assert "no timing" in row_energy(_row(status="error")).blank["joules_per_call"]
    # a CPU row reads RAPL through the sensors: a fake sysfs tree whose package counter moves 30 J over the row
    from tileops.bench.sensors import RowSensors

    proc = FakeProc(tmp_path / "proc")
    fake_rapl(tmp_path / "sys", {"intel-rapl:0": ("package-0", 1_000_000, 2**32)})
    s = RowSensors(DeviceInfo(kind="cpu", name="a CPU"), proc=tmp_path / "proc", sys=tmp_path / "sys", poll_s=None)
    s.start()
    proc.advance(total=1000, own=900)
    fake_rapl(tmp_path / "sys", {"intel-rapl:0": ("package-0", 31_000_000, 2**32)})
    cpu = s.stop()
    assert cpu.cpu is not None and cpu.cpu.energy_j == pytest.approx(30.0)
    got = row_energy(make_record(flops=1200, bytes=2400, conditions=cpu))  # 10 samples + 2 warm-up calls
    assert got.joules_per_call == pytest.approx(2.5) and got.flop_per_joule == pytest.approx(480.0)
    unreadable = RowConditions(window_s=1.0, cpu=CpuConditions(blank={"energy_j": "no RAPL energy counter"}))
    assert row_energy(make_record(conditions=unreadable)).blank["bytes_per_joule"] == "no RAPL energy counter"


# -- the whole tool: a run with audit entries, power states, energy -------------------------------------------


def _audit(**over: object) -> AuditEntry:
    base = dict(op="relu", label="llama3-8b", dtype="bfloat16", backend="torch", verdict="WARN",
                reason="reads 2.6x the declared read half", expected_read_bytes=500_000_000,
                measured_read_bytes=1_300_000_000, measured_write_bytes=200_000_000, kernels=1,
                device=DeviceIdentity(kind="cuda", name=H200, hostname="h"))
    base.update(over)
    return AuditEntry(**base)  # type: ignore[arg-type]


@pytest.fixture()
def audited_run(tmp_path: Path) -> tuple[Path, Path]:
    """A run directory as bench and audit leave it: records.jsonl (three rows, one power-capped) and
    audit.jsonl (two of them audited, one without a reading), and the profile that prices them."""
    at_30 = (1e9 / (BW * BURST)) / 0.30  # 30 % SOL on the burst ceiling
    records = [_row(at_30, conditions=_gpu()),
               _row(at_30, label="llama3-70b", conditions=_gpu(power_capped=True)),
               _row(at_30, label="mistral-7b")]
    run = tmp_path / "run"
    write_records(run / "records.jsonl", records)
    append_entry(run / AUDIT_FILE, _audit())
    append_entry(run / AUDIT_FILE, _audit(label="llama3-70b", verdict="ERROR", measured_read_bytes=None,
                                          measured_write_bytes=None, reason="ncu not found"))
    return run, write_profile(tmp_path / "h200-test.yaml", _profile())


def _roofline(run: Path, prof: Path, fmt: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    result = run_roofline(RooflineOptions(results=[run], profile=str(prof), format=fmt, jobs=1), out, err)
    assert result.exit_code == 0, err.getvalue()
    return out.getvalue()


def test_the_table_shows_the_gap_split_power_marks_and_energy(audited_run: tuple[Path, Path]) -> None:
    text = _roofline(*audited_run, "table")
    gap = text.split("SOL gap, split by the audit's DRAM traffic", 1)[1]
    row = next(line for line in gap.splitlines() if "llama3-8b" in line)
    assert "30.0 %" in row and "1.80x" in row and "54.0 %" in row and "memory" in row
    assert "llama3-70b" not in gap.split("SOL gap split by")[0]  # its audit has no reading: not in the table
    assert "SOL gap split by the audit's DRAM traffic: 1 row(s)" in text
    assert "SOL gap not split: 1 row(s): the audit has no DRAM reading for this row (ERROR: ncu not found)" in text
    assert "SOL gap not split: 1 row(s): the row was not audited" in text
    assert "power-capped (sustained)" in text  # the capped row's verdict cell
    assert "power: 1 under a power cap (1 against the sustained ceiling), of 2 GPU row(s) read" in text
    assert "energy: 2 row(s) with joules per call" in text
    md = _roofline(*audited_run, "md")
    table = md.split("## SOL gap, split by the audit's DRAM traffic", 1)[1].split("## Summary")[0]
    assert "| relu | llama3-8b | bfloat16 | torch | 30.0 % | 1.80x | 54.0 % | memory |  |" in table
    assert "llama3-70b" not in table and "power-capped (sustained)" in md


def test_json_and_csv_carry_the_gap_power_and_energy_fields(audited_run: tuple[Path, Path]) -> None:
    rows = {r["label"]: r for r in json.loads(_roofline(*audited_run, "json"))["rows"]}
    split, capped, plain = rows["llama3-8b"], rows["llama3-70b"], rows["mistral-7b"]
    assert split["gap"] == "moves 1.80x the minimum bytes; at what it moves it runs at 54% of the ceiling"
    assert split["gap_traffic_ratio"] == pytest.approx(1.8) and split["gap_achieved"] == pytest.approx(0.54)
    assert split["gap_moved_bytes"] == 1_800_000_000 and split["gap_blank"] is None
    assert capped["gap"] is None and "ERROR: ncu not found" in capped["gap_blank"]
    assert "not audited" in plain["gap_blank"]
    assert capped["power_state"] == "power-capped" and capped["ceiling_basis"] == "sustained"
    assert capped["efficiency"] == pytest.approx(0.30 * BURST / SUSTAINED)
    assert split["power_state"] == "uncapped" and split["ceiling_basis"] == "burst"
    assert split["sm_mhz_min"] == 1980.0 and capped["sm_mhz_min"] == 1500.0 and capped["power_limit_w"] == 700.0
    assert capped["clock_events"] == ["sw_power_cap"] and split["power_blank"] is None
    assert split["energy_j_per_call"] == pytest.approx(5.0) and split["bytes_per_joule"] == pytest.approx(2e8)
    assert split["flop_per_joule"] is None and "moves data only" in split["energy_blank"]
    lines = list(csv.DictReader(io.StringIO(_roofline(*audited_run, "csv"))))
    by = {r["label"]: r for r in lines}
    assert float(by["llama3-8b"]["gap_traffic_ratio"]) == pytest.approx(1.8)
    assert by["llama3-70b"]["clock_events"] == "sw_power_cap" and by["llama3-70b"]["ceiling_basis"] == "sustained"
    assert float(by["llama3-8b"]["energy_j_per_call"]) == pytest.approx(5.0)
    assert by["mistral-7b"]["energy_j_per_call"] == "" and "no conditions" in by["mistral-7b"]["energy_blank"]


def test_a_run_without_audit_or_sensors_says_why_each_is_blank(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_records(run / "records.jsonl", [make_record()])
    prof = write_profile(tmp_path / "cpu.yaml", make_profile())
    (row,) = json.loads(_roofline(run, prof, "json"))["rows"]
    assert "no audit entries" in row["gap_blank"] and row["gap"] is None
    assert row["power_state"] is None and "CPU row" in row["power_blank"]
    assert "no conditions" in row["energy_blank"] and row["energy_j_per_call"] is None
    text = _roofline(run, prof, "table")
    assert "SOL gap" not in text and "energy:" not in text and "power:" not in text


def test_full_metrics_carry_the_gap_energy_and_power_series_and_lean_none(audited_run: tuple[Path, Path]) -> None:
    """The exporter's own path (load_run reads records and audit.jsonl; the exposition at each detail level)."""
    from prometheus_client.parser import text_string_to_metric_families

    from tileops.export.metrics import exposition
    from tileops.export.snapshot import load_run
    from tileops.pipeline.export import chooser

    run, prof = audited_run
    snaps = load_run(run, chooser(str(prof)))

    def samples(detail: str) -> dict[tuple[str, str], list]:
        text = exposition(snaps, detail=detail).decode()
        out: dict[tuple[str, str], list] = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                out.setdefault((s.name, s.labels.get("label", "")), []).append(s)
        return out

    full, lean = samples("full"), samples("lean")
    assert full[("tileops_row_gap_traffic_ratio", "llama3-8b")][0].value == pytest.approx(1.8)
    assert full[("tileops_row_gap_achieved_ratio", "llama3-8b")][0].value == pytest.approx(0.54)
    assert ("tileops_row_gap_traffic_ratio", "llama3-70b") not in full  # its audit has no reading
    assert full[("tileops_row_energy_joules", "llama3-8b")][0].value == pytest.approx(5.0)
    assert ("tileops_row_energy_joules", "mistral-7b") not in full  # no sensor readings: absent, not zero
    assert ("tileops_row_flops_per_joule", "llama3-8b") not in full  # data only
    (state,) = full[("tileops_row_power_state", "llama3-70b")]
    assert state.labels["state"] == "power-capped" and state.labels["basis"] == "sustained"
    assert full[("tileops_row_sm_clock_min_hertz", "llama3-70b")][0].value == pytest.approx(1.5e9)
    assert full[("tileops_row_power_watts", "llama3-8b")][0].value == pytest.approx(690.0)
    new = ("gap", "energy", "joule", "power_state", "sm_clock", "power_watts")
    assert not [k for k in lean if any(w in k[0] for w in new)]


def test_the_plots_side_table_shows_the_gap_split(audited_run: tuple[Path, Path], tmp_path: Path) -> None:
    """The rows as the reader prices them (audit.jsonl read beside the records), in the table beside the plot."""
    from tileops.pipeline.export import chooser
    from tileops.report.plot import _table_lines, plot_layout
    from tileops.report.stream import read_priced

    class Keep:
        def __init__(self) -> None:
            self.rows: list = []

        def add(self, p: object) -> None:
            self.rows.append(p)

        def merge(self, later: Keep) -> None:
            self.rows += later.rows

    run, prof = audited_run
    ch = chooser(str(prof))
    (kept,) = read_priced([run], ch, lambda: [Keep()])
    layout = plot_layout(kept.rows, ch.profiles[0])  # no FLOPs, so no row is placed: each is listed with why
    lines = [text for text, _ in _table_lines(layout.listed)]
    assert lines[0].endswith("gap: bytes x min, at bytes moved")
    assert next(t for t in lines if "llama3-8b" in t).endswith("1.80x, 54.0 %")
    assert "power-capped (sustained)" in next(t for t in lines if "llama3-70b" in t)
    run_roofline(RooflineOptions(results=[run], profile=str(prof), plot_dir=tmp_path / "plot", jobs=1),
                 io.StringIO(), io.StringIO())
    assert (tmp_path / "plot" / "roofline.png").stat().st_size > 0


def test_the_fast_path_of_a_row_without_readings_or_audit_says_what_the_full_path_says() -> None:
    """Most rows (older records, runs not audited) take a shortcut in the machine columns: the same cells."""
    from tileops.report import columns
    from tileops.roofline import GapBlank

    for rec in (make_record(), make_record(status="error"), _row()):
        p = price(rec, make_profile())
        fast = columns.conditions_values(p)
        p.gap = GapBlank(columns.NO_AUDIT)  # not None: the full path
        assert columns.conditions_values(p) == fast


def test_the_command_line_shows_the_gap_and_a_bad_audit_file_is_a_located_error(
        audited_run: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    from tileops import exitcodes
    from tileops.cli import main

    run, prof = audited_run
    assert main(["roofline", str(run), "--profile", str(prof)]) == exitcodes.OK
    out = capsys.readouterr().out
    assert "SOL gap, split by the audit's DRAM traffic" in out and "1.80x" in out
    with (run / AUDIT_FILE).open("a") as f:
        f.write("{not json\n")
    assert main(["roofline", str(run), "--profile", str(prof)]) == exitcodes.USAGE
    err = capsys.readouterr().err
    assert f"{AUDIT_FILE}:3" in err


def test_a_new_calibration_keeps_a_sustained_fraction_below_it_and_drops_one_above(tmp_path: Path) -> None:
    """build_profile over a base that holds sustained fractions: memory's (0.80) is below the new burst envelope
    and stays; bf16's (0.72) is above the new 0.70 and is dropped with a warning, so the profile still loads."""
    from tileops.ledger import (DeviceCalibration, MixMeasurement, RoofMeasurement, build_profile)
    from tileops.profiles.store import write_profile as store_write
    from tileops.records import Machine

    base = _profile(bf16_sustained=0.72)
    machine = Machine(device=DeviceIdentity(kind="cuda", name=H200, uuid="GPU-1", hostname="h"), torch_version="2.11",
                      tileops_version="0")
    mix = {"bytes_per_s": 0.85 * BW, "bytes": 3 * 2**30, "array_bytes": 2**30, "best_s": 1e-3, "reps": 5,
           "kernel": "torch"}
    run = DeviceCalibration(run_id="cal-2", started_at="2026-01-02T00:00:00Z",
                            finished_at="2026-01-02T00:01:00Z", quick=False, machine=machine,
                            mixes={"triad": MixMeasurement.model_validate(mix)},
                            roofs={"tensor_core.bf16": RoofMeasurement.model_validate(
                                {"flops_per_s": 0.70 * 9.895e14, "flops": 1e12, "best_s": 1e-3, "reps": 5,
                                 "method": "cuBLAS"})})
    prof, warnings = build_profile(base, [run])
    assert prof.memory is not None and prof.memory.calibration == pytest.approx(0.85)
    assert prof.memory.sustained == SUSTAINED and prof.memory.sustained_source == CALIB
    bf16 = prof.compute["tensor_core.bf16"]
    assert bf16.calibration == pytest.approx(0.70) and bf16.sustained is None
    assert any("tensor_core.bf16: the profile's sustained fraction 0.720" in w and "dropped" in w for w in warnings)
    store_write(prof, tmp_path)  # validated as written: it loads
