"""Envoy's ext_proc messages, built and read: a refusal answered at once, a request routed to the
endpoint the picker chose (the Gateway API Inference Extension's endpoint-picker protocol), the
headers of a request and the endpoint subset a GIE gateway offers."""

from __future__ import annotations

from google.protobuf import struct_pb2
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.type.v3 import http_status_pb2

from shardwise.gateway.dataplane import envoy
from shardwise.gateway.decide.openai_errors import Refusal

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


def routed(endpoint: str, model: str, *, key_id: str | None = None,
            body: bytes | None = None) -> pb.ProcessingResponse:
    values = [(envoy.DESTINATION_HEADER, endpoint), (envoy.MODEL_HEADER, model)]
    # Without the match header no fast route applies when the route is chosen again: the request
    # goes where the picker said, even if its model got a fast route while it was held.
    remove: list[str] = [envoy.MODEL_MATCH_HEADER]
    if key_id is not None:  # keys on: the observer charges this id; the key itself never reaches an engine
        values.append((envoy.KEY_HEADER, key_id))
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
