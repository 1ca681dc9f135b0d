"""The run report in a real browser: a real CPU run's report.html opened in headless chromium (Debian's chromium and
chromium-driver, driven by selenium; .ci/run installs them).

One browser for the module (starting one is most of a test's cost), one real
bench run whose page the bench itself wrote, and the same run's page against
itself as a baseline (`tileops report --baseline`). The page loads with no
console error, shows every record of the run, draws a point per row whose hover
names that row, sorts on a header's click and filters on a choice; a page of
hostile strings shows them as text. Screenshots are kept in the test's
temporary directory. Without chromium a local run skips, CI fails (as
tests/export_support.py's need_binary does for Prometheus).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from roofline_fixtures import make_profile, make_record, write_profile, write_records

from cli_support import tileops
from tileops.records import iter_records

PROFILE = make_profile(name="browser-test-cpu", match=("no device: given with --profile",), bw_theoretical=50e9,
                       bw_calibration=0.8, roofs={"cpu.fp32": (200e9, 0.8), "cpu.fp32_matmul": (200e9, 0.8)})
HOSTILE = '<img class="injected" src=x onerror="document.title=\'pwned\'">'
#: What chromium is told: no GPU, no network of its own (the machine's is closed), a profile of its own.
pytestmark = pytest.mark.slow  # a real bench run and a browser: seconds each

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1400,1000")


def need_browser() -> tuple[str, str]:
    """(chromium, chromedriver), and selenium importable; skip locally when one is missing, fail under CI=true."""
    found = []
    for name in (("chromium", "chromium-browser"), ("chromedriver",)):
        path = next((p for n in name for p in (shutil.which(n), f"/usr/bin/{n}") if p and os.access(p, os.X_OK)), None)
        found.append(path)
    try:
        import selenium  # noqa: F401  # the `test` extra installs it
    except ImportError:
        found.append(None)
    if all(found):
        return found[0], found[1]
    msg = ("chromium, chromium-driver or selenium not installed: `apt-get install chromium chromium-driver` "
           "(.ci/run installs them) and the `test` extra (selenium)")
    if os.environ.get("CI") == "true":
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real quick run of two ops on the CPU, priced on a stated profile (no calibration): the bench writes
    its report.html and says where."""
    d = tmp_path_factory.mktemp("html-run")
    profile = write_profile(d / "browser-test-cpu.yaml", PROFILE)
    out = d / "run"
    r = tileops("bench", "--quick", "--op", "relu", "--op", "add", "--device", "cpu", "--profile", str(profile),
                "--out", str(out))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"report: {out / 'report.html'}" in r.stdout  # the summary links the page
    base = tileops("report", str(out), "--baseline", str(out), "--profile", str(profile), "-o", str(d / "base.html"))
    assert base.returncode == 0, base.stdout + base.stderr
    return out


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    chromium, chromedriver = need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(chromedriver), options=opts)
    try:
        yield d
    finally:
        d.quit()


def _open(driver, path: Path) -> list[dict]:
    """Open the page from disk; the browser's console entries of its loading (each read once)."""
    driver.get(path.as_uri())
    driver.find_element("id", "rows")
    return driver.get_log("browser")


def _visible_rows(driver) -> list:
    return [tr for tr in driver.find_elements("css selector", "#rows tbody tr") if tr.is_displayed()]


def _key(tr) -> tuple[str, ...]:
    cells = [td.text for td in tr.find_elements("css selector", "td")]
    return tuple(cells[1:5])  # op, label, dtype, backend


def test_a_real_runs_page_loads_clean_and_shows_every_row(driver, run: Path, tmp_path: Path) -> None:
    log = _open(driver, run / "report.html")
    assert [e for e in log if e["level"] == "SEVERE"] == []
    records = list(iter_records(run))
    shown = [_key(tr) for tr in _visible_rows(driver)]
    assert sorted(shown) == sorted((r.op, r.label, r.dtype, r.backend) for r in records)
    assert driver.find_element("id", "shown").text == f"{len(records)} of {len(records)} rows"
    assert len(driver.find_elements("css selector", "svg.roofline .pt")) == len(records)
    assert driver.find_element("id", "health-line").text.startswith("health: ")
    shot = tmp_path / "report.png"
    assert driver.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_a_points_hover_shows_its_row(driver, run: Path, tmp_path: Path) -> None:
    """Each point on top where it is drawn (a later row's point may cover an earlier one at the same place) names
    its own row when hovered, with the row's cells, SOL interval and verdict."""
    from selenium.webdriver.common.action_chains import ActionChains

    _open(driver, run / "report.html")
    tip = driver.find_element("id", "tooltip")
    assert not tip.is_displayed()
    on_top = [p for p in driver.find_elements("css selector", "svg.roofline .pt") if driver.execute_script(
        "arguments[0].scrollIntoView({block: 'center'}); const r = arguments[0].getBoundingClientRect();"
        "return document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2) === arguments[0];", p)]
    assert on_top
    for point in on_top:
        i = point.get_attribute("data-i")
        op, label, dtype, backend = _key(driver.find_element("css selector", f'#rows tbody tr[data-i="{i}"]'))
        ActionChains(driver).move_to_element(point).perform()
        deadline = time.monotonic() + 5
        while f"{op} [{label} {dtype} {backend}]" not in tip.text and time.monotonic() < deadline:
            time.sleep(0.05)
        text = tip.text
        assert tip.is_displayed() and text.startswith(f"#{int(i) + 1} {op} [{label} {dtype} {backend}]"), text
        assert "efficiency" in text and "verdict" in text and "SOL (95 % CI)" in text
    assert driver.save_screenshot(str(tmp_path / "hover.png"))


def test_a_header_sorts_and_a_choice_filters(driver, run: Path) -> None:
    from selenium.webdriver.support.ui import Select

    _open(driver, run / "report.html")
    records = list(iter_records(run))
    times = {str(i): r.timing.actual_time_s for i, r in enumerate(records)}
    header = driver.find_element("css selector", '#rows th[data-col="5"]')
    assert header.text.startswith("time")
    header.click()
    order = [tr.get_attribute("data-i") for tr in _visible_rows(driver)]
    assert [times[i] for i in order] == sorted(times.values())
    header.click()
    order = [tr.get_attribute("data-i") for tr in _visible_rows(driver)]
    assert [times[i] for i in order] == sorted(times.values(), reverse=True)

    Select(driver.find_element("css selector", 'select[data-filter="op"]')).select_by_value("relu")
    relu = sum(r.op == "relu" for r in records)
    assert {_key(tr)[0] for tr in _visible_rows(driver)} == {"relu"} and len(_visible_rows(driver)) == relu
    assert driver.find_element("id", "shown").text == f"{relu} of {len(records)} rows"
    shown_points = [p for p in driver.find_elements("css selector", "svg.roofline .pt") if p.is_displayed()]
    assert len(shown_points) == relu
    Select(driver.find_element("css selector", 'select[data-filter="dtype"]')).select_by_value("float32")
    assert {_key(tr)[0:3:2] for tr in _visible_rows(driver)} == {("relu", "float32")}
    driver.find_element("id", "reset").click()
    assert len(_visible_rows(driver)) == len(records)


def test_the_baseline_page_gives_each_row_its_change(driver, run: Path) -> None:
    log = _open(driver, run.parent / "base.html")
    assert [e for e in log if e["level"] == "SEVERE"] == []
    heads = [th.text for th in driver.find_elements("css selector", "#rows th")]
    assert heads[-4:] == ["baseline", "ratio", "ratio (95 % CI)", "change"]
    changes = {tr.find_elements("css selector", "td")[-1].text for tr in _visible_rows(driver)}
    assert changes and changes <= {"same", "ambiguous", "unjudged"}  # a run against itself: never slower
    ratios = {tr.find_elements("css selector", "td")[-3].text for tr in _visible_rows(driver)}
    assert ratios == {"1.00x"}


def test_hostile_strings_show_as_text(driver, tmp_path: Path) -> None:
    """A record's strings are text on the page: no element of theirs, no script of theirs run."""
    rows = [make_record(op=HOSTILE, label=HOSTILE, device_name=HOSTILE, flops=1 << 20, bytes=1 << 23,
                        median_s=1e-3, level_ci_s=(0.9e-3, 1.1e-3), ci_df=20.0)]
    run = write_records(tmp_path / "run" / "records.jsonl", rows).parent
    res = tileops("report", str(run), "--profile", str(write_profile(tmp_path / "p.yaml", PROFILE)))
    assert res.returncode == 0, res.stderr
    log = _open(driver, run / "report.html")
    assert [e for e in log if e["level"] == "SEVERE"] == []
    assert driver.find_elements("css selector", "img.injected") == []
    assert driver.title != "pwned"
    assert _key(_visible_rows(driver)[0])[:2] == (HOSTILE, HOSTILE)
