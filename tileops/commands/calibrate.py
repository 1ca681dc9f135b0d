"""`tileops calibrate`: measure this device's ceilings and write its calibrated profile.

The profile goes to the profile store (``--profile-dir``, ``TILEOPS_PROFILE_DIR``,
default under the user's data dir), plus a per-device raw result under
``devices/<uuid>.yaml``; the shipped profiles change only with
``--write-shipped``. ``--all-devices`` calibrates each visible GPU in turn, each
in its own process, and writes one profile per device model (median over its
devices) plus every device's own result. ``--max-age 7d`` measures only the
devices whose stored result is missing, rough (quick) or older than that: what
an init container runs before every benchmark. ``--check`` then holds each device's result against its
SKU's floors (node intake: exit 6 below one, 7 when there is none). A calibration measured
on a busy host, or with a ceiling below the stored one beyond noise, is refused, nothing stored (exit 5 or 8),
unless ``--force`` stores it marked. The workflow is ``tileops.pipeline.calibrate``; this module parses its
arguments.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tileops.commands import argtypes


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate", help="measure this device's bandwidth mixes, compute roofs and latency floor",
        description="Measure the device this runs on and write its calibrated profile to the profile store.")
    p.add_argument("--device", default="auto", help="auto (default: cuda:0 if present, else cpu), cpu, cuda:N")
    p.add_argument("--all-devices", action="store_true",
                   help="calibrate every visible GPU in turn, each in its own process (the CPU when there is none)")
    p.add_argument("--quick", action="store_true", help="small sizes and few repetitions: seconds, rough figures")
    p.add_argument("--max-age", metavar="DURATION",
                   help="skip a device whose stored result (<store>/devices/<uuid>.yaml) is newer than this "
                        "(e.g. 12h, 7d; a quick result never stands in for a full one), say so, exit 0")
    p.add_argument("--profile-dir", type=argtypes.profile_store, default=None,
                   help="profile store to write (default: $TILEOPS_PROFILE_DIR or the user data dir)")
    p.add_argument("--write-shipped", action="store_true",
                   help="write the model profile into the shipped profiles/ folder instead of the store")
    p.add_argument("--no-write", action="store_true", help="measure and print only")
    p.add_argument("--force", action="store_true",
                   help="store a calibration that would be refused (measured on a busy host: exit 5; a ceiling "
                        "below the stored calibration's beyond noise: exit 8), marked with why: every row priced "
                        "on it says so; and store over a device result this tileops cannot read (a newer schema, "
                        "cut short: exit 2 otherwise), which is kept aside as <file>.unreadable-<time>")
    # One nominal, one source: both flags at once is exit 2 from the parser, never one silently winning.
    nominal = p.add_mutually_exclusive_group()
    nominal.add_argument("--dram-bandwidth", metavar="BW",
                         help="nominal memory bandwidth, e.g. 76.8GB/s or 7.68e10 (bytes/s), when DMI cannot tell "
                              "(default: $TILEOPS_DRAM_BANDWIDTH; the flag wins over it)")
    nominal.add_argument("--dram-bandwidth-file", type=Path, metavar="FILE",
                         help="a file holding the nominal bandwidth (`dram_bandwidth: 76.8GB/s`); wins over "
                              "$TILEOPS_DRAM_BANDWIDTH")
    p.add_argument("--cpu-ghz", type=argtypes.positive, metavar="GHZ",
                   help="CPU all-core clock for the peak estimate")
    p.add_argument("--format", choices=("table", "json"), default="table", help="summary format (stdout)")
    p.add_argument("--check", action="store_true",
                   help="node intake: hold each device's stored result against its SKU's floors "
                        "(profiles/floors/); exit 6 below a floor, 7 when no floor holds the SKU")
    p.add_argument("--textfile", type=Path, metavar="DIR", dest="textfile_dir",
                   help="with --check: write tileops_<device>.intake.prom (tileops_node_intake) to DIR for "
                        "node_exporter's textfile collector")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tileops.pipeline.calibrate import CalibrateOptions, run_calibrate

    opts = CalibrateOptions(device=args.device, all_devices=args.all_devices, quick=args.quick, max_age=args.max_age,
                            profile_dir=args.profile_dir, write_shipped=args.write_shipped, write=not args.no_write,
                            dram_bandwidth=args.dram_bandwidth, dram_bandwidth_file=args.dram_bandwidth_file,
                            cpu_ghz=args.cpu_ghz, format=args.format,
                            check=args.check, textfile_dir=args.textfile_dir, force=args.force)
    return run_calibrate(opts).exit_code
