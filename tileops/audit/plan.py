"""Which rows the audit measures, and how one is found again in the child.

The audit runs the manifest's own rows, never scaled-up shapes (§4.5: a bigger
shape can cross a kernel-selection threshold and audit an implementation the
benchmark never runs). Selection is the bench's (``tileops.bench.select``);
without ``--op`` it keeps the ops that declare a read half, since only those
can get a verdict. Rows are built exactly as the bench builds them
(``tileops.ops.workload``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tileops.bench.select import Planned, Selection, plan
from tileops.device import DeviceInfo
from tileops.errors import TileOpsError
from tileops.ops.spec import OpEntry, Workload, dtype_case_name

if TYPE_CHECKING:
    from tileops.ops.base import Op

#: What the audit measures without ``--backend`` (``audit_plan`` says why).
AUDIT_BACKENDS = ("torch",)


def manifest_entries() -> dict[str, OpEntry]:
    """The manifest's clean entries by op name: the one place the audit reads the manifest from."""
    from tileops.ops.catalog import load_entries

    return load_entries()


def op_classes() -> dict[str, type[Op]]:
    from tileops.ops.registry import load_all

    return load_all()


def declares_read_half(cls: type[Op]) -> bool:
    """Whether the op's entry states a read half (``Op.eval_roofline_read_bytes()`` is not None)."""
    return getattr(cls, "emitted", None) is not None and cls.emitted.read_bytes is not None


def audit_plan(entries: dict[str, OpEntry], classes: dict[str, type[Op]], sel: Selection,
               device: DeviceInfo) -> list[Planned]:
    """The rows to audit, in manifest order: every row of the selected ops, whatever the host.

    ``Selection.all_rows`` is forced on: the bench's CPU default (rows tagged
    ``cpu``) never applies to the audit. Without ``--op``, only ops that
    declare a read half are kept; an op named explicitly is measured even
    without one (its rows get NO-VERDICT, with their reads reported).
    Without ``--backend`` the audit measures eager (``AUDIT_BACKENDS``): the
    read formula is the same for every backend, and ncu replays every kernel
    of a call, so each further backend multiplies the audit's time; ``--backend
    all`` measures what each implementation's kernels read.
    """
    sel = Selection(ops=list(sel.ops), families=list(sel.families), labels=list(sel.labels), tags=list(sel.tags),
                    backends=list(sel.backends) or list(AUDIT_BACKENDS), dtypes=list(sel.dtypes), all_rows=True)
    rows = plan(entries, classes, sel, device)
    if not sel.ops:
        rows = [p for p in rows if declares_read_half(classes[p.op])]
    return rows


def case_arg(case: Any) -> str:
    """A dtype case as one command-line argument (JSON: a name, or a tensor -> dtype mapping)."""
    return json.dumps(case if isinstance(case, str) else dict(case), sort_keys=True)


def find_row(entry: OpEntry, label: str, case_json: str) -> tuple[Workload, Any]:
    """The workload row and dtype case the parent named; TileOpsError naming what exists otherwise."""
    rows = {w.label: w for w in entry.workloads}
    if label not in rows:
        raise TileOpsError(f"{entry.name}: no workload row {label!r}; rows are {', '.join(rows)}")
    row = rows[label]
    wanted = json.loads(case_json)
    for case in row.dtypes:
        if dtype_case_name(case) == dtype_case_name(wanted):
            return row, case
    raise TileOpsError(f"{entry.name} [{label}]: no dtype case {dtype_case_name(wanted)!r}; cases are "
                       + ", ".join(dtype_case_name(c) for c in row.dtypes))
