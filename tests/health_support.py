"""What a real CPU run's health line may honestly be: the physics check judges each ceiling, except where a row's
time interval straddles it (issue 26: noise neither invents a breach nor hides one)."""

from __future__ import annotations

import re

#: NOT JUDGED reasons a real run on a shared host may give although every ceiling was priced: a row's interval
#: straddles a ceiling (within-noise), or the profile has no such roof (roof-absent: GPU keys on a CPU).
NOISE_ONLY = frozenset({"within-noise", "roof-absent"})


def assert_judged_but_for_noise(out: str) -> str:
    """The output's health line is OK, or PARTLY JUDGED for noise (or an absent roof) alone; returns it."""
    found = re.search(r"^health: (.*)$", out, re.M)
    assert found, out[-2000:]
    health = found.group(1)
    if health.startswith("OK"):
        return health
    assert health.startswith("PARTLY JUDGED") and "NOT JUDGED:" in health, health
    reasons = set(re.findall(r"\(([a-z-]+)\)", health.split("NOT JUDGED:", 1)[1]))
    assert reasons and reasons <= NOISE_ONLY, health
    return health
