"""delta() with counter resets, summarize() across pods, and the sliding Window (virtual time)."""

from __future__ import annotations

import dataclasses

import pytest
from observe_builders import sample

from shardwise.observe import aggregate, parse
from shardwise.observe.aggregate import Window


def test_delta_subtracts_buckets_and_counters() -> None:
    before = sample({0.02: 2}, requests=2, output_tokens=10)
    after = sample({0.02: 5, 0.04: 1}, requests=6, output_tokens=30)
    d = aggregate.delta(before, after)
    assert d.reset is None
    assert d.counters[parse.REQUESTS] == 4 and d.counters[parse.OUTPUT_TOKENS] == 20
    h = dict(d.histograms[parse.TTFT].buckets)
    assert (h[0.01], h[0.02], h[0.04], h[float("inf")]) == (0, 3, 4, 4)


def test_counter_going_backwards_is_a_restart_and_after_counts_from_zero() -> None:
    before = sample({0.02: 50}, requests=50)
    after = sample({0.04: 3}, requests=3)  # same _created: only the counters tell
    d = aggregate.delta(before, after)
    assert d.reset is not None and "went backwards" in d.reset
    assert d.counters[parse.REQUESTS] == 3
    assert d.histograms[parse.TTFT] == after.histograms[parse.TTFT]


def test_changed_created_is_a_restart_even_when_counters_grew() -> None:
    before = sample({0.02: 2}, requests=2, created=1000.0)
    after = sample({0.02: 9}, requests=9, created=2000.0)  # restarted and already past 2
    d = aggregate.delta(before, after)
    assert d.reset is not None and "re-created" in d.reset
    assert d.counters[parse.REQUESTS] == 9


def test_quantile_of_a_fleet_is_taken_on_summed_buckets_not_averaged() -> None:
    fast = aggregate.Delta({parse.TTFT: sample({0.02: 90}).histograms[parse.TTFT]}, {})
    slow = aggregate.Delta({parse.TTFT: sample({1.0: 10}).histograms[parse.TTFT]}, {})
    s = aggregate.summarize([fast, slow], 300, [])
    # 100 observations, rank 95 is the 5th of the 10 in (0.75, 1.0]: 750 + 250 * 5/10 ms.
    assert s.ttft_p95_ms == pytest.approx(875.0)
    # Rank 50 is the 50th of the 90 in (0.01, 0.02]; averaging per-pod p50s would give ~510 ms.
    assert s.ttft_p50_ms == pytest.approx(10 + 10 * 50 / 90)


def test_summary_without_observations_has_no_quantiles() -> None:
    s = aggregate.summarize([aggregate.delta(sample(), sample())], 300, [])
    assert s.ttft_p95_ms is None and s.requests == 0 and s.requests_per_second is None


def test_window_rates_counts_and_gauges() -> None:
    w = Window(window_seconds=300)
    assert w.add("a", sample(requests=10, output_tokens=100), t=0) is None  # baseline only
    w.add("a", sample({0.02: 30}, requests=40, output_tokens=400, running=3, kv=0.5), t=30)
    s = w.summary(now=30)
    assert s.requests == 30 and s.output_tokens == 300
    assert s.requests_per_second == pytest.approx(1.0)
    assert s.output_tokens_per_second == pytest.approx(10.0)
    assert (s.running, s.kv_cache_usage, s.pods) == (3, 0.5, 1)


def test_window_slides_and_old_requests_age_out() -> None:
    w = Window(window_seconds=60, stale_after_s=60)
    w.add("a", sample(requests=0), t=0)
    w.add("a", sample({0.02: 100}, requests=100), t=30)  # a burst early on
    w.add("a", sample({0.02: 100}, requests=100), t=90)
    w.add("a", sample({0.02: 100, 0.5: 10}, requests=110), t=120)
    s = w.summary(now=120)
    # The window starts at 60; its baseline is the newest scrape at or before then (t=30),
    # so the burst before t=30 is out and the increase is 110 - 100 over 90 s.
    assert s.requests == 10
    assert s.requests_per_second == pytest.approx(10 / 90)
    assert s.ttft_p50_ms == pytest.approx(250 + 250 * 5 / 10)


def test_restart_mid_window_counts_both_sides() -> None:
    w = Window(window_seconds=300)
    w.add("a", sample(requests=100, created=1), t=0)
    w.add("a", sample(requests=130, created=1), t=15)   # +30
    step = w.add("a", sample(requests=4, created=2), t=30)  # restarted: +4 since restart
    assert step is not None and step.reset is not None
    w.add("a", sample(requests=10, created=2), t=45)   # +6
    assert w.summary(now=45).requests == 40


def test_vanished_pod_keeps_its_requests_but_not_its_gauges() -> None:
    w = Window(window_seconds=300, stale_after_s=30)
    for t in (0, 15):
        w.add("a", sample(requests=10 * t, running=2), t=t)
        w.add("b", sample(requests=20 * t, running=5), t=t)
    for t in (30, 45, 60):  # b is gone: its scrapes fail or it was deleted
        w.add("a", sample(requests=10 * t, running=2), t=t)
    s = w.summary(now=60)
    assert s.requests == 600 + 300  # a: 0 -> 600; b: 0 -> 300 before it vanished
    assert (s.running, s.pods) == (2, 1)
    # Past the window, b is forgotten altogether.
    for t in (330, 345):
        w.add("a", sample(requests=10 * t, running=2), t=t)
    s = w.summary(now=345)
    assert s.requests == 10 * 345 - 10 * 45  # baseline: the newest scrape at or before 45
    assert s.pods == 1


def test_new_pod_rate_is_its_own_not_diluted_over_the_window() -> None:
    w = Window(window_seconds=300)
    for t in range(0, 301, 30):
        w.add("old", sample(requests=t), t=t)  # 1 request/s
    w.add("new", sample(requests=0), t=240)
    w.add("new", sample(requests=60), t=300)  # 1 request/s for the last minute
    assert w.summary(now=300).requests_per_second == pytest.approx(2.0)


def test_gauges_are_summed_and_kv_usage_averaged() -> None:
    g = [sample(running=2, kv=0.2).gauges, sample(running=3, kv=0.6).gauges]
    s = aggregate.summarize([], 300, g)
    assert (s.running, s.waiting, s.kv_cache_usage) == (5, 0, pytest.approx(0.4))


def test_summary_is_deterministic() -> None:
    def build() -> aggregate.Summary:
        w = Window()
        w.add("a", sample({0.02: 1}, requests=1), t=0)
        w.add("a", sample({0.02: 7, 0.04: 3}, requests=10), t=15)
        return w.summary(now=20)

    assert build() == build()
    assert dataclasses.asdict(build())["ttft_p95_ms"] is not None
