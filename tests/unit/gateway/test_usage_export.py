"""Usage records leave through a real Envoy (issue 43): the rendered bootstrap with the observe
filter and its access log, the real route service (picker, keys, the keyed fast path over ADS), a
simulated engine, a raw engine that answers a 400 or breaks its stream, and two real local HTTP
receivers the test runs (the webhook sinks' far ends) plus the stdout sink.

A mixed run (keyed fast path and picker, JSON and streams, an engine's 400, a broken stream):
every request arrives once by its record id at the roomy receiver and on stdout (two that reuse a client's
x-request-id included) and on stdout, every delivery's
signature verifies, the records' tokens and cost per key equal what the key was charged, and no
key is in any delivery. Then the receivers answer 503 for a while: the one with room loses
nothing once it answers again; the one with a buffer of 2 keeps 2 and counts the rest dropped.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from aiohttp import web
from envoy.service.accesslog.v3 import als_pb2_grpc
from envoy.service.discovery.v3 import ads_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from shardwise.gateway import metrics
from shardwise.gateway.dataplane import fastpath, keys_lua, observe_lua, xds
from shardwise.gateway.decide import holding, keys, records, routes
from shardwise.gateway.service import export, extproc, gatekeeper
from shardwise.gateway.service.dispatcher import Dispatcher
from shardwise.gateway.service.observer import AccessLog, Observer
from tests.unit.gateway.envoy_harness import envoy_beside

OPEN = "sk-usage-open-" + "a" * 40  # no limits: the keyed fast path (Envoy alone)
LIMITED = "sk-usage-limited-" + "b" * 40  # a requests limit: the picker
TINY = "sk-usage-tiny-" + "c" * 40  # one request a minute: the second is the key's own 429
SECRET = b"whsec-test-0123456789"
PRICE = 2.0  # $ per 1M completion tokens, both deployments
BROKEN_AFTER = 40  # content events the raw engine streams before it breaks


def _table() -> keys.KeyTable:
    return keys.KeyTable(by_hash={keys.hash_key(OPEN): keys.Key(id="team/open", models=frozenset()),
                                  keys.hash_key(LIMITED): keys.Key(id="team/limited", models=frozenset(),
                                                                   requests_per_minute=10000),
                                  keys.hash_key(TINY): keys.Key(id="team/tiny", models=frozenset(),
                                                                requests_per_minute=1)}, problems={})


async def _edge_engine(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """An engine that refuses `bad` with a 400 and breaks a stream after BROKEN_AFTER events."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            body = json.loads(await reader.readexactly(int(headers.get("content-length", "0"))))
            if "bad" in body["messages"][0]["content"]:
                reply = b'{"error":{"message":"bad request","type":"invalid_request_error","code":null}}'
                writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n%s" % (len(reply), reply))
                await writer.drain()
                continue
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            events = [b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'] + [
                b'data: {"choices":[{"delta":{"content":"w%d"}}]}\n\n' % i for i in range(BROKEN_AFTER)]
            for event in events:
                writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                await writer.drain()
            await asyncio.sleep(0.05)
            writer.transport.abort()
            return
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


class Receiver:
    """A webhook's far end: verifies each delivery's signature, keeps its body; 503 while down."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.down = False
        self.unsigned = 0
        self.refused = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.down:
            self.refused += 1
            return web.Response(status=503)
        if not records.verify(SECRET, request.headers.get(records.SIGNATURE_HEADER, ""), body, int(time.time())):
            self.unsigned += 1
            return web.Response(status=401)
        self.bodies.append(body)
        return web.Response(status=200)

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for body in self.bodies for line in body.splitlines()]

    def by_id(self) -> dict[str, dict[str, Any]]:
        return {r["id"]: r for r in self.records()}


@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from shardwise_runtime.sim.app import build_app
    from shardwise_runtime.sim.config import EngineConfig
    from shardwise_runtime.sim.engine import Engine

    parts: dict[str, Any] = {"roomy": Receiver(), "tight": Receiver(), "stdout": io.StringIO()}

    async def setup(server: grpc.aio.Server):
        engine = web.AppRunner(build_app(Engine(EngineConfig(host="127.0.0.1", model="m", served_model_names=("m",),
                                                             port=0, ttft_ms=1, itl_ms=1))), access_log=None)
        await engine.setup()
        await web.TCPSite(engine, "127.0.0.1", 0).start()
        edge = await asyncio.start_server(_edge_engine, "127.0.0.1", 0)
        sim, raw = f"127.0.0.1:{engine.addresses[0][1]}", f"127.0.0.1:{edge.sockets[0].getsockname()[1]}"
        table = routes.Table(routes={
            model: routes.Route(model=model, namespace="team", name=model, endpoints=(endpoint,), scale_to_zero=False,
                                desired_replicas=1, usd_per_million_output_tokens=PRICE)
            for model, endpoint in (("m", sim), ("edge", raw))})
        dispatcher = Dispatcher(holding.Limits(timeout_s=5), on_wake=lambda route: None)
        dispatcher.synced.set()
        dispatcher.set_table(table)
        price_of = (lambda model: table.routes[model].usd_per_million_output_tokens if model in table.routes else None)
        gate = gatekeeper.Gatekeeper(gatekeeper.AuthSettings(), price_of=price_of)
        gate.set_table(_table())
        urls = {}
        for name in ("roomy", "tight"):
            app = web.Application()
            app.router.add_post("/usage", parts[name].handle)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            urls[name] = f"http://127.0.0.1:{runner.addresses[0][1]}/usage"
        fast = dict(flush_interval_s=0.05, backoff_base_s=0.05, backoff_cap_s=0.3, batch=4)
        sinks = [export.StdoutSink(parts["stdout"]),
                 export.WebhookSink(export.WebhookSettings(urls["roomy"], secret=SECRET, buffer=1000, **fast)),
                 export.WebhookSink(export.WebhookSettings(urls["tight"], secret=SECRET, buffer=2, **fast))]
        usage = export.Export(sinks, price_of=price_of,
                              served_of=lambda model, endpoint: records.Served(records.ENGINE, endpoint or "", "team"))
        tasks = usage.tasks()
        parts.update(gate=gate, sinks=sinks, endpoints={"m": sim, "edge": raw})
        pb_grpc.add_ExternalProcessorServicer_to_server(extproc.ExtProc(dispatcher, gate, on_answered=usage.answered), server)
        ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(
            xds.Discovery(fastpath.snapshot(table, keyed=keys_lua.metadata(gate.table))), server)
        als_pb2_grpc.add_AccessLogServiceServicer_to_server(AccessLog(Observer(gate, usage)), server)

        def close() -> None:
            for task in tasks:
                task.cancel()
            edge.close()
        return close

    with envoy_beside(tmp_path_factory.mktemp("usage"), setup, observe_flush_s=0.05) as running:
        parts["url"] = f"{running.listen_url}/v1"
        yield parts


def _send(door: dict[str, Any], token: str, model: str, content: str, *, stream: bool = False,
          request_id: str | None = None) -> int:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 5}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    try:
        with httpx.stream("POST", f"{door['url']}/chat/completions", json=body,
                          headers={"authorization": f"Bearer {token}",
                                   **({"x-request-id": request_id} if request_id else {})}, timeout=30) as response:
            response.read()
            return response.status_code
    except httpx.RemoteProtocolError:
        return -1  # the broken stream


def _wait(what: str, done: Any, limit_s: float = 30.0) -> None:
    deadline = time.monotonic() + limit_s
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _dropped(sink: export.WebhookSink) -> float:
    return metrics.REGISTRY.get_sample_value("shardwise_gateway_usage_dropped_total",
                                             {"sink": sink.name, "reason": "buffer_full"}) or 0


def _stdout_ids(door: dict[str, Any]) -> list[str]:
    return [json.loads(line)["usage"]["id"] for line in door["stdout"].getvalue().splitlines()]


def test_a_mixed_run_arrives_once_signed_and_adds_up_to_the_keys_charges(door: dict[str, Any]) -> None:
    sent = [(OPEN, "m", "hello", False), (OPEN, "m", "again", False), (OPEN, "m", "streamed", True),
            (LIMITED, "m", "picker", False), (LIMITED, "m", "picker stream", True),
            (OPEN, "edge", "bad", False), (LIMITED, "edge", "bad", False), (OPEN, "edge", "break", True)]
    tight_sink = door["sinks"][2]
    dropped_before = _dropped(tight_sink)
    codes = [_send(door, *case[:3], stream=case[3]) for case in sent]
    assert codes == [200, 200, 200, 200, 200, 400, 400, -1], codes
    # A client's own x-request-id, twice: Envoy passes it on, so it cannot be the idempotency key.
    sent += [(OPEN, "m", "mine", False)] * 2
    assert [_send(door, OPEN, "m", "mine", request_id="client-chosen") for _ in range(2)] == [200, 200]
    roomy, tight = door["roomy"], door["tight"]
    _wait("every request's record at the roomy receiver", lambda: len(roomy.by_id()) >= len(sent))
    # The tight one (room for 2) may drop some of an access-log flush's burst even while it answers.
    _wait("at the tight one, delivered or counted dropped",
          lambda: len(tight.by_id()) + _dropped(tight_sink) - dropped_before >= len(sent))
    got = roomy.records()
    ids = [r["id"] for r in got]
    assert len(ids) == len(set(ids)) == len(sent) and all(ids), ids  # once each: no receiver was down
    assert len({r["request_id"] for r in got}) == len(sent) - 1  # Envoy's ids, the client's one twice
    assert set(tight.by_id()) <= set(ids) and len(tight.bodies) == len({b for b in tight.bodies})
    assert sorted(_stdout_ids(door)) == sorted(ids)
    assert roomy.unsigned == tight.unsigned == 0
    assert {(r["key_id"], r["model"], r["status"], r["error_type"]) for r in got} == {
        ("team/open", "m", 200, None), ("team/limited", "m", 200, None), ("team/open", "edge", 400,
        "invalid_request_error"), ("team/limited", "edge", 400, "invalid_request_error"),
        ("team/open", "edge", 200, "stream_broken")}
    broken = next(r for r in got if r["error_type"] == "stream_broken")
    # what it streamed, as the observe filter counts it (written every EVENTS_STEP events)
    assert BROKEN_AFTER - observe_lua.EVENTS_STEP < broken["completion_tokens"] <= BROKEN_AFTER, broken
    assert broken["stream"] and not broken["complete"]
    for r in got:
        assert r["version"] == records.SCHEMA_VERSION and r["namespace"] == "team"
        assert r["served_by"] == {"kind": "engine", "name": door["endpoints"][r["model"]]}, r
        if r["error_type"] is None:
            assert r["prompt_tokens"] > 0 and r["completion_tokens"] > 0 and r["ttft_s"] is not None
            assert r["duration_s"] >= r["ttft_s"]
    # The records add up to what each key was charged (tokens and micro-USD).
    charged = door["gate"].pending
    for key_id in ("team/open", "team/limited"):
        mine = [r for r in got if r["key_id"] == key_id]
        assert sum(r["prompt_tokens"] for r in mine) == charged[key_id].prompt
        assert sum(r["completion_tokens"] for r in mine) == charged[key_id].completion > 0
        assert round(sum(r["cost_usd"] for r in mine) * 1e6) == charged[key_id].cost_micro_usd > 0
    # No key anywhere in what left (the ids are there, the tokens are not).
    left = b"".join(roomy.bodies + tight.bodies) + door["stdout"].getvalue().encode()
    assert b"team/open" in left
    for token in (OPEN, LIMITED, OPEN[:16], keys.hash_key(OPEN)):
        assert token.encode() not in left


def test_a_receiver_away_loses_nothing_within_the_buffer_and_counts_the_rest(door: dict[str, Any]) -> None:
    roomy, tight = door["roomy"], door["tight"]
    _, roomy_sink, tight_sink = door["sinks"]
    _wait("the first test's records all delivered", lambda: not roomy_sink.buffer and not tight_sink.buffer)
    before_ids, tight_before = set(roomy.by_id()), set(tight.by_id())
    dropped_before = _dropped(tight_sink)
    roomy.down = tight.down = True
    count = 7
    for index in range(count):
        assert _send(door, OPEN, "m", f"while away {index}") == 200
    _wait("every record of the outage buffered or dropped",
          lambda: len(roomy_sink.buffer) == count and len(tight_sink.buffer) == 2)
    _wait("the receivers were tried while away", lambda: roomy.refused > 0 and tight.refused > 0)
    assert _dropped(tight_sink) - dropped_before == count - 2
    assert _dropped(roomy_sink) == 0
    roomy.down = tight.down = False
    _wait("the outage's records delivered once the receivers answer",
          lambda: len(set(roomy.by_id()) - before_ids) == count and not roomy_sink.buffer and not tight_sink.buffer)
    assert len(set(tight.by_id()) - tight_before) == 2  # the two it had room for, the rest counted above
    assert len(_stdout_ids(door)) == len(set(_stdout_ids(door))) == len(before_ids) + count  # stdout never waits


def _post_raw(door: dict[str, Any], body: bytes, token: str | None) -> tuple[int, str]:
    """One request; (status, Envoy's x-request-id for it, which the test sets to find its record)."""
    request_id = f"refused-{time.monotonic_ns()}"
    headers = {"content-type": "application/json", "x-request-id": request_id,
               **({"authorization": f"Bearer {token}"} if token else {})}
    response = httpx.post(f"{door['url']}/chat/completions", content=body, headers=headers, timeout=30)
    return response.status_code, request_id


def test_the_gateways_own_answers_have_one_record_each(door: dict[str, Any]) -> None:
    """No key, an unknown key, an unknown model, a key's own 429, a hostile body: answered by the
    route filter without an engine, each is one record (status, error type, the key's id once
    known, zero tokens), and the access log adds none of its own."""
    roomy, roomy_sink = door["roomy"], door["sinks"][1]
    _wait("earlier records delivered", lambda: not roomy_sink.buffer)
    before = set(roomy.by_id())
    good = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
    unknown = json.dumps({"model": "nope", "messages": [{"role": "user", "content": "hi"}]}).encode()
    cases = [(good, None), (good, "sk-usage-unknown-" + "d" * 40), (unknown, OPEN), (good, TINY), (good, TINY),
             (b'{"model": "m", "messages": [', OPEN)]
    answers = [_post_raw(door, body, token) for body, token in cases]
    assert [status for status, _ in answers] == [401, 401, 404, 200, 429, 400], answers
    _wait("a record for every request", lambda: len(set(roomy.by_id()) - before) >= len(cases))
    _wait("nothing more on its way", lambda: not roomy_sink.buffer)
    new = [r for r in roomy.records() if r["id"] not in before]
    by_request = {r["request_id"]: r for r in new}
    assert len(new) == len(by_request) == len(cases), new  # once each
    expected = [(401, "authentication_error", None, ""), (401, "authentication_error", None, ""),
                (404, "not_found_error", "team/open", "nope"), (200, None, "team/tiny", "m"),
                (429, "rate_limit_exceeded", "team/tiny", "m"), (400, "invalid_request_error", "team/open", "")]
    for (status, request_id), (want_status, want_type, want_key, want_model) in zip(answers, expected):
        record = by_request[request_id]
        assert (record["status"], record["error_type"], record["key_id"], record["model"]) == (
            want_status, want_type, want_key, want_model), record
        if status >= 400:
            assert record["served_by"] == {"kind": "gateway", "name": "shardwise"}, record
            assert record["prompt_tokens"] == record["completion_tokens"] == 0 and record["cost_usd"] == 0
            assert "error_code" in record, record
    assert by_request[answers[4][1]]["error_code"] == "rate_limit_exceeded"
    assert by_request[answers[0][1]]["error_code"] == "invalid_api_key"
    left = b"".join(roomy.bodies)
    for token in (OPEN, TINY, "sk-usage-unknown-"):
        assert token.encode() not in left
