"""Hosted providers through a real Envoy: the `openai` client with one base URL and one key reaches
a self-hosted model (the fast path, plain HTTP) and a hosted-only model (Envoy's own TLS to a local
HTTPS server with a CA made by this test: the simulated engine standing in for a provider). The
provider sees its own model id and its own key, never the caller's; the provider's 429 (with its
Retry-After), 500 and a reset mid-stream reach the client as OpenAI-shaped outcomes; the
provider key is nowhere in Envoy's log, stats or config dump, the service's log or its metrics.
"""

from __future__ import annotations

import base64
import logging
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import openai
import prometheus_client
import pytest
from aiohttp import web
from envoy.service.accesslog.v3 import als_pb2_grpc
from envoy.service.cluster.v3 import cds_pb2_grpc
from envoy.service.discovery.v3 import ads_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from shardwise.gateway import metrics
from shardwise.gateway.dataplane import envoy, fastpath, xds
from shardwise.gateway.dataplane import providers as dataplane
from shardwise.gateway.decide import providers, routes
from shardwise.gateway.service import providers as service
from shardwise.gateway.service.dispatcher import Dispatcher
from shardwise.gateway.decide import keys
from shardwise.gateway.service.extproc import ExtProc
from shardwise.gateway.service.gatekeeper import AuthSettings, Gatekeeper
from shardwise.gateway.service.observer import AccessLog, Observer
from shardwise_runtime.sim.app import build_app
from shardwise_runtime.sim.config import EngineConfig
from shardwise_runtime.sim.engine import Engine
from tests.unit.gateway.envoy_harness import envoy_beside
from tests.unit.gateway import fake_provider
from tests.unit.gateway.fake_provider import PROVIDER_KEY, FakeProvider, make_ca

CALLER_KEY = "sk-caller-never-forwarded"
KEY_NAME, KEY_ID = "caller", "team/caller"
AUTH = {"authorization": f"Bearer {CALLER_KEY}"}
HOSTED, UPSTREAM_ID, LOCAL = "hosted-chat", "provider-model-2025", "local-chat"


@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("providers")
    ca, cert, key = make_ca(tmp)
    fake = FakeProvider()
    parts: dict[str, Any] = {"fake": fake}

    async def setup(server: grpc.aio.Server):
        _, provider_port = await fake_provider.start(fake, cert, key, UPSTREAM_ID)
        local_engine = Engine(EngineConfig(host="127.0.0.1", model=LOCAL, served_model_names=(LOCAL,), port=0,
                                           ttft_ms=5, itl_ms=1))
        local_runner = web.AppRunner(build_app(local_engine), access_log=None)
        await local_runner.setup()
        await web.TCPSite(local_runner, "127.0.0.1", 0).start()
        local = f"127.0.0.1:{local_runner.addresses[0][1]}"
        table = routes.Table(routes={LOCAL: routes.Route(model=LOCAL, namespace="team", name=LOCAL, endpoints=(local,),
                                                         scale_to_zero=False, desired_replicas=1)})
        dispatcher = Dispatcher()
        dispatcher.set_table(table)
        dispatcher.synced.set()
        # Keys on: the key id is charged, and must never reach the provider.
        gate = Gatekeeper(AuthSettings(), cost_of=lambda m, p, c, cached: (
            providers.cost_micro_usd(book.price_of(m), p, c, cached) if book.price_of(m) is not None else None))
        key_secret = keys.slim_secret({"metadata": {"namespace": "team", "name": "caller"},
                                       "data": {"key": base64.b64encode(CALLER_KEY.encode()).decode()}})
        gate.set_table(keys.build_table([{"metadata": {"namespace": "team", "name": KEY_NAME},
                                          "spec": {"secretName": "caller"}}], [key_secret]))
        provider = {"metadata": {"namespace": "team", "name": "acme", "creationTimestamp": "2026-12-01T00:00:00Z"},
                    "spec": {"baseURL": f"https://localhost:{provider_port}/v1",
                             "keySecretRef": {"name": "acme-key"}, "maxConcurrentRequests": 8,
                             "tls": {"caBundleSecretRef": {"name": "acme-ca"}},
                             "models": [{"name": HOSTED, "id": UPSTREAM_ID,
                                         "prices": {"input": "2.50", "cachedInput": "0.25", "output": "10"}}]}}
        secrets = [{"metadata": {"namespace": "team", "name": "acme-key"},
                    "data": {"key": base64.b64encode(PROVIDER_KEY.encode()).decode()}},
                   {"metadata": {"namespace": "team", "name": "acme-ca"},
                    "data": {"ca.crt": base64.b64encode(ca.read_bytes()).decode()}}]
        book = service.Book()
        book.set_catalogue(providers.build([provider], secrets, self_hosted=[LOCAL]))
        parts.update(book=book, local=local, provider_port=provider_port, catalogue=book.catalogue)
        pb_grpc.add_ExternalProcessorServicer_to_server(ExtProc(dispatcher, gate, book), server)
        # No fast route: with keys on (and no key table in the snapshot) every request takes the picker.
        ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(
            xds.Discovery(dataplane.with_route(fastpath.snapshot(table, enabled=False))), server)
        cds_pb2_grpc.add_ClusterDiscoveryServiceServicer_to_server(book.cds, server)
        als_pb2_grpc.add_AccessLogServiceServicer_to_server(AccessLog(Observer(gate)), server)

        return lambda: None  # the engines' runners end with the harness's loop

    with envoy_beside(tmp, setup, providers=True) as running:
        parts["running"] = running
        parts["client"] = openai.OpenAI(base_url=f"{running.listen_url}/v1", api_key=CALLER_KEY, max_retries=0,
                                        timeout=30)
        yield parts


def test_one_base_url_and_key_reach_a_self_hosted_and_a_hosted_model(door: dict[str, Any]) -> None:
    client = door["client"]
    assert {HOSTED, LOCAL} <= {m.id for m in client.models.list().data}
    local = client.chat.completions.with_raw_response.create(model=LOCAL, messages=[{"role": "user", "content": "hi"}],
                                                             max_tokens=3)
    assert local.headers["x-gateway-destination-endpoint-served"] == door["local"]
    before = len(door["fake"].seen)
    hosted = client.chat.completions.create(model=HOSTED, messages=[{"role": "user", "content": "hi"}], max_tokens=3)
    assert hosted.choices[0].message.content and hosted.usage.completion_tokens == 3
    seen = door["fake"].seen[before:]
    # exactly one request reached the provider: its own model id, its own key, the base URL's path and host
    assert seen == [{"authorization": f"Bearer {PROVIDER_KEY}", "model": UPSTREAM_ID, "path": "/v1/chat/completions",
                     "host": "localhost"}], seen
    chunks = list(client.chat.completions.create(model=HOSTED, messages=[{"role": "user", "content": "stream"}],
                                                 max_tokens=4, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert all(s["authorization"] != f"Bearer {CALLER_KEY}" for s in door["fake"].seen)


def test_the_provider_429_reaches_the_client_with_its_retry_after(door: dict[str, Any]) -> None:
    with pytest.raises(openai.RateLimitError) as caught:
        door["client"].chat.completions.create(model=HOSTED, messages=[{"role": "user", "content": "fault:429"}])
    assert caught.value.status_code == 429 and caught.value.response.headers["retry-after"] == "7"
    assert caught.value.body["code"] == "rate_limit_exceeded"


def test_the_provider_500_is_an_openai_server_error(door: dict[str, Any]) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        door["client"].chat.completions.create(model=HOSTED, messages=[{"role": "user", "content": "fault:500"}])
    assert caught.value.status_code == 500 and caught.value.body["type"] == "server_error"


def test_a_reset_mid_stream_ends_the_stream_with_an_error_not_a_silent_end(door: dict[str, Any]) -> None:
    got: list[str] = []
    with pytest.raises((openai.APIError, httpx.HTTPError)):
        for chunk in door["client"].chat.completions.create(
                model=HOSTED, messages=[{"role": "user", "content": "fault:reset"}], stream=True):
            got += [c.delta.content or "" for c in chunk.choices]
    assert got == ["par"]  # what came before the reset passed through unbuffered


def test_an_unknown_model_is_still_a_404_and_the_cap_is_a_429(door: dict[str, Any]) -> None:
    with pytest.raises(openai.NotFoundError):
        door["client"].chat.completions.create(model="nobody-serves-this", messages=[{"role": "user", "content": "x"}])
    book, upstream = door["book"], door["catalogue"].upstreams["team/acme"]
    book.in_flight[upstream.id] = upstream.max_concurrent  # as if 8 were in flight
    try:
        with pytest.raises(openai.RateLimitError) as caught:
            door["client"].chat.completions.create(model=HOSTED, messages=[{"role": "user", "content": "x"}])
        assert caught.value.response.headers["retry-after"] == "1" and "team/acme" in caught.value.message
    finally:
        book.in_flight.pop(upstream.id, None)


def test_the_provider_key_is_nowhere_but_at_the_provider(door: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    door["client"].chat.completions.create(model=HOSTED, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    admin = f"http://127.0.0.1:{door['running'].admin_port}"
    places = {
        "envoy log": door["running"].log(),
        "envoy stats": urllib.request.urlopen(f"{admin}/stats?format=prometheus", timeout=5).read().decode(),
        "envoy config dump": urllib.request.urlopen(f"{admin}/config_dump?include_eds", timeout=5).read().decode(),
        "service metrics": prometheus_client.generate_latest().decode(),
        "service log": caplog.text,
        "catalogue repr": repr(door["catalogue"]),
    }
    assert "provider/team/acme" in places["envoy config dump"]  # the cluster is there, its key is not
    for where, text in places.items():
        assert PROVIDER_KEY not in text, where
        assert base64.b64encode(PROVIDER_KEY.encode()).decode() not in text, where


def test_a_client_cannot_pick_the_provider_cluster_itself(door: dict[str, Any]) -> None:
    before = len(door["fake"].seen)
    answer = httpx.post(f"{door['running'].listen_url}/v1/chat/completions", timeout=30,
                        headers={dataplane.PROVIDER_HEADER: "provider/team/acme", **AUTH},
                        json={"model": "nobody-serves-this", "messages": [{"role": "user", "content": "x"}]})
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "model_not_found"
    assert len(door["fake"].seen) == before  # nothing reached the provider


def _closed_port() -> int:
    import socket

    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        return closed.getsockname()[1]


@pytest.mark.parametrize("case", ["closed port", "certificate not trusted"])
def test_a_provider_that_cannot_be_reached_is_an_openai_503_and_its_probe_says_why(door: dict[str, Any],
                                                                                   case: str) -> None:
    port = _closed_port() if case == "closed port" else door["provider_port"]
    # the second trusts the system store, which does not know the test's CA: Envoy refuses the certificate
    down = {"metadata": {"namespace": "team", "name": "down", "creationTimestamp": "2026-12-02T00:00:00Z"},
            "spec": {"baseURL": f"https://localhost:{port}/v1", "keySecretRef": {"name": "acme-key"},
                     "connectTimeoutSeconds": 2, "models": [{"name": "down-model"}]}}
    book, old = door["book"], door["catalogue"]
    secret = {"metadata": {"namespace": "team", "name": "acme-key"},
              "data": {"key": base64.b64encode(PROVIDER_KEY.encode()).decode()}}
    catalogue = providers.build([down], [secret])
    merged = providers.Catalogue({**old.upstreams, **catalogue.upstreams}, {**old.models, **catalogue.models}, {})
    door["running"].loop.call_soon_threadsafe(book.set_catalogue, merged)
    try:
        def answer() -> httpx.Response | None:
            got = httpx.post(f"{door['running'].listen_url}/v1/chat/completions", timeout=30, headers=AUTH,
                             json={"model": "down-model", "messages": [{"role": "user", "content": "x"}]})
            return got if got.status_code != 404 and got.headers.get("content-type") == "application/json" else None
        got = _eventually(answer)
        assert got.status_code == 503, got.text
        assert got.json()["error"]["code"] == "provider_unavailable" and got.json()["error"]["type"] == "server_error"
        import asyncio

        upstream = catalogue.upstreams["team/down"]
        reason, message = asyncio.run_coroutine_threadsafe(
            service.probe(upstream, dataplane.SYSTEM_CA_FILE, 2), door["running"].loop).result(10)
        assert reason == (providers.UNREACHABLE if case == "closed port" else providers.TLS_FAILED), message
        assert PROVIDER_KEY not in message
    finally:
        door["running"].loop.call_soon_threadsafe(book.set_catalogue, old)


def _eventually(probe: Any, timeout: float = 30.0) -> Any:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(0.2)
    raise AssertionError("not within the time")


def _sample(name: str, labels: dict[str, str]) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def _key_figures() -> tuple[float, float, float]:
    return (_sample("shardwise_gateway_requests_total", {"model": HOSTED, "code": "200"}),
            _sample("shardwise_gateway_key_requests_total", {"key": KEY_ID, "model": HOSTED, "code": "200"}),
            _sample("shardwise_gateway_key_cost_usd_total", {"key": KEY_ID}))


@pytest.mark.parametrize("stream", [False, True])
def test_no_header_of_shardwise_nor_the_key_id_reaches_the_provider_and_the_key_is_charged_once(
        door: dict[str, Any], stream: bool) -> None:
    before, seen = _key_figures(), len(door["fake"].headers)
    got = door["client"].chat.completions.create(model=HOSTED, messages=[{"role": "user", "content": "hi"}],
                                                 max_tokens=2, stream=stream)
    if stream:
        got = [c for c in got if c.usage][-1]  # a keyed stream asks the provider for its usage
    assert got.usage.completion_tokens == 2
    requests_before, key_before, cost_before = before
    assert _eventually(lambda: _key_figures()[1] > key_before or None)  # the access log names the model and key
    requests_after, key_after, cost_after = _key_figures()
    assert (requests_after - requests_before, key_after - key_before) == (1, 1)  # counted once
    prices = door["catalogue"].models[HOSTED].prices
    expected = providers.cost_micro_usd(prices, got.usage.prompt_tokens, got.usage.completion_tokens) / 1e6
    assert cost_after - cost_before == pytest.approx(expected, rel=1e-9) and expected > 0
    sent = door["fake"].headers[seen:]
    assert len(sent) == 1
    names = {name.lower() for name in sent[0]}
    internal = {envoy.MODEL_HEADER, envoy.KEY_HEADER, envoy.PROVIDER_HEADER, envoy.DESTINATION_HEADER,
                envoy.MODEL_MATCH_HEADER, envoy.AFFINITY_HEADER}
    assert not {n for n in names if n.startswith(("x-shardwise", "x-gateway"))} | (names & internal), sent[0]
    for value in sent[0].values():  # nor anywhere in a value: the key id, the alias, the cluster's name
        assert KEY_ID not in value and HOSTED not in value and "provider/team/acme" not in value, sent[0]


def test_cached_prompt_tokens_are_charged_at_the_cached_input_price(door: dict[str, Any]) -> None:
    before = _key_figures()
    door["client"].chat.completions.create(model=HOSTED, messages=[{"role": "user", "content": "usage:cached"}])
    assert _eventually(lambda: _key_figures()[1] > before[1] or None)
    after = _key_figures()
    prompt, completion, cached = fake_provider.CACHED_USAGE
    prices = door["catalogue"].models[HOSTED].prices
    expected = providers.cost_micro_usd(prices, prompt, completion, cached) / 1e6
    assert expected < providers.cost_micro_usd(prices, prompt, completion) / 1e6  # the cache discount applies
    assert (after[1] - before[1], after[2] - before[2]) == (1, pytest.approx(expected, rel=1e-9))
