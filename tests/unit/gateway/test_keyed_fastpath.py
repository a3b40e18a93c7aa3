"""The keyed fast path (keys_lua.py): a real Envoy on the rendered bootstrap, fed the key table over
ADS by the real `Discovery`, a stand-in route service that counts the requests crossing into
ext_proc, and an upstream that keeps what it got.

A key without limits asking a fast model must reach the engine without one ext_proc stream, as its
id and without its bearer token; every other keyed request (no key, a wrong one, a model the key
may not use, a key with limits, a client's own key-id header) must take the picker's route, where
today's answers come from. A stream that did not ask for its usage gets it asked for; a revoked key
takes the picker's route at the next request.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import pathlib
import time
from collections.abc import Iterator

import grpc
import httpx
import pytest
from envoy.service.discovery.v3 import ads_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from shardwise.gateway.dataplane import envoy, fastpath, keys_lua, xds
from shardwise.gateway.decide import keys, routes
from tests.unit.gateway.envoy_harness import envoy_beside
from tests.unit.gateway.test_fastpath import CountingRoute, _rejections, _route

OPEN = "sk-open-" + "x" * 40  # every model, no limits
NARROW = "sk-narrow-" + "y" * 90  # two SHA-256 blocks: only `fast-model`
LIMITED = "sk-limited-1"


def _table(*, revoked: bool = False) -> keys.KeyTable:
    by_hash = {keys.hash_key(NARROW): keys.Key(id="ns/narrow", models=frozenset({"fast-model"})),
               keys.hash_key(LIMITED): keys.Key(id="ns/limited", models=frozenset(), requests_per_minute=60)}
    if not revoked:
        by_hash[keys.hash_key(OPEN)] = keys.Key(id="ns/open", models=frozenset())
    return keys.KeyTable(by_hash=by_hash, problems={})


class Upstream:
    """Answers every request with a small JSON body; keeps each request's headers and body."""

    def __init__(self) -> None:
        self.seen: list[tuple[dict[str, str], bytes]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.seen.append((headers, body))
                reply = b'{"object":"chat.completion","choices":[]}'
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(reply), reply))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@contextlib.contextmanager
def _keyed_door(tmp: pathlib.Path) -> Iterator[dict]:
    upstream = Upstream()
    parts: dict[str, object] = {}

    async def setup(server: grpc.aio.Server):
        server_socket = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
        address = f"127.0.0.1:{server_socket.sockets[0].getsockname()[1]}"
        table = routes.Table(routes={"fast-model": _route("fast-model", (address,)),
                                     "other-model": _route("other-model", (address,))})
        parts["table"], parts["route"] = table, CountingRoute(address)
        parts["discovery"] = xds.Discovery(fastpath.snapshot(table, keyed=keys_lua.metadata(_table())))
        pb_grpc.add_ExternalProcessorServicer_to_server(parts["route"], server)
        ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(parts["discovery"], server)
        return server_socket.close

    with envoy_beside(tmp, setup, observe=False) as running:
        yield {"url": f"{running.listen_url}/v1", "upstream": upstream, "loop": running.loop, "running": running,
               **parts}


@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory):
    with _keyed_door(tmp_path_factory.mktemp("keyed")) as parts:
        yield parts
        assert _rejections(parts) == 0, parts["running"].log()[-2000:]
        assert "lua" not in parts["running"].log().lower()  # no script failed


def _post(door: dict, token: str | None, model: str, *, path: str = "chat/completions", raw: bytes | None = None,
          **extra) -> tuple[int, dict[str, str], bytes]:
    """(ext_proc streams it took, the headers and body the upstream got)."""
    headers = {"content-type": "application/json", **({"authorization": f"Bearer {token}"} if token else {})}
    headers.update(extra.pop("headers", {}))
    body = raw if raw is not None else json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}],
                                                   **extra}).encode()
    before = door["route"].streams
    response = httpx.post(f"{door['url']}/{path}", content=body, headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    seen_headers, seen_body = door["upstream"].seen[-1]
    return door["route"].streams - before, seen_headers, seen_body


def test_the_lua_digest_is_sha256() -> None:
    # The script's SHA-256 is exercised through Envoy below; its padding boundaries here by length.
    assert keys_lua.metadata(_table())[keys.hash_key(OPEN)] == {"id": "ns/open"}
    assert keys_lua.key_ids(keys_lua.metadata(_table())) == ["ns/narrow", "ns/open"]  # no limited key


def test_a_key_without_limits_is_admitted_by_envoy_alone(door: dict) -> None:
    for token, model in ((OPEN, "fast-model"), (OPEN, "other-model"), (NARROW, "fast-model")):
        crossed, headers, _ = _post(door, token, model)
        assert crossed == 0, (token, model)
        assert headers[envoy.KEY_HEADER] == ("ns/open" if token == OPEN else "ns/narrow")
        assert "authorization" not in headers and headers[envoy.MODEL_HEADER] == model
    crossed, headers, _ = _post(door, OPEN, "fast-model", path="completions", headers={"authorization": f"bearer  {OPEN}"})
    assert crossed == 0  # the scheme in any case, the token trimmed, as keys.bearer reads it


@pytest.mark.parametrize("length", [0, 1, 54, 55, 56, 63, 64, 65, 119, 120, 200])
def test_every_padding_length_hashes_like_hashlib(door: dict, length: int) -> None:
    token = "k" * length
    if not token:
        return
    table = keys.KeyTable(by_hash={**_table().by_hash, keys.hash_key(token): keys.Key(id="ns/len", models=frozenset())},
                          problems={})
    _publish(door, table)
    crossed, headers, _ = _post(door, token, "fast-model")
    assert crossed == 0 and headers[envoy.KEY_HEADER] == "ns/len", hashlib.sha256(token.encode()).hexdigest()
    _publish(door, _table())


def _publish(door: dict, table: keys.KeyTable) -> None:
    snapshot = fastpath.snapshot(door["table"], keyed=keys_lua.metadata(table))
    door["loop"].call_soon_threadsafe(door["discovery"].update, snapshot)
    deadline = time.monotonic() + 30
    while _routes_version(door) != fastpath.version_of(snapshot.route_config):
        assert time.monotonic() < deadline, "Envoy never took the new routes"
        time.sleep(0.05)


def _routes_version(door: dict) -> str:
    with httpx.Client() as client:
        dump = client.get(f"http://127.0.0.1:{door['running'].admin_port}/config_dump?resource=dynamic_route_configs").json()
    return next((c.get("version_info") for c in dump.get("configs", ())), "")


def test_every_other_keyed_request_takes_the_picker(door: dict) -> None:
    cases = [(None, "fast-model", {}), ("sk-wrong", "fast-model", {}), (NARROW, "other-model", {}),
             (LIMITED, "fast-model", {}), (OPEN, "no-such-model", {}),
             (OPEN, "fast-model", {"headers": {"authorization": f"Basic {OPEN}"}})]
    for token, model, extra in cases:
        crossed, headers, _ = _post(door, token, model, **extra)
        assert crossed == 1, (token, model)
        # a key Envoy knows keeps its id on the picker's route (which sets the same); no other
        assert headers.get(envoy.KEY_HEADER) in ((None, "ns/open") if token == OPEN else (None,)), (token, model)
    # a client's own key id, with and without a readable body, never makes a request fast
    for raw in (None, b"not json"):
        crossed, headers, _ = _post(door, None, "fast-model", raw=raw,
                                    headers={envoy.KEY_HEADER: "ns/open", envoy.MODEL_MATCH_HEADER: "fast-model"})
        assert crossed == 1 and envoy.KEY_HEADER not in headers


def test_a_stream_is_asked_for_its_usage_and_one_that_set_its_options_is_left_to_the_picker(door: dict) -> None:
    crossed, headers, body = _post(door, OPEN, "fast-model", stream=True)
    assert crossed == 0 and int(headers["content-length"]) == len(body)
    sent = json.loads(body)
    assert sent["stream_options"] == {"include_usage": True} and sent["stream"] is True and sent["model"] == "fast-model"
    crossed, _, body = _post(door, OPEN, "fast-model", stream=True, stream_options={"include_usage": True})
    assert crossed == 0 and json.loads(body)["stream_options"] == {"include_usage": True}
    crossed, _, _ = _post(door, OPEN, "fast-model", stream=True, stream_options={"continuous_usage_stats": True})
    assert crossed == 1  # the picker merges include_usage into the client's own options
    crossed, _, body = _post(door, OPEN, "fast-model", stream=False)
    assert crossed == 0 and "stream_options" not in json.loads(body)
    crossed, _, body = _post(door, OPEN, "fast-model", path="embeddings", stream=True)
    assert crossed == 0 and "stream_options" not in json.loads(body)  # no stream there: left as the picker leaves it


def test_a_revoked_key_takes_the_picker_at_its_next_request(door: dict) -> None:
    assert _post(door, OPEN, "fast-model")[0] == 0
    _publish(door, _table(revoked=True))
    try:
        assert _post(door, OPEN, "fast-model")[0] == 1
        assert _post(door, NARROW, "fast-model")[0] == 0
    finally:
        _publish(door, _table())
