"""What the gateway reads from an OpenAI request body, and the answers it gives without an engine
(pure): the body and its model or the 400, the stream asked to report its usage, the model list."""

from __future__ import annotations

import calendar
import json
import time
from collections.abc import Iterable
from typing import Any

from shardwise.gateway.decide import keys, openai_errors
from shardwise.gateway.decide.openai_errors import Refusal

STREAMING_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
# Deeper bodies are refused: Python's json gives up near 1,000 levels (RecursionError, not
# ValueError) and the body is encoded again on the way out (with_stream_usage), a few frames deeper
# in the stack than it was read. OpenAI's own structured outputs allow 10 levels of schema nesting;
# 256 levels of JSON leaves room for any real request.
MAX_DEPTH = 256


def parse_body(raw: bytes) -> tuple[dict[str, Any], str] | Refusal:
    """The body and its model, or the 400 to answer (any body that cannot be read gets one)."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return openai_errors.invalid_json(str(exc))
    except RecursionError:
        return openai_errors.invalid_json(f"the body is nested more than {MAX_DEPTH} levels deep")
    if _deeper_than(raw, body, MAX_DEPTH):
        return openai_errors.invalid_json(f"the body is nested more than {MAX_DEPTH} levels deep")
    if not isinstance(body, dict):
        return openai_errors.not_an_object()
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return openai_errors.missing_model()
    return body, model


def _deeper_than(raw: bytes, body: Any, limit: int) -> bool:
    # Counting the brackets first (in C) spares the walk for nearly every body: fewer brackets than
    # the limit cannot nest deeper than it.
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    stack = [(body, 1)]
    while stack:  # a loop, not recursion: the body may be as deep as json allowed
        node, depth = stack.pop()
        if depth > limit:
            return True
        for child in node.values() if isinstance(node, dict) else node if isinstance(node, list) else ():
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return False


def with_stream_usage(path: str, body: dict[str, Any]) -> bytes | None:
    """The body with `stream_options.include_usage: true` when a stream did not ask for its usage
    (the tokens a key is charged come from it), else None (the body goes on unchanged)."""
    if path not in STREAMING_PATHS or body.get("stream") is not True:
        return None
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return None
    changed = dict(body)
    changed["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return json.dumps(changed, separators=(",", ":")).encode()


def models_list(routes: Iterable[Any], key: keys.Key | None = None) -> Refusal:
    """OpenAI's model list (a 200 answered like a refusal: status, headers, body): the key's models."""
    data = [model_object(route) for route in routes if key is None or key.allows(route.model)]
    body = json.dumps({"object": "list", "data": data}, separators=(",", ":")).encode()
    return Refusal(200, body, (("content-type", openai_errors.JSON),))


def model_object(route: Any) -> dict[str, Any]:
    created = 0
    if route.created:
        created = calendar.timegm(time.strptime(route.created, "%Y-%m-%dT%H:%M:%SZ"))
    return {"id": route.model, "object": "model", "created": created, "owned_by": route.namespace}
