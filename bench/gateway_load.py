"""The load of `make bench-gateway`: N concurrent streaming chat completions, in a process of its own.

Every request is `POST /v1/chat/completions` with `stream: true` and a fixed `max_tokens`, so a
complete answer is exactly that many content chunks. The client records, per request, the time
to the first content chunk (TTFT) and the gaps between consecutive content chunks as they come
off the socket; it parses no JSON on the hot path (a byte pattern finds content chunks), so what it
measures is the transport, not its own parsing.

aiohttp's connector is unlimited here: its default of 100 connections (the limit production-stack's
router stalled at) would queue most of 256 streams inside the client and bill the wait to the
proxy. Bounded: `--requests` in all and a `--time-limit` after which no request starts; each
request has its own timeout. Several `--base-url`s are used round robin (the direct baseline).
Writes one JSON object to `--out`: the raw samples, errors and wall time of the run.

    python bench/gateway_load.py --base-url http://127.0.0.1:8001 --requests 500 \
        --concurrency 64 --out /tmp/run.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import re
import sys
import time
from typing import Any

import aiohttp

MODEL = "bench-model"
# A content chunk carries non-empty `content`: vLLM's opening role chunk has `"content":""`, and
# proxies may add chunks of their own (LiteLLM sends finish_reason in a chunk with an empty delta).
_CONTENT = re.compile(rb'"content": ?"[^"]')
_DATA = b"data: "
_DONE = b"data: [DONE]"
# A fixed prompt: the same bytes through every contender.
PROMPT = "Say something about load balancers. " * 4


class Samples:
    """What the run saw: per request TTFT and chunk gaps (seconds), and what failed."""

    def __init__(self) -> None:
        self.ttft: list[float] = []
        self.gaps: list[float] = []
        self.e2e: list[float] = []
        self.ok = 0
        self.errors = 0
        self.error_examples: list[str] = []

    def fail(self, why: str) -> None:
        self.errors += 1
        if len(self.error_examples) < 5:
            self.error_examples.append(why[:300])


async def one_request(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str],
    tokens: int,
    samples: Samples,
) -> None:
    started = time.perf_counter()
    chunks: list[float] = []
    done = False
    try:
        async with session.post(url, data=body, headers=headers) as response:
            if response.status != 200:
                text = (await response.text())[:200]
                samples.fail(f"HTTP {response.status}: {text}")
                return
            async for line in response.content:
                if not line.startswith(_DATA):
                    continue
                if line.startswith(_DONE):
                    done = True
                    break
                if _CONTENT.search(line):
                    chunks.append(time.perf_counter())
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as error:
        samples.fail(f"{type(error).__name__}: {error}")
        return
    finished = time.perf_counter()
    if not done or len(chunks) != tokens:
        samples.fail(f"incomplete stream: {len(chunks)} of {tokens} chunks, [DONE] {done}")
        return
    samples.ok += 1
    samples.ttft.append(chunks[0] - started)
    samples.gaps.extend(b - a for a, b in zip(chunks, chunks[1:]))
    samples.e2e.append(finished - started)


async def run_load(
    base_urls: list[str],
    *,
    requests: int,
    concurrency: int,
    tokens: int,
    time_limit_s: float,
    request_timeout_s: float,
    ramp_s: float = 0.0,
    api_key: str | None = None,
) -> tuple[Samples, float]:
    """Send `requests` streams, `concurrency` at a time; returns the samples and the wall time.

    With `ramp_s` (about one stream's duration) worker i starts i/concurrency of it late, and its
    first stream, sent while the others are still ramping up, is not sampled: the streams arrive
    spread out, as independent clients' do, rather than in waves of `concurrency` at once. All
    streams last about as long, so workers that start together stay in step: without a ramp every
    wave's last request waits behind the whole wave in each process on its path, and TTFT p99
    measures that burst rather than the proxy."""
    body = json.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": tokens,
            "stream": True,
        }
    ).encode()
    headers = {"content-type": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    urls = itertools.cycle([url.rstrip("/") + "/v1/chat/completions" for url in base_urls])
    samples = Samples()
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=request_timeout_s)
    started = time.perf_counter()
    deadline = started + time_limit_s
    remaining = iter(range(requests))

    unsampled = Samples()  # the ramp's streams: checked like the others, not counted

    async def worker(index: int, session: aiohttp.ClientSession) -> None:
        first = ramp_s > 0
        if first:
            await asyncio.sleep(ramp_s * index / concurrency)
        # One shared iterator: each worker takes the next request number until none are left.
        for _ in remaining:
            if time.perf_counter() >= deadline:
                return
            await one_request(session, next(urls), body, headers, tokens, unsampled if first else samples)
            first = False

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(worker(index, session) for index in range(concurrency)))
    samples.errors += unsampled.errors
    samples.error_examples += unsampled.error_examples
    return samples, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", action="append", required=True)
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--time-limit", type=float, default=120.0, help="seconds")
    parser.add_argument("--request-timeout", type=float, default=30.0, help="seconds")
    parser.add_argument("--ramp", type=float, default=0.0,
                        help="seconds over which the workers start (about one stream's duration); "
                             "each worker's first stream is then not sampled")
    parser.add_argument("--api-key", default=None, help="sent as a bearer token")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    factory = None
    with contextlib.suppress(ImportError):
        # uvloop when installed (the bench extra): less of the client's own time in the figures.
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        samples, wall = runner.run(
            run_load(
                args.base_url,
                requests=args.requests,
                concurrency=args.concurrency,
                tokens=args.tokens,
                time_limit_s=args.time_limit,
                request_timeout_s=args.request_timeout,
                ramp_s=args.ramp,
                api_key=args.api_key,
            )
        )
    result: dict[str, Any] = {
        "wall_s": wall,
        "ok": samples.ok,
        "errors": samples.errors,
        "error_examples": samples.error_examples,
        "ttft_s": samples.ttft,
        "gaps_s": samples.gaps,
        "e2e_s": samples.e2e,
    }
    with open(args.out, "w", encoding="utf-8") as out:
        json.dump(result, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
