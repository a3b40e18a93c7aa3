"""Fuzz: a broken exporter cannot make the collector crash or report impossible figures.

Scrapes are the real vLLM 0.32 capture with series broken (NaN, infinities, negative or 1e308
values, relabelled `le` bounds); invariants: parsing raises only MetricsError; every quantile,
rate, mean and gauge of the window is finite and not negative; the status takes the figures
(JSON without NaN); the autoscaler decides on them."""

from __future__ import annotations

import json
import math

import fuzz_inputs
from hypothesis import given
from hypothesis import strategies as st
from shardwise.autoscale import decision, history, observation, policy
from shardwise.observe import aggregate, parse, status

_BEFORE = (fuzz_inputs.FIXTURES / "vllm-0.32-cpu" / "metrics-t0.txt").read_text()
_POLICY = policy.policy_from_spec({"minReplicas": 1, "maxReplicas": 8,
                                   "slo": {"ttftP95": "500ms", "itlP95": "50ms", "e2eP95": "20s"}})


def _parse(text: str) -> parse.Sample | None:
    try:
        return parse.parse(text)
    except parse.MetricsError:
        return None


def assert_summary_invariants(summary: aggregate.Summary) -> None:
    for field in ("ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p95_ms",
                  "e2e_p95_ms", "queue_p95_ms", "queue_mean_ms", "requests_per_second",
                  "prompt_tokens_per_second", "output_tokens_per_second", "running", "waiting",
                  "kv_cache_usage"):
        value = getattr(summary, field)
        assert value is None or (math.isfinite(value) and value >= 0), (field, value)
    for field in ("requests", "prompt_tokens", "output_tokens"):
        value = getattr(summary, field)
        assert math.isfinite(value) and value >= 0, (field, value)
    json.dumps(status.status_latency(summary), allow_nan=False)


@given(before=fuzz_inputs.scrapes(_BEFORE), after=fuzz_inputs.scrapes(),
       gap=st.sampled_from([15.0, 1e-9, 300.0]))
def test_window_figures_are_finite_and_not_negative(before: str, after: str, gap: float) -> None:
    fuzz_inputs.ran("metrics aggregation")
    window = aggregate.Window(window_seconds=300.0, stale_after_s=60.0)
    for t, text in ((0.0, before), (gap, after), (gap + 15.0, after)):
        sample = _parse(text)
        if sample is not None:
            window.add("pod-a", sample, t)
            window.add("pod-b", sample, t)
    summary = window.summary(gap + 15.0)
    assert_summary_invariants(summary)
    obs = observation.Observation(
        current_replicas=2, replicas_ready=2, ttft_p95_ms=summary.ttft_p95_ms,
        itl_p95_ms=summary.itl_p95_ms, e2e_p95_ms=summary.e2e_p95_ms, waiting=summary.waiting or 0.0,
        running=summary.running or 0.0, kv_cache_usage=summary.kv_cache_usage,
        requests_per_second=summary.requests_per_second or 0.0, itl_floor_ms=40.0)
    result = decision.decide(_POLICY, obs, history.History(), 1000.0)
    assert 1 <= result.desired_replicas <= 8


@given(text=fuzz_inputs.scrapes())
def test_parsing_keeps_only_plausible_values(text: str) -> None:
    fuzz_inputs.ran("metrics parsing")
    sample = _parse(text)
    if sample is None:
        return
    for name, h in sample.histograms.items():
        bounds = [b for b, _ in h.buckets]
        assert bounds == sorted(bounds) and bounds[-1] == math.inf, name
        assert all(b == math.inf or 0 <= b <= parse.MAX_BUCKET_BOUND_S for b in bounds), name
        assert all(math.isfinite(c) and c >= 0 for _, c in h.buckets), name
        assert math.isfinite(h.sum) and h.sum >= 0 and math.isfinite(h.count) and h.count >= 0
        q = aggregate.histogram_quantile(0.95, h.buckets)
        assert math.isnan(q) or (math.isfinite(q) and q >= 0), (name, q)
    for value in (*sample.counters.values(), *sample.gauges.values(), *sample.created.values()):
        assert math.isfinite(value) and value >= 0
    assert 0 <= sample.gauges.get(parse.KV_CACHE_USAGE, 0.0) <= 1
