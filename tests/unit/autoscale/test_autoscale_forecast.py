"""Forecast.level_fence: how far the smoothed level strays from the load on noise alone."""

from __future__ import annotations

import math

import pytest

from shardwise.autoscale import forecast


@pytest.mark.parametrize(
    ("period_s", "startup_s", "shrink"),
    [
        # An average over one period is the period itself: alpha = 1 - 1/e.
        pytest.param(30.0, 30.0, math.sqrt((1 - math.exp(-1)) / (1 + math.exp(-1))), id="one period"),
        # Over three periods (a 90 s start, 30 s periods) the average keeps about 0.4 of it.
        pytest.param(30.0, 90.0, math.sqrt((1 - math.exp(-1 / 3)) / (1 + math.exp(-1 / 3))),
                     id="one start of three periods"),
        # A start shorter than a period averages over the period, never less.
        pytest.param(30.0, 10.0, math.sqrt((1 - math.exp(-1)) / (1 + math.exp(-1))),
                     id="start shorter than a period"),
    ],
)
def test_level_fence_is_the_burst_fence_shrunk_by_the_average(
        period_s: float, startup_s: float, shrink: float) -> None:
    state = forecast.Forecast(level=20.0, deviation=2.0)
    assert state.level_fence(period_s, startup_s) == pytest.approx(state.fence(period_s) * shrink)


def test_level_fence_shrinks_as_the_average_lengthens() -> None:
    state = forecast.Forecast(level=20.0, deviation=2.0)
    fences = [state.level_fence(30.0, start) for start in (30.0, 90.0, 300.0, 900.0)]
    assert fences == sorted(fences, reverse=True)
    assert all(0 < f < state.fence(30.0) for f in fences)
