"""Which endpoint gets a request: least load, with prefix affinity under a bound.

Pure and deterministic: the same endpoints, loads, prefix and sequence number give the same pick.

Load of an endpoint = requests this gateway has outstanding there + the engine's own waiting queue
(`vllm:num_requests_waiting`, which also counts other gateway replicas' requests) + KV_WEIGHT x its
KV-cache use (`vllm:kv_cache_usage_perc`, 0..1: a nearly full cache preempts, so it weighs like
a few more requests). Engine numbers are optional; without them the load is the outstanding count.

Prefix affinity is KubeAI's CHWBL (consistent hashing with bounded loads, Mirrokni et al. 2016):
each endpoint owns VNODES points on a hash ring; a request's prefix (the first PREFIX_CHARS of
its prompt or of its concatenated messages) hashes onto the ring and walks clockwise to the first
endpoint whose load + 1 <= ceil(c x (total load + 1) / n), c = 1.25. Conversations return to the
engine that holds their prefix in its KV cache, yet no engine takes more than 25 % above the mean.
Adding or removing an endpoint moves only the prefixes on its own arcs.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

VNODES = 100
LOAD_FACTOR = 1.25
KV_WEIGHT = 4.0
PREFIX_CHARS = 256


@dataclasses.dataclass(frozen=True)
class EngineStats:
    """What the engine's /metrics last said (None: not scraped yet or unreachable)."""

    waiting: float = 0.0
    kv_cache_usage: float = 0.0


def engine_load(engine: EngineStats) -> float:
    """The engine's own part of the load: its queue, and its KV cache weighed as a few requests."""
    return engine.waiting + KV_WEIGHT * engine.kv_cache_usage


def load_of(endpoint: str, outstanding: Mapping[str, int], stats: Mapping[str, EngineStats]) -> float:
    return outstanding.get(endpoint, 0) + engine_load(stats.get(endpoint) or EngineStats())


def _hash(text: str) -> int:
    # surrogatepass: JSON may carry a lone surrogate ("\ud800"), which strict UTF-8 cannot encode.
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


@functools.lru_cache(maxsize=256)
def ring(endpoints: tuple[str, ...]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The sorted ring points and the endpoint owning each (cached per endpoint set)."""
    points = sorted((_hash(f"{endpoint}#{i}"), endpoint) for endpoint in endpoints for i in range(VNODES))
    return tuple(p for p, _ in points), tuple(e for _, e in points)


def prefix_of(body: Mapping[str, Any], chars: int = PREFIX_CHARS) -> str | None:
    """The part of a request that decides affinity: the start of its prompt or messages."""
    messages = body.get("messages")
    if isinstance(messages, list):
        parts = []
        for message in messages:
            if isinstance(message, Mapping):
                role = message.get("role")
                parts.append(f"{role if isinstance(role, str) else ''}:{_text(message.get('content'))}\n")
            if sum(map(len, parts)) >= chars:
                break
        text = "".join(parts)
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list):
            prompt = prompt[0] if prompt and isinstance(prompt[0], str) else None
        text = prompt if isinstance(prompt, str) else ""
    return text[:chars] or None


def _text(content: Any) -> str:
    """A message's text: a string, or the text of its parts (multimodal). Whatever is not text (a
    number, an object) adds nothing to the prefix: affinity skips it, and the engine, which owns
    the schema, answers the request with its own 400."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return ""


def least_loaded(endpoints: Sequence[str], loads: Mapping[str, float], seq: int) -> str:
    """The lowest load; ties rotate with the request's sequence number so equal engines share."""
    low = min(loads[e] for e in endpoints)
    ties = sorted(e for e in endpoints if loads[e] == low)
    return ties[seq % len(ties)]


def pick(endpoints: Sequence[str], *, outstanding: Mapping[str, int], stats: Mapping[str, EngineStats],
         prefix: str | None, seq: int = 0, load_factor: float = LOAD_FACTOR) -> str:
    """The endpoint for one request (endpoints must not be empty)."""
    if not endpoints:
        raise ValueError("no endpoints to pick from")
    loads = {e: load_of(e, outstanding, stats) for e in endpoints}
    if prefix is None or len(endpoints) == 1:
        return least_loaded(endpoints, loads, seq)
    capacity = math.ceil(load_factor * (sum(loads.values()) + 1) / len(endpoints))
    points, owners = ring(tuple(sorted(endpoints)))
    start = bisect.bisect(points, _hash(prefix))
    seen: set[str] = set()
    for step in range(len(points)):
        owner = owners[(start + step) % len(points)]
        if owner in seen:
            continue
        if loads[owner] + 1 <= capacity:
            return owner
        seen.add(owner)
        if len(seen) == len(endpoints):
            break
    return least_loaded(endpoints, loads, seq)  # every engine is over the bound (fractional loads)
