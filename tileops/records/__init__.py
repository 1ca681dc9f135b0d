"""The records contract (§5.2): what the bench writes and every other layer reads.

Three jobs, one module each: ``contract`` (the dataclasses of a record, a run
file and an audit entry, with their bounds; the device they name is one
``identity.DeviceIdentity``), ``decode`` (strict JSON to those
objects and back: the standard library's decoder, with msgspec's mirror in
``fast`` as the one optional fast path, both reading times with ``times``) and ``files`` (``records.jsonl``,
``run.json`` and ``audit.jsonl``: appended, read in spans, torn tails set
aside). What the rest of the package uses is named here.
"""

from tileops.records.contract import (AUDIT_FILE, AUDIT_PREMISE, AUDIT_VERDICTS, MAX_COUNT, MAX_TIME_S, MIN_TIME_S,
                                      MEASUREMENT_FIELDS, OUTPUT_ONLY_FIELDS, RECORDS_FILE, RUN_FILE,
                                      RUN_FILE_MAX_BYTES, SCHEMA_VERSION, SELECTION_FIELDS,
                                      AuditEntry, CpuConditions, GpuConditions, RowConditions,
                                      AuditVerdict, Environment, ErrorInfo, ErrorKind, Machine, ProbeKind, ProbeLevel,
                                      ProbeRate, ProbeReading, RacePairing, Record, RunInfo,
                                      RunOptions, RunStatus, SchedulerSlices, Status, TimerKind, Timing,
                                      utcnow)
from tileops.records.identity import DeviceIdentity, device_key
from tileops.records.decode import RecordFileError, from_data, to_data, to_json
from tileops.records.files import (append_record, collecting_rarely, iter_jsonl, iter_records, jsonl_spans,
                                   load_records, parse_record, read_audit, read_run_info, replace_records,
                                   resolve_records_path, set_aside_torn_tail, torn_tail, write_run_info)
from tileops.records.times import parse_time

__all__ = [
    "AUDIT_FILE", "AUDIT_PREMISE", "AUDIT_VERDICTS", "CpuConditions", "GpuConditions", "RowConditions",
    "MAX_COUNT", "MAX_TIME_S", "MEASUREMENT_FIELDS", "MIN_TIME_S", "OUTPUT_ONLY_FIELDS", "RECORDS_FILE",
    "DeviceIdentity",
    "RUN_FILE", "RUN_FILE_MAX_BYTES", "SCHEMA_VERSION", "SELECTION_FIELDS", "AuditEntry", "AuditVerdict",
    "Environment", "ErrorInfo", "ErrorKind", "Machine", "ProbeKind", "ProbeLevel", "ProbeRate",
    "ProbeReading", "RacePairing", "Record", "RecordFileError", "RunInfo", "RunOptions",
    "RunStatus", "SchedulerSlices", "Status", "TimerKind", "Timing", "append_record", "collecting_rarely",
    "device_key", "from_data",
    "iter_jsonl", "iter_records", "jsonl_spans", "load_records", "parse_record", "parse_time", "read_audit",
    "read_run_info", "replace_records", "resolve_records_path", "set_aside_torn_tail", "to_data", "to_json",
    "torn_tail", "utcnow", "write_run_info",
]
