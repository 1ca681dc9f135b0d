"""Stores from elsewhere (issue 38, item 4): a store the appliance did not just write, met by a reader and by the
command that would rewrite it.

Every (store x case) cell: the profile store, a device's calibration result and its history, a records file,
a run file and an audit file, each written by a newer schema version, by an older one, truncated, with one
field of the wrong type, or owned by another user without write permission (the file 0444, or its folder
0555). Each read gives an error naming the file, the line or field and what to do, or reads through a
documented migration; the command that would rewrite the file then stops with such an error (or keeps the
file's bytes, where its documented behaviour is to keep them aside), and no byte of the store changes.

The cells are real: the store is the one ``tileops calibrate --quick`` writes, the run the one a quick
``tileops bench`` writes, the audit file ``tileops audit``'s; the writers run as the command line does. Root
ignores permission bits, so when the tests run as root the read-only cells run their command as root without
the capabilities that override them (``setpriv``: CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER out of its
bounding set), which then meets the permission bits as any user does; otherwise as the test's own user; docs/reliability.md, "Stores from
elsewhere", holds the table.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from cli_support import tileops, tileops_argv

from tileops.audit.entry import read_entries
from tileops.cli import main
from tileops.errors import TileOpsError
from tileops.ledger import RESULTS_SCHEMA, load_device_history, read_device_result
from tileops.profiles import load_profile
from tileops.records import SCHEMA_VERSION, RunOptions, iter_records, read_run_info, torn_tail

HOST = "stores-elsewhere"
KEY = f"cpu-{HOST}"
OTHER_UID = 12345  # owns the read-only files: not the user the command runs as
#: what a root test drops to run a read-only cell's command as a user the permission bits apply to. Not another
#: uid: that user could not reach a checkout in a private folder (a CI's mktemp -d) to import tileops at all.
DROPPED_CAPS = "-dac_override,-dac_read_search,-fowner"
CASES = ("newer", "older", "truncated", "wrong-type", "read-only-file", "read-only-dir")

# --------------------------------------------------------------------------- the seed: real stores, made once


@pytest.fixture(scope="module")
def seed() -> Iterator[Path]:
    """A profile store from ``tileops calibrate --quick`` and a run directory from a quick ``tileops bench``
    and ``tileops audit``, outside pytest's private temp folder so another user can reach it."""
    root = Path(tempfile.mkdtemp(prefix="tileops-stores-seed-"))
    try:
        yield _seeded(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _seeded(root: Path) -> Path:
    os.chmod(root, 0o755)
    env = _env(root)
    tileops("calibrate", "--quick", "--device", "cpu", "--force", env=env, check=True)  # stored on a busy host too
    tileops("bench", "--quick", "--op", "relu", "--device", "cpu", "--calibrate", "never", "--no-plot",
            "--out", str(root / "run"), env=env, check=True)
    audited = tileops("audit", "--op", "relu", "--device", "cpu", "--out", str(root / "run"), env=env)
    assert audited.returncode == 1 and (root / "run" / "audit.jsonl").stat().st_size, audited.stderr[-2000:]
    run = json.loads((root / "run" / "run.json").read_text())
    run["status"], run["exit_code"] = "interrupted", 130  # a run to resume
    (root / "run" / "run.json").write_text(json.dumps(run, indent=2) + "\n")
    return root


def _env(root: Path) -> dict[str, str]:
    return {"TILEOPS_PROFILE_DIR": str(root / "store"), "TILEOPS_HOSTNAME": HOST, "HOME": str(root / "home"),
            "XDG_DATA_HOME": str(root / "xdg" / "data"), "XDG_CACHE_HOME": str(root / "xdg" / "cache"),
            "XDG_STATE_HOME": str(root / "xdg" / "state"), "XDG_CONFIG_HOME": str(root / "xdg" / "config")}


@pytest.fixture
def cell_root(seed: Path) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="tileops-stores-cell-"))
    os.chmod(root, 0o755)
    for name in ("store", "run"):
        shutil.copytree(seed / name, root / name)
    try:
        yield root
    finally:
        _remove(root)


def _remove(root: Path) -> None:
    for p in [root, *root.rglob("*")]:  # a 0555 folder cannot be emptied until it is writable again
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
    shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------- the stores


def _yaml_edit(edit: Callable[[dict], None]) -> Callable[[bytes], bytes]:
    def change(raw: bytes) -> bytes:
        data = yaml.safe_load(raw)
        edit(data)
        return yaml.safe_dump(data, sort_keys=False).encode()

    return change


def _jsonl_edit(edit: Callable[[dict], None]) -> Callable[[bytes], bytes]:
    """Each line edited (the first line is what a reader meets first)."""

    def change(raw: bytes) -> bytes:
        lines = []
        for line in raw.splitlines():
            data = json.loads(line)
            edit(data)
            lines.append(json.dumps(data, separators=(",", ":")).encode())
        return b"\n".join(lines) + b"\n"

    return change


def _json_edit(edit: Callable[[dict], None]) -> Callable[[bytes], bytes]:
    def change(raw: bytes) -> bytes:
        data = json.loads(raw)
        edit(data)
        return (json.dumps(data, indent=2) + "\n").encode()

    return change


def _set(**values: object) -> Callable[[dict], None]:
    return lambda d: d.update(values)


def _profile_newer(d: dict) -> None:
    d.update(schema_version=2, ceilings_by_clock={"boost": 1.0})


def _profile_older(d: dict) -> None:
    """A profile written before a CPU's estimated peak kept its factors (issue 29)."""
    for roof in d.get("compute", {}).values():
        roof.pop("peak", None)


def _result_newer(d: dict) -> None:
    d.update(schema_version=RESULTS_SCHEMA + 1, power_profile={"mode": "max-q"})


def _result_older(d: dict) -> None:
    """Schema 1: the device's facts as flat fields, before the machine description was shared."""
    m = d.pop("machine")
    dev = m["device"]
    d.update(schema_version=1, kind=dev["kind"], name=dev["name"], uuid=dev.get("uuid"), index=dev.get("index"),
             hostname=dev["hostname"], driver=m.get("driver"), cuda=m.get("cuda"), cpu_model=m.get("cpu_model"),
             threads=m.get("threads"), l2_bytes=m.get("l2_bytes"), torch_version=m.get("torch_version", ""),
             tool_version="tileops " + str(m.get("tileops_version", "")))
    for key in ("conditions", "power_state", "power_blank", "host", "marked", "clock", "clock_not_measured"):
        d.pop(key, None)


def _record_newer(d: dict) -> None:
    d.update(schema_version=SCHEMA_VERSION + 1, energy_j=1.5)


def _record_older(d: dict) -> None:
    """The environment's device as flat fields (before ``DeviceIdentity``), without row conditions."""
    env = d["env"]
    dev = env.pop("device")
    env.update(device_kind=dev["kind"], device_name=dev["name"], device_uuid=dev["uuid"],
               device_index=dev["index"], hostname=dev["hostname"])
    d.pop("conditions", None)


def _run_newer(d: dict) -> None:
    d.update(schema_version=2, shards=[{"host": "a"}])


def _run_older(d: dict) -> None:
    """A run file of before the options were kept whole, and before issue 34's host model."""
    for key in ("options", "threads", "quiet", "stopping_rule", "host_allocator", "host_noise"):
        d.pop(key, None)
    d["host_drift"] = {"sigma": 0.01}


def _audit_newer(d: dict) -> None:
    """What a newer tileops writes: fields added (the audit's contract never changes or removes one)."""
    d.update(l2_read_bytes=1024)


OLD_GPU = "NVIDIA H100 80GB HBM3"


def _audit_older(d: dict) -> None:
    """An audit line of a GPU host from before the device was nested: flat ``device_name``, ``device_uuid``."""
    d.pop("device", None)
    d.update(device_name=OLD_GPU, device_uuid="GPU-12345678-1234-1234-1234-123456789abc", hostname=HOST)


#: What each store's older file reads as: today's shape, with what the migration says.
MIGRATED: dict[str, Callable[[object], bool]] = {
    "profile": lambda p: any("written before" in (r.not_a_bound or "") for r in p.compute.values()),  # type: ignore[attr-defined]
    "calibration": lambda r: r.schema_version == RESULTS_SCHEMA and r.hostname == HOST,  # type: ignore[attr-defined]
    "history": lambda h: [r.hostname for r in h] == [HOST],  # type: ignore[attr-defined]
    "records": lambda rs: {r.env.device.hostname for r in rs} == {HOST} and all(  # type: ignore[attr-defined]
        r.conditions is None for r in rs),  # type: ignore[attr-defined]
    "run.json": lambda i: i.options == RunOptions() and bool(i.host_drift),  # type: ignore[attr-defined]
    "audit": lambda es: {e.device.name for e in es} == {OLD_GPU},  # type: ignore[attr-defined]
}


def _audit_wrong(d: dict) -> None:
    d["kernels"] = "three"


def _read_profiles(path: Path) -> object:
    return load_profile(path)


def _read_history(path: Path) -> object:
    read_device_result(path)  # the one file, located
    return load_device_history(KEY, path.parents[3])


def _read_records(path: Path) -> object:
    return list(iter_records(path))


def _read_run(path: Path) -> object:
    return read_run_info(path.parent)


def _read_audit(path: Path) -> object:
    return read_entries(path)


@dataclass(frozen=True)
class Store:
    name: str
    find: Callable[[Path], Path]  # the file of a cell's root
    read: Callable[[Path], object]  # the library's reader of it
    writer: Callable[[Path], list[str]]  # the command that would rewrite it
    newer: Callable[[bytes], bytes]
    older: Callable[[bytes], bytes]
    wrong: Callable[[bytes], bytes]
    wrong_field: str  # the field the wrong-type case names
    kept_aside: bool = False  # a torn (truncated) file's whole part stays and its fragment is moved aside


def _model_profile(root: Path) -> Path:
    return next(p for p in sorted((root / "store").glob("*.yaml")))


def _history_file(root: Path) -> Path:
    return next(iter(sorted((root / "store" / "devices" / "history" / KEY).glob("*.yaml"))))


CALIBRATE = ["calibrate", "--quick", "--device", "cpu"]
#: Where the calibration goes on (its store is readable), stored on a busy host too (exit 5 otherwise): ``--force``
#: never replaces a history file, nor writes where the permissions say no.
CALIBRATE_ANYWAY = [*CALIBRATE, "--force"]


def _resume(root: Path) -> list[str]:
    return ["bench", "--resume", str(root / "run")]


def _audit(root: Path) -> list[str]:
    return ["audit", "--op", "relu", "--device", "cpu", "--out", str(root / "run")]


STORES = {s.name: s for s in (
    Store("profile", _model_profile, _read_profiles, lambda r: CALIBRATE,
          _yaml_edit(_profile_newer), _yaml_edit(_profile_older), _yaml_edit(_set(latency_floor_s="fast")),
          "latency_floor_s"),
    Store("calibration", lambda r: r / "store" / "devices" / f"{KEY}.yaml", read_device_result, lambda r: CALIBRATE,
          _yaml_edit(_result_newer), _yaml_edit(_result_older), _yaml_edit(_set(quick="maybe")), "quick"),
    Store("history", _history_file, _read_history, lambda r: CALIBRATE_ANYWAY,
          _yaml_edit(_result_newer), _yaml_edit(_result_older), _yaml_edit(_set(started_at=[1, 2])), "started_at"),
    Store("records", lambda r: r / "run" / "records.jsonl", _read_records, _resume,
          _jsonl_edit(_record_newer), _jsonl_edit(_record_older), _jsonl_edit(_set(flops="many")), "flops",
          kept_aside=True),
    Store("run.json", lambda r: r / "run" / "run.json", _read_run, _resume,
          _json_edit(_run_newer), _json_edit(_run_older), _json_edit(_set(rows_total="two")), "rows_total"),
    Store("audit", lambda r: r / "run" / "audit.jsonl", _read_audit, _audit,
          _jsonl_edit(_audit_newer), _jsonl_edit(_audit_older), _jsonl_edit(_audit_wrong), "kernels",
          kept_aside=True),
)}

#: What each cell must do. "error": the read raises naming the file, the field or line, and a fix, and the
#: writer exits 2 saying so, nothing changed. "migrates": the read succeeds (a documented migration), the file
#: unchanged. "ignored": a newer audit line's unknown fields are ignored (fields are only ever added to it).
#: "torn": the whole lines read, the fragment skipped; the writer keeps it aside byte for byte.
#: "refused": the read succeeds; the writer, as a user who may not write the file, exits 2 naming it.
EXPECT: dict[tuple[str, str], str] = {}
for _s in STORES:
    EXPECT.update({(_s, "newer"): "error", (_s, "older"): "migrates", (_s, "truncated"): "error",
                   (_s, "wrong-type"): "error", (_s, "read-only-file"): "refused", (_s, "read-only-dir"): "refused"})
EXPECT[("audit", "newer")] = "ignored"
EXPECT[("records", "truncated")] = EXPECT[("audit", "truncated")] = "torn"
#: History files are never rewritten: a calibration adds a file beside them, so an unreadable or read-only one is
#: named in a warning and left as it is, and the calibration goes on.
for _c in ("newer", "truncated", "wrong-type", "read-only-file"):
    EXPECT[("history", _c)] = "left" if _c == "read-only-file" else "warned"


# --------------------------------------------------------------------------- helpers


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file of the cell and its bytes (a folder: None), but the run's lock file (the lock, not a store)."""
    out: dict[str, bytes | None] = {}
    for p in sorted(root.rglob("*")):
        if p.name == "run.lock":
            continue
        out[str(p.relative_to(root))] = None if p.is_dir() else p.read_bytes()
    return out


def _truncate(raw: bytes) -> bytes:
    """Cut short in the middle of its last part, as a copy stopped half-way leaves it."""
    return raw[: max(1, int(len(raw) * 0.7))]


def make_cell(root: Path, store: Store, case: str) -> Path:
    path = store.find(root)
    raw = path.read_bytes()
    change = {"newer": store.newer, "older": store.older, "truncated": _truncate, "wrong-type": store.wrong}
    if case in change:
        path.write_bytes(change[case](raw))
    if (store.name, case) == ("calibration", "older"):  # schema 1 came before the history: a store of that time
        shutil.rmtree(root / "store" / "devices" / "history")
    return path


def as_other_user() -> list[str] | None:
    """The prefix that runs a command as a user who does not own the read-only files (None: the tests already
    run as one). Root writes whatever the permission bits say, so root runs it without the capabilities that let
    it (:data:`DROPPED_CAPS`)."""
    if os.geteuid() != 0:
        return None
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        msg = "the read-only cells need setpriv (util-linux) to run a command as another user than root"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return [setpriv, f"--bounding-set={DROPPED_CAPS}", "--"]


def make_read_only(root: Path, path: Path, case: str) -> None:
    """The runner owns the cell; ``path`` (or its folder) belongs to another user, without write permission."""
    target = path if case == "read-only-file" else path.parent
    if os.geteuid() == 0:
        os.chown(target, OTHER_UID, OTHER_UID)
    target.chmod(0o444 if case == "read-only-file" else 0o555)


def run_writer(root: Path, argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
               other_user: bool) -> tuple[int, str]:
    """The command, in this process, or as the other user in a child process; its exit code and stderr."""
    env = _env(root)
    if other_user:
        prefix = as_other_user()
        if prefix is not None:
            full = {**os.environ, **env}
            r = subprocess.run([*prefix, *tileops_argv(*argv)], capture_output=True, text=True, env=full,
                               timeout=300, cwd=root)
            return r.returncode, r.stderr
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(root)
    capsys.readouterr()
    rc = main(argv)
    return rc, capsys.readouterr().err


def assert_located(text: str, path: Path, where: str) -> None:
    """``text`` names the file (a relative ``path``: as the end of the one named), the field (or line) and what
    to do."""
    assert str(path) in text or path.name in text, text
    assert where in text, f"{where!r} not named in: {text}"
    assert re.search(r"\b(fix|upgrade|re-run|remove|move|give|run|chmod|replace|restore)\b", text), text


# --------------------------------------------------------------------------- the cells


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", list(STORES))
def test_a_store_from_elsewhere_is_read_or_named_and_never_overwritten(
        name: str, case: str, cell_root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    store, expect = STORES[name], EXPECT[(name, case)]
    path = make_cell(cell_root, store, case)
    read_only = case.startswith("read-only")
    if read_only:
        make_read_only(cell_root, path, case)
    before = snapshot(cell_root)
    check_read(name, case, expect, path)
    assert snapshot(cell_root) == before, "a read changed the store"
    if expect in ("migrates", "ignored") and name != "calibration":
        return  # a reader's cell: the writers' own tests hold what a rewrite of a readable file keeps
    argv = CALIBRATE_ANYWAY if (name, case) == ("calibration", "older") else store.writer(cell_root)
    rc, err_text = run_writer(cell_root, argv, monkeypatch, capsys, read_only)
    check_rewrite(name, case, expect, path.relative_to(cell_root), before, snapshot(cell_root), rc, err_text)


def _field(name: str, case: str) -> str:
    return {"newer": "schema_version", "wrong-type": STORES[name].wrong_field}.get(case, "")


def check_read(name: str, case: str, expect: str, path: Path) -> None:
    """The library's read of the cell's file: a located error, the whole lines of a torn file, or a migration."""
    store = STORES[name]
    if expect in ("error", "warned"):
        with pytest.raises(TileOpsError) as err:
            store.read(path) if expect == "error" else read_device_result(path)
        assert_located(str(err.value), path, _field(name, case))
        if case == "newer":
            assert "newer" in str(err.value) and "upgrade" in str(err.value), err.value
    elif expect == "torn":
        fragment = torn_tail(path)
        assert fragment, "the cut leaves a torn last line"
        assert len(store.read(path)) == path.read_bytes()[: -len(fragment)].count(b"\n")  # type: ignore[arg-type]
    else:
        got = store.read(path)
        assert got is not None
        if case == "older":
            assert MIGRATED[name](got), f"{name}: the older file did not read as today's"


def check_rewrite(name: str, case: str, expect: str, rel: Path, before: dict[str, bytes | None],
                  after: dict[str, bytes | None], rc: int, err: str) -> None:
    """What the command that would rewrite the file did to the store (``before``, ``after``: every file)."""
    key, old = str(rel), before[str(rel)]
    assert old is not None
    if expect in ("error", "refused"):
        assert rc == 2, err
        named = rel.parent if case == "read-only-dir" else rel  # what the person must change
        assert_located(err, named, _field(name, case))
        if case.startswith("read-only"):
            assert "not writable" in err, err
        assert after == before, f"{name}: the command changed a store it could not read or may not write"
    elif expect == "torn":  # the whole part stays; the rest is kept aside byte for byte
        fragment = old[old.rfind(b"\n") + 1:]
        if name == "audit":
            assert after[key + ".prev"] == old, "the audit did not keep the file it moved"
        else:
            assert (after[key] or b"").startswith(old[: -len(fragment)])
            assert [v for k, v in after.items() if k.startswith(key + ".torn-")] == [fragment]
    elif expect in ("warned", "left"):
        assert rc == 0, err
        assert after[key] == old
        if expect == "warned":
            assert_located(err, rel, "")
    else:  # an older calibration result: kept byte for byte in the history, then replaced
        assert rc == 0, err
        assert old in [v for k, v in after.items() if "/history/" in k], "the older result was not kept"


# --------------------------------------------------------------------------- the person's word, and the bench's step


def test_calibrate_force_keeps_an_unreadable_result_aside_and_stores_the_new_one(
        cell_root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """``--force`` is the person's word to store over a result this tileops cannot read: the old file is moved
    aside byte for byte (``<key>.yaml.unreadable-<time>``), never lost."""
    path = make_cell(cell_root, STORES["calibration"], "newer")
    old = path.read_bytes()
    rc, err = run_writer(cell_root, CALIBRATE_ANYWAY, monkeypatch, capsys, False)
    assert rc == 0, err
    aside = list(path.parent.glob(f"{path.name}.unreadable-*"))
    assert [p.read_bytes() for p in aside] == [old]
    assert read_device_result(path).schema_version == RESULTS_SCHEMA


def test_the_bench_calibration_step_stops_before_replacing_an_unreadable_result(
        cell_root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """The bench calibrates its device when the stored result is unreadable; it has no word of the person's to
    replace it, so it stops (exit 2) naming the file and the ways out, before any row, the store unchanged."""
    path = make_cell(cell_root, STORES["calibration"], "truncated")
    before = snapshot(cell_root / "store")
    rc, err = run_writer(cell_root, ["bench", "--quick", "--op", "relu", "--device", "cpu", "--no-plot", "--out",
                                     str(cell_root / "new")], monkeypatch, capsys, False)
    assert rc == 2, err
    assert_located(err, path, "--calibrate never")
    assert snapshot(cell_root / "store") == before
    assert not (cell_root / "new" / "records.jsonl").exists()
