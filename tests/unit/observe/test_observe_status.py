"""Status dicts (rounding, no churn), should_write(), and cost()."""

from __future__ import annotations

import pytest

from shardwise.observe import cost, status
from shardwise.observe.aggregate import Summary


def _summary(**overrides: float | None) -> Summary:
    base = dict(
        window_seconds=300.0, pods=2, requests=40.0, prompt_tokens=1550.0, output_tokens=736.0,
        ttft_p50_ms=28.387096774193548, ttft_p95_ms=40.0, ttft_p99_ms=56.00000000000001,
        itl_p50_ms=6.010362694300518, itl_p95_ms=20.721739130434777, e2e_p95_ms=463.6363636,
        queue_p95_ms=None, requests_per_second=2.6666666666666665,
        prompt_tokens_per_second=103.33333, output_tokens_per_second=49.0666666,
        running=3.0, waiting=0.0, kv_cache_usage=0.123456,
    )
    base.update(overrides)
    return Summary(**base)  # type: ignore[arg-type]


def test_latency_is_rounded_to_three_significant_digits() -> None:
    got = status.status_latency(_summary())
    assert got == {
        "window": "5m",
        "ttftP50Ms": 28.4, "ttftP95Ms": 40.0, "ttftP99Ms": 56.0,
        "itlP50Ms": 6.01, "itlP95Ms": 20.7, "e2eP95Ms": 464.0,
        "requestsPerSecond": 2.67, "promptTokensPerSecond": 103.0,
        "outputTokensPerSecond": 49.1, "kvCacheUsage": 0.123,
        "running": 3, "waiting": 0,
    }  # queueP95Ms absent: no observations means no figure, not a null


def test_identical_inputs_give_identical_dicts_and_noise_is_rounded_away() -> None:
    a = status.status_latency(_summary(ttft_p95_ms=40.0000001))
    b = status.status_latency(_summary(ttft_p95_ms=39.9999999))
    assert a == b
    assert status.status_latency(_summary(ttft_p50_ms=-0.0))["ttftP50Ms"] == 0.0


def test_cost_figures() -> None:
    c = cost.cost(8, 2.49, "spec", output_tokens_per_s=1000.0, total_tokens_per_s=3000.0)
    assert c.gpu_hours_per_hour == 8 and c.hourly_usd == pytest.approx(19.92)
    # 19.92 $/h buys 3.6M output tokens at 1000 tok/s.
    assert c.per_million_output_tokens_usd == pytest.approx(19.92 / 3.6)
    assert c.per_million_total_tokens_usd == pytest.approx(19.92 / 10.8)
    assert status.status_cost(c) == {
        "gpuHoursPerHour": 8.0, "hourlyUSD": 19.92, "priceSource": "spec",
        "perMillionOutputTokensUSD": 5.53, "perMillionTotalTokensUSD": 1.84,
    }


def test_cost_without_throughput_has_no_per_token_price() -> None:
    c = cost.cost(4, 2.0, "default-table", output_tokens_per_s=0.0, total_tokens_per_s=None)
    assert c.per_million_output_tokens_usd is None and c.per_million_total_tokens_usd is None
    assert "perMillionOutputTokensUSD" not in status.status_cost(c)


def test_cheap_per_token_price_keeps_significant_digits() -> None:
    c = cost.cost(1, 0.5, "configmap", output_tokens_per_s=50_000.0, total_tokens_per_s=None)
    assert status.status_cost(c)["perMillionOutputTokensUSD"] == pytest.approx(0.00278)


def test_negative_inputs_are_refused() -> None:
    with pytest.raises(ValueError):
        cost.cost(-1, 2.0, "spec", 1.0, 1.0)


WRITE = dict(min_interval_s=30.0, relative_threshold=0.05)
OLD = {"latency": {"window": "5m", "ttftP95Ms": 100.0, "requestsPerSecond": 10.0}}


@pytest.mark.parametrize(
    ("previous", "new", "elapsed", "expected"),
    [
        (None, OLD, 0.0, True),  # first write
        (OLD, OLD, 1e6, False),  # identical: never, however long ago
        (OLD, {"latency": {**OLD["latency"], "ttftP95Ms": 200.0}}, 10.0, False),  # too soon
        (OLD, {"latency": {**OLD["latency"], "ttftP95Ms": 200.0}}, 30.0, True),
        (OLD, {"latency": {**OLD["latency"], "ttftP95Ms": 104.0}}, 60.0, False),  # 4% < 5%
        (OLD, {"latency": {**OLD["latency"], "ttftP95Ms": 94.0}}, 60.0, True),  # 6%
        (OLD, {"latency": {"window": "5m", "ttftP95Ms": 100.0}}, 60.0, True),  # disappeared
        (OLD, {"latency": {**OLD["latency"], "itlP95Ms": 5.0}}, 60.0, True),  # appeared
        (OLD, {"latency": {**OLD["latency"], "window": "1m"}}, 60.0, True),  # not a number
        ({"latency": {"waiting": 0}}, {"latency": {"waiting": 1}}, 60.0, True),  # from zero
    ],
)
def test_should_write(previous: dict | None, new: dict, elapsed: float, expected: bool) -> None:
    assert status.should_write(previous, new, 1000.0, 1000.0 + elapsed, **WRITE) is expected


def test_small_drift_is_written_once_the_window_rolls() -> None:
    drifted = {"latency": {**OLD["latency"], "ttftP95Ms": 101.0}}
    assert not status.should_write(OLD, drifted, 0.0, 299.0, **WRITE, refresh_s=300.0)
    assert status.should_write(OLD, drifted, 0.0, 300.0, **WRITE, refresh_s=300.0)
    assert not status.should_write(OLD, OLD, 0.0, 900.0, **WRITE, refresh_s=300.0)
