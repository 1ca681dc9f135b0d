"""Roofline analysis (§4.4): read one manifest entry, report every defect, decide emission.

Three rules shape this module:

* Total: ``analyze`` accepts whatever YAML produced and never raises on it.
  A defect is a value in the result, not an exception.
* Lossless: each fact is absent, malformed or valid, and the three are told
  apart (``Fact``). A missing field and a broken one are different defects.
* Accumulating: a defect does not stop the pass. A judgment that cannot be
  reached because a fact it needs is unusable is recorded in ``unreached``,
  naming that fact.

Only a clean analysis yields an :class:`OpEntry`, which codegen emits from.

The readers are one per part of the entry, sharing one scope (``tileops.manifest.scope``): the signature
(``signature``), the roofline (``roofline_fields``) and the workload rows (``workloads``); what an analysis
reports is ``facts``.
"""

from __future__ import annotations

from typing import Any

from tileops.manifest.facts import DEFECT_CODES, MALFORMED, Analysis, Defect, Fact, State, Unreached
from tileops.manifest.roofline_fields import RooflineReader
from tileops.manifest.signature import SignatureReader
from tileops.manifest.values import is_ident, is_text, short
from tileops.manifest.workloads import WorkloadReader
from tileops.ops.spec import OpEntry

__all__ = ["DEFECT_CODES", "ENTRY_FIELDS", "STATUSES", "Analysis", "Defect", "Fact", "State", "Unreached", "analyze"]

ENTRY_FIELDS = ("family", "ref_api", "status", "description", "signature", "workloads", "roofline")
STATUSES = ("spec-only", "implemented")


def analyze(entry: Any, name: Any = "<entry>", file: str = "<memory>") -> Analysis:
    """Analyse one entry. Total: never raises, whatever ``entry`` and ``name`` are.

    The pass is bounded by construction (formula size and depth, repr length);
    should a check still fail unexpectedly, that becomes an ``internal`` defect
    at the entry's location instead of a traceback, and the tests treat it as a
    bug in the analysis.
    """
    an = _Analyzer(entry, name, file)
    try:
        return an.run()
    except Exception as exc:  # RecursionError and MemoryError included
        an.a.entry = None
        an.a.defects.append(Defect("internal", an.loc(""), f"the analysis could not finish: "
                                   f"{type(exc).__name__}: {short(str(exc))}",
                                   "this is a bug in tileops; report it with the entry"))
        return an.a


class _Analyzer(SignatureReader, RooflineReader, WorkloadReader):
    """One entry's pass: each part read by its reader, into one scope."""

    def run(self) -> Analysis:
        e = self.entry
        if not isinstance(e, dict):
            self.defect("entry-type", "", f"an entry must be a mapping, got {type(e).__name__}",
                        "write the entry as 'name: {family: ..., signature: ..., roofline: ...}'")
            for part in ("signature", "workloads", "roofline"):
                self.unreached(f"{part} checks", part, "entry mapping")
            return self.a
        if not is_ident(self.entry_name_raw()):
            self.defect("bad-name", "", f"op name {short(self.name)} is not an identifier",
                        "name the op with letters, digits and underscores, e.g. silu_and_mul")
        self.unknown_keys(e, ENTRY_FIELDS, "")
        family = self.get(e, "family", "family", required=True, kind="a non-empty string", check=is_text)
        ref_api = self.get(e, "ref_api", "ref_api", required=True, kind="a non-empty string", check=is_text)
        status = self.get(e, "status", "status", required=True, kind="spec-only or implemented",
                          check=lambda v: isinstance(v, str))
        if status.ok and status.value not in STATUSES:
            self.defect("bad-status", "status", f"status {short(status.value)} is unknown",
                        f"use one of: {', '.join(STATUSES)}")
            status = self.fact("status", MALFORMED)
        desc = self.get(e, "description", "description", required=False, kind="a string",
                        check=lambda v: isinstance(v, str))

        sig = self.signature(e)
        roof = self.roofline(e, sig)
        rows = self.workloads(e, sig, status)

        if self.a.ok and sig is not None and roof is not None and rows is not None:
            self.a.entry = OpEntry(
                name=self.name, family=family.value, ref_api=ref_api.value, status=status.value,
                signature=sig, workloads=tuple(rows), roofline=roof, file=self.file,
                description=desc.value or "",
            )
        return self.a

    def entry_name_raw(self) -> Any:
        return self.name

