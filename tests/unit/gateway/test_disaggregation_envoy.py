"""A disaggregated pair behind a real Envoy: the picker's service prefills a long prompt on a
simulated prefill engine, and Envoy streams the decode from a simulated decode engine that was
handed the prefill engine's kv_transfer_params (it counts the prompt's tokens as loaded, not
computed). Short prompts, a prompt the decode engine was already sent, a dead prefill engine and
one that drops the connection mid-request all end on the decode engine, which prefills itself."""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from envoy.service.discovery.v3 import ads_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from prometheus_client.parser import text_string_to_metric_families

from shardwise.gateway import metrics
from shardwise.gateway.dataplane import fastpath, xds
from shardwise.gateway.decide import routes
from shardwise.gateway.service import extproc
from shardwise.gateway.service.dispatcher import Dispatcher
from shardwise_runtime.sim import app
from shardwise_runtime.sim.config import EngineConfig
from shardwise_runtime.sim.engine import Engine
from tests.unit.gateway.envoy_harness import envoy_beside

MODELS = ("pd", "pd-dead", "pd-reset", "pd-decode-dies")
FIRST_CHUNK = b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Incident"}}]}\n\n'
LONG = "Summarise the attached incident report for the on-call engineer, step by step. " * 40  # ~800 tokens


def _config(role: str) -> EngineConfig:
    return EngineConfig(host="127.0.0.1", port=0, model="/models/tiny", served_model_names=MODELS, ttft_ms=5.0,
                        itl_ms=1.0, max_concurrency=8, max_model_len=8192, tensor_parallel_size=1, role=role,
                        kv_connector="NixlConnector")


async def _dropping(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A prefill engine that dies mid-request: it reads the request, then the connection is gone."""
    await reader.readuntil(b"\r\n\r\n")
    writer.transport.abort()


async def _dying_decode(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A decode engine that dies mid-stream: the headers and one chunk, then the connection is gone."""
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                 b"%x\r\n%s\r\n" % (len(FIRST_CHUNK), FIRST_CHUNK))
    await writer.drain()
    await asyncio.sleep(0.2)
    writer.transport.abort()


def _route(model: str, decode: str, prefill: str) -> routes.Route:
    return routes.Route(model=model, namespace="a", name=model, endpoints=(decode,), scale_to_zero=False,
                        desired_replicas=1, prefill_endpoints=(prefill,), nodes=((decode, "n1"), (prefill, "n1")))


@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    parts: dict[str, Any] = {}

    async def setup(server: grpc.aio.Server):
        prefill, decode = Engine(_config("prefill")), Engine(_config("decode"))
        runners = []
        for name, engine in (("prefill", prefill), ("decode", decode)):
            runner, port = await app.start_site(engine, shutdown_timeout_s=0.1)
            runners.append(runner)
            parts[name] = f"127.0.0.1:{port}"
        dropping = await asyncio.start_server(_dropping, "127.0.0.1", 0)
        dying = await asyncio.start_server(_dying_decode, "127.0.0.1", 0)
        closed = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        dead = f"127.0.0.1:{closed.sockets[0].getsockname()[1]}"
        closed.close()  # nothing listens there any more
        await closed.wait_closed()
        table = routes.Table(routes={
            "pd": _route("pd", parts["decode"], parts["prefill"]),
            "pd-dead": _route("pd-dead", parts["decode"], dead),
            "pd-reset": _route("pd-reset", parts["decode"], f"127.0.0.1:{dropping.sockets[0].getsockname()[1]}"),
            "pd-decode-dies": _route("pd-decode-dies", f"127.0.0.1:{dying.sockets[0].getsockname()[1]}",
                                     parts["prefill"])})
        dispatcher = Dispatcher()
        dispatcher.synced.set()
        dispatcher.set_table(table)
        servicer = extproc.ExtProc(dispatcher)
        parts["servicer"] = servicer
        pb_grpc.add_ExternalProcessorServicer_to_server(servicer, server)
        ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(xds.Discovery(fastpath.snapshot(table)), server)

        def close() -> None:  # called on the loop as it ends: the engines' sites stop with it
            dropping.close()
            dying.close()
            asyncio.ensure_future(servicer.prefill.close())
            for runner in runners:
                asyncio.ensure_future(runner.cleanup())
        return close

    with envoy_beside(tmp_path_factory.mktemp("pd"), setup, observe=False) as running:
        yield {**parts, "url": f"{running.listen_url}/v1", "running": running}


def _engine_metrics(endpoint: str) -> dict[tuple[str, str], float]:
    """(sample name, source or finished_reason label) -> value, from the engine's /metrics."""
    text = httpx.get(f"http://{endpoint}/metrics", timeout=10).text
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            label = sample.labels.get("source") or sample.labels.get("finished_reason") or ""
            out[(sample.name, label)] = out.get((sample.name, label), 0.0) + sample.value
    return out


PREFILLS = ("vllm:request_success_total", "length")  # a prefill leg ends capped at max_tokens 1
LOADED = ("vllm:prompt_tokens_by_source_total", "external_kv_transfer")
COMPUTED = ("vllm:prompt_tokens_by_source_total", "local_compute")


def _legs(model: str, outcome: str) -> float:
    return metrics.REGISTRY.get_sample_value("shardwise_gateway_prefill_legs_total",
                                             {"model": model, "outcome": outcome}) or 0.0


def _stream(door: dict[str, Any], model: str, content: str) -> tuple[list[dict[str, Any]], int]:
    """The streamed chat chunks and the prompt tokens its usage reports."""
    body = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 12, "stream": True,
            "stream_options": {"include_usage": True}}
    chunks = []
    with httpx.stream("POST", f"{door['url']}/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line.removeprefix("data: ")))
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert usage and usage[-1]["completion_tokens"] == 12
    return chunks, usage[-1]["prompt_tokens"]


def _delta(before: dict, after: dict, key: tuple[str, str]) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_a_long_prompt_prefills_on_the_prefill_engine_and_streams_from_decode_with_the_kv_params(door) -> None:
    p0, d0, prefilled = _engine_metrics(door["prefill"]), _engine_metrics(door["decode"]), _legs("pd", "prefilled")
    chunks, prompt_tokens = _stream(door, "pd", LONG)
    p1, d1 = _engine_metrics(door["prefill"]), _engine_metrics(door["decode"])
    assert len([c for c in chunks if c.get("choices")]) >= 12  # streamed token by token, not one answer
    assert _delta(p0, p1, PREFILLS) == 1  # the prefill leg: one request, ended at its one token
    assert _delta(p0, p1, COMPUTED) == prompt_tokens  # ... which computed the prompt
    assert _delta(d0, d1, LOADED) == prompt_tokens  # the decode leg carried its kv_transfer_params
    assert _delta(d0, d1, COMPUTED) == 0
    assert _legs("pd", "prefilled") == prefilled + 1


def test_short_and_already_sent_prompts_go_straight_to_decode(door) -> None:
    other = "A different report about the storage cluster's latency. " * 40
    _stream(door, "pd", other)  # prefilled there; the decode engine now holds this prompt
    p0, d0 = _engine_metrics(door["prefill"]), _engine_metrics(door["decode"])
    short, cached = _legs("pd", "short"), _legs("pd", "cached")
    _stream(door, "pd", "hello")
    _stream(door, "pd", other + " And the follow-up question?")  # the same conversation, one turn on
    p1, d1 = _engine_metrics(door["prefill"]), _engine_metrics(door["decode"])
    assert _delta(p0, p1, PREFILLS) == 0
    assert _delta(d0, d1, LOADED) == 0 and _delta(d0, d1, COMPUTED) > 0  # decode prefilled both itself
    assert (_legs("pd", "short"), _legs("pd", "cached")) == (short + 1, cached + 1)


@pytest.mark.parametrize("model", ["pd-dead", "pd-reset"])
def test_a_dead_or_dying_prefill_engine_leaves_the_request_to_decode(door, model: str) -> None:
    d0, failed = _engine_metrics(door["decode"]), _legs(model, "failed")
    _, prompt_tokens = _stream(door, model, f"For {model}: " + LONG)  # a prompt the decode engine was never sent
    d1 = _engine_metrics(door["decode"])
    assert _delta(d0, d1, COMPUTED) == prompt_tokens and _delta(d0, d1, LOADED) == 0
    assert _legs(model, "failed") == failed + 1


def test_a_decode_engine_dying_mid_stream_breaks_the_stream_after_what_it_sent(door) -> None:
    """As for any engine today: Envoy has sent the headers, so it cannot answer otherwise; the
    client gets the chunk before and then an error, not a hang or a clean end."""
    p0 = _engine_metrics(door["prefill"])
    body = {"model": "pd-decode-dies", "messages": [{"role": "user", "content": LONG}], "stream": True}
    received = b""
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream("POST", f"{door['url']}/chat/completions", json=body, timeout=60) as response:
            assert response.status_code == 200
            for piece in response.iter_raw():
                received += piece
    assert received == FIRST_CHUNK
    assert _delta(p0, _engine_metrics(door["prefill"]), PREFILLS) == 1  # its prefill leg had happened
