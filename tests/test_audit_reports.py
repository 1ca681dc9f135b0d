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


def test_a_read_metric_never_requested_is_told_from_one_ncu_could_not_collect() -> None:
    """A report without the column was written by a command that did not ask for it; a column of n/a was
    asked for and not collectable here. Two kinds, two messages."""
    with pytest.raises(ReportError) as exc:
        read_raw_csv((DATA / "raw-no-read.csv").read_text())
    assert exc.value.kind == "metric-not-requested" and "dram__bytes_read.sum was not requested" in str(exc.value)
    assert "collect" not in str(exc.value)
    text = (DATA / "raw-en_US.csv").read_text().replace('"1,048,576"', '"n/a"', 1)
    kernels = read_raw_csv(text)
    assert kernels[0].read_bytes is None
    with pytest.raises(ReportError) as exc:
        summarize(kernels)
    assert exc.value.kind == "metric-not-collectable" and "was asked for dram__bytes_read.sum" in str(exc.value)
    assert "not requested" not in str(exc.value)


class _Metric:
    def __init__(self, value: float | None) -> None:
        self.value = value

    def has_value(self) -> bool:
        return self.value is not None

    def kind(self) -> int:
        return 0

    def as_double(self) -> float:
        return float(self.value)

    def unit(self) -> str:
        return "byte"


def _report_module(metrics: dict):
    """What ``ncu_report`` hands back for a report of one range and one action holding ``metrics``."""
    class Action:
        def name(self) -> str:
            return "relu_kernel"

        def metric_by_name(self, name: str):
            return metrics.get(name)

    class Range:
        def num_actions(self) -> int:
            return 1

        def action_by_idx(self, i: int) -> Action:
            return Action()

    class Context:
        def num_ranges(self) -> int:
            return 1

        def range_by_idx(self, i: int) -> Range:
            return Range()

    class Module:
        @staticmethod
        def load_report(path: str) -> Context:
            return Context()

    return Module


def test_the_ncu_report_reader_tells_not_requested_from_not_collectable(tmp_path: Path) -> None:
    full = {"dram__bytes_read.sum": _Metric(4096.0), "dram__bytes_write.sum": _Metric(2048.0)}
    (k,) = read_ncu_rep(tmp_path / "r.ncu-rep", _report_module(full))
    assert (k.read_bytes, k.write_bytes, k.duration_ns) == (4096, 2048, None)
    with pytest.raises(ReportError) as exc:
        read_ncu_rep(tmp_path / "r.ncu-rep", _report_module({"dram__bytes_write.sum": _Metric(1.0)}))
    assert exc.value.kind == "metric-not-requested" and "relu_kernel" in str(exc.value)
    (k,) = read_ncu_rep(tmp_path / "r.ncu-rep", _report_module({**full, "dram__bytes_read.sum": _Metric(None)}))
    with pytest.raises(ReportError, match="asked for dram__bytes_read.sum") as exc:
        summarize([k])
    assert exc.value.kind == "metric-not-collectable"


WRAPPERS = {
    # the CUDA toolkit's bin/ncu: a script running the versioned install beside bin/
    "cuda": ('#!/bin/sh\nexec "$(dirname "$(readlink -f "$0")")/../nsight-compute-2025.3.1/ncu" "$@"\n',
             "cuda/bin/ncu", "cuda/nsight-compute-2025.3.1"),
    # a site wrapper naming an absolute install
    "absolute": ('#!/bin/bash\nNCU_ROOT={root}/opt/nvidia/nsight-compute/2025.3.1\nexec "$NCU_ROOT/ncu" "$@"\n',
                 "usr/local/bin/ncu", "opt/nvidia/nsight-compute/2025.3.1"),
}


@pytest.mark.parametrize("kind", sorted(WRAPPERS))
def test_ncu_report_is_found_behind_ncus_wrapper_script(kind: str, tmp_path: Path, monkeypatch) -> None:
    """`ncu` on PATH is a script that runs the real one elsewhere: extras/python is that install's, not the
    wrapper's folder's (where it was looked for before, and never found)."""
    import sys

    text, wrapper_at, install_at = WRAPPERS[kind]
    install = tmp_path / install_at
    (install / "extras" / "python").mkdir(parents=True)
    (install / "extras" / "python" / "ncu_report.py").write_text(f"WHERE = {str(install)!r}\n")
    (install / "ncu").write_text("#!/bin/sh\n# the real ncu\n")
    wrapper = tmp_path / wrapper_at
    wrapper.parent.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(text.format(root=tmp_path))
    wrapper.chmod(0o755)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "ncu_report", raising=False)
    from tileops.audit.reports import ncu_install_dirs

    assert install.resolve() in ncu_install_dirs(str(wrapper))
    module = import_ncu_report(str(wrapper), "2025.3.1.0")
    if module is not None and getattr(module, "WHERE", None) is None:
        pytest.skip("an ncu_report module is installed here: it is found first, as it should be")
    assert module is not None and module.WHERE == str(install)
    monkeypatch.delitem(sys.modules, "ncu_report", raising=False)


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
    assert exc.value.kind == "metric-not-requested"
