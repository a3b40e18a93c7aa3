"""Holding bounds, FIFO release and timeouts, in virtual time."""

from __future__ import annotations

from shardwise.gateway.decide import holding
from shardwise.gateway.decide.holding import Holds, Limits, WakeLimiter


def test_count_bound_per_model() -> None:
    holds = Holds(Limits(max_count=2, max_bytes=10**6, timeout_s=10))
    assert [holds.admit("m", t, 1, 0.0) for t in (1, 2, 3)] == [None, None, "count"]
    assert holds.admit("other", 4, 1, 0.0) is None  # the bound is per model
    assert holds.count("m") == 2


def test_bytes_bound_per_model() -> None:
    holds = Holds(Limits(max_count=10, max_bytes=100, timeout_s=10))
    assert holds.admit("m", 1, 60, 0.0) is None
    assert holds.admit("m", 2, 41, 0.0) == "bytes"
    assert holds.admit("m", 3, 40, 0.0) is None
    assert holds.bytes("m") == 100


def test_release_is_fifo_and_empties_the_model() -> None:
    holds = Holds()
    for t in (3, 1, 2):
        holds.admit("m", t, 10, float(t))
    assert [h.ticket for h in holds.release("m")] == [3, 1, 2]
    assert holds.count("m") == 0 and holds.bytes("m") == 0 and list(holds.models()) == []


def test_drop_frees_room() -> None:
    holds = Holds(Limits(max_count=1, max_bytes=100, timeout_s=10))
    holds.admit("m", 1, 50, 0.0)
    assert holds.drop("m", 1).size == 50
    assert holds.drop("m", 1) is None
    assert holds.admit("m", 2, 100, 0.0) is None


def test_expiry_at_the_deadline_only() -> None:
    holds = Holds(Limits(timeout_s=600))
    holds.admit("m", 1, 1, 0.0)
    holds.admit("m", 2, 1, 5.0)
    assert holds.expire(599.9) == []
    assert [(m, h.ticket) for m, h in holds.expire(600.0)] == [("m", 1)]
    assert [h.ticket for _, h in holds.expire(10_000.0)] == [2]
    assert holds.count("m") == 0


def test_default_timeout_outlasts_a_cold_start() -> None:
    assert holding.DEFAULT_TIMEOUT_S >= 600


def test_wake_at_most_once_per_interval_per_model() -> None:
    wakes = WakeLimiter(5.0)
    assert [wakes.due("m", t) for t in (0.0, 1.0, 4.9, 5.0, 9.9, 10.0)] == [True, False, False, True, False, True]
    assert wakes.due("other", 1.0)
