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

import collections
import json
import logging
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from shardwise.gateway import metrics
from shardwise.gateway.dataplane import envoy
from shardwise.gateway.dataplane import extproc_messages as messages
from shardwise.gateway.decide import disaggregation, keys, openai_errors, picker, requests
from shardwise.gateway.decide.openai_errors import Refusal
from shardwise.gateway.service import answered as answered_facts
from shardwise.gateway.service.dispatcher import Dispatcher
from shardwise.gateway.service.gatekeeper import Gatekeeper, Ticket
from shardwise.gateway.service.prefill import PrefillLegs
from shardwise.gateway.service.spillover import Spill

log = logging.getLogger(__name__)

# Answers that end the request's exchange: after one of them nothing more may be sent on the stream.
_FINAL = frozenset({"immediate_response", "request_body"})


class Tracebacks:
    """A traceback per signature (the exception's type and where it was raised) at most once per
    `every` seconds, so a client that can trigger a bug cannot fill the log with it; the count of
    those left out comes with the next one. (kube.quietlog's failing/recovered model fits one loop
    that retries, not many requests failing alike.)"""

    def __init__(self, every: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every, self._clock = every, clock
        self._last: dict[tuple[str, str, int], float] = {}
        self._left_out: collections.Counter[tuple[str, str, int]] = collections.Counter()

    def log(self, exc: BaseException, request_id: str) -> bool:
        frames = traceback.extract_tb(exc.__traceback__)
        where = (frames[-1].filename, frames[-1].lineno or 0) if frames else ("", 0)
        signature = (type(exc).__name__, *where)
        now, last = self._clock(), self._last.get(signature)
        if last is not None and now - last < self.every:
            self._left_out[signature] += 1
            return False
        self._last[signature] = now
        left_out = self._left_out.pop(signature, 0)
        log.error("request %s failed inside the gateway (answered 500 server_error)%s", request_id,
                  f"; {left_out} more alike in the last {now - last:.0f} s" if left_out and last is not None else "",
                  exc_info=exc)
        return True


def request_id_of(first: pb.ProcessingRequest) -> str:
    """Envoy's x-request-id (its access log carries the same), else one of our own."""
    try:
        given = messages.header_map(first.request_headers).get("x-request-id", "")
    except Exception:  # noqa: BLE001 - only an id is wanted here, whatever the headers are
        given = ""
    return given if 0 < len(given) <= 128 and given.isascii() and given.isprintable() else f"req_{uuid.uuid4().hex}"


class ExtProc(pb_grpc.ExternalProcessorServicer):
    def __init__(self, dispatcher: Dispatcher, gatekeeper: Gatekeeper | None = None, providers: Any = None,
                 prefill: PrefillLegs | None = None,
                 on_answered: Callable[[answered_facts.Answered], None] | None = None) -> None:
        self.dispatcher = dispatcher
        # A request the gateway answered itself (a refusal): its usage record (service/answered.py)
        self.on_answered = on_answered
        self.prefill = prefill or PrefillLegs()  # disaggregated pairs: the prefill leg before the decode
        self.gatekeeper = gatekeeper  # None: no keys (every caller is served)
        self.providers = providers  # service/providers.Book, or None: no hosted models
        self.spill = Spill(dispatcher, providers) if providers is not None else None  # spill-over while waking
        self.tracebacks = Tracebacks()

    async def Process(self, request_iterator: AsyncIterator[pb.ProcessingRequest],  # noqa: N802 - gRPC's name
                      context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ProcessingResponse]:
        stream = aiter(request_iterator)
        try:
            first = await anext(stream)
        except StopAsyncIteration:
            return
        answered = False
        facts = answered_facts.Facts(started_unix_s=time.time())
        try:
            async for response in self._route(first, stream, facts):
                answered = answered or response.WhichOneof("response") in _FINAL
                if self.on_answered is not None and response.WhichOneof("response") == "immediate_response":
                    answered_facts.hand_over(self.on_answered, first, response, facts)
                yield response
        except Exception as exc:  # noqa: BLE001 - none may reach gRPC: Envoy would answer 503 with an empty body
            request_id = request_id_of(first)
            metrics.INTERNAL_ERRORS.labels(type(exc).__name__).inc()
            self.tracebacks.log(exc, request_id)
            if not answered:  # once routed, the request is the engine's to answer
                metrics.REQUESTS.labels("", "500").inc()
                response = messages.immediate(openai_errors.internal_error(request_id), "shardwise_internal_error")
                if self.on_answered is not None:
                    answered_facts.hand_over(self.on_answered, first, response, facts)
                yield response

    async def _route(self, first: pb.ProcessingRequest, stream: AsyncIterator[pb.ProcessingRequest],
                     facts: answered_facts.Facts | None = None) -> AsyncIterator[pb.ProcessingResponse]:
        facts = facts if facts is not None else answered_facts.Facts()
        if first.WhichOneof("request") != "request_headers":
            log.warning("ext_proc stream began with %s, not request headers", first.WhichOneof("request"))
            return
        headers = messages.header_map(first.request_headers)
        method, path = headers.get(":method", ""), headers.get(":path", "").split("?", 1)[0]
        key: keys.Key | None = None
        if self.gatekeeper is not None:
            found = self.gatekeeper.authenticate(headers.get("authorization"))
            if isinstance(found, Refusal):
                metrics.REQUESTS.labels("", str(found.status)).inc()
                metrics.KEY_REQUESTS.labels("", "", str(found.status)).inc()
                yield messages.immediate(found, "shardwise_unauthorized")
                return
            key = found
            facts.key_id = key.id
        early = self._answer_headers(method, path, first.request_headers.end_of_stream, key)
        if early is not None:
            metrics.REQUESTS.labels("", str(early.status)).inc()
            yield messages.immediate(early, "shardwise_" + ("models" if early.status == 200 else "refused"))
            return
        yield pb.ProcessingResponse(request_headers=pb.HeadersResponse())
        message = await anext(stream, None)
        if message is None or message.WhichOneof("request") != "request_body":
            return
        raw = message.request_body.body
        parsed = requests.parse_body(raw)
        if isinstance(parsed, Refusal):
            metrics.REQUESTS.labels("", str(parsed.status)).inc()
            yield messages.immediate(parsed, "shardwise_bad_request")
            return
        body, model = parsed
        facts.model = model
        ticket: Ticket | None = None
        if key is not None and self.gatekeeper is not None:
            admitted = (openai_errors.model_not_allowed(model) if not key.allows(model)
                        else await self.gatekeeper.admit(key))
            if isinstance(admitted, Refusal):
                metrics.REQUESTS.labels("", str(admitted.status)).inc()
                metrics.KEY_REQUESTS.labels(key.id, model if key.allows(model) else "", str(admitted.status)).inc()
                yield messages.immediate(admitted, "shardwise_refused")
                return
            ticket = admitted
        try:
            hosted = self._hosted(model)
            if hosted is not None:  # a model only a Provider serves (service/providers.py)
                async for response in self.providers.serve(hosted, path, body, key.id if key is not None else None,
                                                           stream):
                    yield response
                return
            spilled = self.spill.target(model) if self.spill is not None else None
            if spilled is not None:  # waking: answered at once through its provider (service/spillover.py)
                async for response in self.providers.serve(spilled, path, body, key.id if key is not None else None,
                                                           stream):
                    yield response
                return
            choice = await self.dispatcher.choose(model, len(raw), picker.prefix_of(body),
                                                  messages.subset_hint(first, message))
            if isinstance(choice, Refusal):
                known = self.dispatcher.table.get(model) is not None
                metrics.REQUESTS.labels(model if known else "", str(choice.status)).inc()
                if key is not None:
                    metrics.KEY_REQUESTS.labels(key.id, model if known else "", str(choice.status)).inc()
                yield messages.immediate(choice, "shardwise_refused")
                return
            try:
                outgoing = await self._prefilled(model, choice, path, body, first)
                mutated = requests.with_stream_usage(path, outgoing) if key is not None else None
                if mutated is None and outgoing is not body:
                    mutated = disaggregation.encode(outgoing)
                yield messages.routed(choice, model, key_id=key.id if key is not None else None, body=mutated)
                async for _ in stream:  # nothing more is sent in this mode; wait for the request's end
                    pass
            finally:
                self.dispatcher.done(choice)
        finally:
            if ticket is not None and self.gatekeeper is not None:
                self.gatekeeper.release(ticket)

    async def _prefilled(self, model: str, decode: str, path: str, body: dict[str, Any],
                         first: pb.ProcessingRequest) -> dict[str, Any]:
        """The decode leg's body: the client's, with the kv_transfer_params of a prefill leg when
        the model is a disaggregated pair and its prefill went to a prefill engine."""
        route = self.dispatcher.table.get(model)
        if route is None or not route.prefill_endpoints:
            return body
        # A client's own kv_transfer_params would have a decode engine pull KV from any host it names.
        own = {k: v for k, v in body.items() if k != "kv_transfer_params"} if "kv_transfer_params" in body else body
        leg = await self.prefill.before_decode(self.dispatcher, route, decode, path, own, request_id_of(first))
        return own if leg.params is None else disaggregation.decode_body(own, leg.params)

    def _hosted(self, model: str) -> Any:
        """The provider's model when no deployment serves the name (a self-hosted name is never shadowed)."""
        if self.providers is None or self.dispatcher.table.get(model) is not None:
            return None
        return self.providers.get(model)

    def _answer_headers(self, method: str, path: str, end_of_stream: bool,
                        key: keys.Key | None = None) -> Refusal | None:
        if path in ("/v1/models", "/v1/models/") and method == "GET":
            hosted = self.providers.hosted() if self.providers is not None else []
            return requests.models_list([*self.dispatcher.table.models(), *hosted], key)
        if path.startswith("/v1/models/") and method == "GET":
            route = self.dispatcher.table.get(path.removeprefix("/v1/models/")) or \
                self._hosted(path.removeprefix("/v1/models/"))
            if route is None or (key is not None and not key.allows(route.model)):
                return openai_errors.model_not_found(path.removeprefix("/v1/models/"))
            body = json.dumps(requests.model_object(route), separators=(",", ":")).encode()
            return Refusal(200, body, (("content-type", openai_errors.JSON),))
        if path not in envoy.ROUTED_PATHS or method != "POST":
            return openai_errors.unknown_url(method, path)
        if end_of_stream:
            return openai_errors.invalid_json("the body is empty")
        return None
