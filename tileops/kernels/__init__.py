"""Hand-written kernels behind the ops' non-torch backends (``triton/``).

The ops in ``tileops.ops`` name their kernel; nothing here is imported until an op runs
that backend, so the package imports without triton installed.
"""
