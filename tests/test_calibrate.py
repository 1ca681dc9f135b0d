"""Calibration (issue 5): CPU peak arithmetic, nominal DRAM, profile building, and `tileops calibrate` end to end."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from tileops.calibrate.theoretical import CPU_ROOF_ALIASES, TheoryOptions, cpu_base_profile, gpu_base_profile
from tileops.calibrate.cpupeak import cpu_peak
from tileops.ledger import PeakUnknown
from tileops.calibrate.dram import parse_bandwidth, parse_dmidecode, read_bandwidth_file
from tileops.ledger import (HISTORY_KEEP, STREAM_WORDS, DeviceCalibration, MixMeasurement,
                            RoofMeasurement, build_profile, history_dir, load_device_history,
                            load_device_results, read_device_result, write_device_result)
from tileops.device import describe_device, parse_cpuinfo
from tileops.profiles import MIXES, find_profile, load_profile, load_profiles, select_profile, shipped_dir
from tileops.records import DeviceIdentity, Machine
from cli_support import tileops

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[1]


def cpuinfo(name: str):  # a CpuInfo
    return parse_cpuinfo((DATA / "cpuinfo" / name).read_text())


# --------------------------------------------------------------------------- CPU peak arithmetic (primer)


def test_peak_amd_epyc_avx2_two_cores() -> None:
    info = cpuinfo("amd-epyc-avx2-2core.txt")
    assert info.model == "AMD EPYC" and info.physical_cores == 2 and info.logical_cpus == 2
    peak = cpu_peak(info)
    # 2 cores x 2.445 GHz (cpu MHz line) x 2 FMA units x 8 fp32 lanes (AVX2) x 2
    assert (peak.cores, peak.fma_units, peak.lanes) == (2, 2, 8)
    assert peak.ghz == pytest.approx(2.445) and "cpu MHz" in (peak.stated_source or "")
    assert peak.ghz_source == "stated" and not peak.clock_bound  # stated, not measured: no bound yet
    assert "Zen 2 / Zen 3" in peak.fma_table and "Optimization Guide" in peak.fma_table
    assert peak.peak_flops == pytest.approx(2 * 2.445e9 * 2 * 8 * 2)


def test_peak_intel_avx512_counts_physical_cores_not_hyperthreads() -> None:
    info = cpuinfo("intel-xeon-8375c-avx512-2core-ht.txt")
    assert info.logical_cpus == 4 and info.physical_cores == 2
    peak = cpu_peak(info)
    assert peak.ghz == 2.9 and peak.stated_source == "model name"  # "@ 2.90GHz" beats the cpu MHz line
    assert "Xeon Scalable" in peak.fma_table and "248966" in peak.fma_table  # model 106: Ice Lake-SP
    assert (peak.lanes, peak.fma_units) == (16, 2) and peak.isa == "AVX-512"
    assert peak.peak_flops == pytest.approx(2 * 2.9e9 * 2 * 16 * 2)  # 371.2 GFLOP/s
    assert cpu_peak(info, usable=1).peak_flops == pytest.approx(peak.peak_flops / 2)  # affinity caps the cores
    assert cpu_peak(info, max_mhz=3500).ghz == 3.5  # cpufreq maximum beats the model name
    assert cpu_peak(info, ghz=3.0, max_mhz=3500).ghz == 3.0  # the user beats everything
    assert cpu_peak(info, ghz=3.0).ghz_source == "user" and cpu_peak(info, ghz=3.0).clock_bound


def test_peak_arm_needs_a_clock_and_names_the_fix() -> None:
    info = cpuinfo("arm-neoverse-n1-2core.txt")
    assert info.arch == "aarch64" and info.model == "ARM Neoverse-N1" and info.physical_cores == 2
    with pytest.raises(PeakUnknown, match="--cpu-ghz"):
        cpu_peak(info)
    peak = cpu_peak(info, ghz=2.5)
    assert (peak.lanes, peak.fma_units) == (4, 2)  # NEON 128-bit, two FMA pipes on N1
    assert peak.peak_flops == pytest.approx(2 * 2.5e9 * 2 * 4 * 2)


def test_peak_estimate_states_it_is_an_estimate() -> None:
    base, _ = cpu_base_profile(cpuinfo("amd-epyc-avx2-2core.txt"), dmi=lambda: (None, "no DMI here"))
    for key in ("cpu.fp32", "cpu.fp32_matmul"):
        src = base.compute[key].theoretical_source
        assert src.source == "estimate" and "FMA units" in (src.note or "")
    assert base.roof_aliases == CPU_ROOF_ALIASES
    for gpu_key in ("cuda_core.fp32", "tensor_core.tf32", "tensor_core.bf16", "tensor_core.fp16"):
        assert base.roof(gpu_key) is not None
    assert base.roof("tensor_core.fp8") is None  # no CPU roof: priced blank, never guessed
    assert base.match == ["AMD EPYC"]
    assert base.memory is not None and base.memory.theoretical is None
    assert base.memory.theoretical_source.source == "unknown" and "no DMI here" in (
        base.memory.theoretical_source.note or "")


def test_user_given_theoreticals_survive_recalibration() -> None:
    info = cpuinfo("amd-epyc-avx2-2core.txt")
    opts = TheoryOptions(memory_bandwidth=51.2e9, memory_bandwidth_ref="--dram-bandwidth 51.2GB/s")
    first, _ = cpu_base_profile(info, None, opts, dmi=lambda: (None, "x"))
    assert first.memory is not None and first.memory.theoretical == 51.2e9
    assert first.memory.theoretical_source.source == "user"
    again, notes = cpu_base_profile(info, first, TheoryOptions(), dmi=lambda: (None, "x"))
    assert again.memory is not None and again.memory.theoretical == 51.2e9 and not notes


# --------------------------------------------------------------------------- nominal DRAM


def test_dmidecode_named_channels() -> None:
    nominal = parse_dmidecode((DATA / "dmidecode" / "amd-named-channels.txt").read_text())
    assert nominal is not None
    assert nominal.bytes_per_s == pytest.approx(2 * 3200e6 * 8)  # two populated channels; the empty slot is skipped


def test_dmidecode_two_dimms_on_one_channel_count_once() -> None:
    nominal = parse_dmidecode((DATA / "dmidecode" / "intel-two-dimms-per-channel.txt").read_text())
    assert nominal is not None
    assert nominal.bytes_per_s == pytest.approx(76.8e9)  # the primer's dual-channel DDR5-4800


def test_dmidecode_in_a_vm_gives_nothing() -> None:
    assert parse_dmidecode((DATA / "dmidecode" / "qemu-vm.txt").read_text()) is None


@pytest.mark.parametrize("text,value", [("76.8GB/s", 76.8e9), ("76.8 GB/s", 76.8e9), ("3.35TB/s", 3.35e12),
                                        ("7.68e10", 7.68e10), ("1GiB/s", 2**30), ("500MB/s", 5e8)])
def test_parse_bandwidth(text: str, value: float) -> None:
    assert parse_bandwidth(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["fast", "76.8 GHz", "-3GB/s", ""])
def test_parse_bandwidth_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="76.8GB/s"):
        parse_bandwidth(text)


def test_bandwidth_file(tmp_path: Path) -> None:
    f = tmp_path / "bw.txt"
    f.write_text("# nominal from the vendor sheet\ndram_bandwidth: 76.8GB/s\n")
    assert read_bandwidth_file(f) == pytest.approx(76.8e9)
    f.write_text("# nothing\n")
    with pytest.raises(ValueError, match=str(f)):
        read_bandwidth_file(f)


def test_the_environment_states_the_nominal_and_a_flag_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    """TILEOPS_DRAM_BANDWIDTH is how an image or chart states a fleet's nominal: every calibration without
    options reads it (the bench's automatic one included); `tileops calibrate --dram-bandwidth` still wins."""
    from tileops.pipeline.calibrate import CalibrateOptions, theory_options

    monkeypatch.delenv("TILEOPS_DRAM_BANDWIDTH", raising=False)
    assert TheoryOptions.from_env() == TheoryOptions()
    monkeypatch.setenv("TILEOPS_DRAM_BANDWIDTH", "204.8GB/s")
    opts = TheoryOptions.from_env()
    assert opts.memory_bandwidth == pytest.approx(204.8e9)
    assert opts.memory_bandwidth_ref == "TILEOPS_DRAM_BANDWIDTH=204.8GB/s"
    base, _ = cpu_base_profile(cpuinfo("amd-epyc-avx2-2core.txt"), None, opts, dmi=lambda: (None, "no DMI"))
    assert base.memory is not None and base.memory.theoretical == pytest.approx(204.8e9)
    assert base.memory.theoretical_source.source == "user" and "TILEOPS_DRAM_BANDWIDTH" in (
        base.memory.theoretical_source.ref or "")
    assert theory_options(CalibrateOptions()).memory_bandwidth == pytest.approx(204.8e9)
    assert theory_options(CalibrateOptions(dram_bandwidth="76.8GB/s")).memory_bandwidth == pytest.approx(76.8e9)


def test_a_malformed_environment_nominal_fails_before_measuring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from tileops.cli import main

    monkeypatch.setenv("TILEOPS_DRAM_BANDWIDTH", "fast")
    assert main(["calibrate", "--device", "cpu", "--profile-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "TILEOPS_DRAM_BANDWIDTH" in err and "76.8GB/s" in err
    assert not list(tmp_path.iterdir())


# --------------------------------------------------------------------------- building a profile from runs


def _run(key: str, scale: float = 1.0, *, quick: bool = False) -> DeviceCalibration:
    now = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    # formula-guard: allow a synthetic calibration run: STREAM's byte count for a 1 KiB array, no op priced
    mixes = {m: MixMeasurement(bytes_per_s=bw * scale, bytes=STREAM_WORDS[m] * 1024, array_bytes=1024, best_s=1e-3,
                               reps=3, kernel=m)
             for m, bw in {"copy": 4.3e12, "triad": 4.2e12, "read": 4.4e12, "write": 4.1e12}.items()}
    roofs = {"tensor_core.bf16": RoofMeasurement(flops_per_s=790e12 * scale, flops=1e12, best_s=1e-3, reps=3,
                                                 method="bf16 GEMM")}
    machine = Machine(device=DeviceIdentity(kind="cuda", name="NVIDIA H200", uuid=key, hostname="h"),
                      l2_bytes=60 << 20, torch_version="2", tileops_version="0.1.0")
    return DeviceCalibration(run_id="cal-t", started_at=now, finished_at=now, quick=quick, machine=machine,
                             mixes=mixes, roofs=roofs, latency_floor_s=2.5e-6 * scale, latency_method="kernel")


def test_envelope_is_the_best_mix_and_each_fraction_is_kept() -> None:
    base = find_profile("H200")
    profile, warnings = build_profile(base, [_run("GPU-a")])
    mem = profile.memory
    assert mem is not None and not warnings
    assert mem.measured["read"] == 4.4e12
    assert mem.mixes == pytest.approx({m: v / 4.8e12 for m, v in mem.measured.items()})
    assert mem.calibration == max(mem.mixes.values()) == mem.mixes["read"]
    assert profile.compute["tensor_core.bf16"].calibration == pytest.approx(790 / 989.5)
    assert profile.compute["tensor_core.fp8"].calibration is None  # not measured: stays uncalibrated
    src = profile.compute["tensor_core.bf16"].calibration_source
    assert src is not None and src.run_id == "cal-t" and src.tool_version == "tileops 0.1.0"
    assert profile.latency_floor_s == 2.5e-6 and profile.name == "H200"


def test_several_devices_give_the_median_so_one_weak_device_does_not_set_the_ceiling() -> None:
    runs = [_run("GPU-a"), _run("GPU-b", 1.01), _run("GPU-weak", 0.5)]
    profile, _ = build_profile(find_profile("H200"), runs)
    assert profile.memory is not None and profile.memory.measured["copy"] == pytest.approx(4.3e12)
    assert profile.compute["tensor_core.bf16"].calibration == pytest.approx(790 / 989.5)
    src = profile.compute["tensor_core.bf16"].calibration_source
    assert src is not None and "GPU-weak" in (src.ref or "") and "median" in (src.note or "")


def test_a_fraction_above_the_cap_is_not_stored_as_a_calibration() -> None:
    base = find_profile("L4")  # 300 GB/s nominal: an H200's 4.3 TB/s is 14x it
    profile, warnings = build_profile(base, [_run("GPU-a")])
    assert profile.memory is not None and profile.memory.calibration is None and not profile.memory.mixes
    assert profile.memory.measured["copy"] == 4.3e12
    assert any("not a ceiling" in w for w in warnings)
    assert profile.compute["tensor_core.bf16"].calibration is None  # 790 vs 121 TFLOP/s
    assert any("theoretical figure is wrong" in w for w in warnings)


def test_an_unknown_gpu_keeps_bandwidth_and_says_why_compute_is_missing() -> None:
    base, notes = gpu_base_profile("NVIDIA Future GPU", None)
    profile, warnings = build_profile(base, [_run("GPU-a")])
    assert profile.match == ["NVIDIA Future GPU"] and not profile.compute
    assert profile.memory is not None and profile.memory.theoretical is None
    assert profile.memory.effective == 4.4e12 and profile.memory_note
    assert any("no profile matches" in n for n in notes)
    assert any("tensor_core.bf16" in w and "no theoretical" in w for w in warnings)


def test_a_quick_run_says_so_in_its_provenance() -> None:
    profile, _ = build_profile(find_profile("H200"), [_run("GPU-a", quick=True)])
    src = profile.compute["tensor_core.bf16"].calibration_source
    assert src is not None and "quick" in (src.note or "")


# --------------------------------------------------------------------------- per-device history


def _at(run: DeviceCalibration, day: int, run_id: str) -> DeviceCalibration:
    when = dt.datetime(2026, 11, day, tzinfo=dt.timezone.utc)
    return run.model_copy(update={"run_id": run_id, "started_at": when, "finished_at": when})


def test_history_keeps_each_result_and_the_current_file_stays_the_newest(tmp_path: Path) -> None:
    from tileops.export.calibration import device_calibrations

    write_device_result(_at(_run(GPU_A), 1, "cal-1"), tmp_path)
    write_device_result(_at(_run(GPU_A, 0.8), 2, "cal-2"), tmp_path)
    write_device_result(_at(_run(GPU_A, 0.5, quick=True), 3, "cal-3q"), tmp_path)  # quick: its own lineage
    assert [r.run_id for r in load_device_history(GPU_A, tmp_path)] == ["cal-3q", "cal-2", "cal-1"]
    assert [r.run_id for r in load_device_results(tmp_path)] == ["cal-3q"]  # history is not a device
    cur = device_calibrations(tmp_path)[GPU_A]
    assert cur.run_id == "cal-3q" and cur.previous is None  # no earlier quick run to compare with
    write_device_result(_at(_run(GPU_A, 0.7), 4, "cal-4"), tmp_path)
    cur = device_calibrations(tmp_path)[GPU_A]
    assert cur.run_id == "cal-4" and cur.previous is not None and cur.previous.run_id == "cal-2"
    assert cur.previous.mixes["copy"].bytes_per_s == pytest.approx(4.3e12 * 0.8)


def test_a_store_from_before_history_keeps_its_result_as_the_previous(tmp_path: Path) -> None:
    from tileops.export.calibration import device_calibrations

    old = _at(_run(GPU_A), 1, "cal-old")
    write_device_result(old, path=tmp_path / "devices" / f"{GPU_A}.yaml")  # what an older tileops wrote
    assert device_calibrations(tmp_path)[GPU_A].previous is None  # old stores keep reading
    write_device_result(_at(_run(GPU_A, 0.85), 2, "cal-new"), tmp_path)
    assert sorted(p.name for p in history_dir(GPU_A, tmp_path).iterdir()) == ["cal-new.yaml", "cal-old.yaml"]
    cur = device_calibrations(tmp_path)[GPU_A]
    assert cur.run_id == "cal-new" and cur.previous is not None and cur.previous.run_id == "cal-old"


def test_history_is_bounded(tmp_path: Path) -> None:
    for day in range(1, HISTORY_KEEP + 4):
        write_device_result(_at(_run(GPU_A), day, f"cal-{day:02d}"), tmp_path)
    kept = [r.run_id for r in load_device_history(GPU_A, tmp_path)]
    assert len(kept) == HISTORY_KEEP and kept[0] == f"cal-{HISTORY_KEEP + 3:02d}" and "cal-01" not in kept


# --------------------------------------------------------------------------- end to end on this machine


def _tree_digest(d: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(d.rglob("*")):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


GPU_A = "GPU-3f6a9c10-5a1b-4c2d-9e8f-0a1b2c3d4e5f"  # a device id in NVML's real form


def _calibrate(store: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """A quick calibration of this CPU, stored even on a busy host (``--force``: marked; tests/test_calibrate_host.py
    holds the refusal)."""
    env = {**os.environ, "TILEOPS_PROFILE_DIR": str(store), "COLUMNS": "160"}
    return tileops("calibrate", "--device", "cpu", "--quick", "--force", *extra, environ=env, timeout=300)


def _stored_clock(store: Path) -> float | None:
    (dev,) = load_device_results(store)
    return dev.clock.ghz if dev.clock else None


@pytest.mark.slow
def test_cpu_calibration_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    shipped_before = _tree_digest(shipped_dir())
    proc = _calibrate(store)
    assert proc.returncode == 0, proc.stderr
    assert _tree_digest(shipped_dir()) == shipped_before  # shipped files change only with --write-shipped

    name = describe_device("cpu").name
    files = [p for p in store.glob("*.yaml")]
    assert len(files) == 1
    profile = load_profile(files[0])
    assert profile.kind == "cpu" and profile.match == [name]
    mem = profile.memory
    assert mem is not None and set(mem.measured) == set(MIXES)
    assert all(v > 0 for v in mem.measured.values())
    if mem.theoretical is None:  # no DMI here: measured only, said so in the profile and the summary
        assert mem.theoretical_source.source == "unknown" and profile.memory_note
        assert "nominal bandwidth unknown" in proc.stdout
        assert mem.effective == max(mem.measured.values())
    else:
        assert mem.calibration == max(mem.mixes.values())
    for key in ("cpu.fp32", "cpu.fp32_matmul"):
        roof = profile.compute[key]
        assert roof.theoretical > 0 and roof.calibration is not None and roof.calibration > 0
        assert roof.theoretical_source.source == "estimate"
        assert roof.calibration_source is not None and roof.calibration_source.run_id
    assert profile.latency_floor_s is not None and 0 < profile.latency_floor_s < 1e-2
    assert profile.l2_bytes and profile.l2_bytes > 0
    for gpu_key in ("cuda_core.fp32", "tensor_core.tf32", "tensor_core.bf16", "tensor_core.fp16"):
        assert profile.roof(gpu_key) is not None

    # the summary table names every mix and roof
    for needle in (*MIXES, "cpu.fp32_matmul", "envelope", "latency floor", "power state: none (a CPU"):
        assert needle in proc.stdout
    from tileops.calibrate.streaming import load_kernels

    if load_kernels()[0] is not None:  # the mixes ran through streaming.c, whose build is named once
        assert proc.stdout.count("[streaming.c: ") == 1 and "copy a[i] = b[i]; triad" in proc.stdout
        # and the clock was measured under FMA load (clock.c): the peak is a bound the physics check judges by
        peak = profile.compute["cpu.fp32"].peak
        assert peak is not None and peak.measured_ghz and peak.ghz >= peak.measured_ghz
        assert profile.compute["cpu.fp32"].not_a_bound is None and "dependent integer-add chain" in \
            " ".join(proc.stdout.split())
        assert _stored_clock(store) == peak.measured_ghz
    # the per-device result, and the store profile is what this device now selects
    devs = load_device_results(store)
    assert len(devs) == 1 and devs[0].kind == "cpu" and devs[0].name == name
    # what surrounded the measurement, read by the bench's sensors: no power state on a CPU, and why
    cond = devs[0].conditions
    assert cond is not None and cond.cpu is not None and cond.gpu is None and cond.window_s > 0
    assert devs[0].power_state is None and devs[0].power_blank == "a CPU: no GPU clocks or power to read"
    assert cond.cpu.energy_j is not None or cond.cpu.blank["energy_j"]  # RAPL's joules, or why there are none
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(store))
    hit = select_profile(name, load_profiles())
    assert hit is not None and hit.source_path == files[0]


@pytest.mark.slow
def test_all_devices_with_a_nominal_bandwidth(tmp_path: Path) -> None:
    """--all-devices on a host with no GPU calibrates the CPU in a child process; a given nominal gives fractions."""
    store = tmp_path / "store"
    proc = _calibrate(store, "--all-devices", "--dram-bandwidth", "2TB/s")
    assert proc.returncode == 0, proc.stderr
    assert "in its own process" in proc.stderr
    (profile_file,) = store.glob("*.yaml")
    profile = load_profile(profile_file)
    mem = profile.memory
    assert mem is not None and mem.theoretical == 2e12 and mem.theoretical_source.source == "user"
    assert set(mem.mixes) == set(MIXES)
    assert mem.calibration == max(mem.mixes.values())  # the envelope is the best mix
    best = max(mem.measured, key=mem.measured.__getitem__)
    assert mem.mixes[best] == mem.calibration
    assert mem.effective == pytest.approx(max(mem.measured.values()))
    (dev_file,) = (store / "devices").glob("*.yaml")
    assert read_device_result(dev_file).kind == "cpu"
    assert "per-device results" in proc.stdout


def test_calibrate_rejects_a_bad_bandwidth_before_measuring(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tileops.cli import main

    assert main(["calibrate", "--device", "cpu", "--profile-dir", str(tmp_path), "--dram-bandwidth", "lots"]) == 2
    assert "76.8GB/s" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_both_nominal_flags_at_once_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """--dram-bandwidth and --dram-bandwidth-file state the same figure: given both, neither silently wins;
    either one alone wins over TILEOPS_DRAM_BANDWIDTH (docs/profiles.md, the order of precedence)."""
    from tileops.cli import main
    from tileops.pipeline.calibrate import CalibrateOptions, theory_options

    f = tmp_path / "bw.txt"
    f.write_text("dram_bandwidth: 76.8GB/s\n")
    monkeypatch.setenv("TILEOPS_DRAM_BANDWIDTH", "204.8GB/s")
    opts = theory_options(CalibrateOptions(dram_bandwidth_file=f))
    assert opts.memory_bandwidth == pytest.approx(76.8e9) and opts.memory_bandwidth_ref == f"file {f}"
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--device", "cpu", "--profile-dir", str(tmp_path / "store"),
              "--dram-bandwidth", "51.2GB/s", "--dram-bandwidth-file", str(f)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--dram-bandwidth-file: not allowed with argument --dram-bandwidth" in err
    assert not (tmp_path / "store").exists()


def test_calibrate_cpu_function_reports_progress_and_writes_nothing(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from tileops.calibrate import calibrate_cpu

    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(tmp_path))
    seen: list[tuple[str, int, int]] = []
    profile = calibrate_cpu(quick=True, progress=lambda what, i, n: seen.append((what, i, n)))
    assert profile.kind == "cpu" and profile.compute["cpu.fp32"].calibration
    steps = [i for _, i, _ in seen]
    assert steps == sorted(steps) and steps[-1] == seen[-1][2]  # monotone, ends complete
    assert any("triad" in w for w, _, _ in seen)
    assert not list(tmp_path.iterdir())


@pytest.mark.gpu
@pytest.mark.skipif(not describe_device("auto").kind == "cuda", reason="needs a CUDA device")
def test_gpu_calibration_quick() -> None:  # pragma: no cover - runs in scripts/device-check
    from tileops.calibrate import calibrate_device

    outcome = calibrate_device(describe_device("cuda:0"), quick=True)
    mem = outcome.profile.memory
    assert mem is not None and set(mem.measured) == set(MIXES) and all(v > 0 for v in mem.measured.values())
    assert outcome.run.uuid and outcome.run.latency_floor_s
    assert {"tensor_core.bf16", "tensor_core.fp16", "tensor_core.tf32"} <= set(outcome.run.roofs)
