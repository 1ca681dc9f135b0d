"""Exit codes shared by every command and by the library functions that decide them.

Documented in README.md; a command and the library it calls report a failure
the same way because both read these names.
"""

OK = 0
FAILED = 1  # defects, failed rows, a baseline regression, an audit FAIL/ERROR: the work finished
USAGE = 2  # bad arguments, unreadable input or an unwritable output (a full disk): nothing (more) was done
PHYSICS = 3  # a physics-check breach: a roofline formula claims the impossible (§4.3)
PUSH = 4  # results written, but the Pushgateway push failed
BUSY = 5  # the host was busy: `bench --require-quiet` before the first row (nothing measured), or a `calibrate`
# measured contended (nothing stored, the stored calibration stands): retry later
BELOW_FLOOR = 6  # `calibrate --check`: a ceiling measured below its SKU's floor (or not measured): keep the node out
NO_FLOOR = 7  # `calibrate --check`: no floor holds this SKU (or its history is too short): nothing was judged
BELOW_STORED = 8  # `calibrate`: a ceiling fell below the stored calibration's beyond noise: nothing stored (--force)
INTERRUPTED = 130  # Ctrl-C (SIGINT): what finished is kept (`tileops bench --resume DIR`)
TERMINATED = 143  # SIGTERM (docker stop, Kubernetes): as INTERRUPTED; 128 + 15, as a shell reports it
PIPE_CLOSED = 141  # stdout's reader went away (`tileops roofline ... | head`): stopped quietly; 128 + SIGPIPE (13)


#: What a code means to someone reading another process's exit (a fleet container's), in a few words each.
MEANINGS = {
    FAILED: "the work finished with failures",
    USAGE: "bad arguments or unreadable input: nothing was done",
    PHYSICS: "a physics-check breach",
    PUSH: "results written, the Pushgateway push failed",
    BUSY: "the host was busy: nothing stored, the stored calibration stands; rerun on a quieter host",
    BELOW_FLOOR: "a ceiling measured below its SKU's floor",
    NO_FLOOR: "no floor holds this SKU: nothing judged",
    BELOW_STORED: "a ceiling fell below the stored calibration beyond noise: nothing stored (--force stores it)",
    INTERRUPTED: "interrupted (SIGINT)",
    TERMINATED: "terminated (SIGTERM)",
}


def describe(code: int | None) -> str:
    """``exit code N`` with its meaning where the code is one of ours."""
    meaning = MEANINGS.get(code) if code is not None else None
    return f"exit code {code}" + (f" ({meaning})" if meaning else "")
