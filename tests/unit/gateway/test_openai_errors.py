"""Refusals carry OpenAI's status, headers and error object."""

from __future__ import annotations

import json

import pytest

from shardwise.gateway.decide import openai_errors as oe


@pytest.mark.parametrize("refusal, status, type_, code, param, message, retry_after", [
    (oe.invalid_json("Expecting value"), 400, "invalid_request_error", None, None,
     "We could not parse the JSON body of your request. (Expecting value)", None),
    (oe.not_an_object(), 400, "invalid_request_error", None, None, "The request body must be a JSON object.", None),
    (oe.missing_model(), 400, "invalid_request_error", None, "model", "you must provide a model parameter", None),
    (oe.model_not_found("x"), 404, "invalid_request_error", "model_not_found", "model",
     "The model `x` does not exist.", None),
    (oe.unknown_url("GET", "/v1/x"), 404, "invalid_request_error", None, None, "Invalid URL (GET /v1/x)", None),
    (oe.too_large(1024), 413, "invalid_request_error", "request_too_large", None,
     "Request body too large: the limit is 1024 bytes.", None),
    (oe.hold_queue_full("m", 5), 429, "requests", "rate_limit_exceeded", None,
     "The model `m` is starting and has too many requests waiting; retry after 5 s.", "5"),
    (oe.wake_timed_out("m", 600, 30), 503, "server_error", "model_not_ready", None,
     "The model `m` did not become ready within 600 s; retry after 30 s.", "30"),
    (oe.shutting_down(5), 503, "server_error", "service_unavailable", None, "The gateway is shutting down; retry.",
     "5"),
], ids=["json", "object", "model", "not-found", "url", "too-large", "queue-full", "timeout", "shutdown"])
def test_refusals(refusal, status, type_, code, param, message, retry_after) -> None:
    assert refusal.status == status
    assert json.loads(refusal.body) == {"error": {"message": message, "type": type_, "param": param, "code": code}}
    headers = dict(refusal.headers)
    assert headers["content-type"] == "application/json"
    assert headers.get("retry-after") == retry_after
