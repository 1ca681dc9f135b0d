"""Reading Nsight Compute reports (tileops.audit.reports): ncu's raw-page CSV, and ``.ncu-rep`` files.

The CSV reader is tested on the layout ``ncu --csv --page raw --print-units
base`` prints (tests/data/audit/README.md: invented numbers, real layout), in
the locales whose thousands separators ncu uses. The ``.ncu-rep`` reader needs
a report a GPU produced: it runs on every fixture under
tests/data/audit/ncu-rep/ (none yet), skipping locally without the
``ncu_report`` module and failing under CI=true once a fixture exists.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tileops.audit.reports import (ReportError, import_ncu_report, parse_count, read_ncu_rep, read_raw_csv,
                                   summarize)

DATA = Path(__file__).parent / "data" / "audit"
REP_FIXTURES = sorted((DATA / "ncu-rep").glob("*.ncu-rep")) if (DATA / "ncu-rep").is_dir() else []
READS = (1_048_576, 4_194_304, 4_096)
WRITES = (2_097_152, 1_048_576, 4_096)


@pytest.mark.parametrize("name", ["raw-en_US.csv", "raw-de_DE.csv", "raw-fr_FR.csv", "raw-stdout.csv"])
def test_raw_csv_in_every_locale_gives_the_same_bytes(name: str) -> None:
    kernels = read_raw_csv((DATA / name).read_text(encoding="utf-8"))
    assert tuple(k.read_bytes for k in kernels) == READS
    assert tuple(k.write_bytes for k in kernels) == WRITES
    assert [k.duration_ns for k in kernels] == [5632.0, 41216.0, 2400.0]
    assert kernels[0].name.startswith("void at::native::index_elementwise_kernel<128, 4>(long,")
    m = summarize(kernels)
    assert (m.read_bytes, m.write_bytes, m.kernels) == (5_246_976, 3_149_824, 3)


@pytest.mark.parametrize("text, value", [
    ("1,048,576", 1_048_576), ("1.048.576", 1_048_576), ("1\u202f048\u202f576", 1_048_576),
    ("1\u00a0048\u00a0576", 1_048_576), ("1'048'576", 1_048_576), ("1,048,576.00", 1_048_576),
    ("1.048.576,00", 1_048_576), ("4096", 4096), ("1,024", 1024), ("0", 0), ("n/a", None), ("", None),
])
def test_counts_in_any_locale(text: str, value: int | None) -> None:
    assert parse_count(text) == value


@pytest.mark.parametrize("text", ["1,048,576.5", "12.5", "1,2,3", "1.0.48", "abc", "1e6", "0x10"])
def test_what_is_not_a_whole_byte_count_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_count(text)


def test_a_report_without_the_read_metric_is_an_error_naming_it() -> None:
    with pytest.raises(ReportError) as exc:
        read_raw_csv((DATA / "raw-no-read.csv").read_text())
    assert exc.value.kind == "metric" and "dram__bytes_read.sum" in str(exc.value)


def test_scaled_byte_units_are_refused_not_guessed() -> None:
    with pytest.raises(ReportError, match=r"dram__bytes_read\.sum is in 'Kbyte', not bytes.*--print-units base"):
        read_raw_csv((DATA / "raw-kbyte.csv").read_text())


def test_not_a_raw_page_and_ragged_rows() -> None:
    with pytest.raises(ReportError, match="no header row"):
        read_raw_csv("==ERROR== ERR_NVGPUCTRPERM - ...\n")
    text = (DATA / "raw-en_US.csv").read_text().splitlines()
    with pytest.raises(ReportError, match="fields"):
        read_raw_csv("\n".join(text[:3] + [text[3].rsplit('","', 1)[0] + '"']))
    assert read_raw_csv("\n".join(text[:2])) == []  # a header and units only: no kernel (summarize says so)


def _need_ncu_report():
    module = import_ncu_report()
    if module is None:
        msg = ("the ncu_report module is missing (`pip install ncu-report`, the `gpu` extra) and a .ncu-rep "
               "fixture exists under tests/data/audit/ncu-rep/")
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return module


@pytest.mark.skipif(not REP_FIXTURES, reason="no .ncu-rep fixture yet: one needs a GPU (tests/data/audit/README.md)")
@pytest.mark.parametrize("rep", REP_FIXTURES, ids=lambda p: p.name)
def test_both_readers_agree_on_a_real_report(rep: Path) -> None:
    module = _need_ncu_report()
    via_module = summarize(read_ncu_rep(rep, module))
    csv = rep.with_suffix(".csv")
    assert csv.exists(), f"{rep.name} needs its `ncu --import ... --csv --page raw --print-units base` export"
    via_csv = summarize(read_raw_csv(csv.read_text(encoding="utf-8")))
    assert via_module.read_bytes == via_csv.read_bytes > 0
    assert via_module.write_bytes == via_csv.write_bytes
    assert via_module.kernels == via_csv.kernels


def test_an_unloadable_report_is_an_error_naming_the_file(tmp_path: Path) -> None:
    class Refusing:  # what ncu_report does with a missing file: a plain exception
        @staticmethod
        def load_report(path: str):
            raise FileNotFoundError(f"Could not load report file: {path} does not exist.")

    with pytest.raises(ReportError, match=r"nowhere\.ncu-rep: ncu_report cannot load it"):
        read_ncu_rep(tmp_path / "nowhere.ncu-rep", Refusing)


def test_without_the_module_the_report_is_read_through_ncus_csv_export(tmp_path: Path, monkeypatch) -> None:
    """The driver's reader: ncu_report when it loads the report, else `ncu --import ... --csv`, kept beside it."""
    from tileops.audit.run import _measure

    stub = tmp_path / "ncu"
    stub.write_bytes((DATA / "ncu-stubs" / "ncu-import").read_bytes())
    stub.chmod(0o755)
    monkeypatch.setenv("NCU_STUB_CSV", str(DATA / "raw-de_DE.csv"))
    report = tmp_path / "row.ncu-rep"
    report.write_bytes(b"not a report any ncu_report can load")  # installed or not, the CSV route is taken
    kept = tmp_path / "row.csv"
    m = _measure(report, str(stub), kept)
    assert (m.read_bytes, m.write_bytes, m.kernels) == (5_246_976, 3_149_824, 3)
    assert kept.read_text(encoding="utf-8") == (DATA / "raw-de_DE.csv").read_text(encoding="utf-8")
    monkeypatch.setenv("NCU_STUB_CSV", str(DATA / "raw-no-read.csv"))
    with pytest.raises(ReportError) as exc:
        _measure(report, str(stub), kept)
    assert exc.value.kind == "metric"
