"""The implementations an op can run behind the same Op contract, and where each can run.

- ``torch``: the op's ``compute`` in eager PyTorch; runs wherever torch does.
- ``compile``: the same ``compute`` through ``torch.compile`` (inductor): C++/OpenMP on a CPU
  (needs a C++ compiler), Triton on CUDA (needs triton, which CUDA builds of torch bring).
- ``triton``: the op's hand-written Triton kernel (``tileops.ops.triton_kernels``); CUDA only.
  Triton's interpreter (``TRITON_INTERPRET=1``) runs the same kernels on CPU tensors, which the
  tests use to check them against eager; it is for correctness, never for timing.

The bench asks :meth:`tileops.ops.base.Op.unsupported` before it runs a row, so a row a
backend cannot run is skipped with a reason instead of failing. Nothing here imports triton
or inductor at module import: the CPU image has no triton, and the CLI must start fast.

Compile caches live where torch and triton put them, and both read their location from the
environment: ``TORCHINDUCTOR_CACHE_DIR`` (inductor's FX-graph and compiled-code cache) and
``TRITON_CACHE_DIR`` (compiled Triton kernels, from inductor and from our own kernels).
:func:`cache_env` names both for one folder, so a nightly job can keep them beside its results.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import types
from pathlib import Path
from typing import Any
from collections.abc import Callable

from tileops.defaults import BACKENDS

#: Triton 3.x supports NVIDIA GPUs of compute capability 8.0 and later (its README).
TRITON_MIN_CAPABILITY = (8, 0)

INTERPRETER_NOT_TIMED = (
    "Triton kernels run on CUDA devices; on a CPU only Triton's interpreter (TRITON_INTERPRET=1) "
    "runs them, which checks correctness and is not timed")


INTERPRETER_SET = ("TRITON_INTERPRET=1 is set: Triton kernels would run in the interpreter, which is not timed "
                   "(unset it to time them)")


def cache_env(root: str | os.PathLike[str]) -> dict[str, str]:
    """Environment that puts every compile cache under ``root`` (set it before the worker starts:
    inductor and triton read these variables when they first compile)."""
    base = Path(root)
    return {"TORCHINDUCTOR_CACHE_DIR": str(base / "inductor"), "TRITON_CACHE_DIR": str(base / "triton")}


def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """Whether Triton kernels run in the interpreter (read when a kernel module is imported)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def _device_type(device: str) -> str:
    return device.split(":", 1)[0]


def _cuda_capability(device: str) -> tuple[int, int] | None:
    import torch

    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return (major, minor)


@functools.cache
def _cpp_compiler_missing() -> str | None:
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        get_cpp_compiler()
    except Exception as exc:  # inductor says why: no g++/clang++ on PATH, CXX not found, ...
        return f"torch.compile on a CPU needs a C++ compiler (set CXX or install g++): {exc}"
    return None


def device_unsupported(backend: str, device: str) -> str | None:
    """Why ``backend`` cannot run on ``device`` ("cpu", "cuda", "cuda:1", ...), or None."""
    if backend == "torch":
        return None
    if backend == "compile":
        return _compile_unsupported(_device_type(device))
    if backend == "triton":
        return _triton_unsupported(device)
    return f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}"


def _compile_unsupported(kind: str) -> str | None:
    if kind == "cpu":
        return _cpp_compiler_missing()
    if kind == "cuda":
        if not triton_installed():
            return "torch.compile on CUDA generates Triton kernels: install triton"
        return INTERPRETER_SET if interpreting() else None
    return f"torch.compile is not offered on {kind!r} devices here"


def _triton_unsupported(device: str) -> str | None:
    kind = _device_type(device)
    if not triton_installed():
        return "triton is not installed (pip install 'tileops[triton]')"
    if kind == "cpu":
        return INTERPRETER_NOT_TIMED
    if kind != "cuda":
        return f"Triton kernels run on CUDA devices, not {kind!r}"
    if interpreting():
        return INTERPRETER_SET
    cap = _cuda_capability(device)
    if cap is None:
        return "no CUDA device is visible"
    if cap < TRITON_MIN_CAPABILITY:
        return (f"Triton needs compute capability {TRITON_MIN_CAPABILITY[0]}.{TRITON_MIN_CAPABILITY[1]}+, "
                f"this device is {cap[0]}.{cap[1]}")
    return None


def own_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a code object of its own.

    Dynamo keys its compiled-code cache on the code object, and every op of a family shares one
    ``compute`` (all unary ops share ``Unary.compute``). Compiling the shared code once per op
    instance would pile every row's graph onto one code object, reach the recompile limit after
    a few rows, and then run eagerly without a word. A copy per instance gives each its own cache.
    """
    func = getattr(fn, "__func__", fn)
    copy = types.FunctionType(func.__code__.replace(), func.__globals__, func.__name__,
                              func.__defaults__, func.__closure__)
    copy.__kwdefaults__ = func.__kwdefaults__
    copy.__qualname__ = func.__qualname__
    owner = getattr(fn, "__self__", None)
    return copy if owner is None else types.MethodType(copy, owner)


def torch_compile(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.compile`` of ``fn`` for one op instance: static shapes (one row, one shape), and a
    compile that would exceed the recompile limit raises instead of falling back to eager."""
    import torch

    compiled = torch.compile(own_code(fn), dynamic=False)

    def run(*args: Any, **kwargs: Any) -> Any:
        with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
            return compiled(*args, **kwargs)

    return run


def no_recompile(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (already compiled for these inputs) under the stance that makes any recompile raise:
    a guard that fails while timing would otherwise compile inside the timed region."""
    import torch

    def run(*args: Any, **kwargs: Any) -> Any:
        with torch.compiler.set_stance("fail_on_recompile"):
            return fn(*args, **kwargs)

    return run
