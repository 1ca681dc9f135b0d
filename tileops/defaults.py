"""The defaults and choices the command line shows, each defined once, for the parser and the layers alike.

A parser states its flags' choices and defaults before the command runs, and
``tileops --help`` must not import the layer behind a flag (the exporter loads
prometheus_client and pydantic, the report rich, the audit the bench) just to
print a number. So the value lives here, in a module of the standard library
only, and both sides import it: ``tileops.commands`` to show it, the layer
(``tileops.export``, ``tileops.report``, ``tileops.audit``, ``tileops.ops``) to
use it. There is no second copy for a test to hold equal.
"""

from __future__ import annotations

# --- the bench (tileops.bench.sweep, tileops.bench.interval, tileops.pipeline.calibrate)

#: Seconds before a row is killed and recorded as a timeout, by device kind (``--row-timeout``).
BENCH_ROW_TIMEOUT_S: dict[str, float] = {"cpu": 60.0, "cuda": 180.0}
#: How long a compiled backend's first call (its compile) may take before the row is a timeout; the timing
#: after it has the row timeout of its own. A MoE composite compiles tens of graphs (minutes on 2 cores).
BENCH_COMPILE_TIMEOUT_S = 600.0
#: How old a device's calibration may be before the bench measures it again (the chart's default too), in days.
CALIBRATION_MAX_AGE_DAYS = 7
#: The stopping rule's settings a person may change (``--target-precision``, ``--min-time``, ``--max-time``,
#: ``--min-samples``), for a CPU, a GPU and ``--quick``; the rest of each rule is the bench's
#: (``tileops.bench.interval``: blocks, pauses, warm-up).
STOPPING: dict[str, dict[str, float]] = {
    "cpu": {"target_precision": 0.02, "min_time_s": 0.1, "max_time_s": 1.0, "min_samples": 10},
    "cuda": {"target_precision": 0.01, "min_time_s": 0.2, "max_time_s": 5.0, "min_samples": 10},
    "quick": {"target_precision": 0.05, "min_time_s": 0.02, "max_time_s": 0.15, "min_samples": 6},
}

# --- output (tileops.report.printer)

#: ``--output-format``: auto is the console where stdout or stderr is a terminal, else the plain log.
OUTPUT_FORMATS: tuple[str, ...] = ("auto", "console", "log", "jsonl")

# --- ops (tileops.ops.backends)

#: The implementations an op can run behind the same contract; ``--backend`` also takes ``all``.
BACKENDS: tuple[str, ...] = ("torch", "compile", "triton")

# --- the report (tileops.report, tileops.report.baseline, tileops.report.compare_robust)

#: ``tileops roofline --format``: the report's formats.
REPORT_FORMATS: tuple[str, ...] = ("table", "json", "md", "csv")
#: The smallest change between two runs that matters (0.10 = 10 %): ``--threshold``.
BASELINE_THRESHOLD = 0.10

# --- metrics (tileops.export.push, tileops.export.metrics, tileops.export.server)

#: The Pushgateway job label.
PUSH_JOB = "tileops"
#: A push's tries in all, its first retry delay (doubled each retry) and one try's timeout.
PUSH_ATTEMPTS = 5
PUSH_BACKOFF_S = 1.0
PUSH_TIMEOUT_S = 10.0
#: Detail levels of an exposition: ``lean`` (the default) and ``full`` (adds derivable and descriptive row series).
METRICS_DETAILS: tuple[str, ...] = ("lean", "full")
METRICS_DETAIL = "lean"
#: ``tileops serve``'s bind address (this machine only: results are not published to the network by accident; the
#: image sets ``TILEOPS_SERVE_HOST=0.0.0.0``) and port.
SERVE_HOST = "127.0.0.1"
SERVE_PORT = 9469
#: The largest records or audit file a scrape reads (``tileops serve --max-file-mb``): a run of 100,000 records
#: is well under it (benchmarks/serve_scrape.py prints both sizes); a file far beyond that is not one run's
#: records, and reading it would exhaust the exporter's memory.
SERVE_MAX_FILE_BYTES = 256 * 2**20

# --- the audit (tileops.audit.render, tileops.audit.ncu, tileops.audit.run)

#: ``tileops audit --format``.
AUDIT_FORMATS: tuple[str, ...] = ("table", "json", "csv", "md")
#: ``--replay-mode`` choices, the default first, and the premise each reading then rests on (§4.5).
AUDIT_REPLAY_MODES: dict[str, str] = {
    "app-range": "cold caches at the start of the call, its kernels sharing the caches as in a real run "
                 "(ncu --cache-control all --replay-mode app-range)",
    "range": "cold caches at the start of the call, its kernels sharing the caches as in a real run "
             "(ncu --cache-control all --replay-mode range)",
    "kernel": "cold caches on each kernel replay (ncu --cache-control all --replay-mode kernel): an intermediate "
              "one kernel writes is read back from DRAM by the next",
}
AUDIT_REPLAY_MODE = "app-range"
#: What every premise adds to its replay mode's: the audit judges reads only.
AUDIT_READ_SIDE = "read side only: DRAM writes are measured and reported, never judged"
#: ``--clock-control`` choices, the default first: leave the clocks alone (the device's rule), or lock to base.
AUDIT_CLOCK_CONTROLS: tuple[str, ...] = ("none", "base")
#: Seconds before a row under ncu is killed and recorded as ERROR.
AUDIT_ROW_TIMEOUT_S = 300.0
#: The GPU audited, and the calls before the profiled one (outside its NVTX range).
AUDIT_DEVICE = "cuda:0"
AUDIT_WARMUP = 1

# --- the fleet (tileops.fleet)

#: The appliance image each container runs, where ``$TILEOPS_IMAGE`` does not name one.
FLEET_IMAGE = "tileops:latest"
