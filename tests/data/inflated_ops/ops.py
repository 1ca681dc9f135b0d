"""Test-only op: an honest copy whose manifest formula claims 1000x its traffic (tests/test_physics_health.py)."""

from tileops.ops.base import Op


class InflatedCopy(Op):
    name = "inflated_copy"

    def compute(self, x):
        return x.clone()
