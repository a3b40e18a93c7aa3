"""Bodies and errors built by the pure modules against the real vLLM 0.32 captures."""

from __future__ import annotations

import json
import random

import pytest
from shardwise_runtime.sim import errors, protocol
from shardwise_runtime.sim.engine import Plan, plan_generation
from sim_support import TINY, capture, captured_error, shape

IDENT = protocol.Identity(
    id="chatcmpl-0123456789abcdef",
    created=1796045437,
    model="tiny",
    system_fingerprint="vllm-0.32.0-tp2-cdf4a1cc",
)


def _request(**changes: object) -> protocol.Request:
    fields = {
        "kind": "chat",
        "model": "tiny",
        "prompt_tokens": 17,
        "max_tokens": 6,
        "stream": False,
        "include_usage": False,
        "n": 1,
        **changes,
    }
    return protocol.Request(**fields)  # type: ignore[arg-type]


def test_chat_response_has_the_captured_shape() -> None:
    ours = protocol.chat_response(IDENT, "The quick", "length", 41, 24)
    assert shape(ours) == shape(json.loads(capture("chat.json")))
    assert ours["usage"]["total_tokens"] == 65


def test_completion_response_has_the_captured_shape() -> None:
    ident = protocol.Identity("cmpl-869678d9d625144f", 1, "tiny", "vllm-0.32.0-tp2-cdf4a1cc")
    ours = protocol.completion_response(ident, "", "length", 2, 8)
    assert shape(ours) == shape(json.loads(capture("completion.json")))


def test_models_response_has_the_captured_shape() -> None:
    ours = protocol.models_response(
        ("tiny",), "/models/tiny", 256, 1796045437, "modelperm-a9b460d17da46cb4"
    )
    assert ours == json.loads(capture("models.json"))


def test_stream_chunks_match_the_captured_ones() -> None:
    events = [
        block.removeprefix("data: ") for block in capture("chat-stream.sse").split("\n\n") if block
    ]
    captured = [json.loads(event) for event in events[:-1]]
    assert events[-1] == "[DONE]"
    role, middle, last, usage = captured[0], captured[1], captured[-2], captured[-1]
    assert shape(protocol.role_chunk(IDENT)) == shape(role)
    assert shape(protocol.token_chunk(IDENT, "chat", "x", None)) == shape(middle)
    assert shape(protocol.token_chunk(IDENT, "chat", "x", "length")) == shape(last)
    ours_usage = protocol.usage_chunk(IDENT, "chat", 17, 6)
    assert shape(ours_usage) == shape(usage)
    assert ours_usage["usage"] == usage["usage"]


def test_sse_framing_is_compact_json_and_a_blank_line() -> None:
    captured = capture("chat-stream.sse").encode()
    usage_line = captured.split(b"\n\n")[-3] + b"\n\n"
    assert protocol.sse_event(json.loads(usage_line.removeprefix(b"data: "))) == usage_line
    assert captured.endswith(protocol.SSE_DONE)


def test_prompt_tokens_count_characters_over_four_plus_chat_markers() -> None:
    assert protocol.count_text_tokens("abcdefgh") == 2
    assert protocol.count_text_tokens("abcdefghi") == 3
    messages = [
        {"role": "system", "content": "abcd"},
        {"role": "user", "content": [{"type": "text", "text": "abcdefgh"}]},
    ]
    assert protocol.chat_prompt_tokens(messages) == 2 * protocol.CHAT_TOKENS_PER_MESSAGE + 1 + 2
    assert protocol.completion_prompt_tokens([1, 2, 3]) == 3


def test_generated_text_is_the_tokens_in_order() -> None:
    assert protocol.generated_text(3) == "".join(protocol.token_text(i) for i in range(3))


@pytest.mark.parametrize(
    "name, body",
    [
        ("error-bad-request.txt", {"model": "tiny", "messages": "not-a-list"}),
    ],
)
def test_validation_error_is_the_captured_one(name: str, body: dict[str, object]) -> None:
    expected, status = captured_error(name)
    problems = errors.validate_chat(body)
    assert errors.validation_failed(problems) == expected and status == 400


def test_unknown_model_is_the_captured_error() -> None:
    expected, status = captured_error("error-unknown-model.txt")
    assert plan_generation(_request(model="nope"), TINY, random.Random(0)) == expected
    assert status == 404


def test_max_tokens_over_the_context_is_the_captured_error() -> None:
    expected, _ = captured_error("error-too-long.txt")
    assert plan_generation(_request(max_tokens=100000), TINY, random.Random(0)) == expected


@pytest.mark.parametrize(
    "body, loc",
    [
        ({"model": "tiny"}, "body.messages"),
        ([], "body"),
        ({"messages": [], "max_tokens": "ten"}, "body.max_tokens"),
        ({"messages": [], "stream": "yes"}, "body.stream"),
        ({"messages": [{"content": "hi"}]}, "body.messages.0.role"),
        ({"messages": ["hi"]}, "body.messages.0"),
    ],
)
def test_bad_chat_bodies_name_the_offending_field(body: object, loc: str) -> None:
    problems = errors.validate_chat(body)
    assert problems and errors.validation_failed(problems)["error"]["param"] == loc


def test_completion_needs_a_prompt() -> None:
    assert errors.validate_completion({"model": "tiny"})[0]["loc"] == "body.prompt"
    assert errors.validate_completion({"prompt": "hi", "max_tokens": 4}) == []


def test_prompt_plus_max_tokens_beyond_the_context_is_rejected() -> None:
    body = plan_generation(_request(prompt_tokens=200, max_tokens=100), TINY, random.Random(0))
    assert isinstance(body, dict) and body["error"]["param"] == "max_tokens"


def test_without_max_tokens_the_answer_stops_inside_the_context() -> None:
    plan = plan_generation(_request(max_tokens=None), TINY, random.Random(0))
    assert isinstance(plan, Plan) and plan.finish_reason == "stop"
    assert 1 <= plan.tokens <= 256 - 17 and plan.max_tokens == 256 - 17
    tight = plan_generation(_request(max_tokens=None, prompt_tokens=250), TINY, random.Random(0))
    assert isinstance(tight, Plan) and tight.tokens == 6 and tight.finish_reason == "length"


def test_missing_model_answers_as_the_first_served_name() -> None:
    plan = plan_generation(_request(model=None), TINY, random.Random(0))
    assert isinstance(plan, Plan) and plan.model == "tiny" and plan.tokens == 6
