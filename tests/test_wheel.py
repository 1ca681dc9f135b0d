"""The wheel ships its data: install it non-editable into a fresh venv and validate from outside the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_installed_wheel_validates_from_outside_the_checkout(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    wheel = next(dist.glob("tileops-*.whl"))

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    # Dependencies (torch, pydantic, ...) come from this interpreter's site-packages through a
    # .pth path entry, which does not process that directory's own .pth files: the editable
    # checkout is therefore NOT on the new venv's path, and `tileops` resolves to the wheel.
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site, "_host_deps.pth").write_text("\n".join(sorted(deps)) + "\n")

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TILEOPS_MANIFEST_PATH")}
    where = subprocess.run([str(py), "-c", "import tileops, tileops.paths as p; print(tileops.__file__); "
                            "print(p.data_dir('manifest'))"], cwd=outside, env=env,
                           capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    pkg_file, manifest_dir = where.stdout.split()
    assert pkg_file.startswith(str(venv)), f"tileops imported from {pkg_file}, not the installed wheel"
    assert manifest_dir.startswith(str(venv)) and Path(manifest_dir, "elementwise.yaml").exists()

    r = subprocess.run([str(venv / "bin" / "tileops"), "validate"], cwd=outside, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no defects" in r.stdout
    for data in ("manifest", "profiles", "audit", "exporters"):
        assert Path(manifest_dir).parent.joinpath(data).is_dir(), f"{data}/ is missing from the wheel"
    # the HTML report's page (its style and script) beside the module that fills it (tileops.report.html)
    assert Path(pkg_file).parent.joinpath("report", "html_page.html").is_file(), "report/html_page.html is missing"
