"""Nominal DRAM bandwidth of a CPU host: from DMI/SMBIOS when readable, else from the user.

The nominal figure is the theoretical memory roof of a CPU profile. Nothing
else can supply it honestly: a measured triad is a calibration, not a
ceiling. When neither DMI nor the user gives it, the profile says the nominal
is unknown and keeps the measured bytes/s only.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tileops.fsutil import read_regular

_UNITS = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 2.0**10, "mi": 2.0**20, "gi": 2.0**30,
          "ti": 2.0**40}


@dataclass(frozen=True)
class DramNominal:
    bytes_per_s: float
    source: str  # "dmi" or "user"
    detail: str


def parse_bandwidth(text: str) -> float:
    """``76.8GB/s``, ``76.8 GB/s``, ``3.35TB/s``, ``7.68e10`` (bytes/s) -> bytes/s. ValueError naming the forms."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?:([kKmMgGtT]i?)?B(?:/s|ps)?)?\s*", text)
    if not m:
        raise ValueError(f"cannot read {text!r} as a bandwidth; write e.g. 76.8GB/s, 3.35TB/s or 7.68e10 (bytes/s)")
    value = float(m.group(1)) * _UNITS[(m.group(2) or "").lower()]
    if value <= 0:
        raise ValueError(f"bandwidth {text!r} must be positive")
    return value


#: The nominal bandwidth for every calibration this process runs (``tileops calibrate``, the bench's
#: automatic calibration), as ``--dram-bandwidth`` writes it; a flag given on the command line wins.
#: It is how an image or a Helm chart states the nominal of a fleet of known hardware.
DRAM_BANDWIDTH_ENV = "TILEOPS_DRAM_BANDWIDTH"


def bandwidth_from_env(environ: dict[str, str] | None = None) -> tuple[float, str] | None:
    """(bytes/s, where it came from) from ``$TILEOPS_DRAM_BANDWIDTH``, or None when unset or empty.
    ValueError naming the variable and the accepted forms when it cannot be read."""
    text = (os.environ if environ is None else environ).get(DRAM_BANDWIDTH_ENV, "").strip()
    if not text:
        return None
    try:
        return parse_bandwidth(text), f"{DRAM_BANDWIDTH_ENV}={text}"
    except ValueError as exc:
        raise ValueError(f"{DRAM_BANDWIDTH_ENV}: {exc}") from None


def read_bandwidth_file(path: Path) -> float:
    """The first value line of ``path``: a bare bandwidth or ``dram_bandwidth: 76.8GB/s``; '#' starts a comment."""
    try:  # a regular file of at most 64 KiB: a FIFO or a device here would hang the calibration
        lines = read_regular(path, 2**16).decode("utf-8").splitlines()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the DRAM bandwidth file ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text; write the bandwidth as text, e.g. 76.8GB/s") from None
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        value = line.split(":", 1)[1] if ":" in line else line
        try:
            return parse_bandwidth(value.strip().strip("\"'"))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
    raise ValueError(f"{path}: no bandwidth in the file; write one line such as `dram_bandwidth: 76.8GB/s`")


def parse_dmidecode(text: str) -> DramNominal | None:
    """Nominal bandwidth from ``dmidecode -t memory`` output: channels × MT/s × bus bytes.

    DIMMs on one channel share it, so the channel is read from the locator
    (``Channel``/``CHANNEL`` plus its node/socket) when the firmware names it;
    otherwise each populated DIMM counts as its own channel, and the detail
    says that assumption.
    """
    channels: dict[str, float] = {}
    named = True
    n_dimms = 0
    for block in re.split(r"\n(?=Handle )", text):
        if "Memory Device" not in block:
            continue
        fields = {k.strip(): v.strip() for k, _, v in
                  (ln.partition(":") for ln in block.splitlines() if ":" in ln)}
        size = fields.get("Size", "")
        if not size or "No Module" in size or size.startswith("0"):
            continue
        speed = fields.get("Configured Memory Speed") or fields.get("Configured Clock Speed") or fields.get("Speed")
        sm = re.match(r"(\d+)\s*(MT/s|MHz)", speed or "")
        wm = re.match(r"(\d+)\s*bits", fields.get("Data Width", ""))
        if not sm or not wm:
            continue
        n_dimms += 1
        bw = int(sm.group(1)) * 1e6 * int(wm.group(1)) / 8
        loc = f"{fields.get('Bank Locator', '')} {fields.get('Locator', '')}"
        sock = re.search(r"(?:node|socket|cpu|proc|p)\s*_?(\d+)", loc, re.I)
        cm = (re.search(r"channel\s*_?([A-Z0-9]+)", loc, re.I)
              or re.search(r"DIMM[_ ]?([A-P])\d", loc, re.I))  # DIMM_A1, DIMM_A2: slots 1 and 2 of channel A
        if cm:
            key = f"{sock.group(1) if sock else 0}:{cm.group(1).upper()}"
        else:
            named = False
            key = f"dimm{n_dimms}"
        channels[key] = max(channels.get(key, 0.0), bw)
    if not channels:
        return None
    total = sum(channels.values())
    how = ("channels read from the DIMM locators" if named
           else "assuming one DIMM per channel (the firmware does not name channels)")
    return DramNominal(total, "dmi", f"{len(channels)} channel(s) x MT/s x bus width from DMI/SMBIOS, {how}")


def read_dmi() -> tuple[DramNominal | None, str]:
    """(nominal, why-not). Runs ``dmidecode -t memory``, which needs root and a readable DMI table."""
    exe = shutil.which("dmidecode")
    if exe is None:
        return None, "dmidecode is not installed"
    try:
        out = subprocess.run([exe, "-t", "memory"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"dmidecode failed ({exc})"
    if out.returncode != 0:
        return None, f"dmidecode could not read DMI ({(out.stderr or '').strip().splitlines()[-1:] or 'no output'})"
    nominal = parse_dmidecode(out.stdout)
    if nominal is None:
        return None, "DMI lists no populated memory device with a speed and width (usual in a VM)"
    return nominal, ""
