"""One simulated engine: admission control, token timing and accounting.

vLLM admits at most max_num_seqs requests into its running batch and queues the rest; TTFT, ITL
and queue time are what a client and /metrics then see. This module reproduces that with an
asyncio.Semaphore as the batch (FIFO, so waiting requests are admitted in arrival order) and
sleeps whose lengths come from the pure `LatencyModel`, evaluated at the batch size of the
moment. Tokens are scheduled against deadlines, not chained sleeps, so event-loop overhead
does not accumulate into the measured latencies.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import random
import time
from collections.abc import AsyncIterator

from shardwise_runtime.sim import errors, latency, metrics, protocol
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


def plan_generation(
    request: protocol.Request, config: EngineConfig, rng: random.Random
) -> Plan | errors.ErrorBody:
    """Accept a request (and decide its output length) or return the error vLLM would give."""
    if request.model is not None and request.model not in config.served_model_names:
        return errors.unknown_model(request.model, config.served_model_names)
    if request.n != 1:
        return errors.unsupported(
            "the simulated engine generates one choice per request (n=1)", "n"
        )
    model = request.model or config.served_model_name
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
        due = self.scheduled + model.prefill_s(plan.prompt_tokens, engine.running)
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
        self.metrics = metrics.EngineMetrics(
            config.served_model_name, config.max_model_len, self.kv_cache_tokens
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

    def exposition(self) -> bytes:
        """The /metrics body, with the scheduler gauges read at this moment.

        Gauges are set here rather than on every token: the per-token path is the simulator's
        hot loop, and a scrape only ever sees the value of the moment anyway.
        """
        self.metrics.set_load(self.running, self.waiting, self.kv_tokens / self.kv_cache_tokens)
        return self.metrics.exposition()

    def new_id(self, prefix: str) -> str:
        """A response id like vLLM's: prefix and 16 hex digits."""
        return f"{prefix}-{self.rng.getrandbits(64):016x}"

    @contextlib.asynccontextmanager
    async def generate(self, plan: Plan) -> AsyncIterator[Generation]:
        """Queue for a batch slot, run the request, and record it when it ends.

        Leaving the block with an exception (the client went away) records an abort.
        """
        arrival = time.monotonic()
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
