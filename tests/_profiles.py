"""The Hypothesis profiles the suite runs under, loaded on import (tests/conftest.py imports this
first): "ci" by default, "slow" with HYPOTHESIS_PROFILE=slow."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

# "ci": a fixed seed (derandomize) and enough runs that the stateful test reaches dead jobs,
# requeues and expiries on every binary; about half a minute per binary on 2 cores.
# A failure shrinks one bug only and skips the explain phase: both rerun long programs many
# times, which took over five minutes on a busy 2-core machine.
settings.register_profile(
    "ci",
    max_examples=300,
    stateful_step_count=80,
    derandomize=True,
    deadline=None,
    report_multiple_bugs=False,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow],
)
# "slow" (HYPOTHESIS_PROFILE=slow): random seeds, ten times the runs, longer programs.
settings.register_profile(
    "slow",
    max_examples=3_000,
    stateful_step_count=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
# The profile this run loaded; tests that size themselves by it read this, not the environment.
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(HYPOTHESIS_PROFILE)

# A stateful test's timeout: a few minutes per binary with "ci"; "slow" runs ten times longer.
STATEFUL_TIMEOUT_S = 600 if HYPOTHESIS_PROFILE == "ci" else 6 * 3600
