"""The fast path: the routes and endpoints Envoy is sent (pure), then a real Envoy fed over ADS.

The real Envoy runs the rendered bootstrap with the service's real `Discovery` servicer; a
stand-in route service (ext_proc) counts the requests that cross into it and routes them to a
recording upstream, as the slow path does. The fast path must carry a known model's requests
without one ext_proc call, hash conversations that share a start alike, refuse a client's own
routing headers, and follow a new snapshot; Envoy must refuse (NACK) none of it. Routes Envoy does
refuse leave it running the last good ones, are not sent again, and a fixed snapshot is taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import pathlib
import time
from collections.abc import AsyncIterator, Iterator

import grpc
import httpx
import pytest
from envoy.service.discovery.v3 import ads_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from shardwise.gateway import metrics
from shardwise.gateway.dataplane import envoy, fastpath, keys_lua, xds
from shardwise.gateway.decide import routes
from shardwise.gateway.dataplane import extproc_messages
from tests.unit.gateway.envoy_harness import envoy_beside


def _route(model: str, endpoints: tuple[str, ...], **extra) -> routes.Route:
    return routes.Route(model=model, namespace="ns", name=model, endpoints=endpoints, scale_to_zero=False,
                        desired_replicas=len(endpoints), **extra)


TABLE = routes.Table(routes={
    "llama": _route("llama", ("10.0.0.1:8000", "10.0.0.2:8000")),
    "sql-lora": _route("sql-lora", ("10.0.0.2:8000",), base="llama"),
    "asleep": _route("asleep", ()),
})


def _routes(snapshot: fastpath.Snapshot) -> list[dict]:
    (vhost,) = snapshot.route_config["virtual_hosts"]
    return vhost["routes"]


def test_a_model_with_endpoints_gets_a_route_per_openai_path_and_the_picker_takes_the_rest() -> None:
    snapshot = fastpath.snapshot(TABLE)
    found = _routes(snapshot)
    assert [r["name"] for r in found] == [f"{m}{p}" for m in ("llama", "sql-lora") for p in fastpath.ROUTED_PATHS] \
        + ["picker"]
    assert snapshot.models == ("llama", "sql-lora")
    llama = found[0]
    assert llama["match"]["path"] == "/v1/chat/completions"
    assert {h["name"]: h["string_match"]["exact"] for h in llama["match"]["headers"]} == {
        ":method": "POST", envoy.MODEL_MATCH_HEADER: "llama"}
    assert llama["route"]["cluster"] == envoy.FAST_CLUSTER
    assert llama["route"]["metadata_match"] == {"filter_metadata": {"envoy.lb": {"model": "llama"}}}
    assert llama["route"]["hash_policy"] == [{"header": {"header_name": envoy.AFFINITY_HEADER}}]
    assert llama["typed_per_filter_config"][envoy.ROUTE_FILTER]["disabled"] is True
    assert llama["request_headers_to_add"][0]["header"] == {"key": envoy.MODEL_HEADER, "value": "llama"}
    # a held model, an unknown one, a bad body: the picker; keys off, so the keys filter is off there
    assert {k: v for k, v in found[-1].items() if k != "typed_per_filter_config"} == envoy.slow_route()
    assert found[-1]["typed_per_filter_config"][keys_lua.FILTER]["disabled"] is True


def test_each_endpoint_lists_every_model_it_serves() -> None:
    (locality,) = fastpath.snapshot(TABLE).endpoints["endpoints"]
    served = {e["endpoint"]["address"]["socket_address"]["address"]: e["metadata"]["filter_metadata"]["envoy.lb"]["model"]
              for e in locality["lb_endpoints"]}
    assert served == {"10.0.0.1": ["llama"], "10.0.0.2": ["llama", "sql-lora"]}


def test_with_keys_the_fast_routes_need_the_key_filters_verdict_and_the_picker_route_carries_the_table() -> None:
    keyed = {keys_lua.MARK: True, "ab" * 32: {"id": "ns/k"}}
    found = _routes(fastpath.snapshot(TABLE, keyed=keyed))
    llama = found[0]
    assert {"name": envoy.KEY_HEADER, "present_match": True} in llama["match"]["headers"]
    assert llama["request_headers_to_remove"] == ["authorization"]
    assert found[-1]["metadata"] == {"filter_metadata": {keys_lua.FILTER: keyed}}
    assert "typed_per_filter_config" not in found[-1]  # the keys filter runs there
    for resource in (fastpath.snapshot(TABLE, keyed=keyed).route_config,):
        xds.resource_of(xds.ROUTES, resource)  # Envoy's protos take it


def test_turned_off_every_request_takes_the_picker() -> None:
    snapshot = fastpath.snapshot(TABLE, enabled=False)
    assert [r["name"] for r in _routes(snapshot)] == ["picker"]
    assert snapshot.endpoints == {"cluster_name": envoy.FAST_CLUSTER, "endpoints": []}
    assert snapshot.models == ()


def test_the_version_follows_the_content_only() -> None:
    assert fastpath.snapshot(TABLE).version == fastpath.snapshot(TABLE).version
    fewer = routes.Table(routes={k: v for k, v in TABLE.routes.items() if k != "sql-lora"})
    assert fastpath.snapshot(fewer).version != fastpath.snapshot(TABLE).version


def _served_by(endpoints: dict) -> dict[str, list[str]]:
    return {e["endpoint"]["address"]["socket_address"]["address"]: e["metadata"]["filter_metadata"]["envoy.lb"]["model"]
            for locality in endpoints["endpoints"] for e in locality["lb_endpoints"]}


def _sent(snapshot: fastpath.Snapshot) -> dict[str, str]:
    return {xds.ROUTES: fastpath.version_of(snapshot.route_config),
            xds.ENDPOINTS: fastpath.version_of(snapshot.endpoints)}


def test_new_routes_go_out_between_a_bridge_and_their_endpoints() -> None:
    both = {xds.ROUTES, xds.ENDPOINTS}
    old = fastpath.snapshot(routes.Table(routes={"gone": _route("gone", ("10.0.0.9:8000",))}))
    new = fastpath.snapshot(TABLE)
    steps = xds.plan(new, both, _sent(old), old.endpoints)
    assert [t for t, _ in steps] == [xds.ENDPOINTS, xds.ROUTES, xds.ENDPOINTS]
    # while the old routes or the new ones run, every model they name has its endpoints
    assert _served_by(steps[0][1]) == {"10.0.0.1": ["llama"], "10.0.0.2": ["llama", "sql-lora"], "10.0.0.9": ["gone"]}
    assert steps[1][1] == new.route_config and steps[2][1] == new.endpoints
    for resource in (r for _, r in steps):
        xds.resource_of(xds.ENDPOINTS if "cluster_name" in resource else xds.ROUTES, resource)  # Envoy's protos
    # models only gaining endpoints: the bridge is the new endpoints, sent once, before the routes
    fewer = fastpath.snapshot(routes.Table(routes={"llama": TABLE.routes["llama"]}))
    steps = xds.plan(new, both, _sent(fewer), fewer.endpoints)
    assert [(t, r) for t, r in steps] == [(xds.ENDPOINTS, new.endpoints), (xds.ROUTES, new.route_config)]


def test_nothing_is_sent_again_and_nothing_unasked() -> None:
    snapshot = fastpath.snapshot(TABLE)
    assert xds.plan(snapshot, {xds.ROUTES, xds.ENDPOINTS}, _sent(snapshot), snapshot.endpoints) == []
    assert xds.plan(snapshot, {xds.ENDPOINTS}, {}, None) == [(xds.ENDPOINTS, snapshot.endpoints)]
    assert xds.plan(snapshot, set(), {}, None) == []


# -- a real Envoy -----------------------------------------------------------------------------------

class CountingRoute(pb_grpc.ExternalProcessorServicer):
    """The slow path's stand-in: counts its streams and sends each request to the upstream."""

    def __init__(self, upstream: str) -> None:
        self.upstream, self.streams = upstream, 0

    async def Process(self, request_iterator: AsyncIterator[pb.ProcessingRequest], context) -> AsyncIterator:  # noqa: N802
        self.streams += 1
        stream = aiter(request_iterator)
        if await anext(stream, None) is None:
            return
        yield pb.ProcessingResponse(request_headers=pb.HeadersResponse())
        if await anext(stream, None) is None:
            return
        yield extproc_messages.routed(self.upstream, "slow")
        async for _ in stream:
            pass


SLOW_STREAM, STREAM_EVENTS = b"slow-stream", 60


class Upstream:
    """An engine stand-in: answers every request with a JSON body and keeps the headers it got; a
    request that says SLOW_STREAM gets an event stream instead, STREAM_EVENTS events 0.1 s apart."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        self.streamed_until = 0.0  # when its last slow stream ended (monotonic)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                request = await reader.readexactly(int(headers.get("content-length", "0")))
                self.seen.append(headers)
                if SLOW_STREAM in request:  # an event every 0.1 s for STREAM_EVENTS events
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                                 b"transfer-encoding: chunked\r\n\r\n")
                    for index in range(STREAM_EVENTS):
                        event = b"data: %d\n\n" % index
                        writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                        await writer.drain()
                        await asyncio.sleep(0.1)
                    writer.write(b"0\r\n\r\n")
                    await writer.drain()
                    self.streamed_until = time.monotonic()
                    continue
                body = b'{"object":"chat.completion","choices":[]}'
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@contextlib.contextmanager
def _fast_door(tmp: pathlib.Path) -> Iterator[dict]:
    """Envoy fed by a real `Discovery` with one model on the fast path, the upstream and the route."""
    upstream = Upstream()
    parts: dict[str, object] = {}

    async def setup(server: grpc.aio.Server):
        server_socket = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
        address = f"127.0.0.1:{server_socket.sockets[0].getsockname()[1]}"
        table = routes.Table(routes={"fast-model": _route("fast-model", (address,))})
        parts["address"], parts["route"] = address, CountingRoute(address)
        parts["discovery"] = xds.Discovery(fastpath.snapshot(table))
        pb_grpc.add_ExternalProcessorServicer_to_server(parts["route"], server)
        ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(parts["discovery"], server)
        return server_socket.close

    with envoy_beside(tmp, setup, observe=False) as running:
        yield {"url": f"{running.listen_url}/v1", "upstream": upstream, "loop": running.loop, "running": running,
               **parts}


@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory):
    with _fast_door(tmp_path_factory.mktemp("fastpath")) as parts:
        yield parts
        assert _rejections(parts) == 0, parts["running"].log()[-2000:]
        assert "lua" not in parts["running"].log().lower()  # the match script never failed


def _chat(door: dict, model: str, system: str, user: str, **headers: str) -> dict[str, str]:
    body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}], "model": model}
    response = httpx.post(f"{door['url']}/chat/completions", json=body, headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    return door["upstream"].seen[-1]


def test_a_known_model_is_routed_by_envoy_alone(door: dict) -> None:
    before = door["route"].streams
    seen = _chat(door, "fast-model", "You are terse. " * 30, "hello")
    assert door["route"].streams == before  # no ext_proc stream at all
    assert seen[envoy.MODEL_HEADER] == "fast-model"  # what the observer counts it under


def test_every_response_an_engine_gave_names_it_fast_path_and_picker_streams_or_not(door: dict) -> None:
    before = door["route"].streams
    for model, picked in (("fast-model", 0), ("no-such-model", 1)):
        answer = httpx.post(f"{door['url']}/chat/completions", json={"model": model, "messages": []}, timeout=10)
        assert answer.status_code == 200 and answer.headers[envoy.SERVED_HEADER] == door["address"]
        with httpx.stream("POST", f"{door['url']}/chat/completions", timeout=30,
                          json={"model": model, "prompt": SLOW_STREAM.decode(), "stream": True}) as stream:
            assert stream.headers["content-type"] == "text/event-stream"
            assert stream.headers[envoy.SERVED_HEADER] == door["address"]
            stream.read()
        assert door["route"].streams == before + 2 * picked  # fast path: no ext_proc stream
    # a response no engine gave (Envoy's own 413) names none
    too_large = httpx.post(f"{door['url']}/chat/completions", content=b"x" * (5 * 1024 * 1024),
                           headers={"content-type": "application/json"}, timeout=30)
    assert too_large.status_code == 413 and envoy.SERVED_HEADER not in too_large.headers


def test_a_conversation_hashes_alike_turn_after_turn(door: dict) -> None:
    system = "You answer questions about one long document. " * 10  # longer than the hashed window
    first = _chat(door, "fast-model", system, "first question")[envoy.AFFINITY_HEADER]
    again = _chat(door, "fast-model", system, "a different later question")[envoy.AFFINITY_HEADER]
    other = _chat(door, "fast-model", "Another conversation entirely. " * 10, "first question")[envoy.AFFINITY_HEADER]
    assert first == again != other
    assert len(first) == 8 and int(first, 16) >= 0


def test_a_clients_own_routing_headers_are_ignored(door: dict) -> None:
    before = door["route"].streams
    # an unknown model dressed as the fast one takes the picker's route all the same
    seen = _chat(door, "no-such-model", "x", "y", **{envoy.MODEL_MATCH_HEADER: "fast-model",
                                                    envoy.AFFINITY_HEADER: "deadbeef"})
    assert door["route"].streams == before + 1
    assert seen[envoy.MODEL_HEADER] == "slow" and seen[envoy.AFFINITY_HEADER] != "deadbeef"  # its own hash
    # and a body that is not JSON, or has no model, too
    response = httpx.post(f"{door['url']}/chat/completions", content=b"not json",
                          headers={"content-type": "application/json", envoy.MODEL_MATCH_HEADER: "fast-model"})
    assert response.status_code == 200 and door["route"].streams == before + 2
    # a model no header can carry: the picker's route, not a broken request
    seen = _chat(door, "fast-model\r\nx-evil: 1", "s", "u")
    assert door["route"].streams == before + 3 and "x-evil" not in seen


def test_envoy_follows_a_new_snapshot(door: dict) -> None:
    table = routes.Table(routes={"fast-model": _route("fast-model", (door["address"],)),
                                 "new-model": _route("new-model", (door["address"],))})
    door["loop"].call_soon_threadsafe(door["discovery"].update, fastpath.snapshot(table))
    deadline = time.monotonic() + 30
    while True:
        before = door["route"].streams
        _chat(door, "new-model", "s", "u")
        if door["route"].streams == before:
            break  # Envoy routed it: it runs the new routes
        assert time.monotonic() < deadline, "Envoy never took the new snapshot"
        time.sleep(0.2)


def _update(door: dict, snapshot: fastpath.Snapshot) -> None:
    door["loop"].call_soon_threadsafe(door["discovery"].update, snapshot)


def _routed_by_envoy(door: dict, model: str) -> bool:
    before = door["route"].streams
    _chat(door, model, "s", "u")
    return door["route"].streams == before


def _rejections(door: dict) -> int:
    """The routes and endpoints this Envoy refused (its RDS and EDS `update_rejected` counters)."""
    stats = httpx.get(f"http://127.0.0.1:{door['running'].admin_port}/stats?filter=update_rejected",
                      timeout=5).text
    return sum(int(line.rsplit(" ", 1)[1]) for line in stats.splitlines() if line.strip())


def test_routes_envoy_refuses_leave_it_on_the_last_good_ones_and_are_not_sent_again(tmp_path) -> None:
    with _fast_door(tmp_path) as door:
        rejected = metrics.XDS_REJECTED._value.get()
        table = routes.Table(routes={"fast-model": _route("fast-model", (door["address"],)),
                                     "new-model": _route("new-model", (door["address"],))})
        bad = fastpath.snapshot(table)
        bad = fastpath.Snapshot(copy.deepcopy(bad.route_config), bad.endpoints, bad.models)
        # A regex RE2 cannot compile: the proto is valid (the service sends it), Envoy refuses it.
        _routes(bad)[0]["match"] = {"safe_regex": {"regex": "(unclosed"}}
        _update(door, bad)
        deadline = time.monotonic() + 30
        while metrics.XDS_REJECTED._value.get() == rejected:
            assert time.monotonic() < deadline, "Envoy never answered the bad routes"
            time.sleep(0.05)
        assert _routed_by_envoy(door, "fast-model")  # the routes it had still run
        assert not _routed_by_envoy(door, "new-model")  # the refused ones do not
        _update(door, fastpath.snapshot(table))  # fixed: taken as usual
        deadline = time.monotonic() + 30
        while not _routed_by_envoy(door, "new-model"):
            assert time.monotonic() < deadline, "Envoy never took the fixed routes"
            time.sleep(0.2)
        # Refused once: the service did not send the refused version again while it stood.
        assert metrics.XDS_REJECTED._value.get() == rejected + 1
        assert _rejections(door) == 1


# -- engines spared for their queues (overload.py) ---------------------------------------------------

def test_a_spared_engine_leaves_the_models_subset_and_stays_in_the_cluster() -> None:
    spared = fastpath.snapshot(TABLE, spared=frozenset({("llama", "10.0.0.2:8000")}))
    assert _served_by(spared.endpoints) == {"10.0.0.1": ["llama"], "10.0.0.2": ["sql-lora"]}
    assert spared.route_config == fastpath.snapshot(TABLE).route_config  # only the endpoints change
    assert spared.version != fastpath.snapshot(TABLE).version
    xds.resource_of(xds.ENDPOINTS, spared.endpoints)  # Envoy's proto takes it
    both = fastpath.snapshot(TABLE, spared=frozenset({("llama", "10.0.0.2:8000"), ("sql-lora", "10.0.0.2:8000")}))
    assert _served_by(both.endpoints) == {"10.0.0.1": ["llama"], "10.0.0.2": []}
    xds.resource_of(xds.ENDPOINTS, both.endpoints)
    # Sparing changes no route: a stream is sent the endpoints alone, no bridge.
    assert xds.plan(spared, {xds.ROUTES, xds.ENDPOINTS}, _sent(fastpath.snapshot(TABLE)),
                    fastpath.snapshot(TABLE).endpoints) == [(xds.ENDPOINTS, spared.endpoints)]


@contextlib.contextmanager
def _four_engine_door(tmp: pathlib.Path) -> Iterator[dict]:
    """Envoy fed by a real `Discovery`: one model on four engines, each an Upstream of its own."""
    upstreams = [Upstream() for _ in range(4)]
    parts: dict[str, object] = {}

    async def setup(server: grpc.aio.Server):
        sockets = [await asyncio.start_server(u.handle, "127.0.0.1", 0) for u in upstreams]
        addresses = tuple(f"127.0.0.1:{s.sockets[0].getsockname()[1]}" for s in sockets)
        parts["addresses"], parts["route"] = addresses, CountingRoute(addresses[0])
        parts["table"] = routes.Table(routes={"spread": _route("spread", addresses)})
        parts["discovery"] = xds.Discovery(fastpath.snapshot(parts["table"]))
        pb_grpc.add_ExternalProcessorServicer_to_server(parts["route"], server)
        ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(parts["discovery"], server)
        return lambda: [s.close() for s in sockets]

    with envoy_beside(tmp, setup, observe=False) as running:
        yield {"url": f"{running.listen_url}/v1", "upstreams": upstreams, "loop": running.loop,
               "running": running, **parts}


def _spread(door: dict, conversations: int) -> list[int]:
    """How many of `conversations` (each its own prompt) each engine got; none took the picker."""
    before, streams = [len(u.seen) for u in door["upstreams"]], door["route"].streams
    for n in range(conversations):
        body = {"model": "spread", "messages": [{"role": "user", "content": f"conversation {n} " * 40}]}
        response = httpx.post(f"{door['url']}/chat/completions", json=body, timeout=10)
        assert response.status_code == 200, response.text
    assert door["route"].streams == streams
    return [len(u.seen) - b for u, b in zip(door["upstreams"], before)]


def test_envoy_spares_an_overloaded_engine_and_uses_it_again_once_it_is_back(tmp_path: pathlib.Path) -> None:
    with _four_engine_door(tmp_path) as door:
        assert min(_spread(door, 60)) > 0  # the ring gives each engine some conversations

        def spare(*indexes: int) -> None:
            _update(door, fastpath.snapshot(door["table"], spared=frozenset(
                ("spread", door["addresses"][i]) for i in indexes)))

        for spared in [(0,), (0, 1, 2)]:  # one of four; all but one (two replicas: one of two)
            spare(*spared)
            deadline = time.monotonic() + 30
            while any((counts := _spread(door, 60))[i] for i in spared):
                assert time.monotonic() < deadline, f"Envoy kept sending to a spared engine: {counts}"
            assert all(c > 0 for i, c in enumerate(counts) if i not in spared), counts
        spare()
        deadline = time.monotonic() + 30
        while min(counts := _spread(door, 60)) == 0:
            assert time.monotonic() < deadline, f"an engine stayed spared once back: {counts}"
        assert _rejections(door) == 0, door["running"].log()[-2000:]


def test_a_stream_running_on_an_engine_that_is_spared_runs_to_its_end(tmp_path: pathlib.Path) -> None:
    with _four_engine_door(tmp_path) as door:
        before = [len(u.seen) for u in door["upstreams"]]
        body = {"model": "spread", "messages": [{"role": "user", "content": SLOW_STREAM.decode()}]}
        with httpx.stream("POST", f"{door['url']}/chat/completions", json=body, timeout=30) as response:
            events = (line for line in response.iter_lines() if line.startswith("data: "))
            assert next(events) == "data: 0"
            (engine,) = [i for i, u in enumerate(door["upstreams"]) if len(u.seen) > before[i]]
            _update(door, fastpath.snapshot(door["table"], spared=frozenset({("spread", door["addresses"][engine])})))
            deadline = time.monotonic() + 30
            while _spread(door, 20)[engine]:
                assert time.monotonic() < deadline, "Envoy never ran the spared endpoints"
            spared_at = time.monotonic()
            rest = list(events)
        assert rest == [f"data: {i}" for i in range(1, STREAM_EVENTS)]  # every event, none lost
        assert door["upstreams"][engine].streamed_until > spared_at  # it ran on after the spare took hold
