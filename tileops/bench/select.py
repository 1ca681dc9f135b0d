"""Which rows a bench runs: the user's filters, or the default set for the device.

Default set: on a CPU the rows tagged ``cpu`` (small, each well under a second);
on a GPU every row the device can run. A row the device cannot run (its
tensors do not fit in memory, or a dtype the device lacks) is not dropped
silently: it becomes a ``skipped`` record with the reason.

Backends (``--backend``, docs/ops.md "Backends"): each row runs on every backend
selected that its op offers, side by side. ``all`` is every backend the op has.
Without ``--backend`` a device runs what it supports best (``DEFAULT_BACKENDS``):
on a GPU all three (eager, torch.compile, the op's Triton kernel where it has one);
on a CPU eager only, because torch.compile costs seconds of C++ compilation per row
there (minutes over the ``cpu`` set) against a fraction of a second of timing, so
``--backend all`` (or ``compile``) is how a CPU shows both. A backend the op offers
but cannot run here (Triton on a CPU, a kernel's dtype or shape limits, no C++
compiler) is a ``skipped`` record with the reason the op class gives
(``Op.unsupported``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from collections.abc import Iterable

from tileops.bench.adhoc import adhoc_rows
from tileops.device import DeviceInfo
from tileops.errors import LIST_AT_MOST, TileOpsError, unknown_value
from tileops.ops.backends import BACKENDS
from tileops.ops.spec import OpEntry, Workload, dtype_case_name
from tileops.ops.workload import BoundRow, bind_row, build_inputs, instantiate
from tileops.records import SELECTION_FIELDS, RunOptions

if TYPE_CHECKING:
    from tileops.ops.base import Op

#: ``--backend all``: every backend the op offers.
ALL = "all"
#: What a bench runs without ``--backend``, by device kind (the module docstring says why).
DEFAULT_BACKENDS: dict[str, tuple[str, ...]] = {"cuda": BACKENDS, "cpu": ("torch",)}


@dataclass
class Selection:
    ops: list[str] = field(default_factory=list)
    families: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    all_rows: bool = False  # on a CPU, lift the default `cpu` tag filter
    shapes: list[str] = field(default_factory=list)  # --shape: ad-hoc rows of the --op ops (tileops.bench.adhoc)

    @classmethod
    def of(cls, options: RunOptions) -> Selection:
        """The selection a run's options make (their :data:`~tileops.records.SELECTION_FIELDS`)."""
        return cls(**{k: copy.copy(getattr(options, k)) for k in SELECTION_FIELDS})

    @property
    def rows_named(self) -> bool:
        """Whether the user named rows by label, tag or shape (then the device's default tag does not apply)."""
        return bool(self.labels or self.tags or self.all_rows or self.shapes)

    def as_dict(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if v}


@dataclass(frozen=True)
class Planned:
    op: str
    row: Workload
    case: Any
    backend: str
    skip_reason: str | None = None

    @property
    def case_name(self) -> str:
        return dtype_case_name(self.case)

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.op, self.row.label, self.case_name, self.backend)


def _case_dtypes(case: Any) -> set[str]:
    return {case} if isinstance(case, str) else set(dict(case).values())


def _matches(value: str, wanted: list[str]) -> bool:
    return not wanted or value in wanted


def unsupported_dtype(dtypes: set[str], device: DeviceInfo) -> str | None:
    """Why the device cannot run these dtypes, or None."""
    if device.kind == "cuda" and device.capability is not None:
        if any(d.startswith("float8") for d in dtypes) and device.capability < (8, 9):
            return f"fp8 needs compute capability 8.9+, this device is {device.capability[0]}.{device.capability[1]}"
        if "bfloat16" in dtypes and device.capability < (8, 0):
            return "bfloat16 needs compute capability 8.0+"
    return None


def footprint(entry: OpEntry, row: Workload, case: Any) -> int | None:
    """Device memory the row's tensors occupy, read off a call on meta tensors (nothing is allocated).

    None when the op cannot run on meta; the row is then tried, and an
    out-of-memory becomes an error record like any other failure.
    """
    bound = bind_row(entry, row, case)
    op = instantiate(entry, row)
    try:
        op(**build_inputs(op, bound, "meta"))
    except Exception:
        return None
    assert op.last_call is not None
    return sum(op.last_call.nbytes_by_tensor.values())


def wanted_backends(sel: Selection, device: DeviceInfo) -> tuple[str, ...]:
    """The backends asked for (``ALL`` stands for every one), or the device's default; TileOpsError
    naming the known ones for a name that is none of them."""
    unknown = sorted(set(sel.backends) - set(BACKENDS) - {ALL})
    if unknown:
        raise TileOpsError(f"--backend {', '.join(unknown)}: no such backend; use {', '.join(BACKENDS)} or {ALL}")
    if not sel.backends:
        return DEFAULT_BACKENDS[device.kind]
    return BACKENDS if ALL in sel.backends else tuple(sel.backends)


def plan(entries: dict[str, OpEntry], classes: dict[str, type[Op]], sel: Selection, device: DeviceInfo,
         notes: list[str] | None = None) -> list[Planned]:
    """Every (op, row, dtype case, backend) to run or skip, in manifest order, a row's backends side by side.

    With ``--shape``, each selected op runs the ad-hoc rows it asks for (:mod:`tileops.bench.adhoc`; ``--label``
    then names the row they take params from) instead of its manifest rows; what the shape set beyond the
    names given is added to ``notes``."""
    # On a CPU, `--op relu` still means relu's CPU-sized rows: GPU shapes would take minutes per row.
    tags = set(sel.tags) if sel.tags else ({"cpu"} if device.kind == "cpu" and not sel.rows_named else set())
    wanted = wanted_backends(sel, device)
    if sel.shapes and not sel.ops:
        raise TileOpsError("--shape needs --op NAME: the op whose signature the sizes fill and whose formula "
                           "prices the row (e.g. --op gemm --shape M=8192,N=8192,K=8192)")
    out: list[Planned] = []
    for name in sorted(entries):
        e = entries[name]
        if e.status != "implemented" or name not in classes:
            continue
        if not (_matches(name, sel.ops) and _matches(e.family, sel.families)):
            continue
        cls = classes[name]
        backends = _op_backends(cls, wanted, name in sel.ops, notes)
        if not backends:
            continue
        if sel.shapes:
            rows, said = adhoc_rows(e, sel.shapes, sel.labels, sel.dtypes)
            if notes is not None:
                notes += said
        else:
            rows = [row for row in e.workloads
                    if _matches(row.label, sel.labels) and not (tags and not tags & set(row.tags))]
        for row in rows:
            for case in row.dtypes:
                if sel.dtypes and not (_case_dtypes(case) & set(sel.dtypes) or dtype_case_name(case) in sel.dtypes):
                    continue
                why = _skip_reason(e, row, case, device)
                bound = bind_row(e, row, case) if why is None and backends != ["torch"] else None
                for b in backends:
                    out.append(Planned(name, row, case, b, why or _backend_skip(cls, b, bound, device)))
    return out


def _op_backends(cls: type[Op], wanted: tuple[str, ...], named: bool, notes: list[str] | None) -> list[str]:
    """The backends of ``wanted`` the op has: none, no row of it runs; an op named by --op then says so in
    ``notes`` (``--op gemm --op relu --backend triton`` runs relu's rows, never gemm's, and not silently)."""
    backends = [b for b in cls.backends if b in wanted]
    if not backends and named and notes is not None:
        notes.append(f"--op {cls.name}: {_lacks(cls.name, cls, set(wanted))}, so none of its rows runs")
    return backends


def _skip_reason(entry: OpEntry, row: Workload, case: Any, device: DeviceInfo) -> str | None:
    why = unsupported_dtype(_case_dtypes(case), device)
    if why:
        return why
    if device.kind == "cuda" and device.memory_bytes:
        need = footprint(entry, row, case)
        if need is not None and need > 0.85 * device.memory_bytes:
            return (f"needs {need / 2**30:.1f} GiB of device memory, the device has "
                    f"{device.memory_bytes / 2**30:.1f} GiB")
    return None


def _backend_skip(cls: type[Op], backend: str, bound: BoundRow | None, device: DeviceInfo) -> str | None:
    """Why the op cannot run this (row, dtype case) on ``backend`` here (the op class decides), or None.
    Eager runs wherever the row does, so only the other backends are asked."""
    if backend == "torch" or bound is None:
        return None
    return cls.unsupported(backend, device.torch_device, bound.dtypes, bound.shapes, bound.row.params)


# --------------------------------------------------------------------------- a selection that matches nothing

#: Short dtype names people type, and the manifest's name for each.
DTYPE_ALIASES = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32", "float": "float32",
                 "fp64": "float64", "double": "float64", "fp8": "float8_e4m3fn", "e4m3": "float8_e4m3fn",
                 "e5m2": "float8_e5m2", "int": "int64", "long": "int64"}


def _offer(value: str, known: Iterable[str], flag: str, what: str, noun: str, lister: str) -> str:
    alias = DTYPE_ALIASES.get(value.lower()) if flag == "--dtype" else None
    return f"{flag} {value}: matches no {what}" + unknown_value(value, known, noun=noun, lister=lister,
                                                              likely=[alias] if alias else [])


def check_filters(entries: dict[str, OpEntry], classes: dict[str, type[Op]], sel: Selection) -> None:
    """TileOpsError naming every filter value that names nothing at all (a typo, ``--dtype fp16``), with the
    valid values: checked before planning, so a misspelt filter is never silently narrower than meant."""
    implemented = {n: e for n, e in entries.items() if e.status == "implemented" and n in classes}
    problems = [_offer(v, implemented, "--op", "implemented op", "implemented ops", "tileops ops")
                for v in sel.ops if v not in implemented]
    families = {e.family for e in implemented.values()}
    problems += [_offer(v, families, "--family", "family", "families", "tileops ops")
                 for v in sel.families if v not in families]
    scope = [e for n, e in implemented.items() if _matches(n, sel.ops) and _matches(e.family, sel.families)] \
        or list(implemented.values())
    rows = [r for e in scope for r in e.workloads]
    labels = {r.label for r in rows}
    lister = f"tileops ops {scope[0].name}" if len(scope) == 1 else "tileops ops OP"
    problems += [_offer(v, labels, "--label", "row of the selected ops", "labels", lister)
                 for v in sel.labels if v not in labels]
    tags = {t for r in rows for t in r.tags}
    problems += [_offer(v, tags, "--tag", "workload tag", "tags", lister) for v in sel.tags if v not in tags]
    names = {d for r in rows for case in r.dtypes for d in (_case_dtypes(case) | {dtype_case_name(case)})}
    if sel.shapes:  # an ad-hoc row may take any dtype of the op's free dtype union
        names |= {d for e in scope for t in e.signature.tensors if t.is_free_dtype for d in t.dtypes}
    problems += [_offer(v, {d for d in names if "=" not in d}, "--dtype", "dtype of the selected ops' rows",
                        "dtypes", lister) for v in sel.dtypes if v not in names]
    if problems:
        raise TileOpsError("; ".join(problems))


def why_empty(entries: dict[str, OpEntry], classes: dict[str, type[Op]], sel: Selection, device: DeviceInfo) -> str:
    """Why a selection whose every value names something still matches no row: which filters together, and the
    first cause that alone empties it (a backend none of the ops offers, before the CPU's default tag: adding
    --all-rows cannot give gemm a Triton kernel)."""
    given = [f"{flag} {', '.join(vals)}" for flag, vals in (("--op", sel.ops), ("--family", sel.families),
                                                           ("--label", sel.labels), ("--tag", sel.tags),
                                                           ("--dtype", sel.dtypes), ("--backend", sel.backends))
             if vals]
    msg = "no workload row matches " + (" with ".join(given) if given else "the selection")
    implemented = {n: e for n, e in entries.items() if e.status == "implemented" and n in classes}
    scope = {n: e for n, e in implemented.items() if _matches(n, sel.ops) and _matches(e.family, sel.families)}
    asked = set(wanted_backends(sel, device))
    without = [n for n in scope if not set(classes[n].backends) & asked]
    if scope and len(without) == len(scope):  # the cause whatever the other filters say
        having = sorted(n for n in implemented if set(classes[n].backends) & asked)
        if len(scope) == 1:
            msg += f": {_lacks(without[0], classes[without[0]], asked)}"
        else:
            msg += f": none of the {len(scope)} selected ops has a {' or '.join(sorted(asked))} backend"
        msg += (f"; {len(having)} ops have one (docs/ops.md, Backends)" if len(having) > LIST_AT_MOST
                else f"; the ops that have one: {', '.join(having) or 'none'}")
    elif device.kind == "cpu" and not sel.rows_named:
        cpu_rows = [r for e in scope.values() for r in e.workloads if "cpu" in r.tags]
        have = sorted({d for r in cpu_rows for c in r.dtypes for d in _case_dtypes(c)})
        msg += (f": on a CPU only rows tagged `cpu` run unless --label, --tag or --all-rows names others (those rows"
                f" have {', '.join(have) or 'none'}); add --all-rows for the GPU-sized rows")
    if without and len(without) < len(scope) and sel.backends:
        msg += "; " + "; ".join(_lacks(n, classes[n], asked) for n in without)
    if len(scope) == 1:
        (name,) = scope
        msg += f"; list {name}'s rows with `tileops ops {name}`"
    else:
        msg += "; list an op's rows with `tileops ops NAME`"
    return msg


def _lacks(name: str, cls: type[Op], asked: set[str]) -> str:
    """``gemm has no Triton kernel (its backends: torch, compile)``."""
    what = "Triton kernel" if asked == {"triton"} else f"{' or '.join(sorted(asked))} backend"
    return f"{name} has no {what} (its backends: {', '.join(cls.backends)})"
