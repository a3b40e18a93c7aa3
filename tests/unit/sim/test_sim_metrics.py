"""The engine's /metrics against real vLLM 0.32: same families, HELP, types, labels, buckets."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from shardwise_runtime.sim import metrics
from sim_support import capture


def _catalogue(text: str) -> dict[str, tuple[Any, ...]]:
    """vllm:* family -> (type, HELP, label-name sets, bucket bounds per series)."""
    families = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("vllm:"):
            continue
        labels = sorted({tuple(sorted(k for k in s.labels if k != "le")) for s in family.samples})
        buckets = sorted(
            {tuple(s.labels["le"] for s in family.samples if s.name.endswith("_bucket"))}
        )
        families[family.name] = (family.type, family.documentation, labels, buckets)
    return families


def _series(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture(scope="module")
def tiny() -> metrics.EngineMetrics:
    return metrics.EngineMetrics("tiny", max_model_len=256, kv_cache_tokens=524288)


def test_families_match_the_capture(tiny: metrics.EngineMetrics) -> None:
    ours = _catalogue(tiny.exposition().decode())
    theirs = _catalogue(capture("metrics-t1.txt"))
    assert sorted(ours) == sorted(theirs)
    for name in theirs:
        assert ours[name] == theirs[name], name


def test_families_appear_in_the_captured_order(tiny: metrics.EngineMetrics) -> None:
    def help_lines(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("# HELP vllm:")]

    assert help_lines(tiny.exposition().decode()) == help_lines(capture("metrics-t1.txt"))


def test_every_captured_series_exists(tiny: metrics.EngineMetrics) -> None:
    # Same names and label values (engine, model_name, finished_reason, reason, source, ...),
    # except cache_config_info whose values describe the engine.
    ours = {key for key in _series(tiny.exposition().decode()) if key[0].startswith("vllm:")}
    theirs = {key for key in _series(capture("metrics-t1.txt")) if key[0].startswith("vllm:")}
    assert {k for k in ours if k[0] != "vllm:cache_config_info"} == {
        k for k in theirs if k[0] != "vllm:cache_config_info"
    }


@pytest.mark.parametrize("max_model_len, top", [(256, 200.0), (8192, 5000.0), (1, 1.0)])
def test_token_buckets_are_vllms_1_2_5_series(max_model_len: int, top: float) -> None:
    buckets = metrics.token_buckets(max_model_len)
    assert buckets[:3] == (1.0, 2.0, 5.0)[: len(buckets)] and buckets[-1] == top


def test_a_finished_request_is_counted_where_vllm_counts_it() -> None:
    engine = metrics.EngineMetrics("m", max_model_len=256, kv_cache_tokens=1024)
    engine.observe_prefill(prompt_tokens=10, ttft_s=0.03, step_tokens=12)
    for _ in range(3):
        engine.observe_token(itl_s=0.02)
    engine.observe_finished(
        metrics.FinishedRequest(
            finished_reason="length",
            prompt_tokens=10,
            generation_tokens=4,
            max_generation_tokens=4,
            n=1,
            e2e_s=0.1,
            queue_s=0.01,
            prefill_s=0.02,
            decode_s=0.06,
        )
    )
    series = _series(engine.exposition().decode())
    base = {("engine", "0"), ("model_name", "m")}

    def value(name: str, **labels: str) -> float:
        return series[(name, frozenset(base | set(labels.items())))]

    assert value("vllm:request_success_total", finished_reason="length") == 1
    assert value("vllm:request_success_total", finished_reason="stop") == 0
    assert value("vllm:prompt_tokens_total") == 10
    assert value("vllm:generation_tokens_total") == 4
    assert value("vllm:time_to_first_token_seconds_count") == 1
    assert value("vllm:time_to_first_token_seconds_bucket", le="0.04") == 1
    assert value("vllm:time_to_first_token_seconds_bucket", le="0.02") == 0
    assert value("vllm:inter_token_latency_seconds_count") == 3
    assert value("vllm:iteration_tokens_total_sum") == 12
    assert value("vllm:request_time_per_output_token_seconds_sum") == pytest.approx(0.02)
    assert value("vllm:request_inference_time_seconds_sum") == pytest.approx(0.08)
    assert value("vllm:request_queue_time_seconds_sum") == pytest.approx(0.01)
