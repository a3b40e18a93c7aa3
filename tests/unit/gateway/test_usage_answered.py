"""The gateway's own answers become usage records (issue 43): one per immediate response that is a
refusal, with what the route filter knew, and nothing charged."""

from __future__ import annotations

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from shardwise.gateway.dataplane import extproc_messages as messages
from shardwise.gateway.decide import openai_errors, records
from shardwise.gateway.service import answered


def _first(request_id: str = "rid-1") -> pb.ProcessingRequest:
    return pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=base_pb2.HeaderMap(headers=[
        base_pb2.HeaderValue(key="x-request-id", raw_value=request_id.encode()),
        base_pb2.HeaderValue(key="authorization", raw_value=b"Bearer sk-secret")])))


def test_a_keys_429_is_a_record_with_its_key_and_no_tokens() -> None:
    refusal = openai_errors.over_quota("team/k", "requests", 10, 7)
    facts = answered.Facts(started_unix_s=1780000000.25, key_id="team/k", model="m")
    got = answered.answered_of(_first(), messages.immediate(refusal, "shardwise_refused"), facts)
    assert got == answered.Answered(request_id="rid-1", started_unix_s=1780000000.25, key_id="team/k", model="m",
                                    status=429, error_code="rate_limit_exceeded", details="shardwise_refused",
                                    error_kind="requests")
    record = records.build_answered(record_id="id-9", request_id=got.request_id, start_unix_s=got.started_unix_s,
                                    key_id=got.key_id, model=got.model, status=got.status, error_code=got.error_code)
    assert record["served_by"] == {"kind": records.GATEWAY, "name": "shardwise"} and record["namespace"] is None
    assert (record["status"], record["error_type"], record["error_code"]) == (429, "rate_limit_exceeded",
                                                                              "rate_limit_exceeded")
    assert record["prompt_tokens"] == record["completion_tokens"] == record["cached_tokens"] == 0
    assert record["cost_usd"] == 0 and record["key_id"] == "team/k" and record["model"] == "m"
    assert record["time"] == "2026-05-28T20:26:40.250Z" and record["id"] == "id-9"


def test_before_the_key_and_the_body_the_record_has_neither() -> None:
    got = answered.answered_of(_first(), messages.immediate(openai_errors.missing_api_key(), "shardwise_unauthorized"),
                               answered.Facts())
    assert got is not None and (got.status, got.key_id, got.model) == (401, None, None)
    record = records.build_answered(record_id="x", request_id=got.request_id, start_unix_s=None, key_id=None,
                                    model=got.model, status=got.status, error_code=got.error_code)
    assert record["model"] == "" and record["error_type"] == "authentication_error" and record["time"] is None
    assert "sk-secret" not in repr(record)


def test_an_answer_that_is_no_refusal_is_no_record() -> None:
    models = openai_errors.Refusal(200, b'{"data":[]}', ())
    assert answered.answered_of(_first(), messages.immediate(models, "shardwise_models"), answered.Facts()) is None


def test_hand_over_once_and_a_failing_sink_leaves_the_answer_alone() -> None:
    seen: list[answered.Answered] = []
    response = messages.immediate(openai_errors.invalid_api_key(), "shardwise_unauthorized")
    answered.hand_over(seen.append, _first(), response, answered.Facts())
    assert len(seen) == 1

    def broken(_: answered.Answered) -> None:
        raise RuntimeError("sink down")
    answered.hand_over(broken, _first(), response, answered.Facts())  # no exception reaches the route filter


def test_error_code_of_odd_bodies() -> None:
    assert answered.error_code_of(b"not json") is None
    assert answered.error_code_of(b'{"error": "plain"}') is None
    assert answered.error_code_of(b'[]') is None
