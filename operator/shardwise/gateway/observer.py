"""Per-model metrics from the observe filter's streams (Envoy's ext_proc observability mode).

Envoy copies the request headers, the response headers and every response body chunk to this
stream and never waits for an answer, so measuring adds nothing to the client's latency. The
route filter stamped the request with its model and arrival time (headers it set itself, so a
client cannot forge them past it); from those, the first body chunk gives the time to first
byte (the first token of a stream), the end of stream the end-to-end time, and the body the
tokens (`usage`). A response that ends without its end of stream (the engine died, the client
left) is counted as broken.

With API keys on, the route filter also stamped the caller's key id: the response's usage is
charged to it (`Gatekeeper.charge`: per-key metrics, the tokens bucket, the key's usage counters);
a broken stream is charged the completion tokens it streamed before it broke.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from shardwise.gateway import envoy, metrics, usage
from shardwise.gateway.gatekeeper import Gatekeeper

KEY_HEADER = "x-shardwise-key"  # extproc.KEY_HEADER (set by the route filter, never by a client)


def _headers(headers: pb.HttpHeaders) -> dict[str, str]:
    return {h.key.lower(): (h.raw_value.decode("latin-1") if h.raw_value else h.value)
            for h in headers.headers.headers}


class Observer:
    def __init__(self, gatekeeper: Gatekeeper | None = None) -> None:
        self.gatekeeper = gatekeeper

    async def consume(self, first: pb.ProcessingRequest, stream: AsyncIterator[pb.ProcessingRequest]) -> None:
        if first.WhichOneof("request") != "request_headers":
            async for _ in stream:
                pass
            return
        request = _headers(first.request_headers)
        model = request.get(envoy.MODEL_HEADER)
        if not model:  # answered by the route filter itself: counted there
            async for _ in stream:
                pass
            return
        try:
            arrival = float(request.get("x-shardwise-arrival", ""))
        except ValueError:
            arrival = time.time()
        code, tally, first_byte, complete = "", None, False, False
        async for message in stream:
            kind = message.WhichOneof("request")
            if kind == "response_headers":
                response = _headers(message.response_headers)
                code = response.get(":status", "")
                tally = usage.Tally(streaming="text/event-stream" in response.get("content-type", ""))
                complete = message.response_headers.end_of_stream
            elif kind == "response_body":
                chunk = message.response_body.body
                if chunk and not first_byte:
                    first_byte = True
                    metrics.TTFT.labels(model).observe(max(0.0, time.time() - arrival))
                if tally is not None:
                    tally.feed(chunk)
                complete = complete or message.response_body.end_of_stream
            if complete:
                break
        metrics.REQUESTS.labels(model, code or "reset").inc()
        key_id = request.get(KEY_HEADER) if self.gatekeeper is not None else None
        if key_id:
            metrics.KEY_REQUESTS.labels(key_id, model, code or "reset").inc()
        if not complete:
            metrics.BROKEN.labels(model).inc()
            if key_id and tally is not None and tally.streaming and code.startswith("2"):
                self.gatekeeper.charge(key_id, model, *tally.tokens())
            return
        metrics.E2E.labels(model).observe(max(0.0, time.time() - arrival))
        if tally is not None and code.startswith("2"):
            prompt, completion = tally.tokens()
            if prompt is not None:
                metrics.TOKENS.labels(model, "prompt").inc(prompt)
            if completion is not None:
                metrics.TOKENS.labels(model, "completion").inc(completion)
            if key_id:
                self.gatekeeper.charge(key_id, model, prompt, completion)
