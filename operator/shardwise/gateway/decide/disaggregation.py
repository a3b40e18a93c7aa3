"""A request's prefill on a prefill engine, then its decode on a decode engine (issue 39), pure.

The protocol is vLLM's own P/D proxy's (tests/v1/kv_connector/nixl_integration/toy_proxy_server.py)
and llm-d's routing sidecar's (connector_nixlv2.go), SERVING-SHAPES.md C:
1. the prefill leg: the client's body with `kv_transfer_params` asking for a remote decode,
   `stream: false`, `max_tokens: 1` (and `max_completion_tokens: 1` when given), no
   `stream_options`, `min_tokens` or `min_completion_tokens`; the same X-Request-Id as the decode leg;
2. the `kv_transfer_params` of its JSON answer (where the decode engine finds the prompt's KV);
3. the decode leg: the client's own body plus those params, streamed back as the client asked.

Which requests split, as llm-d's prefix-based P/D decider does: none whose prompt, less what the
chosen decode engine already holds in its prefix cache, is shorter than a threshold (a short
prompt prefills on the decode engine faster than it is handed over). What a decode engine holds
is remembered here as vLLM keys its cache: chained hashes of whole blocks of the prompt, recorded
for the engine each request went to (an estimate: it does not see evictions).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from shardwise.gateway.decide import picker

# Tokens a prompt must have beyond the decode engine's cached prefix before its prefill goes to a
# prefill engine. Below two 128-token blocks (vLLM's CPU block; a GPU block is 16) the connector
# would move at most one block, and the decode engine's own prefill of so few tokens costs less
# than a second request's round trip.
DEFAULT_MIN_PROMPT_TOKENS = 256
CHARS_PER_TOKEN = 4  # llm-d's AverageCharactersPerToken: the gateway has no tokenizer
BLOCK_CHARS = 64 * CHARS_PER_TOKEN  # the prefix memory's block: 64 tokens' worth of text
BLOCKS_PER_ENGINE = 65_536  # ~4M tokens of prompt remembered per decode engine, least recent out

# What a prefill leg asks for (toy_proxy_server.py: the decode happens elsewhere).
REMOTE_DECODE: Mapping[str, Any] = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                                    "remote_block_ids": None, "remote_host": None, "remote_port": None}
SPLIT_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})

# Why a request went to its decode engine whole (the outcome label of shardwise_gateway_prefill_legs_total).
SHORT, CACHED, NO_PREFILL_ENGINE, NOT_GENERATION = "short", "cached", "no_prefill_engine", "not_generation"


def prompt_text(body: Mapping[str, Any]) -> str:
    """The prompt as text: a completion's prompt (its strings joined), or every message's
    role:content (the same reading as picker.prefix_of, not cut short)."""
    messages = body.get("messages")
    if isinstance(messages, list):
        return "".join(f"{m.get('role') if isinstance(m.get('role'), str) else ''}:{picker._text(m.get('content'))}\n"
                       for m in messages if isinstance(m, Mapping))
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        return "".join(p for p in prompt if isinstance(p, str))
    return prompt if isinstance(prompt, str) else ""


def estimated_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def block_hashes(text: str, block_chars: int = BLOCK_CHARS) -> tuple[bytes, ...]:
    """One hash per whole block, each over the one before it (a block means the same prefix)."""
    out, previous = [], b""
    data = text.encode("utf-8", "surrogatepass")
    for start in range(0, len(data) - block_chars + 1, block_chars):
        previous = hashlib.blake2b(previous + data[start:start + block_chars], digest_size=8).digest()
        out.append(previous)
    return tuple(out)


class PrefixMemory:
    """Per decode engine, the prompt blocks it was last sent (least recently sent dropped first)."""

    def __init__(self, blocks_per_engine: int = BLOCKS_PER_ENGINE) -> None:
        self.blocks_per_engine = blocks_per_engine
        self._held: dict[str, collections.OrderedDict[bytes, None]] = {}

    def matched(self, endpoint: str, hashes: Sequence[bytes]) -> int:
        """How many leading blocks of the prompt the engine holds."""
        held = self._held.get(endpoint) or {}
        count = 0
        for h in hashes:
            if h not in held:
                break
            count += 1
        return count

    def record(self, endpoint: str, hashes: Sequence[bytes]) -> None:
        held = self._held.setdefault(endpoint, collections.OrderedDict())
        for h in hashes:
            held[h] = None
            held.move_to_end(h)
        while len(held) > self.blocks_per_engine:
            held.popitem(last=False)

    def retain(self, endpoints: set[str]) -> None:
        for gone in set(self._held) - endpoints:
            del self._held[gone]


def whole_on_decode(path: str, prompt_tokens: int, cached_tokens: int, prefill_endpoints: Sequence[str],
                    min_prompt_tokens: int = DEFAULT_MIN_PROMPT_TOKENS) -> str | None:
    """Why the decode engine does both phases (an outcome label), or None: split the request."""
    if path not in SPLIT_PATHS:
        return NOT_GENERATION
    if not prefill_endpoints:  # none ready: decode prefills itself, never an error
        return NO_PREFILL_ENGINE
    if prompt_tokens < min_prompt_tokens:
        return SHORT
    if prompt_tokens - cached_tokens < min_prompt_tokens:
        return CACHED
    return None


def pick_prefill(candidates: Sequence[str], decode_endpoint: str, nodes: Mapping[str, str],
                 loads: Mapping[str, float], seq: int = 0, load_factor: float = picker.LOAD_FACTOR) -> str:
    """The prefill engine for a decode engine: on its node when one there is busy by at most one
    request more than the least loaded prefill engine, or within the picker's bound
    (load + 1 <= ceil(c x (total + 1) / n)): the KV then crosses no network (Dynamo's issue
    10171: ~50 % of the throughput lost when pairs are not kept together); else the least loaded."""
    if not candidates:
        raise ValueError("no prefill engines to pick from")
    node = nodes.get(decode_endpoint)
    capacity = math.ceil(load_factor * (sum(loads.get(e, 0.0) for e in candidates) + 1) / len(candidates))
    lowest = min(loads.get(e, 0.0) for e in candidates)
    near = [e for e in candidates if node is not None and nodes.get(e) == node
            and (loads.get(e, 0.0) <= lowest + 1 or loads.get(e, 0.0) + 1 <= capacity)]
    pool = near or list(candidates)
    return picker.least_loaded(pool, {e: loads.get(e, 0.0) for e in pool}, seq)


def prefill_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """The prefill leg's body (toy_proxy_server.py's send_request_to_service)."""
    out = {k: v for k, v in body.items() if k not in ("stream_options", "min_tokens", "min_completion_tokens")}
    out.update(kv_transfer_params=dict(REMOTE_DECODE), stream=False, max_tokens=1)
    if "max_completion_tokens" in body:
        out["max_completion_tokens"] = 1
    return out


def kv_params_of(answer: Any) -> dict[str, Any] | None:
    """The prefill answer's kv_transfer_params (NixlConnector fills them; the example connector
    answers null: its decode engine finds the KV files by the prompt's hash)."""
    params = answer.get("kv_transfer_params") if isinstance(answer, Mapping) else None
    return dict(params) if isinstance(params, Mapping) else None


def decode_body(body: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """The client's body with the prefill engine's kv_transfer_params (the decode leg)."""
    return {**body, "kv_transfer_params": dict(params)}


def encode(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


@dataclasses.dataclass(frozen=True)
class Leg:
    """How the prefill of one request went: the engine that did it (None: the decode engine does
    both) and the params for the decode leg (None: nothing to add)."""

    outcome: str
    prefill: str | None = None
    params: dict[str, Any] | None = None
