"""A workload row from the command line: ``tileops bench --op gemm --shape M=8192,N=8192,K=8192``.

A performance engineer times their own shape without editing YAML. The row is
built from one of the op's manifest rows (its *template*: the row ``--label``
names, else the op's first): its params and optional inputs stay, and the
shape's sizes replace its indices. A size may name an index of the op's
signature (``A0``) or a derived dimension (``M``) that is one of the indices
under the template's params; which index a derived dimension is, is read off
the op's generated ``with_lets`` evaluator (§4.4.5: no formula text is read at
run time), by evaluating it once on distinct probe sizes. Dimensions that
every manifest row of the op holds equal, and that vary between rows (gemm's
``K`` of ``a`` and ``Kb`` of ``b``), are set together. The row is then called
once on ``meta`` tensors, so a shape the op refuses is exit 2 before any work.

The row is labelled by the shape as given (``M=8192,N=8192,K=8192``) and priced
like every row: the worker calls the op, and ``op.eval_roofline()`` prices that
call with the op's own generated formula.
"""

from __future__ import annotations

import re
from typing import Any
from collections.abc import Iterable

from tileops.errors import OpNotAvailableError, TileOpsError
from tileops.ops.catalog import load_emitted
from tileops.ops.spec import OpEntry, Workload, dtype_case_name
from tileops.ops.workload import bind_row, build_inputs, instantiate

#: The tag an ad-hoc row carries (the CPU's default ``cpu`` tag filter never drops it: it was asked for).
ADHOC_TAG = "shape"
_PART = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([0-9][0-9_]*(?:\s*x\s*[0-9][0-9_]*)*)\s*")
#: Probe sizes: distinct primes, so a derived dimension equal to one index is equal to that index alone.
_PROBES = (1009, 1013, 1019, 1021, 1031, 1033, 1039, 1049, 1051, 1061, 1063, 1069, 1087, 1091, 1093, 1097)
MAX_DIM = 2**40


def parse_shape(text: str) -> dict[str, int | tuple[int, ...]]:
    """``M=8192,N=8192,K=8192`` (a variadic index as ``B=4x16``) as sizes by name; TileOpsError saying the form."""
    form = "write NAME=SIZE pairs separated by commas, e.g. --shape M=8192,N=8192,K=8192 (B=4x16 for a batch)"
    out: dict[str, int | tuple[int, ...]] = {}
    for part in text.split(","):
        m = _PART.fullmatch(part)
        if m is None:
            raise TileOpsError(f"--shape {text!r}: {part.strip()!r} is not NAME=SIZE; {form}")
        name, value = m.group(1), m.group(2)
        sizes = tuple(int(v.replace("_", "")) for v in re.split(r"\s*x\s*", value))
        if any(not 1 <= v <= MAX_DIM for v in sizes):
            raise TileOpsError(f"--shape {text!r}: {name} must be a size from 1 to 2^40")
        if name in out:
            raise TileOpsError(f"--shape {text!r}: {name} is given twice")
        out[name] = sizes[0] if len(sizes) == 1 else sizes
    return out


def shape_label(sizes: dict[str, int | tuple[int, ...]]) -> str:
    """The row's label: the shape as given, normalised (``M=8192,N=8192,K=8192``)."""
    return ",".join(f"{k}={'x'.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in sizes.items())


def template_row(entry: OpEntry, labels: list[str]) -> Workload:
    """The manifest row an ad-hoc row starts from: the one ``--label`` names, else the op's first."""
    if labels:
        for row in entry.workloads:
            if row.label in labels:
                return row
        raise TileOpsError(f"--label {', '.join(labels)}: {entry.name} has no such row to take params from; its "
                           f"rows: {', '.join(r.label for r in entry.workloads)}")
    return entry.workloads[0]


def _full(with_lets: Any, indices: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """Every dimension of a row (indices and derived ones) as the generated evaluator states them."""
    out = with_lets({**indices, **params})
    return {k: v for k, v in out.items() if k not in params}


def _params(entry: OpEntry, row: Workload) -> dict[str, Any]:
    return {p.name: row.params.get(p.name, p.default) for p in entry.signature.params}


def _tied(entry: OpEntry, with_lets: Any) -> list[set[str]]:
    """Groups of dimensions every row of the op holds equal, among which at least one varies between rows."""
    fulls = []
    for row in entry.workloads:
        try:
            fulls.append(_full(with_lets, dict(row.indices), _params(entry, row)))
        except Exception:  # a row the evaluator cannot state (a variadic corner): it decides nothing
            continue
    if len(fulls) < 2:
        return []
    names = [k for k in fulls[0] if all(isinstance(f.get(k), int) and not isinstance(f.get(k), bool) for f in fulls)]
    groups: list[set[str]] = []
    for name in names:
        if any(name in g for g in groups):
            continue
        group = {name} | {o for o in names if o != name and all(f[o] == f[name] for f in fulls)}
        if len(group) > 1 and len({f[name] for f in fulls}) > 1:
            groups.append(group)
    return groups


def adhoc_row(entry: OpEntry, text: str, labels: list[str]) -> tuple[Workload, list[str]]:
    """The row ``--shape text`` asks of ``entry`` (and notes on what it set beyond the names given).
    TileOpsError naming the flag, the name and the op's dimensions when it cannot be built."""
    sizes = parse_shape(text)
    with_lets = load_emitted()[entry.name].with_lets
    template = template_row(entry, labels)
    params = _params(entry, template)
    indices = dict(template.indices)
    scalar = [k for k, v in indices.items() if not isinstance(v, tuple)]
    probe = {k: (_PROBES[i] if i < len(_PROBES) else 2003 + i) for i, k in enumerate(scalar)}
    try:
        probed = _full(with_lets, {**indices, **probe}, params)
    except Exception as exc:
        raise TileOpsError(f"--shape: {entry.name}'s dimensions cannot be worked out ({exc})") from None
    source = {v: k for k, v in probe.items()}
    derived = {k: source.get(v) for k, v in probed.items() if k not in indices}  # dimension -> its index, or None
    known = [*indices, *derived]
    tied = _tied(entry, with_lets)
    notes: list[str] = []
    given: dict[str, Any] = {}
    for name, size in sizes.items():
        if name not in known:
            raise TileOpsError(f"--shape {text!r}: {entry.name} has no dimension {name!r}; its dimensions: "
                               f"{', '.join(known)} (`tileops ops {entry.name}` shows its signature)")
        target = name if name in indices else derived[name]
        if target is None:
            lets = dict(entry.signature.lets)
            raise TileOpsError(f"--shape {text!r}: {name} = {lets.get(name, '?')} is computed, not one index; give "
                               f"the indices it comes from ({', '.join(indices)})")
        if isinstance(size, tuple) != isinstance(indices[target], tuple):
            many = isinstance(indices[target], tuple)
            raise TileOpsError(f"--shape {text!r}: {name} is {'a list of sizes' if many else 'one size'}"
                               f" in {entry.name} (e.g. {name}={'4x16' if many else '4096'})")
        given[name] = size
        indices[target] = size
    for group in tied:
        named = [n for n in group if n in given]
        if not named:
            continue
        size = given[named[0]]
        for other in sorted(group - set(given)):
            target = other if other in indices else derived.get(other)
            if target is not None and indices[target] != size:
                indices[target] = size
                notes.append(f"{other}={size} with {named[0]} (every row of {entry.name} holds them equal)")
    row = Workload(label=shape_label(sizes), indices=indices, params=dict(template.params),
                   present=template.present, dtypes=template.dtypes, tags=(ADHOC_TAG,))
    return row, notes


def cases(entry: OpEntry, row: Workload, dtypes: list[str]) -> list[Any]:
    """The dtype cases an ad-hoc row runs: with ``--dtype``, every case of the op's rows that has one of
    them (and the dtype itself where the signature has one free dtype); else the template's."""
    if not dtypes:
        return list(row.dtypes)
    seen: dict[str, Any] = {}
    for r in entry.workloads:
        for case in r.dtypes:
            seen.setdefault(dtype_case_name(case), case)
    free = [t for t in entry.signature.tensors if t.is_free_dtype]
    if len(free) == 1:
        for d in free[0].dtypes:
            seen.setdefault(d, d)
    return [c for name, c in seen.items()
            if name in dtypes or (isinstance(c, str) and c in dtypes) or
            (not isinstance(c, str) and set(dict(c).values()) & set(dtypes))]


def check_call(entry: OpEntry, row: Workload, case: Any, text: str) -> None:
    """The op called once on ``meta`` tensors of the row: a shape its signature checks refuse (a
    SignatureError, a TileOpsError) is a TileOpsError now. What meta tensors cannot answer (a value-reading
    formula, an input whose values decide traffic) is left to the run, which records it."""
    try:
        bound = bind_row(entry, row, case)
        op = instantiate(entry, row)
        op(**build_inputs(op, bound, "meta"))
    except OpNotAvailableError:
        return
    except TileOpsError as exc:
        raise TileOpsError(f"--shape {text!r} ({dtype_case_name(case)}): {exc}") from None
    except Exception:  # meta tensors' limits, not the shape's: the run tells
        return


def adhoc_rows(entry: OpEntry, shapes: Iterable[str], labels: list[str], dtypes: list[str]
               ) -> tuple[list[Workload], list[str]]:
    """Every ``--shape`` as a checked row of ``entry`` (its dtype cases chosen), and the notes to say."""
    out: list[Workload] = []
    notes: list[str] = []
    for text in shapes:
        row, said = adhoc_row(entry, text, labels)
        chosen = cases(entry, row, dtypes)
        if not chosen:
            continue  # no case of this op has the --dtype asked: the selection's check names it
        row = Workload(label=row.label, indices=row.indices, params=row.params, present=row.present,
                       dtypes=tuple(chosen), tags=row.tags)
        for case in chosen:
            check_call(entry, row, case, text)
        out.append(row)
        notes += [f"--shape {text}: {n}" for n in said]
    return out, notes
