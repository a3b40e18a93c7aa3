"""Refusals in OpenAI's words: the status, the headers and the body an OpenAI client expects.

The body is OpenAI's error object, `{"error": {"message", "type", "param", "code"}}`, so the
official clients raise their typed errors (NotFoundError, RateLimitError, ...) with our message.
Types and codes follow the hosted API: `invalid_request_error` for what the caller must fix,
`model_not_found` for an unknown model, `rate_limit_exceeded` (with Retry-After) when the
model's hold queue is full, and a 503 with Retry-After when a waking model did not come up in
time. Pure: bytes out, nothing sent.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

JSON = "application/json"


@dataclasses.dataclass(frozen=True)
class Refusal:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def error(self) -> dict[str, Any]:
        return json.loads(self.body)["error"]


def body(message: str, type_: str, *, param: str | None = None, code: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}},
                      separators=(",", ":")).encode()


def _refusal(status: int, message: str, type_: str, *, param: str | None = None, code: str | None = None,
             retry_after_s: int | None = None) -> Refusal:
    headers = [("content-type", JSON)]
    if retry_after_s is not None:
        headers.append(("retry-after", str(retry_after_s)))
    return Refusal(status, body(message, type_, param=param, code=code), tuple(headers))


def invalid_json(detail: str) -> Refusal:
    return _refusal(400, f"We could not parse the JSON body of your request. ({detail})", "invalid_request_error")


def not_an_object() -> Refusal:
    return _refusal(400, "The request body must be a JSON object.", "invalid_request_error")


def missing_model() -> Refusal:
    return _refusal(400, "you must provide a model parameter", "invalid_request_error", param="model")


def model_not_found(model: str) -> Refusal:
    return _refusal(404, f"The model `{model}` does not exist.", "invalid_request_error", param="model",
                    code="model_not_found")


def unknown_url(method: str, path: str) -> Refusal:
    return _refusal(404, f"Invalid URL ({method} {path})", "invalid_request_error")


def too_large(limit_bytes: int) -> Refusal:
    return _refusal(413, f"Request body too large: the limit is {limit_bytes} bytes.", "invalid_request_error",
                    code="request_too_large")


def hold_queue_full(model: str, retry_after_s: int) -> Refusal:
    return _refusal(429, f"The model `{model}` is starting and has too many requests waiting; "
                         f"retry after {retry_after_s} s.", "requests", code="rate_limit_exceeded",
                    retry_after_s=retry_after_s)


def wake_timed_out(model: str, waited_s: float, retry_after_s: int) -> Refusal:
    return _refusal(503, f"The model `{model}` did not become ready within {waited_s:.0f} s; "
                         f"retry after {retry_after_s} s.", "server_error", code="model_not_ready",
                    retry_after_s=retry_after_s)


def no_replicas(model: str) -> Refusal:
    return _refusal(503, f"The model `{model}` has no replicas (scaled to 0 without autoscaling.minReplicas 0).",
                    "server_error", code="model_not_ready", retry_after_s=30)


def none_in_subset(model: str) -> Refusal:
    return _refusal(503, f"None of the endpoints the gateway allows for `{model}` (its subset hint) is ready.",
                    "server_error", code="model_not_ready", retry_after_s=5)


def adapter_unavailable(model: str, why: str) -> Refusal:
    # No Retry-After: the spec or the adapter's files must change first (status.adapters says which).
    return _refusal(503, f"The adapter `{model}` cannot be served: {why}", "server_error",
                    code="adapter_unavailable")


def not_synced(retry_after_s: int) -> Refusal:
    return _refusal(503, "The gateway is starting and does not know the models yet.", "server_error",
                    code="service_unavailable", retry_after_s=retry_after_s)


def shutting_down(retry_after_s: int) -> Refusal:
    return _refusal(503, "The gateway is shutting down; retry.", "server_error", code="service_unavailable",
                    retry_after_s=retry_after_s)


def internal_error(request_id: str) -> Refusal:
    """A failure of the gateway's own (a bug): OpenAI's 500, with the id to quote when reporting it."""
    return Refusal(500, body(f"The server had an error while processing your request. Sorry about that! You can "
                             f"retry your request; if the error persists, report it with the request ID "
                             f"{request_id}.", "server_error"),
                   (("content-type", JSON), ("x-request-id", request_id)))


def missing_api_key() -> Refusal:
    return _refusal(401, "You didn't provide an API key. You need to provide your API key in an Authorization "
                         "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", "invalid_request_error",
                    code="invalid_api_key")


def invalid_api_key() -> Refusal:
    # OpenAI echoes a masked part of the key; we echo none of it (a key is never written anywhere).
    return _refusal(401, "Incorrect API key provided.", "invalid_request_error", code="invalid_api_key")


def model_not_allowed(model: str) -> Refusal:
    """A model the key may not use reads as one that does not exist (OpenAI's 404, param model)."""
    return _refusal(404, f"The model `{model}` does not exist or you do not have access to it.",
                    "invalid_request_error", param="model", code="model_not_found")


def over_quota(key_id: str, kind: str, limit: int | None, retry_after_s: int) -> Refusal:
    what = {"requests": "requests per min (RPM)", "tokens": "tokens per min (TPM)",
            "concurrency": "concurrent requests"}.get(kind, kind)
    return _refusal(429, f"Rate limit reached for {what} on key {key_id}: Limit {limit}. Please try again in "
                         f"{retry_after_s}s.", kind, code="rate_limit_exceeded", retry_after_s=retry_after_s)
