"""SGLang's and TensorRT-LLM's Prometheus metrics, for a simulated engine started with their argv.

Same interface as metrics.EngineMetrics (the vLLM families), so the engine's timing code is shared
and only the names, HELP texts, labels and buckets differ. Sources (SERVING-SHAPES.md D and E):

- SGLang: sgl-project/sglang@00ae9c1 python/sglang/srt/metrics/collector.py, the
  SchedulerMetricsCollector gauges (num_running_reqs, num_queue_reqs, token_usage, num_used_tokens,
  max_total_num_tokens, gen_throughput, cache_hit_rate) and the TokenizerMetricsCollector counters
  and histograms with their default buckets; label `model_name` (docs/references/production_metrics.md).
  Only with `--enable-metrics`; served at /metrics on the API port.
- TensorRT-LLM: NVIDIA/TensorRT-LLM@050f80d tensorrt_llm/metrics/collector.py (MetricsCollector):
  request success by `finished_reason`, e2e/TTFT/TPOT/queue/prefill/decode/inference histograms with
  their default buckets, token counters, running/waiting, KV utilisation and hit rate; labels
  `model_name`, `engine_type`. Served as Prometheus text at /prometheus/metrics (only with
  `return_perf_metrics`); /metrics is the JSON iteration stats (iteration_stats()).

The families the simulator has nothing to say about (P/D queues, speculative decoding, grammar,
retraction, memory) are left out rather than exported at zero: the status reads none of them.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from shardwise_runtime.sim.metrics import FinishedRequest

# sglang collector.py TokenizerMetricsCollector defaults.
SGLANG_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
SGLANG_E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400,
                      600, 1200, 1800, 2400)
SGLANG_ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
                      0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000,
                      8.000)
# tensorrt_llm/metrics/collector.py MetricsCollector defaults.
TRTLLM_REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                          60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TRTLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                       5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TRTLLM_TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                       7.5, 10.0, 20.0, 40.0, 80.0)
TRTLLM_PREFILL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                          20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)


class _AbortCounter:
    """`request_success["abort"]` of the vLLM interface: SGLang counts aborts in their own family."""

    def __init__(self, counter: Any) -> None:
        self._counter = counter

    def inc(self, amount: float = 1) -> None:
        self._counter.inc(amount)


class SGLangMetrics:
    """The sglang: families of one `python -m sglang.launch_server --enable-metrics`."""

    def __init__(self, model_name: str, max_model_len: int, kv_cache_tokens: int,
                 max_loras: int | None = None) -> None:
        del max_model_len, max_loras  # SGLang's buckets are fixed; LoRA is refused for sglang
        self.registry = registry = CollectorRegistry()
        labels = ("model_name",)

        def gauge(name: str, doc: str) -> Any:
            return Gauge(name, doc, labels, registry=registry).labels(model_name)

        def counter(name: str, doc: str) -> Any:
            return Counter(name, doc, labels, registry=registry).labels(model_name)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Any:
            return Histogram(name, doc, labels, buckets=buckets, registry=registry).labels(model_name)

        self.running = gauge("sglang:num_running_reqs", "The number of running requests.")
        self.used_tokens = gauge("sglang:num_used_tokens", "The number of used tokens.")
        self.token_usage = gauge("sglang:token_usage", "The token usage.")
        self.gen_throughput = gauge("sglang:gen_throughput", "The generation throughput (token/s).")
        self.queue = gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
        gauge("sglang:cache_hit_rate", "The prefix cache hit rate.")
        gauge("sglang:max_total_num_tokens",
              "Maximum total number of tokens in the KV cache pool.").set(kv_cache_tokens)
        self.kv_cache_tokens = kv_cache_tokens
        self.prompt_tokens = counter("sglang:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("sglang:generation_tokens", "Number of generation tokens processed.")
        counter("sglang:cached_tokens", "Number of cached prompt tokens.")
        self.requests = counter("sglang:num_requests", "Number of requests processed.")
        counter("sglang:num_so_requests", "Number of structured output requests processed.")
        self.aborted = counter("sglang:num_aborted_requests", "Number of requests aborted.")
        self.ttft = histogram("sglang:time_to_first_token_seconds",
                              "Histogram of time to first token in seconds.", SGLANG_TTFT_BUCKETS)
        self.itl = histogram("sglang:inter_token_latency_seconds",
                             "Histogram of inter-token latency in seconds.", SGLANG_ITL_BUCKETS)
        self.e2e = histogram("sglang:e2e_request_latency_seconds",
                             "Histogram of End-to-end request latency in seconds", SGLANG_E2E_BUCKETS)
        self.request_success = {"abort": _AbortCounter(self.aborted)}
        self._window: list[tuple[float, int]] = []  # (time, tokens) for gen_throughput

    def set_load(self, running: int, waiting: int, kv_usage: float) -> None:
        self.running.set(running)
        self.queue.set(waiting)
        self.token_usage.set(kv_usage)
        self.used_tokens.set(round(kv_usage * self.kv_cache_tokens))
        now = time.monotonic()
        self._window = [(t, n) for t, n in self._window if now - t < 10.0]
        self.gen_throughput.set(sum(n for _, n in self._window) / 10.0)

    def record_lora_state(self, adapters: list[str]) -> None:
        del adapters

    def observe_prefill(self, prompt_tokens: int, ttft_s: float, step_tokens: int, loaded: bool = False) -> None:
        del step_tokens, loaded
        self.ttft.observe(ttft_s)
        self._window.append((time.monotonic(), 1))

    def observe_token(self, itl_s: float) -> None:
        self.itl.observe(itl_s)
        self._window.append((time.monotonic(), 1))

    def observe_finished(self, request: FinishedRequest) -> None:
        # SGLang counts tokens when a request finishes (observe_one_finished_request), not per step.
        self.prompt_tokens.inc(request.prompt_tokens)
        self.generation_tokens.inc(request.generation_tokens)
        self.requests.inc()
        self.e2e.observe(request.e2e_s)

    def exposition(self, names: list[str] | None = None) -> bytes:
        return generate_latest(self.registry if names is None else self.registry.restricted_registry(names))


class TrtllmMetrics:
    """The trtllm_ families of one `trtllm-serve` with `return_perf_metrics`, plus its JSON stats."""

    def __init__(self, model_name: str, max_model_len: int, kv_cache_tokens: int,
                 max_loras: int | None = None, block_size: int = 32) -> None:
        del max_model_len, max_loras
        self.registry = registry = CollectorRegistry()
        labels = ("model_name", "engine_type")
        ident = (model_name, "trtllm")

        def gauge(name: str, doc: str) -> Any:
            return Gauge(name, doc, labels, registry=registry).labels(*ident)

        def counter(name: str, doc: str) -> Any:
            return Counter(name, doc, labels, registry=registry).labels(*ident)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Any:
            return Histogram(name, doc, labels, buckets=buckets, registry=registry).labels(*ident)

        success = Counter("trtllm_request_success", "Count of successfully processed requests.",
                          (*labels, "finished_reason"), registry=registry)
        self.request_success = {reason: success.labels(*ident, reason)
                                for reason in ("stop", "length", "abort", "error", "repetition")}
        self.e2e = histogram("trtllm_e2e_request_latency_seconds",
                             "Histogram of end to end request latency in seconds.", TRTLLM_REQUEST_BUCKETS)
        self.ttft = histogram("trtllm_time_to_first_token_seconds",
                              "Histogram of time to first token in seconds.", TRTLLM_TTFT_BUCKETS)
        self.tpot = histogram("trtllm_time_per_output_token_seconds",
                              "Histogram of time per output token in seconds.", TRTLLM_TPOT_BUCKETS)
        self.queue = histogram("trtllm_request_queue_time_seconds",
                               "Histogram of time spent in WAITING phase for request.", TRTLLM_REQUEST_BUCKETS)
        self.prefill = histogram("trtllm_request_prefill_time_seconds",
                                 "Histogram of prefill (context) phase duration in seconds "
                                 "(first_token_time - first_scheduled_time).", TRTLLM_PREFILL_BUCKETS)
        self.decode = histogram("trtllm_request_decode_time_seconds",
                                "Histogram of decode (generation) phase duration in seconds "
                                "(last_token_time - first_token_time).", TRTLLM_REQUEST_BUCKETS)
        self.inference = histogram("trtllm_request_inference_time_seconds",
                                   "Histogram of total inference duration in seconds "
                                   "(last_token_time - first_scheduled_time).", TRTLLM_REQUEST_BUCKETS)
        self.prompt_tokens = counter("trtllm_prompt_tokens",
                                     "Cumulative number of prompt (input) tokens processed.")
        self.generation_tokens = counter("trtllm_generation_tokens",
                                         "Cumulative number of generation (output) tokens produced.")
        gauge("trtllm_kv_cache_hit_rate", "KV cache hit rate")
        self.kv_utilization = gauge("trtllm_kv_cache_utilization", "KV cache utilization")
        self.running = gauge("trtllm_num_requests_running", "Number of active requests")
        self.waiting = gauge("trtllm_num_requests_waiting", "Number of queued requests")
        self.completed = counter("trtllm_num_requests_completed",
                                 "Total number of completed requests across iterations")
        self.block_size = block_size
        self.max_blocks = max(1, kv_cache_tokens // block_size)
        self.iteration = 0
        self._load = (0, 0, 0.0)

    def set_load(self, running: int, waiting: int, kv_usage: float) -> None:
        self.running.set(running)
        self.waiting.set(waiting)
        self.kv_utilization.set(kv_usage)
        self._load = (running, waiting, kv_usage)

    def record_lora_state(self, adapters: list[str]) -> None:
        del adapters

    def observe_prefill(self, prompt_tokens: int, ttft_s: float, step_tokens: int, loaded: bool = False) -> None:
        del prompt_tokens, step_tokens, loaded
        self.ttft.observe(ttft_s)

    def observe_token(self, itl_s: float) -> None:
        del itl_s  # TensorRT-LLM records time per output token per request, when it finishes

    def observe_finished(self, request: FinishedRequest) -> None:
        self.request_success[request.finished_reason].inc()
        self.completed.inc()
        self.prompt_tokens.inc(request.prompt_tokens)
        self.generation_tokens.inc(request.generation_tokens)
        self.e2e.observe(request.e2e_s)
        self.queue.observe(request.queue_s)
        self.prefill.observe(request.prefill_s)
        self.decode.observe(request.decode_s)
        self.inference.observe(request.prefill_s + request.decode_s)
        if request.generation_tokens > 1:
            self.tpot.observe(request.decode_s / (request.generation_tokens - 1))

    def exposition(self, names: list[str] | None = None) -> bytes:
        return generate_latest(self.registry if names is None else self.registry.restricted_registry(names))

    def iteration_stats(self) -> list[dict[str, Any]]:
        """GET /metrics of trtllm-serve: a JSON array of iteration stats (needs enable_iter_perf_stats).

        The real queue hands each stat out once; the simulator has no iterations, so it reports one
        stat of the moment per call, with the fields trtllm-serve.rst shows.
        """
        running, _, kv_usage = self._load
        self.iteration += 1
        used = round(kv_usage * self.max_blocks)
        return [{
            "gpuMemUsage": 0, "iter": self.iteration, "iterLatencyMS": 0.0,
            "kvCacheStats": {"maxNumBlocks": self.max_blocks, "freeNumBlocks": self.max_blocks - used,
                             "usedNumBlocks": used, "tokensPerBlock": self.block_size,
                             "allocTotalBlocks": used, "allocNewBlocks": 0, "reusedBlocks": 0,
                             "cacheHitRate": 0.0},
            "numActiveRequests": running,
        }]
