"""Exceptions shared across the package."""


class TileOpsError(Exception):
    """Base for errors the CLI reports as a clear message rather than a traceback, with ``exit_code``
    (``tileops.exitcodes``: 2, bad input, unless a subclass says otherwise)."""

    exit_code: int = 2  # tileops.exitcodes.USAGE


class OpNotAvailableError(TileOpsError):
    """The op cannot answer this question for this call: no completed call yet, or a
    value-reading formula asked about a call on ``meta`` tensors (§4.4.4)."""


class SignatureError(TileOpsError, ValueError):
    """A call does not fit the op's signature: names the op, the tensor and what was expected."""


class ManifestError(TileOpsError):
    """The manifest cannot serve a request (unknown op, unclean entry)."""


class BackendUnavailableError(TileOpsError):
    """This backend cannot run this call here (no such backend for the op, a device, dtype or shape
    its implementation does not cover, a missing dependency): names the op, the backend and why."""


class CompileError(TileOpsError):
    """A backend's compilation failed (torch.compile, a Triton kernel's JIT): names the op and the cause."""
