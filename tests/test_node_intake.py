"""Node intake (issue 36, item 6): `tileops calibrate --check` holds a device's stored calibration against
its SKU's floors (profiles/floors/): exit 6 below a floor, naming the ceiling, the measured value, the floor
and the gap; exit 0 with one line at or above every floor; exit 7 when no floor holds the SKU.

Every check reads stored calibrations, so no GPU is needed: an H200's result is planted in a tmp store.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import socket
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tileops import exitcodes
from tileops.errors import TileOpsError
from tileops.ledger import (STREAM_WORDS, DeviceCalibration, MixMeasurement, RoofMeasurement, load_device_history,
                            read_device_result, write_device_result)
from tileops.ledger.floors import load_floors, read_floors
from tileops.ledger.intake import judge_intake
from tileops.pipeline.calibrate import CalibrateResult
from tileops.pipeline.intake import check_intake
from tileops.profiles import ProfileError, load_profiles, select_profile
from tileops.report.printer import LogPrinter
from cli_support import tileops
from test_calibrate_max_age import cpu_result

NOW = dt.datetime.now(dt.timezone.utc)
H200_UUID = "GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
REPO = Path(__file__).resolve().parents[1]
#: The published fractions profiles/floors/h200.yaml holds (tileops-h200-fractions.txt), and the datasheet.
H200_PUBLISHED = {"memory.read": 0.9380, "memory.copy": 0.8183, "memory.triad": 0.8427, "memory.write": 0.8926,
                  "tensor_core.bf16": 0.7077, "tensor_core.fp16": 0.6684, "tensor_core.tf32": 0.7249,
                  "tensor_core.fp8": 0.6303}
H200_DATASHEET = {"memory": 4.8e12, "tensor_core.bf16": 9.895e14, "tensor_core.fp16": 9.895e14,
                  "tensor_core.tf32": 4.945e14, "tensor_core.fp8": 1.979e15}


def h200_result(scale: dict[str, float] | None = None, name: str = "NVIDIA H200") -> DeviceCalibration:
    """An H200's full calibration at the published fractions, each ceiling times ``scale`` (default 1)."""
    scale = scale or {}

    def rate(ceiling: str) -> float:
        theo = H200_DATASHEET["memory" if ceiling.startswith("memory.") else ceiling]
        return H200_PUBLISHED[ceiling] * theo * scale.get(ceiling, 1.0)

    mixes = {m: MixMeasurement(bytes_per_s=rate(f"memory.{m}"), bytes=STREAM_WORDS[m] << 31, array_bytes=1 << 31,
                               best_s=1e-3, reps=200, kernel=m) for m in STREAM_WORDS}
    roofs = {k: RoofMeasurement(flops_per_s=rate(k), flops=1e12, best_s=1e-3, reps=50, method="cublas")
             for k in H200_PUBLISHED if not k.startswith("memory.")}
    return DeviceCalibration(run_id="cal-h200", started_at=NOW - dt.timedelta(minutes=10), finished_at=NOW,
                             quick=False, machine={"device": {"kind": "cuda", "name": name, "uuid": H200_UUID,
                                                              "index": 0, "hostname": "gpu-node-7"},
                                                   "torch_version": "2.13.0", "tileops_version": "0.1.0"},
                             mixes=mixes, roofs=roofs)


def planted(store: Path, run: DeviceCalibration) -> DeviceCalibration:
    """``run`` written to the store as `tileops calibrate` writes it, and read back from the file."""
    return read_device_result(write_device_result(run, store))


def judge(runs: list[DeviceCalibration], store: Path, textfile: Path | None = None) -> tuple[CalibrateResult, str]:
    out = io.StringIO()
    result = CalibrateResult(runs=runs)
    result.intake = check_intake(runs, store, LogPrinter(out, out), textfile, now=NOW)
    return result, out.getvalue()


# --------------------------------------------------------------------------- H200: published fractions less 10 %


def test_a_low_h200_is_rejected_naming_the_ceiling_measured_floor_and_gap(tmp_path: Path) -> None:
    store = tmp_path / "store"
    run = planted(store, h200_result({"tensor_core.bf16": 0.7}))  # 30 % under the published fraction
    result, said = judge([run], store, tmp_path / "textfile")
    assert result.exit_code == exitcodes.BELOW_FLOOR == 6
    (line,) = [x for x in said.splitlines() if x.startswith("intake BELOW FLOOR")]
    floor = 0.7077 * 0.9 * 9.895e14
    assert "tensor_core.bf16" in line and f"measured {0.7077 * 0.7 * 9.895e14:.4g} FLOP/s" in line
    assert f"floor {floor:.4g} FLOP/s" in line and f"gap {0.7 / 0.9 - 1:+.1%}" in line
    assert "TileOPs PR #1980" in line and "less 10%" in line  # the floor names its source and margin
    assert "intake REJECT" in said and "1 of 8 ceilings" in said
    # exported: the state one-hot and the ceiling's gap, as node_exporter's textfile collector reads them
    text = (tmp_path / "textfile" / f"tileops_{H200_UUID}.intake.prom").read_text()
    samples = {(s.name, s.labels.get("state") or s.labels.get("ceiling")): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert samples[("tileops_node_intake", "below_floor")] == 1 and samples[("tileops_node_intake", "pass")] == 0
    assert samples[("tileops_node_intake_gap_ratio", "tensor_core.bf16")] == pytest.approx(0.7 / 0.9 - 1)


def test_an_unmeasured_ceiling_is_not_an_accepted_one(tmp_path: Path) -> None:
    run = h200_result()
    del run.roofs["tensor_core.fp8"]
    result, said = judge([planted(tmp_path, run)], tmp_path)
    assert result.exit_code == exitcodes.BELOW_FLOOR
    assert "tensor_core.fp8: measured not measured" in said


def test_a_good_h200_passes_in_one_line(tmp_path: Path) -> None:
    store = tmp_path / "store"
    run = planted(store, h200_result({"memory.read": 0.91}))  # 9 % under one published fraction: inside 10 %
    result, said = judge([run], store)
    assert result.exit_code == exitcodes.OK
    assert said.count("\n") == 1 and said.startswith(f"intake PASS: {H200_UUID} (NVIDIA H200) meets all 8 floors")
    assert f"nearest: memory.read {0.91 / 0.9 - 1:+.1%}" in said


def test_an_unknown_sku_has_no_floor_and_says_so(tmp_path: Path) -> None:
    run = planted(tmp_path, h200_result(name="NVIDIA Mystery 96GB"))
    result, said = judge([run], tmp_path)
    assert result.exit_code == exitcodes.NO_FLOOR == 7
    assert "intake NO FLOOR" in said and "no profile matches 'NVIDIA Mystery 96GB'" in said
    assert "add a floors file" in said
    # and nothing to judge at all is no pass either
    assert judge([], tmp_path)[0].exit_code == exitcodes.NO_FLOOR


def test_the_shipped_h200_floors_are_the_published_fractions() -> None:
    floors = read_floors(REPO / "profiles" / "floors" / "h200.yaml")
    assert floors.source == "published" and floors.margin == 0.10 and floors.margin_why
    assert {k: v.fraction for k, v in floors.ceilings.items()} == H200_PUBLISHED
    assert select_profile("NVIDIA H200", load_profiles(store=False)).name == floors.sku  # its datasheet figures


# --------------------------------------------------------------------------- CPU: its own history less 15 %


def _cpu_history(store: Path, triads: list[float]) -> None:
    for i, triad in enumerate(triads):
        run = cpu_result(NOW - dt.timedelta(days=len(triads) - i), run_id=f"cal-past{i}")
        run.mixes["triad"] = run.mixes["triad"].model_copy(update={"bytes_per_s": triad})
        write_device_result(run, store)


def test_the_cpu_floor_is_the_median_of_its_history_less_the_margin(tmp_path: Path) -> None:
    _cpu_history(tmp_path, [1.0e10, 1.4e10, 1.2e10, 0.2e10])  # one bad run: the median stands
    current = cpu_result(NOW, run_id="cal-now")
    current.mixes["triad"] = current.mixes["triad"].model_copy(update={"bytes_per_s": 0.9e10})
    write_device_result(current, tmp_path)
    history = load_device_history(current.device_key, tmp_path)
    verdict = judge_intake(current, load_floors(tmp_path), None, history)
    floor = next(c for c in verdict.checks if c.floor.ceiling == "memory.triad").floor
    assert floor.rate == pytest.approx(1.1e10 * 0.85)  # median of 1.0, 1.4, 1.2, 0.2 (x 1e10) is 1.1e10
    assert "median" in floor.source and "4 earlier quick calibrations" in floor.source
    assert verdict.state == "below_floor" and [c.floor.ceiling for c in verdict.failing] == ["memory.triad"]


def test_a_cpu_without_enough_history_has_no_floor(tmp_path: Path) -> None:
    _cpu_history(tmp_path, [1e10, 1e10])
    current = planted(tmp_path, cpu_result(NOW, run_id="cal-now"))
    result, said = judge([current], tmp_path)
    assert result.exit_code == exitcodes.NO_FLOOR
    assert "2 earlier quick calibration(s)" in said and "3 needed" in said
    assert "calibrate it again until its history holds enough results" in said


@pytest.mark.slow
def test_calibrate_check_on_this_host_cpu(tmp_path: Path) -> None:
    """The command end to end: the stored result kept by --max-age, judged; exit 6 then, after a good one, 0."""
    store, textfile = tmp_path / "store", tmp_path / "textfile"
    env = {**os.environ, "TILEOPS_PROFILE_DIR": str(store), "COLUMNS": "200"}
    _cpu_history(store, [1e10, 1e10, 1e10])
    low = cpu_result(NOW - dt.timedelta(minutes=1), run_id="cal-low")
    low.mixes["triad"] = low.mixes["triad"].model_copy(update={"bytes_per_s": 0.5e10})
    write_device_result(low, store)
    args = ("calibrate", "--device", "cpu", "--quick", "--max-age", "7d", "--check", "--textfile", str(textfile))
    bad = tileops(*args, environ=env, timeout=300)
    assert bad.returncode == 6, bad.stderr
    assert "intake BELOW FLOOR" in bad.stdout and "memory.triad" in bad.stdout and "gap -41.2%" in bad.stdout
    key = f"cpu-{socket.gethostname()}"
    assert 'state="below_floor"} 1.0' in (textfile / f"tileops_{key}.intake.prom").read_text()

    write_device_result(cpu_result(NOW, run_id="cal-good"), store)
    good = tileops(*args, environ=env, timeout=300)
    assert good.returncode == 0, good.stderr
    assert [x for x in good.stdout.splitlines() if x.startswith("intake")] == [
        next(x for x in good.stdout.splitlines() if x.startswith(f"intake PASS: {key}"))]


# --------------------------------------------------------------------------- a floors file a person writes


def test_a_bad_floors_file_names_file_field_and_fix(tmp_path: Path) -> None:
    bad = tmp_path / "floors" / "x.yaml"
    bad.parent.mkdir()
    bad.write_text("sku: X\ndevice_kind: cuda\nsource: published\nmargin: 1.5\nmargin_why: w\n"
                   "ceilings: {memory.read: {fraction: 0.9, ref: r}}\n")
    with pytest.raises(ProfileError) as err:
        load_floors(tmp_path)
    assert str(bad) in str(err.value) and err.value.field == "margin" and "docs/profiles.md" in (err.value.fix or "")
    bad.write_text("sku: X\ndevice_kind: cpu\nsource: history\nmargin: 0.1\nmargin_why: w\n"
                   "ceilings: {memory.read: {fraction: 0.9, ref: r}}\n")
    with pytest.raises(TileOpsError, match="drop ceilings"):
        load_floors(tmp_path)


def test_a_site_floors_file_overrides_the_shipped_one(tmp_path: Path) -> None:
    site = tmp_path / "floors" / "h200.yaml"
    site.parent.mkdir()
    site.write_text("sku: H200\ndevice_kind: cuda\nsource: published\nmargin: 0.5\nmargin_why: lenient site\n"
                    "ceilings: {memory.read: {fraction: 0.9380, ref: r}}\n")
    run = planted(tmp_path, h200_result({"tensor_core.bf16": 0.1, "memory.read": 0.6}))
    result, said = judge([run], tmp_path)
    assert result.exit_code == exitcodes.OK and "meets all 1 floors" in said


def test_textfile_without_check_is_refused_before_anything_is_measured(tmp_path: Path) -> None:
    res = tileops("calibrate", "--device", "cpu", "--textfile", str(tmp_path), env={"TILEOPS_PROFILE_DIR": str(tmp_path)})
    assert res.returncode == exitcodes.USAGE and "give --check with it" in res.stderr
    assert not (tmp_path / "devices").exists()
