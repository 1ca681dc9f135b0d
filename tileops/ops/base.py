"""The Op contract (§4.4.4, §1.4, §4.7).

An op is a class named after its manifest entry. ``forward`` binds the call to
the entry's signature (dtypes, shapes, presence), runs the implementation,
checks the outputs against the signature's extents and records ``last_call``.
``eval_roofline`` prices ``last_call`` through the entry's generated evaluator,
and caches nothing: a cached pair would outlive the shapes it was priced for.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar
from collections.abc import Callable

import torch

from tileops.dtypes import name_of, to_torch
from tileops.errors import BackendUnavailableError, CompileError, OpNotAvailableError, SignatureError
from tileops.ops.backends import device_unsupported, no_recompile, torch_compile
from tileops.ops.call import CheckedCall
from tileops.ops.spec import Emitted, Signature, TensorSpec

if TYPE_CHECKING:
    from tileops.ops.triton_kernels import Kernel

DEFAULT_ROOF = "cuda_core.fp32"


@dataclass(frozen=True)
class PreparedCall:
    """A checked call ready to repeat (:meth:`Op.prepare`): ``run()`` re-executes only the backend's
    implementation; ``setup_s`` is the first call's seconds, compilation included (None for eager)."""

    run: Callable[[], Any]
    setup_s: float | None


class Op:
    """Base of every op. Subclasses set ``name`` (the manifest entry) and implement ``compute``."""

    name: ClassVar[str]
    emitted: ClassVar[Emitted]
    #: backends this op implements (tileops.ops.backends): "torch" (eager, the portable one) and
    #: "compile" (torch.compile of ``compute``) for every op; "triton" where a kernel is named below.
    backends: ClassVar[tuple[str, ...]] = ("torch", "compile")
    #: the op's Triton kernel, "module:name" in tileops.ops.triton_kernels (imported only when used)
    triton_kernel: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if ("triton" in cls.backends) != (cls.triton_kernel is not None):
            raise TypeError(f"{cls.__qualname__}: declare the 'triton' backend and a triton_kernel together "
                            f"(backends {cls.backends}, triton_kernel {cls.triton_kernel!r})")
        if "name" in cls.__dict__:  # a concrete op for one entry: bind its own evaluator (§4.4.1)
            from tileops.ops import catalog, registry

            cls.emitted = catalog.emitted_for(cls.name)
            registry.register(cls)

    def __init__(self, backend: str = "torch", **params: Any) -> None:
        if backend not in self.backends:
            raise ValueError(f"{self.name}: backend {backend!r} is not implemented; use one of {self.backends}")
        self.backend = backend
        self.params = self._bind_params(params)
        self.last_call: CheckedCall | None = None
        self._stages: dict[str, list[CheckedCall]] = {}
        self._compiled: Callable[..., Any] | None = None  # the compile backend's compute, made once
        self._unchecked = False  # inside a prepared eager call: stages run their compute only

    # -- construction --------------------------------------------------------------

    @property
    def signature(self) -> Signature:
        return self.emitted.signature

    def _bind_params(self, given: dict[str, Any]) -> dict[str, Any]:
        specs = {p.name: p for p in self.signature.params}
        unknown = sorted(set(given) - set(specs))
        if unknown:
            raise TypeError(f"{self.name}: unknown parameter(s) {unknown}; the signature declares "
                            f"{sorted(specs) or 'none'}")
        out: dict[str, Any] = {}
        for p in self.signature.params:
            if p.name in given:
                out[p.name] = given[p.name]
            elif p.required:
                raise TypeError(f"{self.name}: parameter {p.name!r} ({p.type}) is required")
            else:
                out[p.name] = p.default
        return out

    # -- the call ------------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        sig = self.signature
        bound = self._bind_inputs(args, kwargs)
        call = self._check_inputs(bound)
        self.check_call(call)
        self._stages = {}
        result = self.implementation()(**bound)
        outs = result if isinstance(result, tuple) else (result,)
        if len(outs) != len(sig.outputs):
            raise AssertionError(f"{self.name}: compute returned {len(outs)} tensors, signature has {len(sig.outputs)}")
        self._check_outputs(call, dict(zip((t.name for t in sig.outputs), outs)))
        call.stages = self._stages
        self.last_call = call
        return result

    __call__ = forward

    def compute(self, *args: Any, **tensors: Any) -> Any:
        """The implementation: inputs by signature name (absent optionals are None), a tensor or a tuple of them
        out. Each family declares its own parameters (``*args: Any, **tensors: Any`` lets it: a checker accepts
        any override of this gradual signature)."""
        raise NotImplementedError

    # -- backends ------------------------------------------------------------------

    def implementation(self) -> Callable[..., Any]:
        """The selected backend's ``compute``: inputs by signature name, outputs as ``compute``
        returns them; no checks and no ``last_call`` (``forward`` adds both)."""
        if self.backend == "compile":
            if self._compiled is None:  # compiled on first use when prepare() was not called
                self._compiled = torch_compile(self.compute)
            return self._compiled
        if self.backend == "triton":
            kernel = self.kernel()
            return lambda **tensors: kernel(self, **tensors)
        return self.compute

    def prepare(self, *args: Any, **kwargs: Any) -> PreparedCall:
        """Check a call once and make the backend ready; return what repeats it and what that took.

        A timer must time the op, not the contract's bookkeeping (binding, dtype and shape
        checks, output checks, ``last_call``): that costs as much per call as a small kernel
        (docs/architecture.md, "Figures behind the code"). So the call is made once through ``forward`` here -- it is
        checked, ``last_call`` is the call ``eval_roofline`` prices, and for ``compile`` it
        compiles (torch.compile, once per instance) and for ``triton`` it JIT-compiles the
        kernel (or loads it from TRITON_CACHE_DIR). ``PreparedCall.run`` then repeats only the
        backend's implementation on the same, already checked inputs; eager composites run
        their stages' ``compute`` too (the checked call recorded their calls). A mutated input
        is mutated, as by any call.

        ``setup_s`` is the first call's seconds, compilation included, for ``compile`` and
        ``triton`` (the bench records it apart from the timing; None for ``torch``). After it, a
        compiled op that would recompile (a guard failing on other inputs) raises instead of
        compiling inside a timing. A backend failure raises CompileError naming the op, the
        backend and the cause.
        """
        t0 = time.perf_counter()
        try:
            self.forward(*args, **kwargs)
            for d in {t.device for t in (*args, *kwargs.values())
                      if isinstance(t, torch.Tensor) and t.device.type == "cuda"}:  # pragma: no cover - GPU
                torch.cuda.synchronize(d)
        except (SignatureError, BackendUnavailableError):
            raise
        except Exception as exc:
            if self.backend == "torch":
                raise
            raise CompileError(f"{self.name}: the {self.backend} backend failed on its first call "
                               f"(compilation included): {type(exc).__name__}: {exc}") from exc
        seconds = time.perf_counter() - t0
        if self.backend == "compile":
            assert self._compiled is not None
            self._compiled = no_recompile(self._compiled)
        bound = self._bind_inputs(args, kwargs)
        if self.backend == "torch":
            return PreparedCall(run=lambda: self._compute_unchecked(bound), setup_s=None)
        impl = self.implementation()  # compiled code keeps its stages' bookkeeping: it was traced with it

        def run() -> Any:
            # A composite's code was traced from an empty stage record (forward starts one): start each call
            # from a fresh one, or its guard ("not self._stages") fails and the call would recompile (it
            # raises instead); last_call keeps the checked call's own record.
            self._stages = {}
            return impl(**bound)

        return PreparedCall(run=run, setup_s=seconds)

    def _compute_unchecked(self, bound: dict[str, Any]) -> Any:
        self._unchecked = True
        try:
            return self.compute(**bound)
        finally:
            self._unchecked = False

    @classmethod
    def kernel(cls) -> Kernel:
        """The op's Triton kernel (imports triton)."""
        if cls.triton_kernel is None:
            raise BackendUnavailableError(f"{cls.name}: no Triton kernel; backends are {', '.join(cls.backends)}")
        from tileops.ops.triton_kernels import load

        return load(cls.triton_kernel)

    @classmethod
    def unsupported(cls, backend: str, device: str, dtypes: Mapping[str, str],
                    shapes: Mapping[str, tuple[int, ...]], params: Mapping[str, Any] | None = None) -> str | None:
        """Why this op cannot run ``backend`` on ``device`` for a call with these dtypes (every
        tensor's, outputs included: ``BoundRow.dtypes``) and input shapes (``BoundRow.shapes``),
        or None when it can. The bench asks before running a row and records a skip with the reason."""
        if backend not in cls.backends:
            return f"{cls.name} has no {backend!r} backend (it has {', '.join(cls.backends)})"
        return device_unsupported(backend, device) or cls.call_unsupported(backend, dtypes, shapes, params or {})

    @classmethod
    def call_unsupported(cls, backend: str, dtypes: Mapping[str, str], shapes: Mapping[str, tuple[int, ...]],
                         params: Mapping[str, Any]) -> str | None:
        """The implementation's own limits on dtypes and shapes, whatever the device (the tests use
        this to pick the rows a kernel claims). Only Triton kernels have any today."""
        if backend == "triton":
            return cls.kernel().unsupported(cls.name, dtypes, shapes, params)
        return None

    def check_call(self, call: CheckedCall) -> None:
        """Constraints between bound indices that shape patterns cannot state (a's K equals b's K,
        an even width, query heads a multiple of kv heads). Raise SignatureError naming the op,
        the tensor and what was expected. The default has none."""

    def run_stage(self, stage: str, op: Op, *args: Any, **kwargs: Any) -> Any:
        """Run a sub-op as a named stage of this composite; its checked call joins ``stages``."""
        if self._unchecked:  # a prepared call: the checked call already recorded this stage
            return op._compute_unchecked(op._bind_inputs(args, kwargs))
        out = op.forward(*args, **kwargs)
        assert op.last_call is not None
        self._stages.setdefault(stage, []).append(op.last_call)
        return out

    def _bind_inputs(self, args: tuple, kwargs: dict) -> dict[str, torch.Tensor | None]:
        names = [t.name for t in self.signature.inputs]
        if len(args) > len(names):
            raise SignatureError(f"{self.name}: takes {len(names)} inputs ({', '.join(names)}), got {len(args)}")
        bound: dict[str, Any] = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise SignatureError(f"{self.name}: no input named {k!r}; inputs are {', '.join(names)}")
            if k in bound:
                raise SignatureError(f"{self.name}: input {k!r} given twice")
            bound[k] = v
        for t in self.signature.inputs:
            v = bound.get(t.name)
            if v is None and not t.optional:
                raise SignatureError(f"{self.name}: required input {t.name!r} is missing")
            if v is not None and not isinstance(v, torch.Tensor):
                raise SignatureError(f"{self.name}: input {t.name!r} must be a tensor, got {type(v).__name__}")
            bound.setdefault(t.name, None)
        return bound

    def _check_inputs(self, bound: dict[str, torch.Tensor | None]) -> CheckedCall:
        sig = self.signature
        present = {k: v for k, v in bound.items() if v is not None}
        dtypes = {k: name_of(v.dtype) for k, v in present.items()}
        for t in sig.inputs:
            if t.name in present:
                self._check_dtype(t, dtypes[t.name], dtypes, where="input")
        indices: dict[str, Any] = {}
        origin: dict[str, str] = {}
        for t in sig.inputs:
            if t.name in present:
                self._bind_shape(t, tuple(present[t.name].shape), indices, origin)
        devices = {v.device.type for v in present.values()}
        if len(devices) > 1:
            raise SignatureError(f"{self.name}: inputs are on several devices {sorted(devices)}")
        ix = self.emitted.with_lets({**indices, **self.params})
        return CheckedCall(
            op=self.name, indices=ix, params=dict(self.params), dtypes=dtypes,
            shapes={k: tuple(v.shape) for k, v in present.items()},
            nbytes_by_tensor={k: _nbytes(v) for k, v in present.items()},
            present_inputs=frozenset(t.name for t in sig.inputs if t.optional and t.name in present),
            metadata={t.name: present[t.name] for t in sig.inputs if t.metadata and t.name in present},
            device=devices.pop() if devices else "cpu",
        )

    def _check_dtype(self, t: TensorSpec, got: str, dtypes: dict[str, str], where: str) -> None:
        if t.dtype_param is not None:
            want = self.params[t.dtype_param]
            ok = got == want
            expected = f"{want} (parameter {t.dtype_param})"
        elif t.same_as is not None:
            want = dtypes.get(t.same_as)
            ok = want is None or got == want
            expected = f"the dtype of {t.same_as} ({want})"
        else:
            ok = got in t.dtypes
            expected = " | ".join(t.dtypes)
        if not ok:
            raise SignatureError(f"{self.name}: {where} {t.name!r} has dtype {got}, expected {expected}")

    def _bind_shape(self, t: TensorSpec, shape: tuple[int, ...], ix: dict[str, Any], origin: dict[str, str]) -> None:
        pattern = t.shape
        fixed = [d for d in pattern if not d.startswith("*")]
        has_var = len(fixed) != len(pattern)
        if (len(shape) < len(fixed)) if has_var else (len(shape) != len(fixed)):
            raise SignatureError(
                f"{self.name}: input {t.name!r} has shape {list(shape)}, expected [{', '.join(pattern)}]"
                f" ({'at least ' if has_var else ''}{len(fixed)} dims)")
        var_len = len(shape) - len(fixed)
        pos = 0
        for d in pattern:
            if d.startswith("*"):
                val: Any = tuple(shape[pos:pos + var_len])
                pos += var_len
                key = d[1:]
            else:
                val = shape[pos]
                pos += 1
                key = d
                if d.isascii() and d.isdigit():
                    if val != int(d):
                        raise SignatureError(f"{self.name}: input {t.name!r} dim {pos - 1} is {val}, expected {d}")
                    continue
            if key in ix and ix[key] != val:
                raise SignatureError(
                    f"{self.name}: input {t.name!r} binds {key} = {val}, but {origin[key]} bound {key} = {ix[key]}"
                    f" (expected shape [{', '.join(pattern)}])")
            ix.setdefault(key, val)
            origin.setdefault(key, f"input {t.name!r}")

    def _check_outputs(self, call: CheckedCall, outs: dict[str, torch.Tensor]) -> None:
        want_shapes = self.emitted.output_shapes(call.indices)
        for t in self.signature.outputs:
            o = outs[t.name]
            got = name_of(o.dtype)
            self._check_dtype(t, got, {**call.dtypes, t.name: got}, where="output")
            if tuple(o.shape) != tuple(want_shapes[t.name]):
                raise AssertionError(
                    f"{self.name}: output {t.name!r} has shape {list(o.shape)}, the signature states "
                    f"{list(want_shapes[t.name])}")
            call.dtypes[t.name] = got
            call.shapes[t.name] = tuple(o.shape)
            call.nbytes_by_tensor[t.name] = _nbytes(o)

    # -- what consumers read ---------------------------------------------------------

    def _require_call(self) -> CheckedCall:
        if self.last_call is None:
            raise OpNotAvailableError(
                f"{self.name}: no completed call yet; the dtype (and any dynamic dims) are bound by forward(), "
                "so call the op before pricing it")
        return self.last_call

    def eval_roofline(self) -> tuple[int, int]:
        """(flops, bytes) of the last completed call, from the entry's generated evaluator."""
        return self.emitted.roofline(self._require_call())

    def eval_roofline_read_bytes(self) -> int | None:
        """The read half of bytes for the NCU audit (§4.5); None when the entry declares none."""
        call = self._require_call()
        return None if self.emitted.read_bytes is None else self.emitted.read_bytes(call)

    def make_input(self, t: TensorSpec, shape: tuple[int, ...], dtype: str, device: str,
                   generator: torch.Generator, indices: dict[str, Any]) -> torch.Tensor:
        """Build input ``t`` for a workload row. Override where values matter (ids within range,
        routing, lengths): the row's own generator makes them reproducible (§4.7)."""
        return make_tensor(shape, dtype, device, generator)

    def roof_key(self) -> str:
        """The profile key of the unit an optimal implementation would use (§1.4)."""
        return DEFAULT_ROOF

    def roofline_data_terms(self) -> dict[str, Any]:
        """The values that decided a value-dependent number (§4.7). Empty for shape-only ops."""
        return {}

    def __repr__(self) -> str:
        ps = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({ps})"


def _nbytes(t: torch.Tensor) -> int:
    """prod(shape) * bits(dtype) / 8: the tensor's logical size, meta tensors included."""
    return math.prod(t.shape) * t.element_size()


def make_tensor(shape: tuple[int, ...], dtype: str, device: str,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """A tensor for a workload row: random normal floats, small random ints, random bools."""
    td = to_torch(dtype)
    if device == "meta":
        return torch.empty(shape, dtype=td, device="meta")
    # Drawn on the host from the row's own generator (reproducible on any device), then moved.
    if td == torch.bool:
        t = torch.rand(shape, generator=generator) > 0.5
    elif not td.is_floating_point:
        t = torch.randint(0, 64, shape, generator=generator, dtype=td)
    elif dtype.startswith("float8"):
        t = torch.randn(shape, generator=generator).clamp(-4, 4).to(td)
    else:
        t = torch.randn(shape, generator=generator, dtype=torch.float32).to(td)
    return t.to(device)
