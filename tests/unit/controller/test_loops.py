"""controller/loops.every: a step per interval as leader only; a failing step is logged once and
the loop goes on."""

from __future__ import annotations

import asyncio
import logging

import pytest

from shardwise.controller import loops
from shardwise.kube.quietlog import QuietLog


def test_steps_only_while_acting_and_survives_a_failing_step(caplog: pytest.LogCaptureFixture) -> None:
    acting = iter([False, True, True, True, True])
    steps: list[int] = []

    async def step() -> None:
        steps.append(len(steps))
        if len(steps) == 1:
            raise RuntimeError("engine away")
        if len(steps) == 3:
            raise asyncio.CancelledError  # ends the test's loop, as a shutdown does

    quiet = QuietLog(logging.getLogger("test.loops"), "test loop")
    with caplog.at_level(logging.INFO, logger="test.loops"), pytest.raises(asyncio.CancelledError):
        asyncio.run(loops.every(0.0, step, acting=lambda: next(acting), quiet=quiet))
    assert steps == [0, 1, 2]  # the first turn was not the leader's: no step
    assert [r.getMessage() for r in caplog.records] == [
        "test loop failed: RuntimeError: engine away (retrying with backoff)",
        "test loop recovered after 1 failed attempts over 0 s"]


def test_the_interval_is_start_to_start() -> None:
    now = [100.0]
    slept: list[float] = []

    async def step() -> None:
        now[0] += 3.0  # a slow step
        if len(slept) == 2:
            raise asyncio.CancelledError

    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        await real_sleep(0)

    quiet = QuietLog(logging.getLogger("test.loops"), "test loop")
    with pytest.MonkeyPatch.context() as patch, pytest.raises(asyncio.CancelledError):
        patch.setattr(loops.asyncio, "sleep", sleep)
        asyncio.run(loops.every(5.0, step, acting=lambda: True, quiet=quiet, clock=lambda: now[0]))
    assert slept == [2.0, 2.0]
