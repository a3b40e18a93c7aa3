"""OpenAI-compatible request reading and response building, shaped like vLLM 0.32: pure functions.

Every body here copies the key set and key order of the captures in tests/fixtures/vllm-0.32-cpu/
(chat.json, completion.json, chat-stream.sse, models.json), so that clients and parsers written
against the simulator also work against vLLM.

Tokens: the simulator has no tokenizer. A prompt counts as ceil(characters / 4) tokens (the usual
rule of thumb for English BPE); each generated token is one filler word and one SSE chunk. Usage
fields and the vllm:* token metrics use these same counts. A LoRA adapter's answers start further
along the filler (`adapter_shift`), so a client sees that the adapter, not the base, answered.
"""

from __future__ import annotations

import dataclasses
import json
import math
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

VLLM_VERSION = "0.32.0"
CHARS_PER_TOKEN = 4
# Chat templates wrap each message in role markers; vLLM counts those as prompt tokens too.
CHAT_TOKENS_PER_MESSAGE = 4
FILLER = ("The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", ".")

Kind = Literal["chat", "completion"]
FinishReason = Literal["stop", "length"]


@dataclasses.dataclass(frozen=True)
class Request:
    """What the engine needs from a validated request body."""

    kind: Kind
    model: str | None
    prompt_tokens: int
    max_tokens: int | None
    stream: bool
    include_usage: bool
    n: int
    # vLLM's P/D protocol: what the prefill engine returned, passed on to the decode engine.
    kv_transfer_params: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class Identity:
    """Per-response identifiers: the same in every chunk of one streamed answer."""

    id: str
    created: int
    model: str
    system_fingerprint: str


def count_text_tokens(text: str) -> int:
    """Tokens in a piece of text under the simulator's characters/4 rule."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _content_text(content: object) -> str:
    # OpenAI content is a string or a list of parts; only text parts cost tokens here.
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def chat_prompt_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """Prompt tokens of a chat request: message texts plus the template's per-message markers."""
    return sum(
        CHAT_TOKENS_PER_MESSAGE + count_text_tokens(_content_text(m.get("content")))
        for m in messages
    )


def completion_prompt_tokens(prompt: str | Sequence[Any]) -> int:
    """Prompt tokens of a completion request: a string, or a list of token ids counted as is."""
    if isinstance(prompt, str):
        return max(1, count_text_tokens(prompt))
    return len(prompt)


def read_request(kind: Kind, body: Mapping[str, Any]) -> Request:
    """Pull the fields the engine uses out of a body that passed validation."""
    if kind == "chat":
        prompt_tokens = chat_prompt_tokens(body["messages"])
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    else:
        prompt_tokens = completion_prompt_tokens(body["prompt"])
        max_tokens = body.get("max_tokens")
    stream_options = body.get("stream_options") or {}
    return Request(
        kind=kind,
        model=body.get("model"),
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=bool(body.get("stream")),
        include_usage=bool(stream_options.get("include_usage")),
        n=body.get("n") or 1,
        kv_transfer_params=body.get("kv_transfer_params") if isinstance(body.get("kv_transfer_params"), dict)
        else None,
    )


def token_text(index: int, shift: int = 0) -> str:
    """The text of the index-th generated token (`shift`: where an adapter starts the filler)."""
    return FILLER[(index + shift) % len(FILLER)]


def generated_text(tokens: int, shift: int = 0) -> str:
    """The whole text of `tokens` generated tokens."""
    return "".join(token_text(i, shift) for i in range(tokens))


def adapter_shift(name: str) -> int:
    """An adapter's filler offset: never 0 (the base's), the same for a name in every process."""
    return 1 + zlib.crc32(name.encode()) % (len(FILLER) - 1)


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


def chat_response(
    ident: Identity,
    text: str,
    finish_reason: FinishReason,
    prompt_tokens: int,
    completion_tokens: int,
) -> dict[str, Any]:
    """Non-streaming chat completion (chat.json)."""
    message = {
        "role": "assistant",
        "content": text,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "reasoning": None,
    }
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": None,
        "token_ids": None,
        "routed_experts": None,
    }
    return {
        "id": ident.id,
        "object": "chat.completion",
        "created": ident.created,
        "model": ident.model,
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": ident.system_fingerprint,
        "usage": {
            **_usage(prompt_tokens, completion_tokens),
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        },
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "prompt_text": None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def completion_response(
    ident: Identity,
    text: str,
    finish_reason: FinishReason,
    prompt_tokens: int,
    completion_tokens: int,
) -> dict[str, Any]:
    """Non-streaming text completion (completion.json)."""
    choice = {
        "index": 0,
        "text": text,
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": None,
        "token_ids": None,
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "routed_experts": None,
    }
    return {
        "id": ident.id,
        "object": "text_completion",
        "created": ident.created,
        "model": ident.model,
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": ident.system_fingerprint,
        "usage": {
            **_usage(prompt_tokens, completion_tokens),
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        },
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def _chunk_head(ident: Identity, kind: Kind) -> dict[str, Any]:
    obj = "chat.completion.chunk" if kind == "chat" else "text_completion"
    return {"id": ident.id, "object": obj, "created": ident.created, "model": ident.model}


def role_chunk(ident: Identity) -> dict[str, Any]:
    """The first chat chunk: the assistant role with empty content, sent with the first token."""
    choice = {
        "index": 0,
        "delta": {"role": "assistant", "content": ""},
        "logprobs": None,
        "finish_reason": None,
    }
    return {
        **_chunk_head(ident, "chat"),
        "choices": [choice],
        "prompt_token_ids": None,
        "prompt_text": None,
    }


def token_chunk(
    ident: Identity, kind: Kind, text: str, finish_reason: FinishReason | None
) -> dict[str, Any]:
    """One generated token; the last one carries finish_reason and stop_reason."""
    choice: dict[str, Any] = {"index": 0}
    if kind == "chat":
        choice["delta"] = {"content": text}
    else:
        choice["text"] = text
    choice["logprobs"] = None
    choice["finish_reason"] = finish_reason
    if finish_reason is not None:
        choice["stop_reason"] = None
    choice["token_ids"] = None
    return {**_chunk_head(ident, kind), "choices": [choice]}


def usage_chunk(
    ident: Identity, kind: Kind, prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    """The final chunk with `stream_options.include_usage`: no choices, usage and fingerprint."""
    return {
        **_chunk_head(ident, kind),
        "choices": [],
        "usage": _usage(prompt_tokens, completion_tokens),
        "system_fingerprint": ident.system_fingerprint,
    }


def sse_event(payload: Mapping[str, Any] | str) -> bytes:
    """One server-sent event, framed as vLLM frames it: `data: <compact json>` and a blank line."""
    data = (
        payload
        if isinstance(payload, str)
        else json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    )
    return f"data: {data}\n\n".encode()


SSE_DONE = sse_event("[DONE]")


@dataclasses.dataclass(frozen=True)
class AdapterCard:
    """A loaded LoRA adapter as /v1/models lists it (models-with-adapters.json)."""

    name: str
    root: str  # the path it was loaded from
    parent: str  # the served name it applies to
    permission_id: str


def _model_card(
    name: str,
    root: str,
    parent: str | None,
    max_model_len: int | None,
    created: int,
    permission_id: str,
) -> dict[str, Any]:
    permission = {
        "id": permission_id,
        "object": "model_permission",
        "created": created,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }
    return {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": root,
        "parent": parent,
        "max_model_len": max_model_len,
        "permission": [permission],
    }


def models_response(
    served_names: Sequence[str],
    root: str,
    max_model_len: int,
    created: int,
    permission_id: str,
    adapters: Sequence[AdapterCard] = (),
) -> dict[str, Any]:
    """GET /v1/models (models.json): one entry per served name, all rooted at the model path,
    then one per loaded adapter, with its parent and no max_model_len of its own."""
    cards = [
        _model_card(name, root, None, max_model_len, created, permission_id)
        for name in served_names
    ]
    cards += [
        _model_card(a.name, a.root, a.parent, None, created, a.permission_id) for a in adapters
    ]
    return {"object": "list", "data": cards}


def system_fingerprint(tensor_parallel_size: int, digest: str) -> str:
    """vLLM's `vllm-<version>-tp<N>-<hash>` fingerprint."""
    return f"vllm-{VLLM_VERSION}-tp{tensor_parallel_size}-{digest}"
