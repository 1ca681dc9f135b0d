"""Whether each implemented entry has its Op class, and each Op class its entry (``tileops validate``).

Only importing the op modules tells which classes exist, and their import
binds each class to the generated module: a stale or missing generated module
stops it, which is a defect of its own (``stale-codegen``), not a crash of the
validator. The analysis cannot see any of this: it reads YAML only. The codes
(``stale-codegen``, ``no-class``, ``no-entry``) are listed with the analysis's
in docs/manifest.md.
"""

from __future__ import annotations

from tileops.errors import ManifestError
from tileops.manifest.analysis import Defect
from tileops.manifest.load import ManifestReport

def class_defects(report: ManifestReport) -> list[Defect]:
    """Entries and Op classes pair up; the generated modules the classes bind are current."""
    from tileops.ops import registry

    try:
        classes = registry.load_all()
    except ManifestError as exc:  # a stale or missing generated module: the classes cannot be created
        return [Defect("stale-codegen", "generated module", str(exc),
                       "run `tileops codegen` (and `tileops codegen --manifest DIR` for each extra directory)")]
    out: list[Defect] = []
    for e in report.entries().values():
        if e.status == "implemented" and e.name not in classes:
            out.append(Defect("no-class", f"{e.file}:{e.name}.status",
                              f"{e.name} is implemented but no Op class claims it",
                              f"add a class with name = {e.name!r}, or set status: spec-only"))
    names = {a.name for a in report.analyses}
    for name in sorted(set(classes) - names):
        out.append(Defect("no-entry", f"class {classes[name].__module__}.{classes[name].__qualname__}",
                          f"class claims manifest entry {name!r}, which does not exist",
                          "add the manifest entry, or remove the class"))
    return out
