"""Hostile request bodies at the front door (issue 44): an OpenAI error or the engine's own answer,
never a 503 with an empty body, and no traceback in the gateway's log.

First the ext_proc servicer alone (a failure inside it is a 500 in OpenAI's words, counted, its
traceback logged once a minute per signature), then a real Envoy on the rendered bootstrap with the
real servicer, dispatcher, gatekeeper and ADS server in front of a simulated engine, keys off (fast
path on) and keys on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import pathlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import httpx
import pytest
from aiohttp import web
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from shardwise.gateway import metrics
from shardwise.gateway.dataplane import fastpath, xds
from shardwise.gateway.decide import holding, keys, requests, routes
from shardwise.gateway.service import extproc, gatekeeper
from shardwise.gateway.service.dispatcher import Dispatcher
from tests.unit.gateway.envoy_harness import envoy_beside

DEEP = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
NESTED = b"[" * 5000 + b"]" * 5000
NUMERIC = [{"model": "m", "messages": [{"role": "user", "content": 1.0}], "max_tokens": 2},
           {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": 0}]}], "max_tokens": 2}]
TOKEN = "sk-1"


def _headers(*pairs: tuple[str, str]) -> pb.ProcessingRequest:
    return pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=base_pb2.HeaderMap(headers=[
        base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs])))


def _body(raw: bytes) -> pb.ProcessingRequest:
    return pb.ProcessingRequest(request_body=pb.HttpBody(body=raw, end_of_stream=True))


async def _exchange(servicer: extproc.ExtProc, *messages: pb.ProcessingRequest) -> list[pb.ProcessingResponse]:
    async def stream() -> AsyncIterator[pb.ProcessingRequest]:
        for message in messages:
            yield message
    return [response async for response in servicer.Process(stream(), None)]


class Broken(Dispatcher):
    async def choose(self, *args: Any, **kwargs: Any) -> Any:
        raise KeyError("a bug")


def _dispatcher(cls: type[Dispatcher] = Dispatcher, endpoint: str = "10.0.0.1:8000") -> Dispatcher:
    dispatcher = cls(holding.Limits(timeout_s=5), on_wake=lambda route: None)
    dispatcher.synced.set()
    dispatcher.set_table(routes.Table(routes={"m": routes.Route(
        model="m", namespace="ns", name="m", endpoints=(endpoint,), scale_to_zero=False, desired_replicas=1)}))
    return dispatcher


def _errors(exception: str) -> float:
    return metrics.REGISTRY.get_sample_value("shardwise_gateway_internal_errors_total", {"exception": exception}) or 0


CHAT = (":method", "POST"), (":path", "/v1/chat/completions")


def test_a_failure_inside_the_gateway_is_a_500_in_openai_words_counted_and_logged_once_a_minute(caplog) -> None:
    servicer = extproc.ExtProc(_dispatcher(Broken))
    clock = [0.0]
    servicer.tracebacks = extproc.Tracebacks(clock=lambda: clock[0])
    before = _errors("KeyError")
    body = _body(b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}')
    with caplog.at_level(logging.ERROR, logger=extproc.__name__):
        answers = [asyncio.run(_exchange(servicer, _headers(*CHAT, ("x-request-id", f"r{n}")), body))
                   for n in range(3)]
        clock[0] = 61.0
        asyncio.run(_exchange(servicer, _headers(*CHAT), body))
    for n, answer in enumerate(answers):
        immediate = answer[-1].immediate_response
        assert immediate.status.code == 500
        error = json.loads(immediate.body)["error"]
        assert error["type"] == "server_error" and f"r{n}" in error["message"]
        headers = {h.header.key: h.header.raw_value.decode() for h in immediate.headers.set_headers}
        assert headers == {"content-type": "application/json", "x-request-id": f"r{n}"}
    assert _errors("KeyError") - before == 4
    logged = [r for r in caplog.records if r.exc_info]
    assert len(logged) == 2  # the first, then the same signature again only after a minute
    assert "2 more alike" in logged[1].getMessage() and "req_" in logged[1].getMessage()


def test_a_failure_after_the_request_was_routed_sends_nothing_more() -> None:
    class FailsAtTheEnd(Dispatcher):
        def done(self, endpoint: str) -> None:
            super().done(endpoint)
            raise RuntimeError("a bug at the end")

    servicer = extproc.ExtProc(_dispatcher(FailsAtTheEnd))
    before = _errors("RuntimeError")
    answer = asyncio.run(_exchange(servicer, _headers(*CHAT), _body(json.dumps(NUMERIC[1]).encode())))
    assert [a.WhichOneof("response") for a in answer] == ["request_headers", "request_body"]
    assert _errors("RuntimeError") - before == 1


@pytest.mark.parametrize("raw", [DEEP, NESTED, b'{"model": "m", "x": ' + b'{"a": ' * 3000 + b"1" + b"}" * 3000 + b"}",
                                 b'{"model": "m", "x": ' + b"[" * 257 + b"]" * 257 + b"}"])
def test_a_body_nested_too_deep_is_the_documented_400(raw: bytes) -> None:
    refusal = requests.parse_body(raw)
    assert isinstance(refusal, requests.Refusal) and refusal.status == 400
    assert refusal.error["type"] == "invalid_request_error" and "nested" in refusal.error["message"]


def test_a_body_as_deep_as_the_limit_is_read() -> None:
    raw = b'{"model": "m", "x": ' + b"[" * 255 + b"]" * 255 + b"}"  # 256 levels with the object
    assert requests.parse_body(raw)[1] == "m"


# A real Envoy ---------------------------------------------------------------------------------

@contextlib.contextmanager
def _front_door(tmp: pathlib.Path, *, keys_on: bool, dispatcher_cls: type[Dispatcher] = Dispatcher) -> Iterator[str]:
    from shardwise.devcluster.processes import free_port
    from shardwise_runtime.sim.app import build_app
    from shardwise_runtime.sim.config import EngineConfig
    from shardwise_runtime.sim.engine import Engine

    async def setup(server: grpc.aio.Server):
        port = free_port()
        runner = web.AppRunner(build_app(Engine(EngineConfig(host="127.0.0.1", model="m", served_model_names=("m",),
                                                             port=port, ttft_ms=1, itl_ms=1))))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        dispatcher = _dispatcher(dispatcher_cls, endpoint=f"127.0.0.1:{port}")
        gate = None
        if keys_on:
            gate = gatekeeper.Gatekeeper(gatekeeper.AuthSettings())
            secret = keys.slim_secret({"metadata": {"name": "s", "namespace": "n"}, "data": {"key": "c2stMQ=="}})
            gate.set_table(keys.build_table([{"metadata": {"name": "k", "namespace": "n"},
                                              "spec": {"secretName": "s"}}], [secret]))
        pb_grpc.add_ExternalProcessorServicer_to_server(extproc.ExtProc(dispatcher, gate), server)
        fast = not keys_on and dispatcher_cls is Dispatcher
        discovery = xds.Discovery(fastpath.snapshot(dispatcher.table, enabled=fast))
        ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(discovery, server)
        return lambda: asyncio.ensure_future(runner.cleanup())

    with envoy_beside(tmp, setup, observe=False) as running:
        yield f"{running.listen_url}/v1"
        assert "critical" not in running.log().lower(), running.log()[-2000:]


@pytest.mark.parametrize("keys_on", [False, True], ids=["keys-off", "keys-on"])
def test_hostile_bodies_get_an_openai_4xx_or_the_engines_answer_on_a_real_envoy(tmp_path: pathlib.Path,
                                                                                  keys_on: bool, caplog) -> None:
    auth = {"authorization": f"Bearer {TOKEN}"} if keys_on else {}
    with caplog.at_level(logging.WARNING), _front_door(tmp_path, keys_on=keys_on) as url:
        for raw in (DEEP, NESTED):
            response = httpx.post(f"{url}/chat/completions", content=raw,
                                  headers={"content-type": "application/json", **auth}, timeout=30)
            assert response.status_code == 400, response.text
            assert response.headers["content-type"] == "application/json"
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error" and "nested more than" in error["message"]
        for body in NUMERIC:
            response = httpx.post(f"{url}/chat/completions", json=body, headers=auth, timeout=30)
            # The simulated engine, like vLLM's own parser for some shapes, reads text it cannot use
            # as empty and answers; a 4xx must be OpenAI's error object.
            if response.status_code >= 400:
                assert 400 <= response.status_code < 500 and "error" in response.json(), response.text
            else:
                assert response.status_code == 200 and response.json()["object"] == "chat.completion"
        if keys_on:  # the same bodies without a key: the 401, read before the body
            response = httpx.post(f"{url}/chat/completions", content=DEEP, headers={"content-type": "application/json"})
            assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


def test_a_failure_inside_the_gateway_reaches_the_client_as_a_500_in_openai_words(tmp_path: pathlib.Path) -> None:
    with _front_door(tmp_path, keys_on=False, dispatcher_cls=Broken) as url:
        response = httpx.post(f"{url}/chat/completions", json=NUMERIC[0], timeout=30)
    assert response.status_code == 500 and response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["type"] == "server_error" and error["code"] is None
    assert response.headers["x-request-id"] in error["message"]  # Envoy's id, the one its access log has
