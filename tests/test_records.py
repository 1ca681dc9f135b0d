"""The record contract (tileops.records): strict, located, finite, and readable back exactly as written."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from roofline_fixtures import make_record

from tileops.records.contract import CpuConditions, GpuConditions, RowConditions, SchedulerSlices
from tileops.records import (AuditEntry, DeviceIdentity, Environment, Machine, Record, RecordFileError, RunInfo,
                             append_record, from_data, iter_records, load_records, parse_record, read_audit,
                             read_run_info, to_data, to_json, torn_tail, utcnow, write_run_info)


def _line(rec: Record, **changes: object) -> str:
    data = to_data(rec)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        obj = data
        for p in parents:
            obj = obj[p]
        if value is ...:
            del obj[leaf]
        else:
            obj[leaf] = value
    return json.dumps(data)


def test_a_record_written_before_intervals_and_conditions_reads_with_them_blank() -> None:
    data = to_data(make_record())
    del data["conditions"], data["timing"]["median_ci_s"]
    back = parse_record(json.dumps(data))
    assert back.conditions is None and back.timing is not None and back.timing.median_ci_s is None
    with_them = dataclasses.replace(make_record(), timing=dataclasses.replace(make_record().timing,
                                                                              median_ci_s=[0.95, 1.1]),
                                    conditions=RowConditions(window_s=1.0, cpu=CpuConditions(cores=2)))
    assert parse_record(to_json(with_them)) == with_them


def test_round_trip_is_exact(tmp_path: Path) -> None:
    rec = make_record(data_terms={"experts_hit": 3, "rows": [1, 2]}, shapes={"x": [4, 8]}, params={"a": 1.5})
    path = tmp_path / "records.jsonl"
    append_record(path, rec)
    append_record(path, make_record(status="error"))
    back = list(iter_records(path))
    assert back[0] == rec and back[1].error is not None and back[1].error.kind == "exception"
    assert parse_record(to_json(rec)) == rec


@pytest.mark.parametrize(("changes", "field", "why"), [
    ({"timing__median_s": -1.0}, "timing.median_s", "must be >= 1e-12"),
    ({"timing__median_s": 5e-324}, "timing.median_s", "must be >= 1e-12"),  # would price an infinite rate
    ({"timing__total_s": 1e300}, "timing.total_s", "must be <= 1000000000"),
    ({"timing__median_s": "fast"}, "timing.median_s", "expected a number"),
    ({"flops": 1.5}, "flops", "whole number"),
    ({"flops": 2**70}, "flops", "must be <="),
    ({"bytes": True}, "bytes", "whole number"),
    ({"status": "great"}, "status", "expected one of ok, error, skipped"),
    ({"env__device__kind": "tpu"}, "env.device.kind", "expected one of cpu, cuda"),
    ({"env__device__index": True}, "env.device.index", "whole number"),
    ({"env__device": ...}, "env.device", "missing"),
    ({"env__device_kind": "cpu"}, "env.device_kind", "beside `device`"),  # both shapes in one line
    ({"op": ...}, "op", "missing"),
    ({"colour": "blue"}, "colour", "unknown field"),
    ({"shapes": {"x": [4, "8"]}}, "shapes.x.1", "whole number"),
    ({"started_at": "yesterday"}, "started_at", "ISO 8601"),
    ({"params": {"scale": 1e400}}, "params.scale", "finite"),
    ({"timing__median_ci_s": [1.2, 0.9]}, "timing.median_ci_s", "lo <= median_s <= hi"),
    ({"timing__median_ci_s": [0.5, 0.9]}, "timing.median_ci_s", "lo <= median_s <= hi"),  # misses the median
    ({"timing__median_ci_s": [0.9]}, "timing.median_ci_s", "two finite numbers"),
    ({"timing__median_ci_s": [0.0, 1.2]}, "timing.median_ci_s", "lo <= median_s <= hi"),
    ({"conditions": {"contended": True}}, "conditions.window_s", "missing"),
])
def test_a_bad_line_is_named_by_file_line_and_field(tmp_path: Path, changes: dict, field: str, why: str) -> None:
    path = tmp_path / "records.jsonl"
    good = to_json(make_record())
    path.write_text(good + "\n" + _line(make_record(), **changes) + "\n" + good + "\n")
    with pytest.raises(RecordFileError) as err:
        list(iter_records(path))
    msg = str(err.value)
    assert f"{path}:2:" in msg and field in msg and why in msg, msg


def test_non_finite_numbers_are_refused_wherever_they_are(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    for token in ("Infinity", "NaN", "-Infinity"):
        path.write_text(to_json(make_record()).replace('"median_s":1.0', f'"median_s":{token}') + "\n")
        with pytest.raises(RecordFileError, match=r":1: .*finite"):
            list(iter_records(path))


def test_a_complete_bad_last_line_is_an_error_but_a_torn_tail_is_not_yet_a_record(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    good = to_json(make_record())
    path.write_text(good + "\n" + good[: len(good) // 2])  # killed mid-write: no newline
    assert len(list(iter_records(path))) == 1
    assert torn_tail(path) == good[: len(good) // 2].encode()
    path.write_text(good + "\n" + good[: len(good) // 2] + "\n")  # the same bytes, but a whole line
    with pytest.raises(RecordFileError, match=r":2: not a valid record \(not JSON"):
        list(iter_records(path))
    assert torn_tail(path) is None


def test_not_utf8_is_a_located_error(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_bytes(to_json(make_record()).encode() + b"\n\xff\xfe\n")
    with pytest.raises(RecordFileError, match=r":2: not UTF-8"):
        list(iter_records(path))


def test_load_records_reads_run_directories_and_files(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    append_record(run / "records.jsonl", make_record())
    assert len(load_records([run, run / "records.jsonl"])) == 2
    with pytest.raises(FileNotFoundError, match="no records file"):
        load_records([tmp_path / "nothing"])


def test_run_info_round_trip_and_errors(tmp_path: Path) -> None:
    info = RunInfo(run_id="r1", started_at=utcnow(), argv=["bench"], selection={"ops": ["relu"]}, rows_total=3)
    write_run_info(tmp_path, info)
    assert read_run_info(tmp_path) == info
    assert read_run_info(tmp_path / "absent") is None
    (tmp_path / "run.json").write_text(json.dumps({**to_data(info), "status": "exploded"}))
    with pytest.raises(RecordFileError, match=r"run.json: not a valid run file \(status: expected one of"):
        read_run_info(tmp_path)


def test_audit_entries_ignore_fields_they_do_not_need_but_check_those_they_do(tmp_path: Path) -> None:
    entry = {"op": "relu", "label": "r", "dtype": "float32", "backend": "torch", "verdict": "FAIL",
             "measured_read_bytes": 50, "expected_read_bytes": 100, "premise": "cold caches", "kernels": 2}
    (tmp_path / "audit.jsonl").write_text(json.dumps(entry) + "\n")
    (got,) = read_audit(tmp_path)
    assert got.verdict == "FAIL" and got.read_ratio == 0.5 and got.key == ("relu", "r", "float32", "torch")
    (tmp_path / "audit.jsonl").write_text(json.dumps({**entry, "verdict": "MAYBE"}) + "\n")
    with pytest.raises(RecordFileError, match=r"audit.jsonl:1: not a valid audit entry \(verdict"):
        read_audit(tmp_path)
    assert read_audit(tmp_path / "nowhere") == []


def test_environment_is_a_machine_and_keys_a_cpu_by_host() -> None:
    env = make_record().env
    assert isinstance(env, Machine) and isinstance(env, Environment)
    assert env.device.key == "cpu-test"
    gpu = dataclasses.replace(env, device=dataclasses.replace(env.device, kind="cuda", uuid="GPU-1"))
    assert gpu.device.key == "GPU-1"
    assert from_data(Machine, {k: v for k, v in to_data(env).items()
                               if k in {f.name for f in dataclasses.fields(Machine)}}).device == env.device


# --------------------------------------------------------------------------- the device's older flat shape

_GPU = DeviceIdentity(kind="cuda", name="NVIDIA H200", uuid="GPU-5e1f", index=1, hostname="gpu-node-1")


def _flat_env(env: Environment) -> dict:
    """An environment as files before the device was nested wrote it: ``device_kind``, ..., ``hostname``."""
    data = to_data(env)
    device = data.pop("device")
    return {**data, "device_kind": device["kind"], "device_name": device["name"], "device_uuid": device["uuid"],
            "device_index": device["index"], "hostname": device["hostname"]}


def _both_readers(path: Path, monkeypatch: pytest.MonkeyPatch, read=iter_records) -> list:
    """What ``read`` makes of ``path`` with msgspec's mirror first (where installed), and with the standard
    decoder alone; held equal."""
    from tileops.records import decode

    fast = list(read(path))
    with monkeypatch.context() as m:
        m.setattr(decode, "_fast_reader", lambda cls, declined: None)
        slow = list(read(path))
    assert fast == slow
    return fast


def test_a_record_with_the_flat_device_reads_as_the_nested_one(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    rec = dataclasses.replace(make_record(), env=dataclasses.replace(make_record().env, device=_GPU))
    new = json.loads(to_json(rec))
    assert new["env"]["device"] == {"kind": "cuda", "name": "NVIDIA H200", "uuid": "GPU-5e1f", "index": 1,
                                    "hostname": "gpu-node-1"}
    assert not {"device_kind", "device_name", "device_uuid", "device_index", "hostname"} & set(new["env"])
    old = {**new, "env": _flat_env(rec.env)}
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(old) + "\n" + json.dumps(new) + "\n")
    from_old, from_new = _both_readers(path, monkeypatch)
    assert from_old == from_new == rec and from_old.env.device.key == "GPU-5e1f"
    # an old CPU line (no uuid, no index: keyed by its host) too
    cpu = make_record()
    path.write_text(json.dumps({**to_data(cpu), "env": {
        k: v for k, v in _flat_env(cpu.env).items() if k not in ("device_uuid", "device_index")}}) + "\n")
    (back,) = _both_readers(path, monkeypatch)
    assert back == cpu and back.env.device.key == "cpu-test"


@pytest.mark.parametrize(("env_change", "field"), [
    ({"device_uuid": "GPU-other"}, "env.device_uuid"),  # both shapes, and a conflicting pair
    ({"hostname": "test"}, "env.hostname"),  # both shapes, even agreeing
])
def test_a_line_with_both_device_shapes_is_refused_naming_the_flat_field(tmp_path: Path, env_change: dict,
                                                                         field: str) -> None:
    data = to_data(make_record())
    data["env"].update(env_change)
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(data) + "\n")
    with pytest.raises(RecordFileError, match=rf"records.jsonl:1: .*{re.escape(field)}: the older flat device "
                                              r"field beside `device`"):
        list(iter_records(path))


def test_a_machine_with_the_flat_device_reads_as_the_nested_one() -> None:
    env = dataclasses.replace(make_record().env, device=_GPU)
    machine_fields = {f.name for f in dataclasses.fields(Machine)} | {
        "device_kind", "device_name", "device_uuid", "device_index", "hostname"}
    old = {k: v for k, v in _flat_env(env).items() if k in machine_fields}
    new = {k: v for k, v in to_data(env).items() if k in machine_fields}
    assert from_data(Machine, old) == from_data(Machine, new) and from_data(Machine, new).device == _GPU
    with pytest.raises(ValueError, match=r"^device_name: the older flat device field beside `device`"):
        from_data(Machine, {**new, "device_name": "NVIDIA H200"})


_ENTRY = {"op": "relu", "label": "r", "dtype": "float32", "backend": "torch", "verdict": "PASS",
          "measured_read_bytes": 100, "expected_read_bytes": 100, "kernels": 1}


def test_an_audit_entry_with_the_flat_device_reads_as_the_nested_one(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    entry = AuditEntry(**_ENTRY, device=DeviceIdentity(kind="cuda", name="NVIDIA H200", uuid="GPU-5e1f",
                                                       hostname="gpu-node-1"))
    new = json.loads(to_json(entry))
    assert new["device"]["uuid"] == "GPU-5e1f" and new["hostname"] is None and "device_uuid" not in new
    old = {**_ENTRY, "device_name": "NVIDIA H200", "device_uuid": "GPU-5e1f", "hostname": "gpu-node-1"}
    # an audit on a host without a GPU named its host alone: it still does
    no_gpu_old = {**_ENTRY, "device_name": None, "device_uuid": None, "hostname": "node-a"}
    no_gpu_new = json.loads(to_json(AuditEntry(**_ENTRY, hostname="node-a")))
    (tmp_path / "audit.jsonl").write_text("".join(json.dumps(d) + "\n" for d in (old, new, no_gpu_old, no_gpu_new)))
    from_old, from_new, host_old, host_new = _both_readers(tmp_path, monkeypatch, read_audit)
    assert from_old == from_new == entry
    assert host_old == host_new and host_new.device is None and host_new.hostname == "node-a"


@pytest.mark.parametrize(("line", "field"), [
    ({"device_uuid": "GPU-other"}, "device_uuid"),
    ({"hostname": "gpu-node-1"}, "hostname"),  # the device holds the host: an entry keeps it once
    ({"device_name": None}, "device_name"),
])
def test_an_audit_entry_with_both_device_shapes_is_refused_naming_the_flat_field(tmp_path: Path, line: dict,
                                                                                  field: str) -> None:
    new = json.loads(to_json(AuditEntry(**_ENTRY, device=_GPU)))
    (tmp_path / "audit.jsonl").write_text(json.dumps({**new, **line}) + "\n")
    with pytest.raises(RecordFileError, match=rf"audit.jsonl:1: not a valid audit entry \({field}: the older flat "):
        read_audit(tmp_path)


def test_from_data_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"^verdict: expected one of"):
        from_data(AuditEntry, {"op": "a", "label": "b", "dtype": "c", "backend": "d", "verdict": "no"})


# --------------------------------------------------------------------------- the fast reader


def _mutations(data: dict) -> list[dict]:
    """The record's data with one value (at any depth) replaced by every kind of wrong or edge value."""
    odd = [None, True, False, 0, 1, -1, 2, 2**63, 2**70, 10**400, 0.0, -0.0, 1.5, -1.5, 5e-324, 1e308,
           float("inf"), float("-inf"), float("nan"), "", "ok", "cpu", "2026-01-01T00:00:00Z", "x", [], [1], ["a"],
           {}, {"a": 1}, {"a": float("nan")}, {"a": [1, "b"]}, [float("inf")]]
    out: list[dict] = []

    def walk(obj: dict, path: tuple) -> None:
        for key, value in list(obj.items()):
            for bad in odd:
                out.append(_replace(data, path + (key,), bad))
            out.append(_replace(data, path + (key,), ...))  # missing
            if isinstance(value, dict) and key not in ("params", "data_terms", "clocks_before", "clocks_after"):
                walk(value, path + (key,))
        out.append(_replace(data, path + ("surplus",), 1))  # unknown

    walk(data, ())
    return out


def _replace(data: dict, path: tuple, value: object) -> dict:
    copy = json.loads(json.dumps(data))
    obj = copy
    for p in path[:-1]:
        obj = obj[p]
    if value is ...:
        obj.pop(path[-1], None)
    else:
        obj[path[-1]] = value
    return copy


def _outcome(decode, data: dict) -> tuple:
    from tileops.records.decode import Invalid
    try:
        obj = decode(data)
    except Invalid as exc:
        return ("invalid", tuple(exc.path), exc.message)
    # equal objects, and every value of the same type (1 is not 1.0, a datetime is not a string)
    return ("ok", obj, repr(to_data(obj)), _types(obj))


def _types(obj: object) -> list:
    if dataclasses.is_dataclass(obj):
        return [(f.name, type(getattr(obj, f.name)).__name__, _types(getattr(obj, f.name)))
                for f in dataclasses.fields(obj)]
    return []


def _read_alike(read, lines: list[bytes], monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """What ``read`` makes of each line with msgspec, held equal to what it makes with the standard reader."""
    from tileops.records import decode

    fast = [read(line) for line in lines]
    monkeypatch.setattr(decode, "_fast_reader", lambda cls, declined: None)
    slow = [read(line) for line in lines]
    for line, f, s in zip(lines, fast, slow):
        assert f == s, line
    return fast


_RECORDS = [
    make_record(data_terms={"experts_hit": 3, "rows": [1, 2]}, shapes={"x": [4, 8]}, params={"a": 1.5},
                tags=["t"]),
    make_record(status="error"),
    make_record(status="skipped", flops=None, bytes=None),
    dataclasses.replace(make_record(), env=dataclasses.replace(
        make_record().env, device=DeviceIdentity(kind="cuda", name="Test GPU", uuid="GPU-1", index=0, hostname="h"),
        threads=4, l2_bytes=1 << 20, clocks_before={"sm_mhz": 1980, "power_w": 300.5})),
    dataclasses.replace(make_record(), timing=dataclasses.replace(make_record().timing, median_ci_s=[0.9, 1.25]),
                        conditions=RowConditions(
                            window_s=2.5, contended=True, contention=["steal 4 %"], throttled=True,
                            power_capped=True,
                            cpu=CpuConditions(cores=2, steal=0.04, others_busy=0.01, load1_start=0.5,
                                              blank={"energy_j": "no RAPL"}),
                            gpu=GpuConditions(other_processes=[12], sm_mhz_min=1500.0, sm_mhz_max=1980.0,
                                              sm_mhz_readings=7, clock_events=["sw_power_cap"],
                                              clock_event_mask=4, power_w=690.5, power_limit_w=700.0,
                                              energy_j=12.5, power_capped_s=0.3))),
    # issue 37: a row timed in scheduler slices, on one thread
    dataclasses.replace(make_record(), env=dataclasses.replace(make_record().env, threads=1),
                        timing=dataclasses.replace(make_record().timing, level_ci_s=[0.5, 3.0], slices=SchedulerSlices(
                            slow=12, samples=40, fast_s=0.6, slow_s=2.5, slice_s=1.5e-3,
                            slice_source="the kernel's default for 2 CPUs (0.75 ms x 2): no slice file readable"))),
]


@pytest.mark.slow
@pytest.mark.parametrize("record", _RECORDS)
def test_msgspec_and_the_standard_reader_read_every_mutation_alike(record: Record, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Readers of many records read a line with msgspec (``tileops.records.fast``, the fast path of
    ``tileops.records.decode.line_decoder``) and hand what it declines to the field-by-field decoder; over every one-value mutation of a record a file reads the same either
    way: the same record with the same value types, or the same located error."""
    pytest.importorskip("msgspec")
    lines = [json.dumps(d).encode() for d in _mutations(to_data(record))]
    assert len(lines) > 1000
    path = tmp_path / "records.jsonl"
    fast = _read_alike(lambda line: _read_one(path, line), lines, monkeypatch)
    assert sum(f[0] == "ok" for f in fast) > 50  # the mutations include many a record may legitimately hold


def test_msgspec_reads_an_audit_entry_as_the_standard_reader_does(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """An audit entry ignores fields it does not know (``ignore_unknown``); the mirror does the same."""
    pytest.importorskip("msgspec")
    entry = {"op": "relu", "label": "r", "dtype": "float32", "backend": "torch", "verdict": "FAIL",
             "measured_read_bytes": 50, "expected_read_bytes": 100, "kernels": 2, "params": {"n": 8},
             "duration_ns": 12.5, "future_field": [1]}
    lines = [json.dumps(d).encode() for d in _mutations(entry)]
    path = tmp_path / "audit.jsonl"
    fast = _read_alike(lambda line: _read_one(path, line, lambda _: read_audit(tmp_path)), lines, monkeypatch)
    assert sum(f[0] == "ok" for f in fast) > 20 and sum(f[0] == "error" for f in fast) > 100


def test_collecting_rarely_restores_the_collector() -> None:
    import gc

    from tileops.records import collecting_rarely

    before = gc.get_threshold()
    gc.freeze()  # what Python 3.12 starts with: objects already frozen, which must not keep ours frozen after
    with collecting_rarely():
        assert gc.get_threshold()[0] == 100_000 and gc.get_freeze_count() > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


# --------------------------------------------------------------------------- odd tokens


def _read_one(path: Path, line: bytes, read=iter_records) -> tuple:
    """What ``read`` makes of a file holding this one line: the object (with its value types), or the error."""
    path.write_bytes(line + b"\n")
    try:
        (rec,) = read(path)
    except RecordFileError as exc:
        return ("error", str(exc))
    return ("ok", rec, repr(to_data(rec)), _types(rec))


def test_msgspec_and_the_standard_reader_read_every_token_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond mutations of values, the tokens where JSON parsers differ (integers beyond 64 bits, NaN,
    floats beyond range, lone surrogates, a byte-order mark, duplicate keys, odd times, whitespace, bytes
    that are not UTF-8): a file reads the same with msgspec as with the standard library alone."""
    pytest.importorskip("msgspec")

    base = make_record(data_terms={"rows": [1, 2]}, shapes={"x": [4, 8]}, params={"a": 1.5})
    lines = [json.dumps(d).encode() for d in _mutations(to_data(base))]
    good = to_json(base)
    for token in ("9223372036854775807", "9223372036854775808", "-9223372036854775809", "18446744073709551616",
                  str(2**70), "12345678901234567890.5", "1e400", "NaN", "-Infinity", "0.00012345678901234567",
                  '"\\ud800"', "1E5", "-0"):
        lines.append(good.replace('"params":{"a":1.5}', f'"params":{{"a":{token}}}').encode())
        lines.append(good.replace('"flops":', f'"flops":{token},"x":').encode())  # unknown field after it
        lines.append(good.replace('"bytes":', f'"bytes":{token},"bytes":').encode())  # a duplicate key: refused by both
    for when in ("2026-01-01", "2026-01-01 00:00:00", "2026-01-01T00:00:00.1234567+00:00", "20260101T000000Z",
                 "2026-01-01T23:59:60Z", "2026-13-01T00:00:00Z", "2026-01-01T00:00:00+25:00", "2026-01-01T00:00Z"):
        lines.append(re.sub(r'"started_at":"[^"]*"', f'"started_at":"{when}"', good).encode())
        lines.append(good.replace('"finished_at":"', f'"finished_at":"{when}","finished_at":"').encode())  # refused by both
    lines += [b"\xef\xbb\xbf" + good.encode(), b"  " + good.encode() + b"  ", good.encode()[:-1], b"[1,]",
              good.encode().replace(b'"label":"', b'"label":"\xff'), good.encode().replace(b'"op":"', b'"op":"\xc3\xa9'),
              good.encode().replace(b'"label":"', b'"label":"\\u00e9\\n'), b"null", b"{}", b"1"]
    path = tmp_path / "records.jsonl"
    fast = _read_alike(lambda line: _read_one(path, line), lines, monkeypatch)
    assert sum(f[0] == "ok" for f in fast) > 50 and sum(f[0] == "error" for f in fast) > 500
    # a whole number beyond 64 bits stays one
    big = good.replace('"params":{"a":1.5}', f'"params":{{"a":{2**70}}}').encode()
    assert _read_one(path, big)[1].params == {"a": 2**70}


def test_a_long_lived_reader_keeps_sharing_after_many_environments(tmp_path: Path) -> None:
    """The mirror's memo of environments is bounded; once full it starts over, so a reader that has seen more
    than its limit (serve, a test process) still shares one environment between a run's rows."""
    pytest.importorskip("msgspec")
    from tileops.records.fast import SHARED_LIMIT

    path = tmp_path / "records.jsonl"
    a = make_record(label="a")
    many = [dataclasses.replace(a, env=dataclasses.replace(a.env, run_id=f"run-{i}")) for i in range(SHARED_LIMIT + 3)]
    last = dataclasses.replace(a.env, run_id="last")  # one not among the many: read after the memo is full
    path.write_text("".join(to_json(r) + "\n" for r in (*many, dataclasses.replace(a, env=last),
                                                         dataclasses.replace(a, label="b", env=last))))
    *_, first, second = iter_records(path)
    assert first.env is second.env


def test_every_row_of_a_run_shares_one_environment(tmp_path: Path) -> None:
    """A run's records carry the same environment: it is decoded once and shared (frozen), while a
    different one, or one equal only by Python's 1 == 1.0 == True, is decoded for itself."""
    path = tmp_path / "records.jsonl"
    a, b = make_record(label="a"), make_record(label="b")
    other = dataclasses.replace(a, env=dataclasses.replace(a.env, device=dataclasses.replace(a.env.device,
                                                                                             hostname="elsewhere")))
    path.write_text("".join(to_json(r) + "\n" for r in (a, b, other)))
    first, second, third = iter_records(path)
    assert first.env is second.env and third.env is not first.env and third.env.device.hostname == "elsewhere"
    threads = to_data(dataclasses.replace(a.env, threads=1))
    path.write_text(_line(a, env=threads) + "\n" + _line(a, env={**threads, "threads": True}) + "\n")
    with pytest.raises(RecordFileError, match=r":2: .*env\.threads: expected a whole number"):
        list(iter_records(path))
    # the same inside the nested device: index 0 read, then false (equal to 0 in Python) refused
    gpu = to_data(dataclasses.replace(a.env, device=dataclasses.replace(a.env.device, kind="cuda", index=0)))
    wrong = {**gpu, "device": {**gpu["device"], "index": False}}
    path.write_text(_line(a, env=gpu) + "\n" + _line(a, env=wrong) + "\n")
    with pytest.raises(RecordFileError, match=r":2: .*env\.device\.index: expected a whole number"):
        list(iter_records(path))
