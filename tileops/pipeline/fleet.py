"""``tileops fleet calibrate|bench`` composed: one appliance container per GPU of this host (``tileops.fleet``).

Each container requests one GPU by uuid; its log lines are echoed prefixed with
the device; its results and profiles are copied to the output folder; a
calibration's profiles are installed in the host's profile store. The exit
code (``tileops.pipeline.outcome``) is 1 when any device failed, each named; a
host where nothing can start (no engine, no image, no GPU) is a TileOpsError
(exit 2) before any container runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tileops.pipeline.outcome import exit_code

if TYPE_CHECKING:
    from tileops.fleet import ContainerOutcome
    from tileops.report.printer import Printer


@dataclass(frozen=True)
class FleetOptions:
    task: str  # calibrate or bench
    image: str
    cpu: bool = False  # one container on the CPU, no GPU request
    out: Path | None = None  # where each device's results go; None: results/fleet-<run id>
    profile_dir: Path | None = None  # the host's store; None: $TILEOPS_PROFILE_DIR or the user data dir
    args: list[str] = field(default_factory=list)  # for `tileops TASK` in each container


@dataclass
class FleetResult:
    outcomes: list[ContainerOutcome]

    @property
    def exit_code(self) -> int:
        return exit_code(failed=sum(not o.ok for o in self.outcomes))


def run_fleet(opts: FleetOptions, printer: Printer | None = None) -> FleetResult:
    """Start one container per device, stream their logs, collect their results, and say how each ended
    (through ``printer``; default: plain lines, as the containers' own logs are)."""
    from tileops import fleet
    from tileops.profiles import store_dir
    from tileops.report.printer import make_printer

    printer = printer if printer is not None else make_printer("log")

    devices = [fleet.CPU] if opts.cpu else fleet.enumerate_gpus()
    run_id = fleet.new_run_id()
    plans = fleet.plan(opts.task, devices, opts.args, run_id)
    client = fleet.connect()
    fleet.check_image(client, opts.image)
    out = opts.out or Path("results") / f"fleet-{run_id}"
    store = opts.profile_dir or store_dir()

    printer.say(f"tileops fleet {opts.task}: {len(plans)} container(s) of {opts.image}: "
                + ", ".join(p.device.describe() for p in plans), result=True)
    outcomes = fleet.launch(client, opts.image, plans, out,
                            seed_profiles=store if opts.task == "bench" else None,
                            echo=lambda line: printer.say(line, result=True))

    if opts.task == "calibrate":
        for path in fleet.install_profiles(outcomes, store):
            printer.say(f"installed {path}", result=True)
    for o in outcomes:
        where = f" -> {o.collected}" if o.collected else ""
        printer.say(f"{o.device.describe()}: {'ok' if o.ok else 'FAILED: ' + o.reason()}{where}", result=True)
    for o in outcomes:
        if not o.ok:
            printer.say(f"tileops fleet {opts.task}: device {o.device.describe()} failed: {o.reason()}", kind="error",
                        bare=True)
    return FleetResult(outcomes)
