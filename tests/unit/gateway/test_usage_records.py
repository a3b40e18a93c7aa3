"""Usage records (decide/records.py): built from an observation, charged as the key is, signed."""

from __future__ import annotations

import json

import pytest

from shardwise.gateway.decide import records

USAGE = '"usage":{"prompt_tokens":12,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":8}}}'


def _build(**over):
    args = dict(record_id="id-1", request_id="r-1", start_unix_s=1_780_000_000.25, key_id="team/k", model="m",
                served=records.Served(records.ENGINE, "10.0.0.7:8000", "team"), code="200", complete=True,
                streaming=False, prompt=12, completion=5, cached=8, ttft_s=0.1234567, duration_s=0.5, cost_micro=1500)
    args.update(over)
    return records.build(**args)


def test_a_whole_answer() -> None:
    record = _build()
    assert record == {"version": records.SCHEMA_VERSION, "time": "2026-05-28T20:26:40.250Z", "id": "id-1",
                      "request_id": "r-1",
                      "key_id": "team/k", "namespace": "team", "model": "m",
                      "served_by": {"kind": "engine", "name": "10.0.0.7:8000"}, "status": 200, "error_type": None, "error_code": None,
                      "stream": False, "complete": True, "prompt_tokens": 12, "completion_tokens": 5,
                      "cached_tokens": 8, "ttft_s": 0.123457, "duration_s": 0.5, "cost_usd": 0.0015}
    json.dumps(record)  # JSON as it is


@pytest.mark.parametrize("code, complete, streaming, tokens, error", [
    ("429", True, False, (0, 0), "rate_limit_exceeded"),
    ("401", True, False, (0, 0), "authentication_error"),
    ("400", True, True, (0, 0), "invalid_request_error"),
    ("503", True, False, (0, 0), "server_error"),
    ("200", False, True, (12, 5), "stream_broken"),  # a broken stream: what it streamed, as the key is charged
    ("200", False, False, (0, 0), "stream_broken"),  # a JSON answer cut short: its usage never came
    ("reset", False, False, (0, 0), "connection_reset"),
])
def test_errors_are_typed_and_charged_as_the_key_is(code, complete, streaming, tokens, error) -> None:
    record = _build(code=code, complete=complete, streaming=streaming)
    assert (record["prompt_tokens"], record["completion_tokens"]) == tokens
    assert record["error_type"] == error
    assert record["status"] == (None if code == "reset" else int(code))
    if tokens == (0, 0):
        assert record["cached_tokens"] == 0


def test_cost_is_the_keys_charge() -> None:
    assert records.cost_micro_usd(1000, None, 2.5) == 2500  # $2.5 per 1M completion tokens
    assert records.cost_micro_usd(1000, 77, 2.5) == 77  # hosted: the provider's prices decide
    assert records.cost_micro_usd(1000, None, None) == 0


def test_cached_tokens_from_the_usage_text() -> None:
    assert records.cached_tokens(USAGE) == 8
    assert records.cached_tokens('"usage":{"prompt_tokens":3}') is None
    assert records.cached_tokens('"usage":{"prompt_tokens_details":{"cached_tokens":true}}') is None
    assert records.cached_tokens('"usage":{"prompt_tok') is None
    assert records.cached_tokens(None) is None


def test_a_signature_verifies_only_for_its_body_secret_and_time() -> None:
    body = records.ndjson([_build(), _build(record_id="id-2")])
    assert body.count(b"\n") == 2
    header = records.signature(b"s3cret", 1000, body)
    assert header.startswith("t=1000,v1=")
    assert records.verify(b"s3cret", header, body, now=1100)
    assert not records.verify(b"other", header, body, now=1100)
    assert not records.verify(b"s3cret", header, body + b" ", now=1100)
    assert not records.verify(b"s3cret", header, body, now=1000 + 301)  # a replay, too late
    assert not records.verify(b"s3cret", "v1=abc", body, now=1000)


def test_backoff_is_jittered_exponential_and_capped() -> None:
    assert [records.backoff_s(n, 1.0) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert records.backoff_s(20, 1.0) == 30.0
    assert records.backoff_s(3, 0.0) == 0.0
    assert records.retryable(None) and records.retryable(503) and records.retryable(429)
    assert not records.retryable(400) and not records.retryable(401)
