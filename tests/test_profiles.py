"""Profile schema, loading, the store, matching and `tileops profile` (issue 5)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml

from tileops.cli import main
from tileops.profiles import (MemoryRoof, Profile, ProfileError, Provenance, Roof, dump_profile, find_profile,
                              load_profile, load_profiles, select_profile, shipped_dir, write_profile)

SHIPPED = {
    "H100-SXM": "NVIDIA H100 80GB HBM3", "H100-PCIe": "NVIDIA H100 PCIe", "H200": "NVIDIA H200", "H20": "NVIDIA H20",
    "A100-SXM4-40GB": "NVIDIA A100-SXM4-40GB", "A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB",
    "A100-PCIe-80GB": "NVIDIA A100 80GB PCIe", "L40S": "NVIDIA L40S", "L4": "NVIDIA L4", "B200": "NVIDIA B200",
    "RTX-4090": "NVIDIA GeForce RTX 4090",
}


@pytest.fixture(autouse=True)
def _empty_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    store = tmp_path / "store"
    monkeypatch.setenv("TILEOPS_PROFILE_DIR", str(store))
    return store


def _cal(run_id: str = "cal-x") -> Provenance:
    return Provenance(source="calibration", run_id=run_id, date=dt.date(2026, 11, 1), tool_version="tileops 0.1.0")


def _full_profile() -> Profile:
    ds = Provenance(source="datasheet", ref="a datasheet")
    mixes = {"copy": 0.861234567891, "triad": 0.9012345678901, "read": 0.88, "write": 0.7}
    return Profile(
        name="test-gpu", kind="gpu", match=["NVIDIA Test GPU", "test gpu alias"],
        memory=MemoryRoof(theoretical=3.35e12, theoretical_source=ds, calibration=max(mixes.values()),
                          calibration_source=_cal(), mixes=mixes,
                          measured={k: v * 3.35e12 for k, v in mixes.items()}),
        compute={"cuda_core.fp32": Roof(theoretical=67e12, theoretical_source=ds),
                 "tensor_core.bf16": Roof(theoretical=989.5e12, theoretical_source=ds, calibration=0.7981234,
                                          calibration_source=_cal())},
        roof_aliases={"tensor_core.tf32": "tensor_core.bf16"},
        l2_bytes=50 * 2**20, latency_floor_s=2.3e-6, latency_floor_source=_cal(), notes="n")


# --------------------------------------------------------------------------- shipped profiles


def test_every_shipped_profile_loads_with_datasheet_values_and_no_calibration() -> None:
    profiles = {p.name: p for p in load_profiles(store=False)}
    assert set(profiles) == set(SHIPPED)
    for name, device in SHIPPED.items():
        p = profiles[name]
        assert p.kind == "gpu" and p.matches(device)
        assert p.memory is not None and p.memory.theoretical and p.memory.theoretical > 1e11
        assert p.memory.calibration is None and not p.memory.mixes and p.memory.effective is None
        assert p.memory.theoretical_source.source == "datasheet" and p.memory.theoretical_source.ref
        assert {"cuda_core.fp32", "tensor_core.bf16", "tensor_core.fp16", "tensor_core.tf32"} <= set(p.compute)
        for key, roof in p.compute.items():
            assert roof.calibration is None and roof.effective is None, (name, key)
            assert roof.theoretical_source.source == "datasheet" and roof.theoretical_source.ref
        # dense figures: bf16 tensor peak is 2x tf32 (sparsity would double both, so this holds either way) but
        # fp16 and bf16 must agree, and the file names its source in a comment
        assert p.compute["tensor_core.bf16"].theoretical == p.compute["tensor_core.fp16"].theoretical
        text = p.source_path.read_text() if p.source_path else ""
        assert "# Source:" in text and "dense" in text


def test_shipped_h100_sxm_matches_the_primer_dense_bf16() -> None:
    h100 = find_profile("H100-SXM")
    assert h100.compute["tensor_core.bf16"].theoretical == pytest.approx(989.5e12)  # primer: 989 dense BF16
    assert h100.memory is not None and h100.memory.theoretical == pytest.approx(3.35e12)


# --------------------------------------------------------------------------- round trip


def test_yaml_round_trip_is_exact(tmp_path: Path) -> None:
    p = _full_profile()
    path = write_profile(p, tmp_path)
    assert path == tmp_path / "test-gpu.yaml"
    back = load_profile(path)
    assert back.model_dump() == p.model_dump()
    assert back.source_path == path
    assert back.memory is not None and back.memory.effective == pytest.approx(3.35e12 * 0.9012345678901)
    assert back.roof("tensor_core.tf32") is back.compute["tensor_core.bf16"]
    text = path.read_text()
    assert text.startswith("# Device profile test-gpu") and "effective:" not in text  # inputs only, never effective
    assert "3.35e+12" in text  # large figures in scientific notation, still YAML floats
    assert isinstance(yaml.safe_load(text)["memory"]["theoretical"], float)


def test_round_trip_with_unknown_nominal_keeps_measured_only(tmp_path: Path) -> None:
    p = Profile(name="cpu-x", kind="cpu", match=["X CPU"], memory=MemoryRoof(
        theoretical=None, theoretical_source=Provenance(source="unknown", note="no DMI"),
        measured={"copy": 9e9, "triad": 1.1e10}),
        compute={"cpu.fp32": Roof(theoretical=1.5e11, theoretical_source=Provenance(source="estimate"))},
        roof_aliases={"cuda_core.fp32": "cpu.fp32"})
    back = load_profile(write_profile(p, tmp_path))
    assert back.memory is not None and back.memory.theoretical is None and not back.memory.nominal_known
    assert back.memory.effective == 1.1e10
    assert back.roof("cuda_core.fp32") is back.compute["cpu.fp32"]
    assert back.roof("tensor_core.fp8") is None


def test_write_profile_refuses_nothing_valid_and_is_atomic(tmp_path: Path) -> None:
    p = _full_profile()
    write_profile(p, tmp_path)
    write_profile(p.model_copy(update={"notes": "second"}), tmp_path)
    assert [x.name for x in tmp_path.iterdir()] == ["test-gpu.yaml"]  # no temp file left behind
    assert load_profile(tmp_path / "test-gpu.yaml").notes == "second"


def test_writing_over_a_shipped_file_can_keep_its_source_comments(tmp_path: Path) -> None:
    shipped = shipped_dir() / "h200.yaml"
    copy = tmp_path / "h200.yaml"
    copy.write_text(shipped.read_text())
    h200 = load_profile(copy)
    write_profile(h200.model_copy(update={"latency_floor_s": 2e-6, "latency_floor_source": _cal()}), tmp_path,
                  keep_header=True)
    text = copy.read_text()
    header = [line for line in shipped.read_text().splitlines() if line.startswith("#")]
    assert text.splitlines()[:len(header)] == header  # the datasheet source notes survive
    assert load_profile(copy).latency_floor_s == 2e-6


# --------------------------------------------------------------------------- malformed profiles

GOOD = """\
name: bad-gpu
kind: gpu
match: ["NVIDIA Bad"]
memory:
  theoretical: 1.0e+12
  theoretical_source: {source: datasheet}
compute:
  cuda_core.fp32:
    theoretical: 2.0e+13
    theoretical_source: {source: datasheet}
"""

MALFORMED = [
    # (what, replace this, with this, field named, words of the fix)
    ("yaml syntax", "kind: gpu", "kind: [gpu", "line 3", "fix the syntax"),
    ("missing name", "name: bad-gpu\n", "", "name", "add name"),
    ("unknown kind", "kind: gpu", "kind: tpu", "kind", "kind: gpu or kind: cpu"),
    ("empty match", 'match: ["NVIDIA Bad"]', "match: []", "match", "device names the driver reports"),
    ("match not a list", 'match: ["NVIDIA Bad"]', "match: {a: 1}", "match", "device names the driver reports"),
    ("negative theoretical", "theoretical: 1.0e+12", "theoretical: -1.0e+12", "memory.theoretical",
     "plain number"),
    ("units in a number", "theoretical: 2.0e+13", "theoretical: 20 TFLOP/s", "compute.cuda_core.fp32.theoretical",
     "plain number"),
    ("calibration above 1.5", "theoretical: 2.0e+13\n",
     "theoretical: 2.0e+13\n    calibration: 2.0\n    calibration_source: {source: calibration}\n",
     "compute.cuda_core.fp32.calibration", "measured / theoretical"),
    ("calibration without source", "theoretical: 2.0e+13\n", "theoretical: 2.0e+13\n    calibration: 0.8\n",
     "compute.cuda_core.fp32", "calibration_source"),
    ("unknown roof key", "cuda_core.fp32:", "tensor_core.fp4:", "compute", "cuda_core.fp32"),
    ("unknown mix", "theoretical: 1.0e+12\n", "theoretical: 1.0e+12\n  mixes: {scale: 0.8}\n", "memory.mixes",
     "copy, triad, read, write"),
    ("calibration not the envelope", "theoretical: 1.0e+12\n",
     "theoretical: 1.0e+12\n  mixes: {copy: 0.8, triad: 0.9}\n  calibration: 0.8\n"
     "  calibration_source: {source: calibration}\n", "memory", "best mix"),
    ("mixes with unknown nominal", "theoretical: 1.0e+12\n  theoretical_source: {source: datasheet}",
     "theoretical_source: {source: unknown}\n  mixes: {copy: 0.8}", "memory", "keep only measured"),
    ("effective stored", "kind: gpu", "kind: gpu\neffective: 3", "effective", "remove it"),
    ("bad provenance source", "theoretical_source: {source: datasheet}\ncompute",
     "theoretical_source: {source: guess}\ncompute", "memory.theoretical_source.source", "datasheet, calibration"),
    ("alias to a missing roof", "compute:", "roof_aliases: {tensor_core.bf16: cpu.fp32}\ncompute:", "(top level)",
     "add compute.cpu.fp32"),
    ("bad l2", "compute:", "l2_bytes: 50MB\ncompute:", "l2_bytes", "integer"),
]


@pytest.mark.parametrize("what,old,new,field,fix", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_profile_names_file_field_and_fix(tmp_path: Path, what: str, old: str, new: str, field: str,
                                                    fix: str) -> None:
    assert old in GOOD, what
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace(old, new, 1))
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    msg = str(info.value)
    assert str(path) in msg and info.value.file == str(path)
    assert info.value.field == field
    # a field is named in the message; a line as the file:line prefix every YAML reader writes
    assert field in msg or field == "(top level)" or f"{path}:{field.removeprefix('line ')}:" in msg
    assert fix in msg


def test_the_good_base_of_the_malformed_cases_loads(tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text(GOOD)
    assert load_profile(path).name == "bad-gpu"


@pytest.mark.parametrize("text,why", [("", "an empty file"), ("- a\n- b\n", "a list")])
def test_a_profile_must_be_a_mapping(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError, match="YAML mapping") as info:
        load_profile(path)
    assert why in str(info.value) and str(path) in str(info.value)


def test_a_yaml_syntax_error_names_the_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: x\nroofs:\n  a: [1, 2\n  b: 3\n")  # the flow list is never closed
    with pytest.raises(ProfileError, match="YAML syntax error") as info:
        load_profile(path)
    assert str(info.value).startswith(f"{path}:4:4: ") and "fix the syntax" in str(info.value)
    assert info.value.field == "line 4"


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read"):
        load_profile(tmp_path / "nope.yaml")


def test_two_profiles_with_one_name_in_a_folder_is_an_error(_empty_store: Path) -> None:
    _empty_store.mkdir()
    (_empty_store / "a.yaml").write_text(GOOD)
    (_empty_store / "b.yaml").write_text(GOOD)
    with pytest.raises(ProfileError, match="also used by") as info:
        load_profiles()
    assert "a.yaml" in str(info.value) and "b.yaml" in str(info.value)


def test_a_malformed_store_profile_fails_loading_loudly(_empty_store: Path) -> None:
    _empty_store.mkdir()
    (_empty_store / "broken.yaml").write_text(GOOD.replace("kind: gpu", "kind: tpu"))
    with pytest.raises(ProfileError, match="broken.yaml"):
        load_profiles()


# --------------------------------------------------------------------------- matching and the store


def test_matching_exact_name_and_aliases() -> None:
    profiles = load_profiles()
    assert select_profile("NVIDIA H100 80GB HBM3", profiles).name == "H100-SXM"
    assert select_profile("  nvidia h100 80gb hbm3 ", profiles).name == "H100-SXM"  # case and outer spaces
    assert select_profile("H100 SXM5 80GB", profiles).name == "H100-SXM"  # an alias
    assert select_profile("NVIDIA H200", profiles).name == "H200"
    assert select_profile("NVIDIA H200 NVL", profiles) is None  # a different product: never a near match
    assert select_profile("NVIDIA H100", profiles) is None  # a prefix is not a match
    assert select_profile("Some CPU", profiles) is None


def test_store_profile_overrides_shipped_by_name(_empty_store: Path) -> None:
    h200 = find_profile("H200")
    assert h200.source_path is not None and h200.source_path.parent == shipped_dir()
    mem = h200.memory
    assert mem is not None and mem.theoretical is not None
    calibrated = h200.model_copy(update={"memory": mem.model_copy(update={
        "calibration": 0.9, "calibration_source": _cal(), "mixes": {"copy": 0.9},
        "measured": {"copy": 0.9 * mem.theoretical}})})
    write_profile(calibrated)
    merged = {p.name: p for p in load_profiles()}
    assert len(merged) == len(SHIPPED)
    assert merged["H200"].source_path == _empty_store / "h200.yaml"
    assert select_profile("NVIDIA H200").memory.calibration == 0.9  # type: ignore[union-attr]


def test_store_profile_with_its_own_name_wins_a_match_over_shipped(_empty_store: Path) -> None:
    mine = find_profile("H200").model_copy(update={"name": "my-h200"})
    write_profile(mine)
    assert select_profile("NVIDIA H200").name == "my-h200"


def test_two_shipped_level_profiles_claiming_one_device_is_an_error() -> None:
    a = _full_profile()
    b = a.model_copy(update={"name": "other"})
    with pytest.raises(ProfileError, match="matches several profiles"):
        select_profile("NVIDIA Test GPU", [a, b])


def test_find_profile_by_name_device_or_file(tmp_path: Path) -> None:
    assert find_profile("h200").name == "H200"
    assert find_profile("NVIDIA L4").name == "L4"
    path = write_profile(_full_profile(), tmp_path)
    assert find_profile(str(path)).name == "test-gpu"
    with pytest.raises(ProfileError, match="known profiles: .*H200"):
        find_profile("no-such-device")


def test_dump_never_writes_effective() -> None:
    def keys(x: object) -> set[str]:
        if isinstance(x, dict):
            return set(x) | {k for v in x.values() for k in keys(v)}
        return set()

    assert "effective" not in keys(yaml.safe_load(dump_profile(_full_profile())))


# --------------------------------------------------------------------------- tileops profile


def test_profile_list_show_and_match(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "list"]) == 0
    out = capsys.readouterr().out
    for name in SHIPPED:
        assert name in out
    assert main(["profile", "show", "H200"]) == 0
    out = capsys.readouterr().out
    for needle in ("theoretical", "calibration", "effective", "4.8 TB/s", "989.5 TFLOP/s", "uncalibrated"):
        assert needle in out
    assert main(["profile", "match", "NVIDIA L40S"]) == 0
    assert "L40S" in capsys.readouterr().out
    assert main(["profile", "match", "NVIDIA Nonesuch"]) == 1
    assert "no profile matches" in capsys.readouterr().out
    assert main(["profile", "show", "nonesuch"]) == 2
    assert "known profiles" in capsys.readouterr().err


def test_profile_show_yaml_is_a_loadable_profile(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["profile", "--format", "yaml", "show", "L4"]) == 0
    path = tmp_path / "l4.yaml"
    path.write_text(capsys.readouterr().out)
    assert load_profile(path).model_dump() == find_profile("L4").model_dump()


def test_profile_show_side_by_side_for_a_calibrated_profile(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    path = write_profile(_full_profile(), tmp_path)
    assert main(["profile", "show", str(path)]) == 0
    out = capsys.readouterr().out
    # theoretical 989.5 TFLOP/s, calibration 79.8 %, effective 789.7 TFLOP/s on one row
    row = next(line for line in out.splitlines() if "tensor_core.bf16" in line)
    assert "989.5 TFLOP/s" in row and "79.8%" in row and "789.7 TFLOP/s" in row
    assert "envelope" in out and "triad" in out


def test_profile_docs_exist() -> None:
    doc = Path(__file__).resolve().parents[1] / "docs" / "profiles.md"
    text = doc.read_text()
    for needle in ("TILEOPS_PROFILE_DIR", "roof_aliases", "STREAM", "--dram-bandwidth", "--all-devices"):
        assert needle in text
