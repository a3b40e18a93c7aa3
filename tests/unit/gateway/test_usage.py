"""Tokens read from streamed and JSON bodies, whatever the chunking."""

from __future__ import annotations

import json
import pathlib

import pytest

from shardwise.gateway.decide import usage

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "vllm-0.32-cpu"


def chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("size", [1, 7, 100, 100_000])
def test_stream_with_usage_fixture(size: int) -> None:
    data = (FIXTURES / "chat-stream.sse").read_bytes()
    events = [json.loads(line[5:]) for line in data.split(b"\n") if line.startswith(b"data:") and b"[DONE]" not in line]
    expected = next(e["usage"] for e in reversed(events) if e.get("usage"))
    tally = usage.Tally(streaming=True)
    for chunk in chunks(data, size):
        tally.feed(chunk)
    assert tally.tokens() == (expected["prompt_tokens"], expected["completion_tokens"])


def test_stream_without_usage_counts_content_events() -> None:
    events = [{"choices": [{"delta": {"role": "assistant", "content": ""}}]}] + \
             [{"choices": [{"delta": {"content": f"t{i}"}}]} for i in range(5)]
    data = b"".join(b"data: " + json.dumps(e, separators=(",", ":")).encode() + b"\n\n" for e in events)
    tally = usage.Tally(streaming=True)
    for chunk in chunks(data + b"data: [DONE]\n\n", 13):
        tally.feed(chunk)
    assert tally.tokens() == (None, 5)


def test_json_usage() -> None:
    data = (FIXTURES / "chat.json").read_bytes()
    tally = usage.Tally(streaming=False)
    for chunk in chunks(data, 50):
        tally.feed(chunk)
    assert tally.tokens() == (41, 24)


def test_json_without_usage_or_broken() -> None:
    for body in (b'{"id": 1}', b'{"id": ', b"[]"):
        tally = usage.Tally(streaming=False)
        tally.feed(body)
        assert tally.tokens() == (None, None)
