"""One simulated engine: admission control, token timing and accounting.

vLLM admits at most max_num_seqs requests into its running batch and queues the rest; TTFT, ITL
and queue time are what a client and /metrics then see. This module reproduces that with an
asyncio.Semaphore as the batch (FIFO, so waiting requests are admitted in arrival order) and
sleeps whose lengths come from the pure `LatencyModel`, evaluated at the batch size of the
moment. Tokens are scheduled against deadlines, not chained sleeps, so event-loop overhead
does not accumulate into the measured latencies. LoRA adapters (`lora`) are served names of
their own: loaded at start-up or at runtime, answered with their own text, counted per adapter.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import random
import time
from collections.abc import AsyncIterator, Container

from shardwise_runtime.sim import adapterfiles, engine_metrics, errors, handoff, latency, lora, metrics, protocol
from shardwise_runtime.sim.config import EngineConfig

# Requests the engine was given no max_tokens for stop "naturally" after this many tokens
# (drawn from the seeded generator) unless the context window ends first.
NATURAL_LENGTH = (16, 128)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one accepted request will do: the served name to answer with and its token counts."""

    model: str
    prompt_tokens: int
    tokens: int
    max_tokens: int
    finish_reason: protocol.FinishReason
    n: int
    lora: str | None = None  # the adapter asked for, by name
    shift: int = 0  # where its text starts in the filler (protocol.adapter_shift)
    # A decode engine given a prefill engine's kv_transfer_params: the prompt's KV is loaded, not computed.
    kv_loaded: bool = False


def plan_generation(
    request: protocol.Request,
    config: EngineConfig,
    rng: random.Random,
    adapters: Container[str] = (),
) -> Plan | errors.ErrorBody:
    """Accept a request (and decide its output length) or return the error vLLM would give."""
    plan = _plan_generation(request, config, rng, adapters)
    if isinstance(plan, Plan) and config.role == handoff.DECODE and request.kv_transfer_params is not None:
        return dataclasses.replace(plan, kv_loaded=True)
    return plan


def _plan_generation(
    request: protocol.Request,
    config: EngineConfig,
    rng: random.Random,
    adapters: Container[str] = (),
) -> Plan | errors.ErrorBody:
    if request.model is not None and request.model in adapters:
        # Planned as the base model would be, then answered under the adapter's name.
        plan = _plan_generation(dataclasses.replace(request, model=None), config, rng)
        if not isinstance(plan, Plan):
            return plan
        name = request.model
        return dataclasses.replace(
            plan, model=name, lora=name, shift=protocol.adapter_shift(name)
        )
    # trtllm-serve's OpenAI server never checks the request's `model` (openai_server.py answers
    # under the one model it was started with), so any name reaches it.
    if (request.model is not None and request.model not in config.served_model_names
            and config.engine != "trtllm"):
        # The aliases are the base names only, even with adapters loaded (lora captures).
        return errors.unknown_model(request.model, config.served_model_names)
    if request.n != 1:
        return errors.unsupported(
            "the simulated engine generates one choice per request (n=1)", "n"
        )
    model = config.served_model_name if config.engine == "trtllm" else (request.model or config.served_model_name)
    room = config.max_model_len - request.prompt_tokens
    if request.max_tokens is None:
        if room < 1:
            return errors.context_too_long(request.prompt_tokens, 1, config.max_model_len)
        tokens = min(rng.randint(*NATURAL_LENGTH), room)
        return Plan(
            model,
            request.prompt_tokens,
            tokens,
            room,
            "stop" if tokens < room else "length",
            request.n,
        )
    if request.max_tokens < 1:
        return errors.error_body(
            f"max_tokens must be at least 1, got {request.max_tokens}.",
            "BadRequestError",
            "max_tokens",
            400,
        )
    if request.max_tokens > config.max_model_len:
        return errors.max_tokens_too_large(request.max_tokens, config.max_model_len)
    if request.max_tokens > room:
        return errors.context_too_long(
            request.prompt_tokens, request.max_tokens, config.max_model_len
        )
    return Plan(
        model, request.prompt_tokens, request.max_tokens, request.max_tokens, "length", request.n
    )


class Generation:
    """The token stream of one admitted request; iterate it to let the tokens come."""

    def __init__(self, engine: Engine, plan: Plan, arrival: float, scheduled: float) -> None:
        self._engine = engine
        self.plan = plan
        self.arrival = arrival
        self.scheduled = scheduled
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self.emitted = 0

    async def __aiter__(self) -> AsyncIterator[int]:
        engine, model, plan = self._engine, self._engine.latency, self.plan
        if plan.kv_loaded:  # the hand-off, then one decode step (the first token's)
            first = handoff.handoff_s(engine.config.kv_connector, plan.prompt_tokens) + model.itl(engine.running)
        else:
            first = model.prefill_s(plan.prompt_tokens, engine.running)
        due = self.scheduled + first
        for index in range(plan.tokens):
            if index:
                due += model.itl(engine.running)
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            now = time.monotonic()
            if index == 0:
                self.first_token_at = now
                engine.metrics.observe_prefill(
                    plan.prompt_tokens,
                    now - self.arrival,
                    step_tokens=plan.prompt_tokens + engine.running - 1,
                    loaded=plan.kv_loaded,
                )
            else:
                assert self.last_token_at is not None
                engine.metrics.observe_token(now - self.last_token_at)
            self.last_token_at = now
            self.emitted += 1
            engine.kv_tokens += 1
            yield index


class Engine:
    """Admission, timing and accounting of one simulated vLLM engine."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.latency = latency.LatencyModel(
            ttft_s=config.ttft_ms / 1000,
            itl_s=config.itl_ms / 1000,
            max_concurrency=config.max_concurrency,
        )
        # A KV cache that holds max_concurrency full contexts: usage reaches 1 only when a full
        # batch of maximal requests runs, as with vLLM's own sizing for max_num_seqs.
        self.kv_cache_tokens = config.max_concurrency * config.max_model_len
        family = {"sglang": engine_metrics.SGLangMetrics, "trtllm": engine_metrics.TrtllmMetrics}
        self.metrics = family.get(config.engine, metrics.EngineMetrics)(
            config.served_model_name,
            config.max_model_len,
            self.kv_cache_tokens,
            max_loras=config.lora.max_loras if config.lora else None,
        )
        self.rng = random.Random(config.seed)
        digest = hashlib.sha256(f"{config.model}:{config.seed}".encode()).hexdigest()
        self.system_fingerprint = protocol.system_fingerprint(
            config.tensor_parallel_size, digest[:8]
        )
        self.started = int(time.time())
        self.running = 0
        self.waiting = 0
        self.kv_tokens = 0
        self._batch = asyncio.Semaphore(config.max_concurrency)
        self.adapters = (
            lora.Registry(config.served_model_name, config.lora.max_rank) if config.lora else None
        )
        self._lora_in_flight: dict[str, int] = {}  # adapter -> requests, in order of arrival
        self._load_static_adapters()

    def _inspect(self, path: str) -> adapterfiles.AdapterFiles | None:
        assert self.config.lora is not None
        return adapterfiles.inspect(
            path,
            hub_endpoint=self.config.lora.hub_endpoint,
            hub_offline=self.config.lora.hub_offline,
            mounts=self.config.lora.mounts,
        )

    def _load_static_adapters(self) -> None:
        # --lora-modules: vLLM loads them before it serves and does not start if one fails.
        if self.adapters is None or self.config.lora is None:
            return
        for module in self.config.lora.modules:
            request = lora.LoadRequest(module.name, module.path, inplace=False)
            refused = self.adapters.add(request, self._inspect(module.path), module.base_model_name)
            if refused is not None:
                raise ValueError(refused["error"]["message"])

    async def load_adapter(self, request: lora.LoadRequest) -> errors.ErrorBody | None:
        """POST /v1/load_lora_adapter: None once loaded, else vLLM's refusal."""
        if self.adapters is None:
            return lora.lora_disabled()
        refused = self.adapters.check_name(request)
        if refused is not None:
            return refused
        # A thread: reading a hub id is a blocking HTTP call and must not stall the tokens.
        files = await asyncio.to_thread(self._inspect, request.path)
        return self.adapters.add(request, files)

    def unload_adapter(self, name: str) -> errors.ErrorBody | None:
        """POST /v1/unload_lora_adapter: None once unloaded, else the 404 for an unknown name."""
        if self.adapters is None:
            return lora.unknown_adapter(name)
        return self.adapters.remove(name)

    def _record_lora_state(self) -> None:
        self.metrics.record_lora_state(list(self._lora_in_flight))

    def _lora_arrived(self, name: str | None) -> None:
        if name is not None:
            self._lora_in_flight[name] = self._lora_in_flight.get(name, 0) + 1
        self._record_lora_state()

    def _lora_left(self, name: str | None) -> None:
        if name is not None:
            self._lora_in_flight[name] -= 1  # in place: the others keep their order
            if not self._lora_in_flight[name]:
                del self._lora_in_flight[name]
        self._record_lora_state()

    def exposition(self, names: list[str] | None = None) -> bytes:
        """The /metrics body (only the families in `names` when given), with the scheduler gauges
        read at this moment.

        Gauges are set here rather than on every token: the per-token path is the simulator's
        hot loop, and a scrape only ever sees the value of the moment anyway.
        """
        self.metrics.set_load(self.running, self.waiting, self.kv_tokens / self.kv_cache_tokens)
        if self.running or self.waiting:
            self._record_lora_state()  # a busy engine steps, and each step stamps the series
        return self.metrics.exposition(names)

    def new_id(self, prefix: str) -> str:
        """A response id like vLLM's: prefix and 16 hex digits."""
        return f"{prefix}-{self.rng.getrandbits(64):016x}"

    @contextlib.asynccontextmanager
    async def generate(self, plan: Plan) -> AsyncIterator[Generation]:
        """Queue for a batch slot, run the request, and record it when it ends.

        Leaving the block with an exception (the client went away) records an abort.
        """
        arrival = time.monotonic()
        self._lora_arrived(plan.lora)
        try:
            self.waiting += 1
            try:
                await self._batch.acquire()
            finally:
                self.waiting -= 1
            self.running += 1
            self.kv_tokens += plan.prompt_tokens
            generation = Generation(self, plan, arrival, time.monotonic())
            try:
                yield generation
            except BaseException:
                self.metrics.request_success["abort"].inc()
                raise
            else:
                self._record(generation)
            finally:
                self.running -= 1
                self.kv_tokens -= plan.prompt_tokens + generation.emitted
                self._batch.release()
        finally:
            self._lora_left(plan.lora)

    def _record(self, generation: Generation) -> None:
        plan = generation.plan
        first = generation.first_token_at or generation.scheduled
        last = generation.last_token_at or first
        self.metrics.observe_finished(
            metrics.FinishedRequest(
                finished_reason=plan.finish_reason,
                prompt_tokens=plan.prompt_tokens,
                generation_tokens=generation.emitted,
                max_generation_tokens=plan.max_tokens,
                n=plan.n,
                e2e_s=last - generation.arrival,
                queue_s=generation.scheduled - generation.arrival,
                prefill_s=first - generation.scheduled,
                decode_s=last - first,
            )
        )
