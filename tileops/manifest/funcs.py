"""Whether each ``func`` roofline of an implemented entry names a plain function of the formulas module.

The analysis checks a func path's form (``tileops.ops.formulas.<name>``); only
importing the module tells whether the function is there and is a function. An
entry whose path does not resolve cannot be emitted: the generated module binds
its formula when imported, so it would stop every run (``tileops codegen``
skips it, ``tileops validate`` reports it).
"""

from __future__ import annotations

import importlib

from tileops.manifest.analysis import Defect
from tileops.manifest.load import ManifestReport
from tileops.ops.catalog import FORMULAS_MODULE, formula_problem

CODE = "func-unresolved"


def func_defects(report: ManifestReport) -> list[Defect]:
    """Each implemented entry's func paths name a plain function defined in the formulas module."""
    return [d for _, d in _unresolved(report)]


def drop_unresolved(report: ManifestReport) -> list[Defect]:
    """Add each entry's unresolved func paths to its analysis, which then is not emitted; returns the
    defects no entry owns (the formulas module itself does not import)."""
    loose: list[Defect] = []
    by_entry: dict[str, list[Defect]] = {}
    for name, d in _unresolved(report):
        (by_entry.setdefault(name, []) if name is not None else loose).append(d)
    for a in report.analyses:
        found = by_entry.get(a.name) if isinstance(a.name, str) else None
        if found:
            a.defects.extend(found)
            a.entry = None
    return loose


def _unresolved(report: ManifestReport) -> list[tuple[str | None, Defect]]:
    """(entry name, defect) for every func path that does not resolve; no name: the module does not import."""
    try:
        formulas = importlib.import_module(FORMULAS_MODULE)
    except Exception as exc:  # an import error is a finding, not a crash
        return [(None, Defect(CODE, FORMULAS_MODULE, f"cannot import {FORMULAS_MODULE}: {type(exc).__name__}: "
                              f"{exc}", "fix the module so it imports"))]
    out: list[tuple[str | None, Defect]] = []
    for e in report.entries().values():
        if e.status != "implemented" or e.roofline.mode != "func":
            continue
        for field in ("func", "read_func"):
            path = getattr(e.roofline, field)
            if not path:
                continue
            problem = formula_problem(formulas, path.rsplit(".", 1)[1])
            if problem is not None:
                out.append((e.name, Defect(CODE, f"{e.file}:{e.name}.roofline.{field}", problem,
                                           f"define a plain function `def {path.rsplit('.', 1)[1]}(call)` in "
                                           "tileops/ops/formulas.py")))
    return out
