"""Ceilings checked against the device's own facts, and calibrations against what others measured (issue 28).

The facts are the ones recorded per SKU (tileops/ceilings/facts.py, each with
where it was published) or read from a fake NVML: no GPU here. The planted
mismatches are the two a fleet meets: a profile carrying the sparse figure, and
facts (or a profile) from a wrong memory clock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tileops.ceilings.arch import ARCHS
from tileops.ceilings.check import TOLERANCE, check_profile, check_report, facts_for
from tileops.ceilings.derive import derive_memory, derive_roof
from tileops.ceilings.facts import RECORDED, DeviceFacts, read_facts
from tileops.ceilings.peers import PEER_BAND, PUBLISHED, compare_profile, peer_warnings
from tileops.ceilings.runtime import check_device
from tileops.cli import main
from tileops.device import DeviceInfo, NvmlSession
from tileops.profiles import Provenance, find_profile, load_profiles

#: Shipped profiles whose every ceiling the recorded facts cover.
FULLY_RECORDED = ("A100-SXM4-40GB", "A100-SXM4-80GB", "A100-PCIe-80GB", "H100-SXM", "H100-PCIe", "H200", "L40S",
                  "L4")


@pytest.fixture(autouse=True)
def _empty_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    store = tmp_path / "store"
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(store))
    return store


def _shipped() -> dict:
    return {p.name: p for p in load_profiles(store=False)}


# --------------------------------------------------------------------------- the shipped profiles


def test_every_shipped_profile_agrees_with_its_recorded_facts() -> None:
    checks = {p.profile: p for p in check_report(list(_shipped().values())).profiles}
    assert set(checks) == set(_shipped())
    assert [c.describe(n) for n, p in checks.items() for c in p.defects] == []
    for name in FULLY_RECORDED:
        states = {c.ceiling: c.state for c in checks[name].ceilings}
        assert set(states.values()) == {"agrees"}, (name, states)
        assert "memory" in states and len(states) == 1 + len(_shipped()[name].compute)
    # the RTX 4090's memory is checked; its compute is not: NVML's maximum SM clock of it is not recorded
    rtx = {c.ceiling: c for c in checks["RTX-4090"].ceilings}
    assert rtx["memory"].state == "agrees"
    assert {c.state for k, c in rtx.items() if k != "memory"} == {"not-checked"}
    assert "max SM clock unknown" in rtx["tensor_core.bf16"].derived.why_not
    for name in ("B200", "H20"):  # no facts recorded: said so, never checked against a guess
        assert checks[name].state == "not-checked" and "no device facts recorded" in checks[name].not_checked


def test_derived_ceilings_are_the_published_products() -> None:
    """Each derivation reproduces a figure someone else computed from the same facts."""
    h200, h100, a100 = RECORDED["NVIDIA H200"], RECORDED["NVIDIA H100 80GB HBM3"], RECORDED["NVIDIA A100-SXM4-80GB"]
    assert derive_memory(RECORDED["NVIDIA GeForce RTX 4090"]).value == pytest.approx(1008.1e9, rel=1e-4)  # nvbench
    assert derive_memory(a100).value == pytest.approx(2039e9, rel=1e-3)  # A100 80GB datasheet: 2,039 GB/s
    assert derive_memory(h200).value == pytest.approx(4.917e12, rel=1e-3)  # 2.4 % above the datasheet's 4.8 TB/s
    # the H100 whitepaper's dense figures: 989.4 (bf16) at the 1830 MHz tensor clock, 66.9 (fp32) at 1980 MHz
    assert derive_roof(h100, "tensor_core.bf16").value == pytest.approx(989.4e12, rel=1e-4)
    assert derive_roof(h100, "cuda_core.fp32").value == pytest.approx(66.9e12, rel=1e-3)
    assert "tensor-core clock" in derive_roof(h100, "tensor_core.bf16").how
    assert derive_roof(a100, "tensor_core.tf32").value == pytest.approx(156e12, rel=1e-3)
    # a GeForce Ada runs FP32-accumulate tensor math at half the professional part's rate per SM
    l40s = RECORDED["NVIDIA L40S"]
    geforce = DeviceFacts("NVIDIA GeForce RTX 4090", (8, 9), 128, 2520.0, 10501.0, 384)
    assert derive_roof(geforce, "tensor_core.bf16").value == pytest.approx(165.2e12, rel=1e-3)  # Ada whitepaper
    assert derive_roof(l40s, "tensor_core.bf16").value == pytest.approx(366.4e12, rel=1e-3)  # 142 x 2520 x 1024
    assert derive_roof(geforce, "tensor_core.int8").value == pytest.approx(660.6e12, rel=1e-3)  # int8: full rate


def test_every_recorded_fact_and_rate_says_where_it_was_published() -> None:
    for facts in RECORDED.values():
        for fact in ("sm_count", "max_sm_mhz", "max_mem_mhz", "bus_width_bits", "tensor_max_mhz"):
            if getattr(facts, fact) is not None:
                assert len(facts.refs.get(fact, "")) > 20, (facts.name, fact)
            elif fact != "tensor_max_mhz":
                assert facts.missing.get(fact), (facts.name, fact)
    for row in ARCHS.values():
        assert all(len(r.source) > 20 for r in [*row.rates.values(), *row.geforce.values()])


def test_the_per_sm_rates_agree_with_torchs_own_table() -> None:
    """torch.cuda._device_limits.GPULimits (FMA per clock per SM for sm_80 and sm_90): ours counts 2 FLOP each."""
    limits = pytest.importorskip("torch.cuda._device_limits")
    import torch

    pairs = {"cuda_core.fp32": (torch.float32, False), "cuda_core.fp64": (torch.float64, False),
             "tensor_core.tf32": (torch.float32, True), "tensor_core.bf16": (torch.bfloat16, True),
             "tensor_core.fp16": (torch.float16, True), "tensor_core.int8": (torch.int8, True)}
    compared = 0
    for cc in ((8, 0), (9, 0)):
        g = limits.GPULimits.__new__(limits.GPULimits)
        g.compute_capability = cc[0] * 10 + cc[1]
        for roof, (dtype, tensor) in pairs.items():
            fma = (g.get_fma_per_cycle_per_sm_tensor_cores(dtype) if tensor
                   else g.get_fma_per_cycle_per_sm_cuda_cores(dtype))
            assert ARCHS[cc].rates[roof].per_clock_per_sm == 2 * fma, (cc, roof)
            compared += 1
    assert compared == 12


# --------------------------------------------------------------------------- planted mismatches


def test_a_sparse_figure_is_a_defect_with_both_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = find_profile("H100-SXM")
    sparse = profile.compute["tensor_core.bf16"].model_copy(update={"theoretical": 1979e12})  # the 2:4 sparse figure
    planted = profile.model_copy(update={"compute": {**profile.compute, "tensor_core.bf16": sparse}})
    (defect,) = check_profile(planted, RECORDED["NVIDIA H100 80GB HBM3"]).defects
    assert defect.ceiling == "tensor_core.bf16" and defect.ratio == pytest.approx(2.0, rel=1e-3)
    text = defect.describe("H100-SXM")
    assert "1.98 PFLOP/s" in text and "989 TFLOP/s" in text and "sparse" in text and "+100.0 %" in text

    # the same through the command, on the planted file: exit 1, DEFECT, both numbers
    data = yaml.safe_load(Path(profile.source_path).read_text())
    data["compute"]["tensor_core.bf16"]["theoretical"] = 1979e12
    path = tmp_path / "h100-sparse.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["profile", "check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "DEFECT" in out and "1.979 PFLOP/s" in out and "989.4 TFLOP/s" in out and "sparse" in out
    assert main(["profile", "check", str(path), "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["defects"] == 1
    (bf16,) = [c for c in doc["profiles"][0]["ceilings"] if c["state"] == "defect"]
    assert (bf16["ceiling"], bf16["stated_per_s"]) == ("tensor_core.bf16", 1979e12)


def test_a_wrong_memory_clock_is_a_defect_either_way() -> None:
    h200 = find_profile("H200")
    # facts from a wrong memory clock (the H100's HBM3 2619 MHz on an H200): the profile now reads above them
    wrong = dataclasses.replace(RECORDED["NVIDIA H200"], max_mem_mhz=2619.0)
    (defect,) = check_profile(h200, wrong).defects
    assert defect.ceiling == "memory" and defect.ratio == pytest.approx(4.8e12 / (768 * 2619e6 * 2))
    assert "above what the device can do" in defect.describe("H200") and "4.8 TB/s" in defect.describe("H200")
    # a profile whose memory figure came from that clock (an H100's 3.35 TB/s): below what the H200's facts give
    mem = h200.memory.model_copy(update={"theoretical": 3.35e12})
    (defect,) = check_profile(h200.model_copy(update={"memory": mem}), RECORDED["NVIDIA H200"]).defects
    assert defect.ratio < 1 - TOLERANCE and "below what the device can reach" in defect.describe("H200")


def test_within_three_percent_is_not_a_defect() -> None:
    h200 = find_profile("H200")
    facts = RECORDED["NVIDIA H200"]
    for scale, state in ((1.0, "agrees"), (4.917e12 * 0.971 / 4.8e12, "agrees"), (4.917e12 * 0.965 / 4.8e12, "defect")):
        mem = h200.memory.model_copy(update={"theoretical": 4.8e12 * scale})
        (memory,) = [c for c in check_profile(h200.model_copy(update={"memory": mem}), facts).ceilings
                     if c.ceiling == "memory"]
        assert memory.state == state, scale


# --------------------------------------------------------------------------- the device's own facts (fake NVML)


class FakeNVML:
    """The part of pynvml the facts reader calls, answering as a named device would."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self, uuid: str, sm_mhz: int, mem_mhz: int, bus_bits: int | None) -> None:
        self.uuid, self.clocks, self.bus = uuid, {1: sm_mhz, 2: mem_mhz}, bus_bits

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid != self.uuid:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return "handle"

    def nvmlDeviceGetMaxClockInfo(self, handle: str, which: int) -> int:
        return self.clocks[which]

    def nvmlDeviceGetMemoryBusWidth(self, handle: str) -> int:
        if self.bus is None:
            raise AttributeError("nvmlDeviceGetMemoryBusWidth")  # an nvidia-ml-py without the call
        return self.bus


def _h200(**kw: Any) -> DeviceInfo:
    return DeviceInfo(kind="cuda", name="NVIDIA H200", index=0, uuid="GPU-h200", sm_count=132, capability=(9, 0),
                      hostname="gpu-node-1", **kw)


def test_a_device_whose_facts_agree_with_its_profile() -> None:
    reading = read_facts(_h200(), nvml=NvmlSession(FakeNVML("GPU-h200", 1980, 3201, 6144)))
    facts = reading.facts
    assert facts is not None and facts.origin == "NVML on cuda:0"
    assert (facts.max_sm_mhz, facts.max_mem_mhz, facts.bus_width_bits) == (1980, 3201, 6144)
    assert facts.tensor_max_mhz == 1830  # published for the H200 at this maximum SM clock
    check = check_device(_h200(), find_profile("H200"), reading)
    assert check.state == "agrees" and not check.warnings() and check.note is None
    assert check.as_dict()["facts"]["refs"]["max_mem_mhz"] == "NVML on cuda:0: nvmlDeviceGetMaxClockInfo"


def test_a_device_whose_facts_disagree_gets_a_warning_and_a_health_note() -> None:
    # an H200 board whose memory runs at the H100's clock: its profile's 4.8 TB/s is 22 % above what it can move
    check = check_device(_h200(), find_profile("H200"), read_facts(_h200(), nvml=NvmlSession(FakeNVML("GPU-h200", 1980, 2619,
                                                                                          6144))))
    assert check.state == "mismatch" and [c.ceiling for c in check.mismatches] == ["memory"]
    (warning,) = check.warnings()
    assert "4.8 TB/s" in warning and "4.02 TB/s" in warning and "NVIDIA H200" in warning
    assert check.note is not None and "profile H200" in check.note and "memory" in check.note
    assert check.as_dict()["state"] == "mismatch" and check.as_dict()["note"] == check.note


def test_a_device_clocked_otherwise_derives_no_tensor_roof_from_a_guess() -> None:
    """A Hopper at another maximum SM clock: its tensor-core clock is published for none, so tensor roofs stay
    unchecked with that reason while the CUDA-core roofs are held against its own clock."""
    reading = read_facts(_h200(), nvml=NvmlSession(FakeNVML("GPU-h200", 1755, 3201, 6144)))
    check = check_profile(find_profile("H200"), reading.facts)
    states = {c.ceiling: c for c in check.ceilings}
    assert states["tensor_core.bf16"].state == "not-checked"
    assert "tensor-core clock unknown" in states["tensor_core.bf16"].derived.why_not
    assert states["cuda_core.fp32"].state == "defect"  # 67 TFLOP/s stated, 59.3 from 132 x 1755 x 256


def test_bus_width_from_the_drivers_properties_when_nvml_lacks_the_call() -> None:
    class Props:
        memory_bus_width = 6144

    reading = read_facts(_h200(), nvml=NvmlSession(FakeNVML("GPU-h200", 1980, 3201, None)), props=Props())
    assert reading.facts is not None and reading.facts.bus_width_bits == 6144
    assert "memory_bus_width" in reading.facts.refs["bus_width_bits"]
    no_props = read_facts(_h200(), nvml=NvmlSession(FakeNVML("GPU-h200", 1980, 3201, None)), props=object())
    assert no_props.facts is not None and no_props.facts.bus_width_bits is None
    assert "nvmlDeviceGetMemoryBusWidth" in no_props.facts.missing["bus_width_bits"]
    assert check_device(_h200(), find_profile("H200"), no_props).state == "agrees"  # memory unchecked, compute agrees


def test_nvml_that_does_not_know_the_device_leaves_clocks_unknown_with_the_reason() -> None:
    reading = read_facts(_h200(), nvml=NvmlSession(FakeNVML("GPU-other", 1980, 3201, 6144)), props=object())
    assert reading.facts is not None and reading.facts.max_sm_mhz is None
    assert "NVML does not know cuda:0" in reading.facts.missing["max_sm_mhz"]
    check = check_device(_h200(), find_profile("H200"), reading)
    assert check.state == "not-checked" and "max SM clock unknown" in check.reason


def test_on_a_cpu_the_check_degrades_to_nothing() -> None:
    class Untouchable:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"NVML asked for {name} on a CPU")

    cpu = DeviceInfo(kind="cpu", name="AMD EPYC 7B13", cpu_model="AMD EPYC 7B13", hostname="h")
    reading = read_facts(cpu, nvml=NvmlSession(Untouchable()))
    assert reading.facts is None and "CPU" in reading.why_not
    check = check_device(cpu, find_profile("H200"), reading)
    assert check.state == "not-checked" and not check.warnings() and check.note is None
    assert check_device(cpu, None).reason == "no profile prices this device"


def test_a_profile_is_held_against_this_devices_facts_before_the_recorded_ones() -> None:
    reading = read_facts(_h200(), nvml=NvmlSession(FakeNVML("GPU-h200", 1980, 2619, 6144)))
    facts, _ = facts_for(find_profile("H200"), reading)
    assert facts is reading.facts
    facts, _ = facts_for(find_profile("H100-SXM"), reading)  # another SKU: its recorded facts
    assert facts is RECORDED["NVIDIA H100 80GB HBM3"]


# --------------------------------------------------------------------------- calibrations against their peers


def _calibrated_h200(triad: float, bf16: float) -> Any:
    h200 = find_profile("H200")
    cal = Provenance(source="calibration", run_id="cal-t", date=dt.date(2026, 11, 1), tool_version="t")
    mixes = {"copy": triad * 0.97, "triad": triad}
    mem = h200.memory.model_copy(update={"mixes": mixes, "calibration": max(mixes.values()), "calibration_source": cal,
                                         "measured": {m: f * 4.8e12 for m, f in mixes.items()}})
    roof = h200.compute["tensor_core.bf16"].model_copy(update={"calibration": bf16, "calibration_source": cal})
    return h200.model_copy(update={"memory": mem, "compute": {**h200.compute, "tensor_core.bf16": roof}})


def test_a_calibration_near_what_others_measured_is_not_flagged() -> None:
    comparisons = compare_profile(_calibrated_h200(triad=0.80, bf16=0.78))
    assert {(c.peer.ceiling, c.peer.mix) for c in comparisons} == {("memory", "triad"), ("tensor_core.bf16", None)}
    assert not any(c.flagged for c in comparisons)
    triad = next(c for c in comparisons if c.peer.mix == "triad")
    assert triad.ratio == pytest.approx(0.80 / 0.848)
    assert "tile-ai/TileOPs" in triad.describe("H200") and "84.8%" in triad.describe("H200")


def test_a_calibration_far_from_what_others_measured_is_flagged(capsys: pytest.CaptureFixture[str],
                                                                 _empty_store: Path) -> None:
    from tileops.profiles import write_profile

    far = _calibrated_h200(triad=0.60, bf16=0.99)  # a busy device's triad; a bf16 "GEMM" that fit in cache
    flagged = {c.peer.ceiling: c for c in compare_profile(far) if c.flagged}
    assert set(flagged) == {"memory", "tensor_core.bf16"}
    assert "below what others measured" in flagged["memory"].describe("H200")
    assert "above what others measured" in flagged["tensor_core.bf16"].describe("H200")
    assert flagged["memory"].ratio < 1 - PEER_BAND

    # the calibration warning a first calibration prints, before it prices anything
    (warning,) = peer_warnings("NVIDIA H200", {"triad": 0.60 * 4.8e12}, {})
    assert "2.88 TB/s" in warning and "4.07 TB/s" in warning and "tile-ai/TileOPs" in warning
    assert peer_warnings("NVIDIA H100 80GB HBM3", {"triad": 1.0}, {}) == []  # nothing published for it

    # `tileops profile check` on the store's calibrated profile: the far calibration fails the check
    write_profile(far)
    assert main(["profile", "check", "H200"]) == 1
    out = capsys.readouterr().out
    assert "more than 15% below what others measured" in out and "0 with defects" in out


def test_the_published_figures_are_measurements_with_their_source() -> None:
    """TileOPs' H200 file also says 0.75 for tf32 and fp8, marked placeholders: only measured ones are kept."""
    assert {(p.ceiling, p.mix, p.fraction) for p in PUBLISHED} == {
        ("memory", "triad", 0.848), ("tensor_core.bf16", None, 0.75), ("tensor_core.fp16", None, 0.75)}
    assert all("src/tileops/perf/profiles/h200.yaml" in p.source for p in PUBLISHED)


def test_calibrate_warns_of_a_far_calibration_and_keeps_the_warning_in_the_result() -> None:
    from tileops.ledger import DeviceCalibration, MixMeasurement, RoofMeasurement
    from tileops.calibrate.run import physics_warnings
    from tileops.records import DeviceIdentity, Machine

    now = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    machine = Machine(device=DeviceIdentity(kind="cuda", name="NVIDIA H200", uuid="GPU-h200", hostname="h"),
                      torch_version="2", tileops_version="0.1.0")
    # formula-guard: allow a synthetic calibration run: bytes of one repetition of a 1 KiB triad, no op priced
    run = DeviceCalibration(run_id="cal", started_at=now, finished_at=now, quick=True, machine=machine,
                            mixes={"triad": MixMeasurement(bytes_per_s=2.5e12, bytes=3072, array_bytes=1024,
                                                           best_s=1e-3, reps=3, kernel="torch add")},
                            roofs={"tensor_core.bf16": RoofMeasurement(flops_per_s=760e12, flops=1e12, best_s=1e-3,
                                                                       reps=3, method="bf16 GEMM")})
    warnings = physics_warnings(_h200(), find_profile("H200"), run)  # no NVML here: the facts are not checked
    assert len(warnings) == 1 and "triad bandwidth" in warnings[0] and "2.5 TB/s" in warnings[0]


# --------------------------------------------------------------------------- the command


def test_profile_check_all_runs_on_the_shipped_profiles(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "check", "--all"]) == 0
    out = capsys.readouterr().out
    assert "11 profile(s): 9 agree within 3%, 0 with defects (0 ceiling(s)), 2 not checked" in out
    assert "B200: not checked" in out and "H20: not checked" in out
    assert "NVIDIA H200 (recorded): compute capability 9.0, 132 SMs" in out
    assert main(["profile", "--format", "json", "check", "--all"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and len(doc["profiles"]) == 11 and doc["tolerance"] == 0.03
    assert main(["profile", "check", "H200", "--all"]) == 2
    assert "NAME or --all, not both" in capsys.readouterr().err
