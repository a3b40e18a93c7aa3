"""SGLang's and TensorRT-LLM's scrapes read into the same Sample as vLLM's (issue 40).

The scrapes below are written from the engines' sources (SERVING-SHAPES.md D and E): SGLang's
`sglang:` families with its `model_name` label (newer releases add `engine_type`, `tp_rank`,
`pp_rank`), TensorRT-LLM's `trtllm_` families on /prometheus/metrics with `model_name` and
`engine_type`. They are not captures of a running engine: neither runs on this machine.
"""

from __future__ import annotations

import pytest
from shardwise.observe import aggregate, parse


def _histogram(name: str, labels: str, buckets: list[tuple[str, int]], total: float) -> list[str]:
    lines = [f"# TYPE {name} histogram"]
    lines += [f'{name}_bucket{{{labels},le="{le}"}} {count}' for le, count in buckets]
    lines += [f"{name}_sum{{{labels}}} {total}", f"{name}_count{{{labels}}} {buckets[-1][1]}"]
    return lines


def sglang_scrape(*, ranks: int = 1, token_usage: float = 0.25, queued: int = 3) -> str:
    lines: list[str] = []
    for rank in range(ranks):
        labels = f'model_name="llama",engine_type="unified",tp_rank="{rank}",pp_rank="0"'
        lines += _histogram("sglang:time_to_first_token_seconds", labels,
                            [("0.1", 2), ("0.25", 8), ("0.5", 10), ("+Inf", 10)], 1.9)
        lines += _histogram("sglang:inter_token_latency_seconds", labels,
                            [("0.01", 50), ("0.025", 900), ("0.05", 1000), ("+Inf", 1000)], 19.0)
        lines += _histogram("sglang:e2e_request_latency_seconds", labels,
                            [("1", 1), ("2.5", 9), ("5", 10), ("+Inf", 10)], 21.0)
        lines += [f"sglang:num_requests_total{{{labels}}} 10", f"sglang:prompt_tokens_total{{{labels}}} 5120",
                  f"sglang:generation_tokens_total{{{labels}}} 1000", f"sglang:cached_tokens_total{{{labels}}} 2048",
                  f"sglang:num_running_reqs{{{labels}}} 2", f"sglang:num_queue_reqs{{{labels}}} {queued}",
                  f"sglang:token_usage{{{labels}}} {token_usage}", f"sglang:cache_hit_rate{{{labels}}} 0.4",
                  f"sglang:gen_throughput{{{labels}}} 123.4"]
    return "\n".join(lines) + "\n"


def trtllm_scrape(*, with_main_families: bool = True) -> str:
    labels = 'model_name="llama",engine_type="trtllm"'
    lines = _histogram("trtllm_time_to_first_token_seconds", labels, [("0.1", 4), ("0.5", 10), ("+Inf", 10)], 1.2)
    lines += _histogram("trtllm_time_per_output_token_seconds", labels, [("0.01", 700), ("0.05", 1000), ("+Inf", 1000)], 11.0)
    lines += _histogram("trtllm_e2e_request_latency_seconds", labels, [("1", 2), ("5", 10), ("+Inf", 10)], 18.0)
    lines += _histogram("trtllm_request_queue_time_seconds", labels, [("0.01", 9), ("0.1", 10), ("+Inf", 10)], 0.05)
    lines += [f'trtllm_request_success_total{{{labels},finished_reason="stop"}} 10']
    if with_main_families:
        lines += [f"trtllm_num_requests_running{{{labels}}} 4", f"trtllm_num_requests_waiting{{{labels}}} 1",
                  f"trtllm_kv_cache_utilization{{{labels}}} 0.6", f"trtllm_kv_cache_hit_rate{{{labels}}} 0.2",
                  f"trtllm_prompt_tokens_total{{{labels}}} 4096", f"trtllm_generation_tokens_total{{{labels}}} 900"]
    return "\n".join(lines) + "\n"


def test_an_sglang_scrape_reads_as_the_same_series() -> None:
    sample = parse.parse(sglang_scrape())
    assert sample.engine == "sglang" and sample.model_name == "llama"
    assert set(sample.histograms) == {parse.TTFT, parse.ITL, parse.E2E}  # no queue-time family
    assert sample.histograms[parse.TTFT].count == 10 and sample.histograms[parse.ITL].sum == 19.0
    assert sample.counters == {parse.REQUESTS: 10, parse.PROMPT_TOKENS: 5120, parse.OUTPUT_TOKENS: 1000}
    assert sample.gauges == {parse.RUNNING: 2, parse.WAITING: 3, parse.KV_CACHE_USAGE: 0.25}


def test_sglang_ranks_add_up_and_their_kv_use_is_the_mean() -> None:
    sample = parse.parse(sglang_scrape(ranks=2, token_usage=0.5))
    assert sample.gauges[parse.WAITING] == 6 and sample.gauges[parse.KV_CACHE_USAGE] == 0.5
    assert sample.counters[parse.REQUESTS] == 20


def test_a_tensorrt_llm_scrape_reads_as_the_same_series() -> None:
    sample = parse.parse(trtllm_scrape())
    assert sample.engine == "trtllm"
    assert set(sample.histograms) == set(parse.HISTOGRAMS)
    assert sample.histograms[parse.QUEUE].count == 10
    assert sample.counters[parse.REQUESTS] == 10 and sample.counters[parse.OUTPUT_TOKENS] == 900
    assert sample.gauges == {parse.RUNNING: 4, parse.WAITING: 1, parse.KV_CACHE_USAGE: 0.6}


def test_tensorrt_llm_1_1s_five_families_are_enough() -> None:
    sample = parse.parse(trtllm_scrape(with_main_families=False))
    assert sample.gauges == {} and parse.PROMPT_TOKENS not in sample.counters
    assert sample.histograms[parse.ITL].count == 1000


def test_an_engine_missing_what_it_always_exposes_is_refused_in_its_own_names() -> None:
    text = "\n".join(l for l in sglang_scrape().splitlines() if not l.startswith("sglang:num_queue_reqs"))
    with pytest.raises(parse.NotVllmMetrics, match="SGLang series missing: sglang:num_queue_reqs"):
        parse.parse(text)


def test_the_gateway_gauges_come_from_each_engine() -> None:
    assert parse.load_gauges(sglang_scrape(queued=7))[parse.WAITING] == 7
    assert parse.load_gauges(trtllm_scrape())[parse.KV_CACHE_USAGE] == 0.6


def test_a_window_of_sglang_scrapes_gives_latency_figures() -> None:
    first, second = parse.parse(sglang_scrape()), parse.parse(sglang_scrape(ranks=2))
    window = aggregate.Window()
    window.add("pod", first, 0.0)
    window.add("pod", second, 60.0)
    summary = window.summary(60.0)
    # The second scrape doubles every count: 10 more requests, their ITL in SGLang's buckets.
    assert summary.requests == 10
    assert summary.itl_p95_ms is not None and 25.0 <= summary.itl_p95_ms <= 50.0
    assert summary.ttft_p95_ms is not None and summary.waiting == 6
