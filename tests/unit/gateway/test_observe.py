"""The observe filter: the Lua script inside a real Envoy, its access log, and what the service
reads from it, against `usage.Tally` (the rules applied to the whole body) whatever the chunking;
then the script alone in LuaJIT (lupa) on generated bodies cut anywhere.

One Envoy (the rendered bootstrap, observe on) in front of a scripted upstream that sends each
case's body in the pieces it says, with pauses so Envoy sees them as separate chunks; a stand-in
route service sends every request there, stamped with the case's name as its model; the real
`AccessLog` servicer records what the real `observation_of` makes of each entry.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
import time
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest
from envoy.data.accesslog.v3 import accesslog_pb2
from envoy.service.accesslog.v3 import als_pb2_grpc
from envoy.service.discovery.v3 import ads_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from google.protobuf import struct_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.gateway.dataplane import envoy, fastpath, observe_lua, xds
from shardwise.gateway.decide import routes, usage
from shardwise.gateway.dataplane import extproc_messages
from shardwise.gateway.service import observer
from tests.unit.gateway.envoy_harness import envoy_beside

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "vllm-0.32-cpu"
SSE = "text/event-stream"
JSON = "application/json"


def sse(events: list[dict | str]) -> bytes:
    return b"".join(b"data: " + (e.encode() if isinstance(e, str) else json.dumps(e, separators=(",", ":")).encode())
                    + b"\n\n" for e in events)


def split_at(data: bytes, marks: list[bytes]) -> list[bytes]:
    """`data` cut inside every occurrence of each mark (after its first byte and before its last)."""
    cuts = set()
    for mark in marks:
        start = data.find(mark)
        while start >= 0:
            cuts.update({start + 1, start + len(mark) - 1})
            start = data.find(mark, start + 1)
    edges = [0, *sorted(c for c in cuts if 0 < c < len(data)), len(data)]
    return [data[a:b] for a, b in zip(edges, edges[1:]) if b > a]


def sized(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


@dataclasses.dataclass(frozen=True)
class Case:
    content_type: str
    pieces: tuple[bytes, ...]
    first_delay_s: float = 0.0
    gap_s: float = 0.003
    break_after: int | None = None  # the upstream connection is cut after this many pieces

    @property
    def body(self) -> bytes:
        return b"".join(self.pieces[:self.break_after])

    def expected(self) -> tuple[int | None, int | None]:
        tally = usage.Tally(streaming=self.content_type == SSE)
        for piece in self.pieces[:self.break_after]:
            tally.feed(piece)
        return tally.tokens()


STREAM = (FIXTURES / "chat-stream.sse").read_bytes()
CHAT = (FIXTURES / "chat.json").read_bytes()
NO_USAGE = sse([{"choices": [{"delta": {"role": "assistant", "content": ""}}]},
                *[{"choices": [{"delta": {"content": f"t{i}"}}]} for i in range(5)], "[DONE]"])
TRICKY = sse([{"choices": [{"delta": {"role": "assistant", "content": ""}}]},
              {"choices": [{"delta": {"content": 'say "usage": {"prompt_tokens": 9} and data: [DONE]'}}]},
              {"choices": [{"delta": {"content": "x"}}], "usage": None},
              {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}, "[DONE]"])
PRETTY = json.dumps({"id": "x", "choices": [{"message": {"content": "usage"}}],
                     "usage": {"prompt_tokens": 7, "completion_tokens": 8, "prompt_tokens_details": {"cached": 0}},
                     "prompt_logprobs": [{"t": i} for i in range(400)]}, indent=1).encode()
MARKS = [b'"usage"', b"data:", b"\n", b"[DONE]", b'"role"', b'"choices":[]', b"prompt_tokens", b'":{']

CASES: dict[str, Case] = {
    "stream-whole": Case(SSE, (STREAM,)),
    "stream-marks": Case(SSE, tuple(split_at(STREAM, MARKS))),
    "stream-64": Case(SSE, tuple(sized(STREAM, 64))),
    "stream-no-usage": Case(SSE, tuple(split_at(NO_USAGE, MARKS))),
    "stream-tricky": Case(SSE, tuple(split_at(TRICKY, MARKS))),
    "json-50": Case(JSON, tuple(sized(CHAT, 50))),
    "json-marks": Case(JSON, tuple(split_at(CHAT, MARKS))),
    "json-pretty-then-long": Case(JSON, tuple(sized(PRETTY, 1000))),
    "json-no-usage": Case(JSON, (b'{"id": 1, "usage": null}',)),
    "stream-slow-first": Case(SSE, (STREAM[:400], STREAM[400:]), first_delay_s=0.3, gap_s=1.0),
    "stream-broken": Case(SSE, tuple(sized(STREAM, 300)), break_after=4),
}


class Route(pb_grpc.ExternalProcessorServicer):
    """The route filter's part: every request to the upstream, its model = its x-case header."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream

    async def Process(self, request_iterator: AsyncIterator[pb.ProcessingRequest],  # noqa: N802
                      context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ProcessingResponse]:
        stream = aiter(request_iterator)
        first = await anext(stream)
        headers = extproc_messages.header_map(first.request_headers)
        yield pb.ProcessingResponse(request_headers=pb.HeadersResponse())
        if await anext(stream, None) is None:
            return
        yield extproc_messages.routed(self.upstream, headers["x-case"], key_id=headers.get("x-case-key"))
        async for _ in stream:
            pass


class Recorder(observer.Observer):
    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, observer.Observation] = {}
        self.upstream = ""

    def record(self, seen: observer.Observation) -> None:
        self.seen[seen.model] = seen


async def _upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
            await reader.readexactly(int(headers.get("content-length", "0")))
            case = CASES[headers["x-case"]]
            writer.write(f"HTTP/1.1 200 OK\r\ncontent-type: {case.content_type}\r\n"
                         "transfer-encoding: chunked\r\n\r\n".encode())
            await writer.drain()
            await asyncio.sleep(case.first_delay_s)
            for index, piece in enumerate(case.pieces):
                if index == case.break_after:
                    writer.transport.abort()
                    return
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
                await asyncio.sleep(case.gap_s)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory):
    recorder = Recorder()

    async def setup(server: grpc.aio.Server):
        upstream = await asyncio.start_server(_upstream, "127.0.0.1", 0)
        port = upstream.sockets[0].getsockname()[1]
        recorder.upstream = f"127.0.0.1:{port}"
        pb_grpc.add_ExternalProcessorServicer_to_server(Route(f"127.0.0.1:{port}"), server)
        als_pb2_grpc.add_AccessLogServiceServicer_to_server(observer.AccessLog(recorder), server)
        # Envoy's routes: the ext_proc route alone (no model is on the fast path here)
        ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(
            xds.Discovery(fastpath.snapshot(routes.Table(routes={}))), server)
        return upstream.close

    with envoy_beside(tmp_path_factory.mktemp("observe"), setup, observe_flush_s=0.05) as running:
        yield running.listen_url, recorder, running.admin_port


def _observe(door, name: str, **headers: str) -> tuple[observer.Observation, float]:
    url, recorder, _ = door
    begun, served = time.monotonic(), None
    try:
        with httpx.stream("POST", f"{url}/v1/chat/completions", content=b"{}",
                          headers={"x-case": name, **headers}, timeout=10) as response:
            assert response.status_code == 200
            served = response.headers.get(envoy.SERVED_HEADER)
            assert b"".join(response.iter_raw()) == CASES[name].body  # passed on unchanged
    except httpx.RemoteProtocolError:
        assert CASES[name].break_after is not None
    took = time.monotonic() - begun
    deadline = time.monotonic() + 5
    while name not in recorder.seen:
        assert time.monotonic() < deadline, f"no access-log entry for {name}"
        time.sleep(0.02)
    # The engine that served, to the client and in the access log alike (a broken stream too).
    assert served == recorder.upstream == recorder.seen[name].endpoint
    return recorder.seen[name], took


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.break_after is None])
def test_tokens_and_end_whatever_the_chunking(door, name: str) -> None:
    seen, took = _observe(door, name)
    case = CASES[name]
    assert seen.complete and seen.code == "200"
    assert seen.tokens() == case.expected()
    assert seen.streaming == (case.content_type == SSE)
    assert seen.ttft_s is not None and seen.e2e_s is not None and 0 <= seen.ttft_s <= seen.e2e_s <= took + 0.05


def test_the_expected_figures_are_the_responses_own() -> None:
    assert CASES["stream-whole"].expected() == (17, 6)
    assert CASES["stream-tricky"].expected() == (3, 2)
    assert CASES["stream-no-usage"].expected() == (None, 5)
    assert CASES["json-50"].expected() == (41, 24)
    assert CASES["json-pretty-then-long"].expected() == (7, 8)
    assert CASES["json-no-usage"].expected() == (None, None)


def test_time_to_first_byte_is_the_first_body_chunk(door) -> None:
    seen, _ = _observe(door, "stream-slow-first")
    # After the headers, 0.3 s to the first chunk, then 1 s after each chunk: the first is seen
    # after the wait (not at the headers) and well before the end (not at the last chunk), with
    # margins no busy machine eats.
    assert seen.ttft_s >= 0.3
    assert seen.e2e_s - seen.ttft_s >= 1.0


def test_a_broken_stream_says_what_it_streamed(door) -> None:
    seen, _ = _observe(door, "stream-broken", **{"x-case-key": "ns/k"})
    case = CASES["stream-broken"]
    assert not seen.complete and seen.code == "200" and seen.key_id == "ns/k"
    prompt, completion = case.expected()
    assert seen.streaming and seen.tokens()[0] == prompt and completion > 0
    assert 0 <= completion - seen.tokens()[1] < observe_lua.EVENTS_STEP  # written every EVENTS_STEP events
    assert seen.e2e_s is None


def test_the_lua_filter_raised_no_error(door) -> None:
    _observe(door, "stream-whole")
    _, _, admin = door
    stats = httpx.get(f"http://127.0.0.1:{admin}/stats?filter=observe").text
    assert "http.gateway.lua.observe.errors: 0" in stats, stats


# -- the entry's parsing, without Envoy ------------------------------------------------------

def _entry(model: str | None = "m", code: int | None = 200, meta: dict | None = None, *, key: str | None = None,
           start_us: int = 1_000_000_000, last_tx_ms: int | None = 900,
           request_id: str = "") -> accesslog_pb2.HTTPAccessLogEntry:
    entry = accesslog_pb2.HTTPAccessLogEntry()
    entry.request.request_id = request_id
    if model is not None:
        entry.request.request_headers[envoy.MODEL_HEADER] = model
    if key is not None:
        entry.request.request_headers[envoy.KEY_HEADER] = key
    if code is not None:
        entry.response.response_code.value = code
    entry.common_properties.start_time.FromMicroseconds(start_us)
    if last_tx_ms is not None:
        entry.common_properties.time_to_last_downstream_tx_byte.FromMilliseconds(last_tx_ms)
    if meta is not None:
        fields = struct_pb2.Struct()
        fields.update(meta)
        entry.common_properties.metadata.filter_metadata[observe_lua.NAMESPACE].CopyFrom(fields)
    return entry


def test_an_entry_read() -> None:
    seen = observer.observation_of(_entry(meta={"first_byte_us": "1000250000", "end": True, "events": 6.0,
                                                "usage": '"usage":{"prompt_tokens":17,"completion_tokens":6}'},
                                          key="ns/k", request_id="req-1"))
    assert seen == observer.Observation(model="m", key_id="ns/k", code="200", complete=True, ttft_s=0.25,
                                        e2e_s=0.9, events=6,
                                        usage='"usage":{"prompt_tokens":17,"completion_tokens":6}',
                                        request_id="req-1", start_unix_s=1000.0)
    assert seen.tokens() == (17, 6)


def test_entries_without_a_model_or_metadata() -> None:
    assert observer.observation_of(_entry(model=None)) is None
    reset = observer.observation_of(_entry(code=None, meta=None, last_tx_ms=None))
    assert reset.code == "reset" and not reset.complete and reset.ttft_s is None and not reset.streaming
    headers_only = observer.observation_of(_entry(meta={"end": True}))
    assert headers_only.complete and headers_only.e2e_s == 0.9 and headers_only.tokens() == (None, None)
    odd = observer.observation_of(_entry(meta={"first_byte_us": "soon", "events": "many", "end": "yes"}))
    assert odd.ttft_s is None and odd.events is None and not odd.complete


def test_parse_usage() -> None:
    assert usage.parse_usage('"usage": {"prompt_tokens": 1, "completion_tokens": 2}, "more": [') == (1, 2)
    assert usage.parse_usage(b'"usage":{"prompt_tokens":1,"completion_tokens":-2}') == (1, None)
    for text in (None, "", '"usage":null', '"usage":{"prompt_tokens":1', '"other":{}', '"usage":[1]'):
        assert usage.parse_usage(text) is None
    assert usage.tokens_of(None, 4) == (None, 4) and usage.tokens_of(None, None) == (None, None)


# -- the script alone, in LuaJIT (lupa), against Tally on any chunking ------------------------

HARNESS = r"""
EnvoyTimestampResolution = {MILLISECOND = 0, MICROSECOND = 1}
function run(content_type, chunks, stop_after)
  local meta = {}
  local handle = {}
  function handle:headers()
    return {get = function(_, key) if key == "content-type" then return content_type end end,
            replace = function() end, remove = function() end}
  end
  function handle:streamInfo()
    return {dynamicMetadata = function() return {set = function(_, ns, key, value) meta[ns .. "/" .. key] = value end,
                                                 get = function() return nil end} end}
  end
  function handle:timestampString(resolution) assert(resolution == 1); return "1700000000123456" end
  function handle:bodyChunks()
    local i = 0
    return function()
      i = i + 1
      if i > stop_after then error("reset") end  -- Envoy never resumes a script whose stream broke
      local c = chunks[i]
      if c == nil then return nil end
      return {length = function() return #c end, getBytes = function(_, s, n) return c:sub(s + 1, s + n) end}
    end
  end
  pcall(envoy_on_response, handle)
  return meta
end
"""


@pytest.fixture(scope="module")
def lua():
    luajit = pytest.importorskip("lupa.luajit21", reason="lupa (a Lua runtime for Python) is in the [test] extra")
    runtime = luajit.LuaRuntime(encoding=None)
    runtime.execute(observe_lua.SOURCE.encode())
    runtime.execute(HARNESS.encode())
    return runtime


def _run(lua, content_type: str, pieces: list[bytes], stop_after: int | None = None) -> observer.Observation:
    table = lua.table_from(pieces)
    meta = dict(lua.globals().run(content_type.encode(), table, len(pieces) + 1 if stop_after is None else stop_after))
    meta = {k.decode().removeprefix(observe_lua.NAMESPACE + "/"): (v.decode() if isinstance(v, bytes) else v)
            for k, v in meta.items()}
    events = meta.get("events")
    return observer.Observation(model="m", key_id=None, code="200", complete=meta.get("end") is True,
                                ttft_s=None if "first_byte_us" not in meta else 0.0, e2e_s=None,
                                events=int(events) if events is not None else None, usage=meta.get("usage"))


def _cuts(data: bytes, cuts: list[int]) -> list[bytes]:
    edges = [0, *sorted({c % (len(data) + 1) for c in cuts}), len(data)]
    return [data[a:b] for a, b in zip(edges, edges[1:])]  # empty pieces too: Envoy sends those


_TEXT = st.sampled_from(["x", "data: ", '"usage": {', "[DONE]", '"role"', "\\n", " ", "é", '"choices":[]'])
_EVENT = st.one_of(
    st.builds(lambda t: {"choices": [{"delta": {"content": "".join(t)}}]}, st.lists(_TEXT, max_size=4)),
    st.just({"choices": [{"delta": {"role": "assistant", "content": ""}}]}),
    st.builds(lambda p, c: {"choices": [], "usage": {"prompt_tokens": p, "completion_tokens": c}},
              st.integers(0, 10**6), st.integers(0, 10**6)),
    st.builds(lambda c: {"choices": [{"delta": {"content": "y"}}], "usage": {"prompt_tokens": 1, "completion_tokens": c}},
              st.integers(0, 99)),
    st.just({"choices": [{"delta": {"content": "z"}}], "usage": None}),
)


@settings(max_examples=300, deadline=None)
@given(events=st.lists(_EVENT, max_size=12), done=st.booleans(), cuts=st.lists(st.integers(0, 10**6), max_size=30))
def test_a_stream_read_by_the_script_as_by_tally(lua, events, done, cuts) -> None:
    data = sse([*events, *(["[DONE]"] if done else [])])
    pieces = _cuts(data, cuts)
    tally = usage.Tally(streaming=True)
    for piece in pieces:
        tally.feed(piece)
    seen = _run(lua, SSE, pieces)
    assert seen.complete and seen.streaming
    assert seen.tokens() == tally.tokens()
    assert (seen.ttft_s is not None) == bool(data)


@settings(max_examples=200, deadline=None)
@given(prompt=st.integers(0, 10**6), completion=st.integers(0, 10**6), indent=st.sampled_from([None, 1, 2]),
       filler=st.integers(0, 3000), cuts=st.lists(st.integers(0, 10**6), max_size=30))
def test_a_json_answer_read_by_the_script_as_by_tally(lua, prompt, completion, indent, filler, cuts) -> None:
    body = {"id": "x", "choices": [{"message": {"content": 'a "usage": {"prompt_tokens": 5} b' + "c" * filler}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "details": {"cached": 1}},
            "prompt_logprobs": ["p"] * (filler // 4)}
    data = json.dumps(body, indent=indent).encode()
    seen = _run(lua, JSON, _cuts(data, cuts))
    assert seen.complete and not seen.streaming and seen.tokens() == (prompt, completion)


@settings(max_examples=100, deadline=None)
@given(events=st.lists(_EVENT, min_size=1, max_size=12), cuts=st.lists(st.integers(0, 10**6), max_size=20),
       stop=st.integers(0, 30))
def test_a_broken_stream_keeps_its_count(lua, events, cuts, stop) -> None:
    pieces = _cuts(sse(events), cuts)
    stop = min(stop, len(pieces))
    tally = usage.Tally(streaming=True)
    for piece in pieces[:stop]:
        tally.feed(piece)
    seen = _run(lua, SSE, pieces, stop_after=stop)
    assert not seen.complete and seen.streaming
    # what it streamed, written every EVENTS_STEP events: never more, and fewer than a step short
    assert 0 <= tally.events - seen.events < observe_lua.EVENTS_STEP


def test_a_very_long_stream_line_is_cut_not_kept(lua) -> None:
    big = {"choices": [{"delta": {"content": "w" * 300_000}}]}
    data = sse([big, big, {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}, "[DONE]"])
    seen = _run(lua, SSE, sized(data, 16384))
    assert seen.tokens() == (1, 2) and seen.events == 2


def test_headers_only_and_other_content(lua) -> None:
    empty = _run(lua, SSE, [])
    assert empty.complete and empty.events == 0 and empty.ttft_s is None and empty.tokens() == (None, 0)
    text = _run(lua, "text/plain", [b"hello"])
    assert text.complete and not text.streaming and text.tokens() == (None, None)
