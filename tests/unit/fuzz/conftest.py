"""Hypothesis profiles for the fuzz suite, and a count of the inputs it ran.

- `fast` (default, in `make test`): a few hundred inputs over all targets, derandomized so CI
  runs the same inputs every time.
- `long` (`make fuzz`, SHARDWISE_FUZZ=long): over 50,000 inputs, random seeds (pass
  `--hypothesis-seed=N` to replay one). The summary line gives the inputs run and the time taken.
"""

from __future__ import annotations

import os
import time

import fuzz_inputs
import pytest
from hypothesis import HealthCheck, settings

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]
settings.register_profile(
    "fast", max_examples=60, deadline=None, derandomize=True, suppress_health_check=_SLOW_OK,
    database=None,
)
# Seven core targets x 7,500 = 52,500 inputs at least (draws a target rejects are not counted);
# the gateway's (test_fuzz_gateway.py) about 52,000 more.
settings.register_profile(
    "long", max_examples=7_500, deadline=None, suppress_health_check=_SLOW_OK, database=None,
)
settings.load_profile(os.environ.get("SHARDWISE_FUZZ", "fast"))

_started = time.monotonic()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if fuzz_inputs.RUN:
        per_target = ", ".join(f"{k} {v}" for k, v in sorted(fuzz_inputs.RUN.items()))
        terminalreporter.write_line(
            f"fuzz: {sum(fuzz_inputs.RUN.values())} inputs in {time.monotonic() - _started:.0f} s "
            f"(profile {os.environ.get('SHARDWISE_FUZZ', 'fast')}: {per_target})"
        )
