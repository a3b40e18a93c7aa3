"""The engine over real HTTP on 127.0.0.1: routes, framing, errors, metrics as vLLM serves them."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sim_support import capture, captured_error, serving, shape

pytestmark = pytest.mark.anyio

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Say something, please."}]}


def _sample(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return sample.value
    raise KeyError(name)


async def test_health_is_an_empty_200_with_vllms_headers() -> None:
    async with serving() as served, httpx.AsyncClient(base_url=served.url) as http:
        response = await http.get("/health")
    assert response.status_code == 200 and response.content == b""
    assert response.headers["server"] == "uvicorn" and response.headers["vary"] == "Origin"
    assert response.headers["content-length"] == "0"


async def test_models_lists_the_served_names() -> None:
    async with (
        serving(served_model_names=("tiny", "alias")) as served,
        httpx.AsyncClient(base_url=served.url) as http,
    ):
        body = (await http.get("/v1/models")).json()
    captured = json.loads(capture("models.json"))
    assert [entry["id"] for entry in body["data"]] == ["tiny", "alias"]
    assert shape(body["data"][0]) == shape(captured["data"][0])
    assert body["data"][0]["root"] == "/models/tiny" and body["data"][0]["max_model_len"] == 256


async def test_stream_is_framed_like_vllms() -> None:
    request = {**CHAT, "max_tokens": 6, "stream": True, "stream_options": {"include_usage": True}}
    async with serving() as served, httpx.AsyncClient(base_url=served.url) as http:
        response = await http.post("/v1/chat/completions", json=request)
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    raw = response.content.decode()
    captured = capture("chat-stream.sse")
    assert raw.endswith("\n\ndata: [DONE]\n\n") and captured.endswith("\n\ndata: [DONE]\n\n")
    ours = [json.loads(e.removeprefix("data: ")) for e in raw.split("\n\n")[:-2]]
    theirs = [json.loads(e.removeprefix("data: ")) for e in captured.split("\n\n")[:-2]]
    assert len(ours) == len(theirs) == 8  # role, 6 tokens, usage
    assert [shape(chunk) for chunk in ours] == [shape(chunk) for chunk in theirs]
    assert len({chunk["id"] for chunk in ours}) == 1
    assert [c["choices"][0]["finish_reason"] for c in ours[:-1]] == [None] * 6 + ["length"]
    assert ours[-1]["usage"]["completion_tokens"] == 6


async def test_stream_without_include_usage_has_no_usage_chunk() -> None:
    async with serving() as served, httpx.AsyncClient(base_url=served.url) as http:
        raw = (
            await http.post("/v1/chat/completions", json={**CHAT, "max_tokens": 3, "stream": True})
        ).text
    events = raw.split("\n\n")[:-1]
    assert len(events) == 5 and all("usage" not in e for e in events)


@pytest.mark.parametrize(
    "capture_name, body",
    [
        (
            "error-unknown-model.txt",
            {"model": "nope", "messages": [{"role": "user", "content": "x"}]},
        ),
        ("error-bad-request.txt", {"model": "tiny", "messages": "not-a-list"}),
        ("error-too-long.txt", {**CHAT, "max_tokens": 100000}),
    ],
)
async def test_errors_are_the_captured_bodies_and_codes(
    capture_name: str, body: dict[str, Any]
) -> None:
    expected, status = captured_error(capture_name)
    async with serving() as served, httpx.AsyncClient(base_url=served.url) as http:
        response = await http.post("/v1/chat/completions", json=body)
    assert response.status_code == status
    assert response.json() == expected


async def test_unknown_paths_get_fastapis_404() -> None:
    async with serving() as served, httpx.AsyncClient(base_url=served.url) as http:
        response = await http.get("/v1/nothing")
    assert response.status_code == 404 and response.json() == {"detail": "Not Found"}


async def test_invalid_json_is_a_400() -> None:
    async with serving() as served, httpx.AsyncClient(base_url=served.url) as http:
        response = await http.post("/v1/chat/completions", content=b"{not json")
    assert response.status_code == 400 and response.json()["error"]["type"] == "Bad Request"


async def test_metrics_count_what_the_client_got() -> None:
    async with serving() as served, httpx.AsyncClient(base_url=served.url) as http:
        usage = (await http.post("/v1/chat/completions", json={**CHAT, "max_tokens": 5})).json()[
            "usage"
        ]
        response = await http.get("/metrics")
    text = response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert _sample(text, "vllm:prompt_tokens_total") == usage["prompt_tokens"]
    assert _sample(text, "vllm:generation_tokens_total") == usage["completion_tokens"] == 5
    assert _sample(text, "vllm:request_success_total", finished_reason="length") == 1
    assert _sample(text, "vllm:e2e_request_latency_seconds_count") == 1
    assert _sample(text, "vllm:num_requests_running") == 0
    assert _sample(text, "vllm:kv_cache_usage_perc") == 0


async def test_metrics_with_a_slash_serves_only_the_named_families_as_vllm_does() -> None:
    names = ["vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]
    query = [("name[]", name) for name in names]
    async with serving() as served, httpx.AsyncClient(base_url=served.url) as http:
        filtered = await http.get("/metrics/", params=query)
        unknown = await http.get("/metrics/", params=[("name[]", "vllm:no_such_metric")])
        ignored = await http.get("/metrics", params=query)  # the instrumentator's route: no filter

    def families(text: str) -> list[tuple[str, str, list[tuple[str, ...]]]]:
        # Sorted: prometheus_client's filter collects from a set, in no fixed order.
        return sorted((f.name, f.type, [tuple(sorted(s.labels)) for s in f.samples])
                      for f in text_string_to_metric_families(text))

    assert filtered.status_code == 200
    assert filtered.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert families(filtered.text) == families(capture("metrics-filtered.txt"))
    assert unknown.status_code == 200 and unknown.content == b""
    assert len(families(ignored.text)) > 20 and "vllm:num_requests_running" in ignored.text


async def test_requests_beyond_the_batch_queue_and_ttft_rises() -> None:
    async with (
        serving(max_concurrency=2, ttft_ms=10.0, itl_ms=4.0) as served,
        httpx.AsyncClient(base_url=served.url) as http,
    ):

        async def ttft() -> float:
            start = time.perf_counter()
            async with http.stream(
                "POST", "/v1/chat/completions", json={**CHAT, "max_tokens": 8, "stream": True}
            ) as response:
                first = None
                async for _ in response.aiter_lines():
                    first = first or time.perf_counter() - start
            assert first is not None
            return first

        alone = await ttft()
        waiting_seen = []

        async def watch_queue() -> None:
            for _ in range(20):
                waiting_seen.append(served.engine.waiting)
                await asyncio.sleep(0.005)

        loaded, _ = await asyncio.gather(asyncio.gather(*(ttft() for _ in range(8))), watch_queue())
        text = (await http.get("/metrics")).text
    assert max(waiting_seen) > 0
    assert max(loaded) > 3 * alone  # the last of four waves waited for three before it
    assert _sample(text, "vllm:request_queue_time_seconds_sum") > 0.05
    assert _sample(text, "vllm:time_to_first_token_seconds_sum") / 9 > alone / 2


async def test_a_client_that_leaves_is_counted_as_an_abort() -> None:
    async with serving(itl_ms=20.0) as served, httpx.AsyncClient(base_url=served.url) as http:
        async with http.stream(
            "POST", "/v1/chat/completions", json={**CHAT, "max_tokens": 200, "stream": True}
        ) as response:
            async for _ in response.aiter_lines():
                break
        for _ in range(100):  # bounded: the server notices on its next write
            if served.engine.running == 0:
                break
            await asyncio.sleep(0.01)
        text = (await http.get("/metrics")).text
    assert served.engine.running == 0
    assert _sample(text, "vllm:request_success_total", finished_reason="abort") == 1
    assert _sample(text, "vllm:kv_cache_usage_perc") == 0


async def test_the_openai_client_works_against_it() -> None:
    async with (
        serving() as served,
        openai.AsyncOpenAI(base_url=f"{served.url}/v1", api_key="EMPTY", max_retries=0) as client,
    ):
        chat = await client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
        stream = await client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
        completion = await client.completions.create(model="tiny", prompt="hi", max_tokens=3)
        text_stream = await client.completions.create(
            model="tiny", prompt="hi", max_tokens=3, stream=True
        )
        pieces = [chunk.choices[0].text async for chunk in text_stream if chunk.choices]
        listed = await client.models.list()
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(
                model="nope", messages=[{"role": "user", "content": "hi"}]
            )
    assert chat.choices[0].finish_reason == "length" and chat.usage is not None
    assert chat.usage.completion_tokens == 4 and chat.choices[0].message.content
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == chat.choices[0].message.content
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4
    assert completion.choices[0].text == "".join(pieces) and completion.usage is not None
    assert [model.id for model in listed.data] == ["tiny"]
