"""Envoy's ext_proc protocol, spoken by the gateway: one gRPC stream per HTTP request.

The route filter's stream (processing mode: request headers SEND, request body BUFFERED,
responses SKIP):
1. request headers: `GET /v1/models[/<id>]` is answered here (immediate_response); the three
   OpenAI POST routes continue; any other path is a 404 in OpenAI's words.
2. request body (whole, up to Envoy's limit): parse it, read `model`, ask the dispatcher; answer
   with a header mutation (`x-gateway-destination-endpoint: IP:PORT`, Envoy's ORIGINAL_DST cluster
   connects there) and clear_route_cache, or with an immediate_response carrying the refusal.
   A held request is simply this answer not sent yet.
3. Then the stream stays open until Envoy ends it with the HTTP request; until then the pick
   counts as outstanding on its endpoint.
Responses are not seen here: the observe filter measures them inside Envoy and its access log
reaches `observer` once per request.
"""

from __future__ import annotations

import calendar
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf import struct_pb2
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from envoy.type.v3 import http_status_pb2

from shardwise.gateway import envoy, keys, metrics, openai_errors, picker
from shardwise.gateway.dispatcher import Dispatcher
from shardwise.gateway.gatekeeper import Gatekeeper, Ticket
from shardwise.gateway.openai_errors import Refusal

log = logging.getLogger(__name__)

ROUTED_PATHS = frozenset(envoy.ROUTED_PATHS)
KEY_HEADER = envoy.KEY_HEADER  # the caller's key id (namespace/name of its APIKey), for the observer
STREAMING_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})
LB_NAMESPACE = "envoy.lb"
SUBSET_NAMESPACE, SUBSET_KEY = "envoy.lb.subset_hint", "x-gateway-destination-endpoint-subset"
_OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD


def header_map(headers: pb.HttpHeaders) -> dict[str, str]:
    return {h.key.lower(): (h.raw_value.decode("latin-1") if h.raw_value else h.value)
            for h in headers.headers.headers}


def immediate(refusal: Refusal, details: str) -> pb.ProcessingResponse:
    return pb.ProcessingResponse(immediate_response=pb.ImmediateResponse(
        status=http_status_pb2.HttpStatus(code=refusal.status),
        headers=pb.HeaderMutation(set_headers=[
            base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=k, raw_value=v.encode()), append_action=_OVERWRITE)
            for k, v in refusal.headers]),
        body=refusal.body, details=details))


def _routed(endpoint: str, model: str, *, key_id: str | None = None,
            body: bytes | None = None) -> pb.ProcessingResponse:
    values = [(envoy.DESTINATION_HEADER, endpoint), (envoy.MODEL_HEADER, model)]
    # Without the match header no fast route applies when the route is chosen again: the request
    # goes where the picker said, even if its model got a fast route while it was held.
    remove: list[str] = [envoy.MODEL_MATCH_HEADER]
    if key_id is not None:  # keys on: the observer charges this id; the key itself never reaches an engine
        values.append((KEY_HEADER, key_id))
        remove.append("authorization")
    if body is not None:
        values.append(("content-length", str(len(body))))
    set_headers = [base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=k, raw_value=v.encode()),
                                              append_action=_OVERWRITE) for k, v in values]
    common = pb.CommonResponse(header_mutation=pb.HeaderMutation(set_headers=set_headers, remove_headers=remove),
                               clear_route_cache=True)
    if body is not None:
        common.body_mutation.body = body
    # The endpoint-picker protocol (GIE docs/proposals/004) names the endpoint twice: the header
    # above and the same value in the `envoy.lb` dynamic metadata, for gateways that read that.
    picked = struct_pb2.Struct()
    picked.update({LB_NAMESPACE: {envoy.DESTINATION_HEADER: endpoint}})
    return pb.ProcessingResponse(request_body=pb.BodyResponse(response=common), dynamic_metadata=picked)


def subset_hint(*messages: pb.ProcessingRequest) -> frozenset[str] | None:
    """The endpoints a GIE gateway restricts this request to (filter metadata
    `envoy.lb.subset_hint`, key `x-gateway-destination-endpoint-subset`), or None: no restriction."""
    for message in messages:
        hint = message.metadata_context.filter_metadata.get(SUBSET_NAMESPACE)
        if hint is not None and SUBSET_KEY in hint.fields:
            value = hint.fields[SUBSET_KEY]
            items = value.list_value.values if value.HasField("list_value") else [value]
            return frozenset(i.string_value for i in items if i.string_value)
    return None


def with_stream_usage(path: str, body: dict[str, Any]) -> bytes | None:
    """The body with `stream_options.include_usage: true` when a stream did not ask for its usage
    (the tokens a key is charged come from it), else None (the body goes on unchanged)."""
    if path not in STREAMING_PATHS or body.get("stream") is not True:
        return None
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return None
    changed = dict(body)
    changed["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return json.dumps(changed, separators=(",", ":")).encode()


def models_list(dispatcher: Dispatcher, key: keys.Key | None = None) -> Refusal:
    """OpenAI's model list (a 200 answered like a refusal: status, headers, body): the key's models."""
    data = [_model_object(route) for route in dispatcher.table.models() if key is None or key.allows(route.model)]
    body = json.dumps({"object": "list", "data": data}, separators=(",", ":")).encode()
    return Refusal(200, body, (("content-type", openai_errors.JSON),))


def _model_object(route: Any) -> dict[str, Any]:
    created = 0
    if route.created:
        created = calendar.timegm(time.strptime(route.created, "%Y-%m-%dT%H:%M:%SZ"))
    return {"id": route.model, "object": "model", "created": created, "owned_by": route.namespace}


def parse_body(raw: bytes) -> tuple[dict[str, Any], str] | Refusal:
    """The body and its model, or the 400 to answer."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return openai_errors.invalid_json(str(exc))
    if not isinstance(body, dict):
        return openai_errors.not_an_object()
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return openai_errors.missing_model()
    return body, model


class ExtProc(pb_grpc.ExternalProcessorServicer):
    def __init__(self, dispatcher: Dispatcher, gatekeeper: Gatekeeper | None = None) -> None:
        self.dispatcher = dispatcher
        self.gatekeeper = gatekeeper  # None: no keys (every caller is served)

    async def Process(self, request_iterator: AsyncIterator[pb.ProcessingRequest],  # noqa: N802 - gRPC's name
                      context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ProcessingResponse]:
        stream = aiter(request_iterator)
        try:
            first = await anext(stream)
        except StopAsyncIteration:
            return
        async for response in self._route(first, stream):
            yield response

    async def _route(self, first: pb.ProcessingRequest,
                     stream: AsyncIterator[pb.ProcessingRequest]) -> AsyncIterator[pb.ProcessingResponse]:
        if first.WhichOneof("request") != "request_headers":
            log.warning("ext_proc stream began with %s, not request headers", first.WhichOneof("request"))
            return
        headers = header_map(first.request_headers)
        method, path = headers.get(":method", ""), headers.get(":path", "").split("?", 1)[0]
        key: keys.Key | None = None
        if self.gatekeeper is not None:
            found = self.gatekeeper.authenticate(headers.get("authorization"))
            if isinstance(found, Refusal):
                metrics.REQUESTS.labels("", str(found.status)).inc()
                metrics.KEY_REQUESTS.labels("", "", str(found.status)).inc()
                yield immediate(found, "shardwise_unauthorized")
                return
            key = found
        early = self._answer_headers(method, path, first.request_headers.end_of_stream, key)
        if early is not None:
            metrics.REQUESTS.labels("", str(early.status)).inc()
            yield immediate(early, "shardwise_" + ("models" if early.status == 200 else "refused"))
            return
        yield pb.ProcessingResponse(request_headers=pb.HeadersResponse())
        message = await anext(stream, None)
        if message is None or message.WhichOneof("request") != "request_body":
            return
        raw = message.request_body.body
        parsed = parse_body(raw)
        if isinstance(parsed, Refusal):
            metrics.REQUESTS.labels("", str(parsed.status)).inc()
            yield immediate(parsed, "shardwise_bad_request")
            return
        body, model = parsed
        ticket: Ticket | None = None
        if key is not None and self.gatekeeper is not None:
            admitted = (openai_errors.model_not_allowed(model) if not key.allows(model)
                        else await self.gatekeeper.admit(key))
            if isinstance(admitted, Refusal):
                metrics.REQUESTS.labels("", str(admitted.status)).inc()
                metrics.KEY_REQUESTS.labels(key.id, model if key.allows(model) else "", str(admitted.status)).inc()
                yield immediate(admitted, "shardwise_refused")
                return
            ticket = admitted
        try:
            choice = await self.dispatcher.choose(model, len(raw), picker.prefix_of(body),
                                                  subset_hint(first, message))
            if isinstance(choice, Refusal):
                known = self.dispatcher.table.get(model) is not None
                metrics.REQUESTS.labels(model if known else "", str(choice.status)).inc()
                if key is not None:
                    metrics.KEY_REQUESTS.labels(key.id, model if known else "", str(choice.status)).inc()
                yield immediate(choice, "shardwise_refused")
                return
            try:
                mutated = with_stream_usage(path, body) if key is not None else None
                yield _routed(choice, model, key_id=key.id if key is not None else None, body=mutated)
                async for _ in stream:  # nothing more is sent in this mode; wait for the request's end
                    pass
            finally:
                self.dispatcher.done(choice)
        finally:
            if ticket is not None and self.gatekeeper is not None:
                self.gatekeeper.release(ticket)

    def _answer_headers(self, method: str, path: str, end_of_stream: bool,
                        key: keys.Key | None = None) -> Refusal | None:
        if path in ("/v1/models", "/v1/models/") and method == "GET":
            return models_list(self.dispatcher, key)
        if path.startswith("/v1/models/") and method == "GET":
            route = self.dispatcher.table.get(path.removeprefix("/v1/models/"))
            if route is None or (key is not None and not key.allows(route.model)):
                return openai_errors.model_not_found(path.removeprefix("/v1/models/"))
            body = json.dumps(_model_object(route), separators=(",", ":")).encode()
            return Refusal(200, body, (("content-type", openai_errors.JSON),))
        if path not in ROUTED_PATHS or method != "POST":
            return openai_errors.unknown_url(method, path)
        if end_of_stream:
            return openai_errors.invalid_json("the body is empty")
        return None
