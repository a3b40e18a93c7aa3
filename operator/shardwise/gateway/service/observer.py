"""Per-model metrics from Envoy's access log: one entry per routed request, after it ended.

The observe filter (observe_lua.py, a Lua filter inside Envoy) reads each response as it streams
past and leaves in the request's dynamic metadata when its first body byte came, its last usage
and, for a stream, its content events, and whether it reached its end of stream. Envoy's HTTP gRPC
access logger (envoy.py) sends that with the status, the request's start and Envoy's own timings
to `AccessLog.StreamAccessLogs`, a message per entry: Python sees one entry per request, never a body chunk,
and the client's stream never waits for it.

From an entry (`observation_of`, pure): time to first byte = first body byte - Envoy's start of
the request (a held request's wait is in it), end-to-end = Envoy's time to the last byte sent
downstream, tokens from the usage (`usage.tokens_of`). The route filter stamped the request with
its model (and, with API keys on, the caller's key id): headers it sets itself, so a client cannot
forge them past it, or for a hosted model its dynamic metadata (`envoy.ROUTE_NAMESPACE`); requests
without a model (the route filter's own answers, counted there) are not logged at all. A response
that ended without its end of stream (the engine died, the client
left) is counted as broken.

With API keys on, the response's usage is charged to the key (`Gatekeeper.charge`: per-key
metrics, the tokens bucket, the key's usage counters); a broken stream is charged the completion
tokens it streamed before it broke (less fewer than observe_lua.EVENTS_STEP, the filter's write interval).

The engine that served is the response's own `x-gateway-destination-endpoint-served` header (the
access log carries it as the client got it): counted per model and endpoint for the console.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Callable

import grpc
from envoy.data.accesslog.v3 import accesslog_pb2
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc

from shardwise.gateway import metrics
from shardwise.gateway.dataplane import envoy, observe_lua
from shardwise.gateway.decide import usage
from shardwise.gateway.service.gatekeeper import Gatekeeper

log = logging.getLogger(__name__)

KEY_HEADER = envoy.KEY_HEADER  # set by the route filter, never by a client


@dataclasses.dataclass(frozen=True)
class Observation:
    """What one request's access-log entry says, in the gateway's terms."""

    model: str
    key_id: str | None
    code: str  # the status sent downstream; "reset" when no response headers came
    complete: bool  # the response reached its end of stream
    ttft_s: float | None  # start of the request to its first response body byte
    e2e_s: float | None  # start of the request to its last byte sent downstream
    events: int | None  # a stream's content events; None: not a stream
    usage: str | None  # the text from the response's last usage key on
    endpoint: str | None = None  # IP:PORT of the engine that served it: the client's SERVED_HEADER
    request_id: str = ""  # Envoy's x-request-id (the usage record's idempotency key)
    start_unix_s: float | None = None  # when Envoy got the request

    @property
    def streaming(self) -> bool:
        return self.events is not None

    def tokens(self) -> tuple[int | None, int | None]:
        return usage.tokens_of(self.usage, self.events)

    def cached(self) -> int:
        return usage.cached_of(self.usage)


def _metadata(entry: accesslog_pb2.HTTPAccessLogEntry, namespace: str = observe_lua.NAMESPACE) -> dict[str, object]:
    filters = entry.common_properties.metadata.filter_metadata
    if namespace not in filters:
        return {}
    values: dict[str, object] = {}
    for name, value in filters[namespace].fields.items():
        kind = value.WhichOneof("kind")
        values[name] = (value.string_value if kind == "string_value" else value.number_value
                        if kind == "number_value" else value.bool_value if kind == "bool_value" else None)
    return values


def observation_of(entry: accesslog_pb2.HTTPAccessLogEntry) -> Observation | None:
    """The observation in one access-log entry; None for a request the route filter never routed."""
    headers = entry.request.request_headers
    # A hosted model's request carries its model and key id as the route filter's metadata: no
    # header of shardwise's reaches the provider (dataplane/providers.py).
    routed_as = _metadata(entry, envoy.ROUTE_NAMESPACE)
    model = headers.get(envoy.MODEL_HEADER, "") or routed_as.get("model") or ""
    if not isinstance(model, str) or not model:
        return None
    key_id = headers.get(KEY_HEADER) or routed_as.get("key") or None
    common = entry.common_properties
    meta = _metadata(entry)
    start_us = common.start_time.ToMicroseconds() if common.HasField("start_time") else None
    ttft = None
    first = meta.get("first_byte_us")
    if isinstance(first, str) and first.isdigit() and start_us is not None:
        ttft = max(0.0, (int(first) - start_us) / 1e6)
    complete = meta.get("end") is True
    e2e = None
    if complete and common.HasField("time_to_last_downstream_tx_byte"):
        e2e = max(0.0, common.time_to_last_downstream_tx_byte.ToNanoseconds() / 1e9)
    code = entry.response.response_code.value if entry.response.HasField("response_code") else 0
    events = meta.get("events")
    text = meta.get("usage")
    return Observation(model=model, key_id=key_id if isinstance(key_id, str) else None,
                       code=str(code) if code else "reset",
                       complete=complete, ttft_s=ttft, e2e_s=e2e,
                       events=int(events) if isinstance(events, float) and events >= 0 else None,
                       usage=text if isinstance(text, str) else None,
                       endpoint=entry.response.response_headers.get(envoy.SERVED_HEADER) or None,
                       request_id=entry.request.request_id,
                       start_unix_s=start_us / 1e6 if start_us is not None else None)


class Observer:
    def __init__(self, gatekeeper: Gatekeeper | None = None,
                 export: Callable[[Observation], None] | None = None) -> None:
        self.gatekeeper = gatekeeper
        self.export = export  # the usage record's sinks (service/export.py): queued, never awaited here

    def record(self, seen: Observation) -> None:
        model, code = seen.model, seen.code
        if seen.ttft_s is not None:
            metrics.TTFT.labels(model).observe(seen.ttft_s)
        metrics.REQUESTS.labels(model, code).inc()
        if seen.endpoint:
            metrics.SERVED.labels(model, seen.endpoint).inc()
        key_id = seen.key_id if self.gatekeeper is not None else None
        if key_id:
            metrics.KEY_REQUESTS.labels(key_id, model, code).inc()
        if not seen.complete:
            metrics.BROKEN.labels(model).inc()
            if key_id and seen.streaming and code.startswith("2"):
                self.gatekeeper.charge(key_id, model, *seen.tokens(), cached=seen.cached())
            return
        if seen.e2e_s is not None:
            metrics.E2E.labels(model).observe(seen.e2e_s)
        if code.startswith("2"):
            prompt, completion = seen.tokens()
            if prompt is not None:
                metrics.TOKENS.labels(model, "prompt").inc(prompt)
            if completion is not None:
                metrics.TOKENS.labels(model, "completion").inc(completion)
            if key_id:
                self.gatekeeper.charge(key_id, model, prompt, completion, cached=seen.cached())

    def record_entries(self, entries: list[accesslog_pb2.HTTPAccessLogEntry]) -> None:
        for entry in entries:
            try:
                seen = observation_of(entry)
                if seen is not None:
                    self.record(seen)
                    if self.export is not None:
                        self.export(seen)
            except Exception:  # noqa: BLE001 - one odd entry must not end the stream of the others
                log.exception("access log entry not recorded")


class AccessLog(als_pb2_grpc.AccessLogServiceServicer):
    """Envoy's access-log stream (one per Envoy worker, kept open): entries to the observer."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer

    async def StreamAccessLogs(self, request_iterator: AsyncIterator[als_pb2.StreamAccessLogsMessage],  # noqa: N802
                               context: grpc.aio.ServicerContext) -> als_pb2.StreamAccessLogsResponse:
        async for message in request_iterator:
            if message.HasField("http_logs"):
                self.observer.record_entries(message.http_logs.log_entry)
        return als_pb2.StreamAccessLogsResponse()
