"""The parts of the GIE endpoint-picker protocol (docs/proposals/004 at v1.5.0) that a gateway other
than shardwise's own relies on: the picked endpoint as header and as `envoy.lb` dynamic metadata,
and the subset hint a gateway may send in the filter metadata."""

from __future__ import annotations

import asyncio

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from google.protobuf import json_format, struct_pb2

from shardwise.gateway.dataplane import extproc_messages
from shardwise.gateway.decide.openai_errors import Refusal
from tests.unit.gateway.test_dispatcher import make, table

A, B = "10.0.0.1:8000", "10.0.0.2:8000"


def _with_subset(value: object) -> pb.ProcessingRequest:
    hint = struct_pb2.Struct()
    hint.update({extproc_messages.SUBSET_KEY: value})
    message = pb.ProcessingRequest()
    message.metadata_context.filter_metadata[extproc_messages.SUBSET_NAMESPACE].CopyFrom(hint)
    return message


def test_the_picked_endpoint_is_the_header_and_the_envoy_lb_metadata() -> None:
    response = extproc_messages.routed(A, "m")
    headers = {h.header.key: h.header.raw_value.decode()
               for h in response.request_body.response.header_mutation.set_headers}
    assert headers["x-gateway-destination-endpoint"] == A
    assert json_format.MessageToDict(response.dynamic_metadata) == {
        "envoy.lb": {"x-gateway-destination-endpoint": A}}
    assert response.request_body.response.clear_route_cache


def test_the_subset_hint_is_read_from_the_filter_metadata_of_any_message() -> None:
    assert extproc_messages.subset_hint(pb.ProcessingRequest()) is None
    assert extproc_messages.subset_hint(pb.ProcessingRequest(), _with_subset([A, B])) == frozenset({A, B})
    assert extproc_messages.subset_hint(_with_subset([])) == frozenset()


def test_the_pick_stays_inside_the_subset_and_an_empty_one_is_503() -> None:
    async def main() -> None:
        dispatcher, _, _ = make()
        dispatcher.set_table(table(m=((A, B), False)))
        picks = set()
        for _ in range(6):
            pick = await dispatcher.choose("m", 1, None, frozenset({B}))
            picks.add(pick)
        assert picks == {B}
        refused = await dispatcher.choose("m", 1, None, frozenset({"10.9.9.9:8000"}))
        assert isinstance(refused, Refusal) and refused.status == 503
        assert ("retry-after", "5") in refused.headers
    asyncio.run(main())
