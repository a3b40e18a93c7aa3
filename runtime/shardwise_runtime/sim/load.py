"""A small open-loop load generator that measures what a client sees, with the official client.

Autoscaling and latency-reporting tests need traffic whose client-side TTFT they can compare with
what the operator reports. Requests are released at a fixed rate (open loop: a slow server does
not slow the arrivals, so queues build the way they do in production), each one a streaming chat
completion with `stream_options.include_usage` through `openai.AsyncOpenAI`. The run is bounded
in count (rps x duration), in concurrency and in time, and only ever targets loopback hosts.

`targets` may be a callable so that a caller can spread the load over replicas as they come and go.
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import itertools
import json
import math
import time
from collections.abc import Callable, Sequence
from typing import IO

import openai

from shardwise_runtime.sim import loopback

PROMPT = "Write a short story about a robot who learns to paint."
Targets = Sequence[str] | Callable[[], Sequence[str]]


@dataclasses.dataclass(frozen=True)
class RequestRecord:
    """One request as the client measured it (the columns of client-phase1.csv, and more)."""

    request: int
    max_tokens: int
    client_ttft_s: float | None  # until the first chunk with a choice; None if none came
    client_e2e_s: float
    chunks: int  # chunks with a choice: role chunk plus one per token for vLLM
    target: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class Summary:
    """Client-side figures of a run; latencies over the successful requests."""

    requests: int
    errors: int
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    e2e_p50_s: float | None
    e2e_p95_s: float | None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(records: Sequence[RequestRecord]) -> Summary:
    """p50/p95 of client TTFT and end-to-end latency over the successful requests."""
    ok = [r for r in records if r.error is None]
    ttft = [r.client_ttft_s for r in ok if r.client_ttft_s is not None]
    e2e = [r.client_e2e_s for r in ok]
    return Summary(
        requests=len(records),
        errors=len(records) - len(ok),
        ttft_p50_s=percentile(ttft, 50),
        ttft_p95_s=percentile(ttft, 95),
        e2e_p50_s=percentile(e2e, 50),
        e2e_p95_s=percentile(e2e, 95),
    )


def write_csv(records: Sequence[RequestRecord], out: IO[str]) -> None:
    """One row per request, first columns as in client-phase1.csv."""
    fields = [f.name for f in dataclasses.fields(RequestRecord)]
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow(dataclasses.asdict(record))


async def _one(
    client: openai.AsyncOpenAI, index: int, target: str, model: str, max_tokens: int
) -> RequestRecord:
    start = time.perf_counter()
    ttft: float | None = None
    chunks = 0
    usage: dict[str, int] = {}
    try:
        # The raw-response form of the official client: it builds, sends and checks the request,
        # and hands over the SSE lines without building a pydantic object per chunk. That object
        # costs ~0.5 ms of CPU; at a few thousand chunks/s on two cores a parsing client falls
        # behind and would report its own backlog as the server's TTFT.
        async with client.chat.completions.with_streaming_response.create(
            model=model,
            messages=[{"role": "user", "content": PROMPT}],
            max_tokens=max_tokens,
            stream=True,
            stream_options={"include_usage": True},
        ) as response:
            async for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[len("data: ") :])
                if chunk.get("choices"):
                    chunks += 1
                    if ttft is None:
                        ttft = time.perf_counter() - start
                usage = chunk.get("usage") or usage
    except (openai.OpenAIError, OSError, ValueError) as error:
        return RequestRecord(
            index,
            max_tokens,
            ttft,
            time.perf_counter() - start,
            chunks,
            target,
            error=f"{type(error).__name__}: {error}",
        )
    return RequestRecord(
        index,
        max_tokens,
        ttft,
        time.perf_counter() - start,
        chunks,
        target,
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
    )


async def run_load(
    targets: Targets,
    model: str,
    rps: float,
    duration_s: float,
    *,
    concurrency: int = 64,
    max_tokens: int | Sequence[int] = 32,
    request_timeout_s: float = 60.0,
    api_key: str = "EMPTY",
) -> list[RequestRecord]:
    """Send round(rps * duration_s) streaming chat requests at a fixed rate; return what was seen.

    `targets` are base URLs ending in /v1 (a list, or a callable asked before each request);
    requests go round-robin over them. At most `concurrency` requests are open at once; one that
    cannot start within `request_timeout_s` of its due time is not sent, and every request ends
    within `request_timeout_s` of its start, so the run ends by duration_s + 2 * request_timeout_s.
    `max_tokens` cycles when a sequence.
    """
    if rps <= 0 or duration_s <= 0 or concurrency < 1:
        raise ValueError("rps, duration_s and concurrency must be positive")
    total = round(rps * duration_s)
    lengths = itertools.cycle([max_tokens] if isinstance(max_tokens, int) else list(max_tokens))
    pick = targets if callable(targets) else (lambda: targets)
    clients: dict[str, openai.AsyncOpenAI] = {}
    slots = asyncio.Semaphore(concurrency)

    def client_for(url: str) -> openai.AsyncOpenAI:
        if url not in clients:
            clients[url] = openai.AsyncOpenAI(
                base_url=loopback.require_loopback_url(url),
                api_key=api_key,
                timeout=request_timeout_s,
                max_retries=0,
            )
        return clients[url]

    if not callable(targets):
        for url in targets:
            # Refuses non-loopback targets before anything is sent; touching the resource also
            # runs the client's lazy imports now rather than on the clock of the first request.
            _ = client_for(url).chat.completions.with_streaming_response
    start = time.perf_counter()

    async def launch(index: int, length: int) -> RequestRecord | None:
        due = start + index / rps
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        async with slots:
            if time.perf_counter() - due > request_timeout_s:
                return None  # stuck behind the concurrency cap for too long: keep the run bounded
            urls = list(pick())
            if not urls:
                return RequestRecord(index, length, None, 0.0, 0, "", error="no targets")
            url = urls[index % len(urls)]
            try:
                client = client_for(url)
            except ValueError as error:
                return RequestRecord(index, length, None, 0.0, 0, url, error=str(error))
            return await _one(client, index, url, model, length)

    try:
        results = await asyncio.gather(*(launch(i, next(lengths)) for i in range(total)))
    finally:
        await asyncio.gather(*(c.close() for c in clients.values()))
    return [record for record in results if record is not None]
