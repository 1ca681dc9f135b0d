"""The call the child measured, as plain JSON: what ``when`` and the verdict read.

The child writes one of these beside the report; the parent never instantiates
the op itself. ``CallFacts`` answers the questions a checked call answers for
the manifest's tensor primitives (``nbytes``, ``is_present``, ``dtype_of``),
so an EXEMPT ``when`` is evaluated with the manifest's own primitive
implementations over the row that was measured.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tileops.fsutil import write_atomic
from tileops.ops.call import TensorFacts


def _plain(v: Any) -> Any:
    """JSON-safe: tuples become lists (variadic indices), everything else as is or its str."""
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def _tupled(v: Any) -> Any:
    return tuple(_tupled(x) for x in v) if isinstance(v, list) else v


@dataclass
class CallFacts(TensorFacts):
    """One measured call, or the error that prevented it (``error_kind`` set, the rest empty)."""

    op: str
    indices: dict[str, Any] = field(default_factory=dict)  # dims (variadic ones as tuples), params, lets
    params: dict[str, Any] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    nbytes_by_tensor: dict[str, int] = field(default_factory=dict)
    present_inputs: tuple[str, ...] = ()
    inputs: int = 0  # bound input tensors (the WARN band allows a partial sector at each end of each)
    read_bytes: int | None = None  # Op.eval_roofline_read_bytes() of this call; None: no read half declared
    roofline_bytes: int | None = None  # eval_roofline()'s bytes, for the report (reads + writes)
    data_terms: dict[str, Any] = field(default_factory=dict)
    device_name: str | None = None
    device_uuid: str | None = None
    error_kind: str | None = None  # no-cuda | op-error
    error: str | None = None

    # -- building and storing -----------------------------------------------------------

    @classmethod
    def of_op(cls, op: Any, *, device_name: str | None = None, device_uuid: str | None = None) -> CallFacts:
        """The facts of ``op.last_call`` and what the op says about it (read half, data terms)."""
        call = op.last_call
        inputs = {t.name for t in op.signature.inputs}
        return cls(
            op=call.op, indices=dict(call.indices), params=dict(call.params), dtypes=dict(call.dtypes),
            shapes={k: tuple(v) for k, v in call.shapes.items()}, nbytes_by_tensor=dict(call.nbytes_by_tensor),
            present_inputs=tuple(sorted(call.present_inputs)),
            inputs=sum(1 for k in call.nbytes_by_tensor if k in inputs),
            read_bytes=op.eval_roofline_read_bytes(), roofline_bytes=op.eval_roofline()[1],
            data_terms=_plain(op.roofline_data_terms()), device_name=device_name, device_uuid=device_uuid)

    @classmethod
    def failed(cls, op: str, kind: str, message: str, **device: Any) -> CallFacts:
        return cls(op=op, error_kind=kind, error=message, **device)

    def write(self, path: Path) -> None:
        write_atomic(path, json.dumps(_plain(asdict(self)), indent=1) + "\n")

    @classmethod
    def read(cls, path: Path) -> CallFacts:
        raw = json.loads(path.read_text(encoding="utf-8"))
        raw["indices"] = {k: _tupled(v) for k, v in raw.get("indices", {}).items()}
        raw["shapes"] = {k: tuple(v) for k, v in raw.get("shapes", {}).items()}
        raw["present_inputs"] = tuple(raw.get("present_inputs", ()))
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in raw.items() if k in known})
