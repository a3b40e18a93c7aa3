"""vLLM 0.32's Prometheus metrics, family for family, on a registry of the engine's own.

The operator's collector parses these and computes quantiles from the histogram buckets, so
names, HELP texts, label sets, bucket boundaries and the `_created` series are those of the real
capture (tests/fixtures/vllm-0.32-cpu/metrics-t1.txt). Families the simulator has nothing to
say about (FLOPs estimates, prefix and multi-modal caches, preemptions) are exported at zero,
as a real engine with those features idle exports them.

Token histograms use vLLM's 1-2-5 buckets up to max_model_len; every other boundary is fixed in
vLLM and copied from the capture. Each engine gets its own CollectorRegistry so that many engines
in one process (the fleet) never share a series.
"""

from __future__ import annotations

import dataclasses

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    gc_collector,
    generate_latest,
    platform_collector,
    process_collector,
)

ENGINE_INDEX = "0"

_SECONDS_FINE = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
_SECONDS_TOKEN = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
_SECONDS_REQUEST = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
_ITERATION_TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
_PARAMS_N = (1, 2, 5, 10, 20)
_PREEMPTIONS = (1, 2, 3, 4, 5, 10, 20)

FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")


def token_buckets(max_model_len: int) -> tuple[float, ...]:
    """vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to and including max_model_len."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_model_len:
                return tuple(buckets)
            buckets.append(float(value))
        exponent += 1


@dataclasses.dataclass(frozen=True)
class FinishedRequest:
    """One request's figures as vLLM records them when the request finishes."""

    finished_reason: str
    prompt_tokens: int
    generation_tokens: int
    max_generation_tokens: int  # max_tokens as sent, or what the context window left
    n: int
    e2e_s: float
    queue_s: float
    prefill_s: float
    decode_s: float


class EngineMetrics:
    """The vllm:* families of one engine, with the updates the engine makes to them."""

    def __init__(
        self,
        model_name: str,
        max_model_len: int,
        kv_cache_tokens: int,
        block_size: int = 16,
        max_loras: int | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        process_collector.ProcessCollector(registry=registry)
        platform_collector.PlatformCollector(registry=registry)
        gc_collector.GCCollector(registry=registry)
        base = ("engine", "model_name")
        ident = (ENGINE_INDEX, model_name)
        tokens = token_buckets(max_model_len)

        def counter(name: str, doc: str) -> Counter:
            family = Counter(name, doc, base, registry=registry)
            return family.labels(*ident)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, base, registry=registry).labels(*ident)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, base, buckets=buckets, registry=registry).labels(*ident)

        mfu = "(for Model Flops Utilization calculations)."
        counter(
            "vllm:estimated_flops_per_gpu",
            f"Estimated number of floating point operations per GPU {mfu}",
        )
        counter(
            "vllm:estimated_read_bytes_per_gpu",
            f"Estimated number of bytes read from memory per GPU {mfu}",
        )
        counter(
            "vllm:estimated_write_bytes_per_gpu",
            f"Estimated number of bytes written to memory per GPU {mfu}",
        )
        self.running = gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        )
        self.waiting = gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        )
        waiting_by_reason = Gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
            "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV "
            "transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
            (*base, "reason"),
            registry=registry,
        )
        self.waiting_capacity = waiting_by_reason.labels(*ident, "capacity")
        waiting_by_reason.labels(*ident, "deferred")
        sleep_state = Gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
            "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep "
            "level 2.",
            (*base, "sleep_state"),
            registry=registry,
        )
        sleep_state.labels(*ident, "awake").set(1)
        sleep_state.labels(*ident, "weights_offloaded")
        sleep_state.labels(*ident, "discard_all")
        self.kv_cache_usage = gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        )
        self.prefix_cache_queries = counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
        )
        counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        counter(
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV connector cross-instance cache sharing, in "
            "terms of number of queried tokens.",
        )
        counter(
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector cross-instance cache sharing, in terms "
            "of number of cached tokens.",
        )
        counter(
            "vllm:mm_cache_queries",
            "Multi-modal cache queries, in terms of number of queried items.",
        )
        counter("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.")
        counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        by_source = Counter(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            (*base, "source"),
            registry=registry,
        )
        self.prompt_tokens_computed = by_source.labels(*ident, "local_compute")
        by_source.labels(*ident, "local_cache_hit")
        self.prompt_tokens_transferred = by_source.labels(*ident, "external_kv_transfer")
        counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).")
        cached_by_source = Counter(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), "
            "host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
            "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
            "vllm:external_prefix_cache_hits.",
            (*base, "source"),
            registry=registry,
        )
        for source in ("device", "host", "p2p", "disk", "external_unspecified"):
            cached_by_source.labels(*ident, source)
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            ("engine", "finished_reason", "model_name"),
            registry=registry,
        )
        self.request_success = {
            reason: success.labels(ENGINE_INDEX, reason, model_name) for reason in FINISHED_REASONS
        }
        rejections = Counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ("model_name", "reason"),
            registry=registry,
        )
        rejections.labels(model_name, "max_num_queued_reqs")
        rejections.labels(model_name, "max_num_queued_tokens")
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens
        )
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens
        )
        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            _ITERATION_TOKENS,
        )
        self.request_max_num_generation_tokens = histogram(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            tokens,
        )
        self.request_params_n = histogram(
            "vllm:request_params_n", "Histogram of the n request parameter.", _PARAMS_N
        )
        self.request_params_max_tokens = histogram(
            "vllm:request_params_max_tokens",
            "Histogram of the max_tokens request parameter.",
            tokens,
        )
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            _SECONDS_FINE,
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            _SECONDS_TOKEN,
        )
        self.tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            _SECONDS_TOKEN,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            _SECONDS_REQUEST,
        )
        self.queue = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            _SECONDS_REQUEST,
        )
        self.inference = histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            _SECONDS_REQUEST,
        )
        self.prefill = histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            _SECONDS_REQUEST,
        )
        self.decode = histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            _SECONDS_REQUEST,
        )
        self.request_num_preemptions = histogram(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            _PREEMPTIONS,
        )
        self.request_prefill_kv_computed_tokens = histogram(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            tokens,
        )
        self._export_cache_config(max_model_len, kv_cache_tokens, block_size)
        self._max_lora = str(max_loras)
        # Only an engine started with --enable-lora has this family (metrics-lora.txt). The label
        # order is the capture's, which differs from the order of vLLM's own labelnames.
        self.lora_info = (
            None
            if max_loras is None
            else Gauge(
                "vllm:lora_requests_info",
                "Running stats on lora requests.",
                ("max_lora", "running_lora_adapters", "waiting_lora_adapters"),
                registry=registry,
            )
        )

    def _export_cache_config(
        self, max_model_len: int, kv_cache_tokens: int, block_size: int
    ) -> None:
        # vLLM exports its CacheConfig as an info-style gauge; these labels are the ones the
        # capture shows, with values that describe the simulated KV cache.
        info = {
            "_block_size_resolved": "True",
            "block_size": str(block_size),
            "cache_dtype": "auto",
            "cache_hit_alignment_tokens": "None",
            "effective_attention_block_size": str(block_size),
            "enable_mamba_shared_prefix_checkpoint": "False",
            "enable_prefix_caching": "True",
            "engine": ENGINE_INDEX,
            "gpu_memory_utilization": "0.9",
            "hash_block_size": "None",
            "is_attention_free": "False",
            "kv_cache_dtype_skip_layers": "[]",
            "kv_cache_layout": "None",
            "kv_cache_max_concurrency": str(kv_cache_tokens / max_model_len),
            "kv_cache_memory_bytes": "None",
            "kv_cache_size_tokens": str(kv_cache_tokens),
            "kv_offloading_backend": "native",
            "kv_offloading_size": "None",
            "kv_sharing_fast_prefill": "False",
            "mamba_block_size": "None",
            "mamba_cache_dtype": "auto",
            "mamba_cache_mode": "none",
            "mamba_page_size_padded": "None",
            "mamba_ssm_cache_dtype": "auto",
            "num_cpu_blocks": "None",
            "num_gpu_blocks": str(kv_cache_tokens // block_size),
            "num_gpu_blocks_override": "None",
            "prefix_cache_retention_interval": "0",
            "prefix_caching_hash_algo": "sha256",
            "prefix_match_unit": "None",
            "replayssm_buffer_len": "16",
            "skip_page_size_padded": "None",
            "sliding_window": "None",
            "swa_bounded_replay": "True",
            "use_kda_recoverssm": "False",
            "use_replayssm": "False",
            "user_specified_block_size": "False",
        }
        gauge = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            tuple(info),
            registry=self.registry,
        )
        gauge.labels(**info).set(1)

    def set_load(self, running: int, waiting: int, kv_usage: float) -> None:
        """Scheduler gauges: requests in the batch, requests queued, KV-cache fraction held."""
        self.running.set(running)
        self.waiting.set(waiting)
        self.waiting_capacity.set(waiting)
        self.kv_cache_usage.set(kv_usage)

    def record_lora_state(self, adapters: list[str]) -> None:
        """One engine step's adapters with requests in flight, stamped with the time.

        vLLM sets the series of the step's label set to the current time and never removes a
        series, so each set of adapters seen keeps the time it was last seen. 0.32 lists every
        adapter with a request in flight under both labels (the capture shows `a1`/`a1`).
        """
        if self.lora_info is None:
            return
        names = ",".join(adapters)
        self.lora_info.labels(self._max_lora, names, names).set_to_current_time()

    def observe_prefill(self, prompt_tokens: int, ttft_s: float, step_tokens: int, loaded: bool = False) -> None:
        """The engine step that computed a prompt and produced its first token.

        `step_tokens` is that step's size: the prompt plus one decode token per other running
        request. Only prefill steps are sampled into iteration_tokens_total; counting every
        decode step of every request would cost more than the whole simulated token.
        """
        self.ttft.observe(ttft_s)
        self.iteration_tokens.observe(step_tokens)
        self.prompt_tokens.inc(prompt_tokens)
        # A decode engine given kv_transfer_params loads the prompt's KV (vLLM counts it by source).
        (self.prompt_tokens_transferred if loaded else self.prompt_tokens_computed).inc(prompt_tokens)
        self.prefix_cache_queries.inc(prompt_tokens)
        self.generation_tokens.inc()

    def observe_token(self, itl_s: float) -> None:
        """One decode step of one request after its first token."""
        self.itl.observe(itl_s)
        self.generation_tokens.inc()

    def observe_finished(self, request: FinishedRequest) -> None:
        """Per-request histograms and the success counter, as vLLM records them at the end."""
        self.request_success[request.finished_reason].inc()
        self.request_prompt_tokens.observe(request.prompt_tokens)
        self.request_generation_tokens.observe(request.generation_tokens)
        self.request_max_num_generation_tokens.observe(request.max_generation_tokens)
        self.request_params_n.observe(request.n)
        self.request_params_max_tokens.observe(request.max_generation_tokens)
        self.request_num_preemptions.observe(0)
        self.request_prefill_kv_computed_tokens.observe(request.prompt_tokens)
        self.e2e.observe(request.e2e_s)
        self.queue.observe(request.queue_s)
        self.prefill.observe(request.prefill_s)
        self.decode.observe(request.decode_s)
        self.inference.observe(request.prefill_s + request.decode_s)
        if request.generation_tokens > 1:
            self.tpot.observe(request.decode_s / (request.generation_tokens - 1))

    def exposition(self, names: list[str] | None = None) -> bytes:
        """The /metrics body in Prometheus text format 0.0.4, as vLLM serves it; with `names`, only
        those families (prometheus_client's `name[]` filter, which vLLM's `/metrics/` applies)."""
        if names is None:
            return generate_latest(self.registry)
        return generate_latest(self.registry.restricted_registry(names))
