"""The exposition of a varied run, byte for byte, and the same snapshot however the run is read.

``tests/data/export/varied-{lean,full}.prom`` hold the exposition that the exporter wrote for
:func:`varied_run` before its snapshot was reduced to per-row tuples (issue 18: export of 100,000
records in seconds): two devices whose rows interleave, a breach, a latency-bound row, error and
skipped rows, one row on three backends (a race) and one on two with a single priced, escapes in
labels, shapes, params and data_terms, an audit. The reduction must not change one byte. A change
to the metrics themselves regenerates the files (``python tests/test_export_golden.py``) and shows
in the diff.
"""

from __future__ import annotations

import dataclasses
import pickle
import sys
from datetime import timedelta
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from export_support import T0, env, profile, record, write_profile_file, write_run
from tileops.export.metrics import exposition
from tileops.export.snapshot import build_snapshots, latest_per_device, load_run
from tileops.profiles import ProfileChooser
from tileops.records import load_records, read_audit, read_run_info, to_json
from tileops.report.stream import read_priced
from tileops.roofline import price_all
from cli_support import tileops

GOLDEN = Path(__file__).parent / "data" / "export"


def varied_run(root: Path) -> Path:
    cpu = env()
    gpu = env(hostname="node-a", device="Other GPU", uuid="GPU-0000-1111", kind="cuda")  # no profile matches
    quoted = env(hostname='node "b"\\x')  # a second CPU host, with a label value that needs escaping

    def rec(*args, **kw):
        return record(*args, **kw)

    compiled = rec("relu", "big", seconds=1e-3, backend="compile")
    compiled = dataclasses.replace(compiled, timing=dataclasses.replace(compiled.timing, compile_s=4.5))
    skipped = dataclasses.replace(rec("relu", "big", status="skipped", backend="triton"), skip_reason="no triton")
    terms = dataclasses.replace(rec("index", "gather", bytes_=4_000_000), data_terms={"unique": 17, "ids": [3, 1]},
                                params={"dim": -1, "note": 'say "hi"'}, shapes={"x": [8, 4], "idx": [16]})
    records = [
        rec("relu", "small"),
        rec("add", "inflated", bytes_=80_000_000_000),  # 800x the nominal bandwidth: a breach
        rec("relu", "small", e=gpu),  # a GPU row no profile prices
        rec("relu", "big", seconds=2e-3),  # the race: torch, compile (twice as fast), triton skipped
        compiled,
        skipped,
        rec("neg", "small", status="error"),
        # the same CPU once named by an explicit uuid: one device to its labels, two to the race key (two
        # backends under the uuid race; the one under the name does not)
        rec("relu", "mixed", e=dataclasses.replace(cpu, device=dataclasses.replace(cpu.device, uuid="cpu-node-a"))),
        rec("relu", "mixed", backend="compile", seconds=5e-4, e=dataclasses.replace(cpu, device=dataclasses.replace(cpu.device, uuid="cpu-node-a"))),
        rec("relu", "mixed", backend="compile"),
        rec("cast", "tiny", bytes_=8, flops=0, seconds=5e-8),  # under the latency floor
        rec("mul", 'label "x"\\y', e=quoted),
        rec("mul", "half", backend="compile", status="error"),  # two backends, one priced: no margin
        rec("mul", "half"),
        terms,
        rec("gemm", "sq", e=gpu, status="skipped"),
        # after run.json's end (the record's times count when there is no run.json), built by another
        # revision (run_info names the device's first row's)
        rec("relu", "late", start=T0 + timedelta(minutes=5), e=dataclasses.replace(cpu, git_revision="fff999")),
    ]
    return write_run(root / "run", records, minutes=3, audit=[
        {"op": "relu", "label": "small", "dtype": "float32", "backend": "torch", "verdict": "FAIL",
         "measured_read_bytes": 6_000_000, "expected_read_bytes": 4_000_000}])


def chooser() -> ProfileChooser:
    return ProfileChooser([profile()])


def exposition_of(run: Path, detail: str) -> bytes:
    return exposition(latest_per_device(load_run(run, chooser())), build_info=False, detail=detail)


CASES = [("lean", True), ("full", True), ("lean", False)]  # (detail, with its run.json)


def golden(detail: str, run_file: bool) -> Path:
    return GOLDEN / f"varied-{detail}{'' if run_file else '-no-run-file'}.prom"


def varied(root: Path, run_file: bool) -> Path:
    run = varied_run(root)
    if not run_file:
        (run / "run.json").unlink()  # the run's id and times from its records, its status "unknown"
    return run


@pytest.mark.parametrize(("detail", "run_file"), CASES)
def test_the_exposition_of_a_varied_run_is_unchanged(tmp_path: Path, detail: str, run_file: bool) -> None:
    assert exposition_of(varied(tmp_path, run_file), detail) == golden(detail, run_file).read_bytes()


@pytest.mark.parametrize("detail", ["lean", "full"])
def test_the_bench_path_renders_what_the_reader_renders(tmp_path: Path, detail: str) -> None:
    """``tileops bench --push/--textfile`` builds its snapshots from the rows it priced; they say the same."""
    run = varied_run(tmp_path)
    priced = price_all(load_records([run]), chooser())
    snaps = build_snapshots(run, read_run_info(run), priced, chooser(), read_audit(run))
    assert exposition(latest_per_device(snaps), build_info=False, detail=detail) == exposition_of(run, detail)


def test_a_run_read_in_parts_is_the_run_read_whole(tmp_path: Path) -> None:
    """However the rows are cut (a worker per part, its tally pickled back), the merged tally publishes what
    one pass publishes: rows in run order, health, races, the first row's environment, the time bounds."""
    from tileops.export.snapshot import RunTally

    run = varied(tmp_path, run_file=False)
    priced = price_all(load_records([run]), chooser())
    whole = {d: exposition(latest_per_device(build_snapshots(run, None, priced, chooser())), build_info=False, detail=d)
             for d in ("lean", "full")}
    for cut in range(len(priced) + 1):
        first, later = RunTally(), RunTally()
        for p in priced[:cut]:
            first.add(p)
        for p in priced[cut:]:
            later.add(p)
        first.merge(pickle.loads(pickle.dumps(later)))
        snaps = latest_per_device(first.snapshots(run, None, chooser()))
        for detail, expected in whole.items():
            assert exposition(snaps, build_info=False, detail=detail) == expected, (cut, detail)


def test_forked_workers_give_the_snapshot_of_one_pass(tmp_path: Path) -> None:
    from tileops.export.snapshot import RunTally

    run = varied(tmp_path, run_file=True)
    info, audit = read_run_info(run), read_audit(run)

    def text(jobs: int) -> bytes:
        (tally,) = read_priced([run], chooser(), lambda: [RunTally()], jobs=jobs, min_span=1)
        return exposition(latest_per_device(tally.snapshots(run, info, chooser(), audit)), build_info=False, detail="full")

    assert text(3) == text(1) == exposition_of(run, "full")


def test_a_bad_line_in_a_large_run_stops_the_export_naming_its_line_and_writes_nothing(tmp_path: Path) -> None:
    """A file large enough to be read by several processes (over 4 MB): the bad line, in the last part, is
    named by its file and line, exit 2, and the textfile directory stays empty."""

    run = tmp_path / "run"
    run.mkdir()
    line = to_json(record()) + "\n"
    n = (5 << 20) // len(line.encode()) + 1
    bad = n - 3
    with open(run / "records.jsonl", "w", encoding="utf-8") as f:
        for i in range(1, n + 1):
            f.write(line.replace('"median_s":0.001', '"median_s":"x"') if i == bad else line)
    prof = write_profile_file(tmp_path / "p.yaml", profile())
    (tmp_path / "tf").mkdir()
    res = tileops("export", str(run), "--profile", str(prof),
                  "--textfile", str(tmp_path / "tf"), timeout=300)
    assert res.returncode == 2, res.stderr
    assert f"records.jsonl:{bad}:" in res.stderr and "median_s" in res.stderr
    assert list((tmp_path / "tf").iterdir()) == []


def main() -> None:
    """Write the golden files from the exporter as it is now (after a deliberate change to the metrics)."""
    import tempfile

    GOLDEN.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for i, (detail, run_file) in enumerate(CASES):
            golden(detail, run_file).write_bytes(exposition_of(varied(Path(tmp) / str(i), run_file), detail))
            print(f"wrote {golden(detail, run_file)}")


if __name__ == "__main__":
    main()
