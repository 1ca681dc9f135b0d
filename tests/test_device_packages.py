"""The run-time needs only what the GPU machine has, plus a carried set that is computed, not listed.

The machine's package list is test data (tests/data/device/, copied from the project's
shared/device/); the carried set is ``scripts/device_packages.py``'s. One test runs the three
commands a first GPU contact runs -- calibrate, bench, audit -- in an interpreter that cannot import
anything else (tests/device_support.py), msgspec above all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from device_support import ROOT, allowed_distributions, sandbox_env, top_level_modules
from device_packages import (DEVICE_LIST, Carried, Dist, RequirementCheck, _report, carried_set,
                             check_requirements, device_packages, download_command, installed_distribution,
                             runtime_requirements)

STUBS = Path(__file__).parent / "data" / "audit" / "ncu-stubs"


def test_the_device_list_is_the_shared_one_and_reads() -> None:
    shared = ROOT.parent / "shared" / "device" / "h200-image-packages.txt"
    if shared.exists():  # the copy in the repo is the project's shared list, unchanged
        assert DEVICE_LIST.read_text() == shared.read_text()
    pkgs = device_packages()
    assert pkgs["torch"] == "2.11.0" and pkgs["triton"] == "3.6.0" and "prometheus-client" in pkgs
    assert not {"msgspec", "pydantic", "platformdirs", "docker", "nvtx", "ncu-report"} & set(pkgs)


def test_every_runtime_dependency_is_on_the_device_or_carried() -> None:
    """pyproject.toml's dependencies, and every requirement of a carried package, transitively: each is the
    machine's or carried. A dependency added to pyproject.toml is carried without anyone listing it."""
    device = device_packages()
    carried, needs = carried_set()
    names = {c.name for c in carried}
    for req in runtime_requirements():
        name = canonicalize_name(req.name)
        assert name in device or name in names, f"{name}: neither on the device nor carried"
    import importlib.metadata as md

    for c in carried:
        assert md.version(c.name) == c.version
        for r in map(Requirement, md.requires(c.name) or ()):
            if r.marker is None or r.marker.evaluate({"extra": "", "python_version": "3.12", "sys_platform": "linux",
                                                       "platform_system": "Linux"}):
                name = canonicalize_name(r.name)
                assert name in device or name in names, f"{name} (for {c.name}): neither on the device nor carried"
    assert names == {"pydantic", "pydantic-core", "annotated-types", "typing-inspection", "platformdirs", "docker"}
    assert "msgspec" not in names and not any(n.name == "msgspec" for n in needs)  # optional: the `fast` extra
    assert any(n.name == "typing-extensions" and "pydantic" in n.needed_by for n in needs)


def test_a_new_dependency_is_carried_and_one_nobody_installed_is_refused(tmp_path: Path) -> None:
    device = device_packages()
    carried, _ = carried_set(device, [Requirement("pyyaml>=6"), Requirement("msgspec>=0.18"),
                                      Requirement("pywin32; sys_platform == 'win32'")])
    assert carried == [Carried("msgspec", __import__("importlib.metadata").metadata.version("msgspec"),
                               ("pyproject.toml",))]
    with pytest.raises(LookupError, match="not-a-real-package-xyz .*make install"):
        carried_set(device, [Requirement("not-a-real-package-xyz")])
    cmd = download_command(str(tmp_path))
    assert "--python-version" in cmd and "3.12" in cmd and "--no-deps" in cmd
    assert {a for a in cmd if "==" in a} == {f"{c.name}=={c.version}" for c in carried_set()[0]}


PROBE = """
import importlib.util, json, sys
found = [m for m in json.loads(sys.argv[1]) if importlib.util.find_spec(m) is not None]
try:
    import msgspec
    imported = True
except ModuleNotFoundError:
    imported = False
import sitecustomize
print(json.dumps([found, imported, sitecustomize.PRELOADED]))
"""


def test_the_sandbox_cannot_import_what_the_device_lacks(tmp_path: Path) -> None:
    """The sandbox is honest: every module installed here that no allowed distribution provides is absent."""
    allowed, blocked = top_level_modules()
    assert "msgspec" in blocked and "pydantic" in allowed and "torch" in allowed and "yaml" in allowed
    probe = PROBE
    env = sandbox_env(tmp_path / "sandbox")
    res = subprocess.run([sys.executable, "-c", probe, json.dumps(sorted(blocked))], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    found, imported, preloaded = json.loads(res.stdout.strip().splitlines()[-1])
    assert found == [] and imported is False and preloaded == []
    # outside the sandbox msgspec is installed (the test extra): the sandbox is what hides it
    assert subprocess.run([sys.executable, "-c", "import msgspec"], timeout=60).returncode == 0


DRIVER = r'''
import json, os, sys
from pathlib import Path
from tileops.cli import main

out = Path(sys.argv[1])
rcs = {}
for name, argv in json.loads(sys.argv[2]):
    try:
        rcs[name] = main(argv)
    except SystemExit as exc:
        rcs[name] = exc.code
import sitecustomize
allowed = set(json.load(open(os.environ["TILEOPS_SANDBOX_ALLOWED"])))
# modules loaded from a file (a Cython runtime's or multiprocessing's synthetic entries have none)
loaded = sorted({n.partition(".")[0] for n, m in list(sys.modules.items()) if getattr(m, "__file__", None)} - allowed)
(out / "report.json").write_text(json.dumps({"rcs": rcs, "loaded": loaded, "preloaded": sitecustomize.PRELOADED}))
'''


@pytest.mark.slow
def test_calibrate_bench_and_audit_run_with_only_the_device_packages_and_the_carried_wheels(tmp_path: Path) -> None:
    """`tileops calibrate --quick`, `tileops bench --quick --op relu --calibrate never` (priced on that
    calibration) and `tileops audit` (under a stub ncu that runs the audited child) in one fresh sandboxed
    interpreter; the bench's workers and the audit's child run sandboxed too."""
    env = sandbox_env(tmp_path / "sandbox")
    env["TILEOPS_PROFILE_DIR"] = str(tmp_path / "profiles")
    commands = [
        ("calibrate", ["calibrate", "--quick", "--force"]),  # this 2-core host is busy under the suite: stored marked
        ("bench", ["bench", "--quick", "--op", "relu", "--calibrate", "never", "--out",
                   str(tmp_path / "run")]),
        ("audit", ["audit", "--op", "relu", "--label", "llama3-8b-mlp-act-prefill-4k", "--dtype", "bfloat16",
                   "--ncu", str(STUBS / "ncu-run-app"), "--out", str(tmp_path / "audit")]),
        # the readers msgspec speeds up where it is installed: the same files without it
        ("roofline", ["roofline", str(tmp_path / "run"), "--format", "csv"]),
        ("export", ["export", str(tmp_path / "run"), "--textfile", str(tmp_path / "textfile")]),
    ]
    res = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path), json.dumps(commands)], env=env,
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    log = res.stdout[-3000:] + res.stderr[-4000:]
    assert res.returncode == 0, log
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["loaded"] == [] and report["preloaded"] == [], report
    assert report["rcs"]["calibrate"] == 0, log
    assert report["rcs"]["bench"] == 0, log
    records = [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    assert records and all(r["status"] == "ok" for r in records)
    assert "No module named" not in log and "Traceback" not in log
    # on a host without a GPU the audit runs its row and says why it measured nothing: ERROR, exit 1
    assert report["rcs"]["audit"] == 1, log
    entries = [json.loads(line) for line in (tmp_path / "audit" / "audit.jsonl").read_text().splitlines()]
    assert [e["verdict"] for e in entries] == ["ERROR"] and entries[0]["error_kind"] == "no-cuda", entries
    assert report["rcs"]["roofline"] == 0 and report["rcs"]["export"] == 0, log
    assert "tileops_sol_ratio" in "".join(p.read_text() for p in (tmp_path / "textfile").glob("*.prom"))
    assert "msgspec" not in allowed_distributions() and os.environ.get("TILEOPS_SANDBOX_ALLOWED") is None


#: torch 2.11.0+cu130's pins on the image's own packages (its wheel metadata, as issue 36 quotes them).
TORCH_211_PINS = ("setuptools<82", "cuda-toolkit[cublas,cudart]==13.0.2; platform_system == 'Linux'",
                  "typing-extensions>=4.10.0", "filelock")
#: Versions the image's list leaves out, chosen to break each pin the issue names, as the image does.
IMAGE_VERSIONS = {"setuptools": "82.0.1", "cuda-toolkit": "13.0.1", "typing-extensions": "4.15.0"}


def _image_lookup(overrides: dict[str, Dist | None] | None = None) -> Callable[[str], Dist | None]:
    """The H200 image as the check would see it: the real list's packages (its versions; this environment's
    requirements where installed here, torch's own 2.11 pins) plus the carried wheels, nothing else."""
    image = device_packages()
    carried = {c.name for c in carried_set()[0]}

    def lookup(name: str) -> Dist | None:
        if overrides and name in overrides:
            return overrides[name]
        here = installed_distribution(name)
        if name in carried:
            return here
        if name not in image:
            return None
        if name == "torch":
            return Dist(image[name] or "2.11.0", TORCH_211_PINS)
        version = image[name] or IMAGE_VERSIONS.get(name) or (here.version if here else "0")
        return Dist(version, here.requires if here else ())

    return lookup


def test_the_check_on_the_image_requires_what_tileops_needs_and_reports_the_images_own_pins() -> None:
    """With the real h200-image-packages.txt: torch's setuptools<82 and cuda-toolkit==13.0.2 and pydantic's
    typing-extensions>=4.16.0 are unmet there, and the image works; each is one reported line, not a failure."""
    check = check_requirements(_image_lookup())
    assert check.unmet == []
    pins = "\n".join(check.image_pins)
    for pin in ("setuptools 82.0.1 is installed, torch asks setuptools<82",
                "cuda-toolkit 13.0.1 is installed, torch asks cuda-toolkit==13.0.2",
                "typing-extensions 4.15.0 is installed, pydantic asks typing-extensions>=4.16.0"):
        assert pin in pins, pins
    assert all("tileops does not need it" in p and "\n" not in p for p in check.image_pins)


def test_the_check_fails_on_what_tileops_needs() -> None:
    """A run-time dependency missing or too old, a carried wheel's dependency missing, carried wheels that
    disagree: each is unmet (exit 1), with its fix."""
    pydantic = installed_distribution("pydantic")
    assert pydantic is not None
    cases = {
        "torch 2.10.0 is installed, pyproject.toml asks torch>=2.11": {"torch": Dist("2.10.0", TORCH_211_PINS)},
        "pydantic (needed by pyproject.toml) is not installed": {"pydantic": None},
        "annotated-types (needed by pydantic) is not installed": {"annotated-types": None},
        "pydantic-core 2.0.0 is installed, pydantic asks pydantic-core==": {"pydantic-core": Dist("2.0.0", ())},
    }
    for expected, overrides in cases.items():
        check = check_requirements(_image_lookup(overrides))
        assert any(expected in p for p in check.unmet), (expected, check.unmet)


def test_the_check_command_prints_one_line_a_finding(capsys: pytest.CaptureFixture[str]) -> None:
    assert _report(RequirementCheck([], ["setuptools 82.0.1 is installed, torch asks setuptools<82 (...)"])) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("device_packages: not required: setuptools") and "1 of the image's own pins" in out[1]
    assert _report(RequirementCheck(["pydantic (needed by pyproject.toml) is not installed"], [])) == 1
    assert "UNMET: pydantic" in capsys.readouterr().out


@pytest.mark.slow
def test_make_device_wheels_builds_the_machines_set_where_none_of_it_is_installed(tmp_path: Path) -> None:
    """`scripts/device_packages.py wheels` (make device-wheels) in a sandbox where the carried packages are
    neither importable nor have metadata: pip resolves them for CPython 3.12 on manylinux x86-64, the project's
    wheel joins them, and the files and sizes are printed; `carried` then reads the wheels' metadata."""
    env = sandbox_env(tmp_path / "sandbox", wheels_only=True)
    script = str(ROOT / "scripts" / "device_packages.py")
    bare = subprocess.run([sys.executable, script, "carried"], capture_output=True, text=True, timeout=120,
                          env={**env, "DEVICE_WHEELS": str(tmp_path / "none")})
    assert bare.returncode == 1 and "make device-wheels" in bare.stderr and "Traceback" not in bare.stderr, bare.stderr
    wheels = tmp_path / "wheels"
    res = subprocess.run([sys.executable, script, "wheels", str(wheels)], capture_output=True, text=True,
                         timeout=600, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    files = sorted(wheels.glob("*.whl"))
    names = {canonicalize_name(f.name.split("-", 1)[0]) for f in files}
    assert names == {"tileops", "pydantic", "pydantic-core", "annotated-types", "typing-inspection", "platformdirs",
                     "docker"}
    for f in files:
        tags = f.name[:-4].split("-")[-3:]
        assert tags[0] in ("py3", "cp312") and (tags[2] == "any" or "manylinux" in tags[2] and "x86_64" in tags[2]), f
        assert f"{f.stat().st_size / 2**20:7.2f} MiB  {f.name}" in res.stdout
    assert sum(f.stat().st_size for f in files) <= 64 * 2**20 and "limit 64 MiB" in res.stdout
    listed = subprocess.run([sys.executable, script, "carried"], capture_output=True, text=True, timeout=120,
                            env={**env, "DEVICE_WHEELS": str(wheels)})
    assert listed.returncode == 0, listed.stderr
    assert {line.split("==")[0] for line in listed.stdout.splitlines()} == names - {"tileops"}


@pytest.mark.slow
def test_a_wheel_set_over_the_limit_fails_with_every_size(tmp_path: Path) -> None:
    """Over the device tool's 64 MiB the build fails, listing each wheel's size and the fix."""
    from device_packages import build_device_wheels

    with pytest.raises(ValueError, match=r"over the device tool's 0 MiB(.|\n)*pydantic_core-.*\.whl(.|\n)*fix: "):
        build_device_wheels(tmp_path, limit=1)
