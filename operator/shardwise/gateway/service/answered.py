"""Requests the gateway answered itself (ext_proc's immediate responses): their usage records.

Envoy's access log logs a request only once the route filter stamped its model (observer.py), so
a refusal (no key 401, unknown model 404, a key's own 429, a hostile body 400, the picker's 503,
a provider's cap) never reaches the observer. ext_proc is the one place that answers each of them,
once per request: `ExtProc.Process` hands each such answer here, with what the route filter knew
by then (the key's id once authenticated, the model once the body was read).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from shardwise.gateway.dataplane import extproc_messages as messages

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Facts:
    """What the route filter learnt of one request before it answered (filled as it goes)."""

    started_unix_s: float | None = None
    key_id: str | None = None
    model: str | None = None


@dataclasses.dataclass(frozen=True)
class Answered:
    request_id: str
    started_unix_s: float | None
    key_id: str | None
    model: str | None
    status: int
    error_code: str | None  # the OpenAI error body's `code` (e.g. invalid_api_key, rate_limit_exceeded)
    details: str  # Envoy's response code details the route filter set (shardwise_refused, ...)
    error_kind: str | None = None  # the error body's `type` (a key's 429: which quota, requests or tokens)


def error_code_of(body: bytes, field: str = "code") -> str | None:
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None
    code = error.get(field) if isinstance(error, dict) else None
    return code if isinstance(code, str) else None


def answered_of(first: pb.ProcessingRequest, response: pb.ProcessingResponse, facts: Facts) -> Answered | None:
    """The refusal in an immediate response; None for an answer that is not one (`/v1/models`)."""
    reply = response.immediate_response
    status = reply.status.code
    if status < 400:
        return None
    headers = messages.header_map(first.request_headers) if first.HasField("request_headers") else {}
    return Answered(request_id=headers.get("x-request-id", ""), started_unix_s=facts.started_unix_s,
                    key_id=facts.key_id, model=facts.model, status=status,
                    error_code=error_code_of(reply.body), details=reply.details,
                    error_kind=error_code_of(reply.body, "type"))


def hand_over(sink: Callable[[Answered], None], first: pb.ProcessingRequest,
              response: pb.ProcessingResponse, facts: Facts) -> None:
    """To the export hook; a failure there never touches the answer."""
    try:
        answer = answered_of(first, response, facts)
        if answer is not None:
            sink(answer)
    except Exception:  # noqa: BLE001 - the refusal goes to the client whatever happens here
        log.exception("usage record of a refused request not made")
