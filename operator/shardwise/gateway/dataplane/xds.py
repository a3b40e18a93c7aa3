"""Envoy's aggregated discovery service (ADS, state of the world), for the fast path's two resources.

The gateway's Envoy asks for the route configuration (RDS) and the fast cluster's endpoints (EDS)
on one gRPC stream to this service (envoy.py's bootstrap). Each stream is sent the newest
snapshot of a type when it asks for that type and whenever the snapshot changes; Envoy answers
each response with an ACK (the version it now runs) or a NACK (the version it keeps, and why),
and a response is not sent again for a version the stream already has, so neither loops.

Order on a change (`plan`): a bridge first, the endpoints of the old and the new routes together,
then the new routes, then the new endpoints: no route Envoy runs points at an empty subset.

Why not a library: the Python xDS control planes on PyPI are unmaintained or pull in a web
framework; the protocol for two resource types of one client is this module.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf import any_pb2, json_format
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.http.ext_proc.v3 import ext_proc_pb2  # noqa: F401 - an Any in the routes
from envoy.extensions.filters.http.lua.v3 import lua_pb2  # noqa: F401 - an Any in the routes (keys filter)
from envoy.extensions.retry.host.previous_hosts.v3 import previous_hosts_pb2  # noqa: F401 - an Any in the routes
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

from shardwise.gateway import metrics
from shardwise.gateway.dataplane import fastpath

log = logging.getLogger(__name__)

ROUTES = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
ENDPOINTS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"


def _packed(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def resource_of(type_url: str, resource: dict[str, Any]) -> any_pb2.Any:
    """A resource as Envoy's proto (a malformed dict fails here, not in Envoy)."""
    message = route_pb2.RouteConfiguration() if type_url == ROUTES else endpoint_pb2.ClusterLoadAssignment()
    return _packed(json_format.ParseDict(resource, message))


def plan(snapshot: fastpath.Snapshot, wanted: set[str], sent: dict[str, str],
         sent_endpoints: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """What one stream is sent next, in order: (type URL, resource) pairs.

    `sent`: type URL -> the version this stream was sent last; `sent_endpoints`: the endpoints it
    was sent last. New routes go out after a bridge, the endpoints of both the old and the new
    routes, and the new endpoints after them: no route Envoy runs ever points at an empty subset,
    whether models gain endpoints, lose them or both at once."""
    out: list[tuple[str, dict[str, Any]]] = []
    last_endpoints = sent.get(ENDPOINTS)
    if ROUTES in wanted and sent.get(ROUTES) != fastpath.version_of(snapshot.route_config):
        if ENDPOINTS in wanted and sent_endpoints is not None:
            bridge = fastpath.merged_endpoints(sent_endpoints, snapshot.endpoints)
            if fastpath.version_of(bridge) != last_endpoints:
                out.append((ENDPOINTS, bridge))
                last_endpoints = fastpath.version_of(bridge)
        out.append((ROUTES, snapshot.route_config))
    if ENDPOINTS in wanted and last_endpoints != fastpath.version_of(snapshot.endpoints):
        out.append((ENDPOINTS, snapshot.endpoints))
    return out


class Discovery(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):
    """`snapshot` None: nothing to send yet. A restarted service answers no stream before its
    informers sync: a running Envoy keeps the routes it has, a new one stays warming (not ready)."""

    def __init__(self, snapshot: fastpath.Snapshot | None = None) -> None:
        self._snapshot = snapshot
        self._packed: dict[str, any_pb2.Any] = {}  # version -> resource, for the current snapshot's
        self._changed = asyncio.Event()  # set (and replaced) on every new snapshot

    def update(self, snapshot: fastpath.Snapshot) -> None:
        """A new snapshot for every stream (nothing is sent when the content is the same)."""
        if self._snapshot is not None and snapshot.version == self._snapshot.version:
            return
        for type_url, resource in ((ROUTES, snapshot.route_config), (ENDPOINTS, snapshot.endpoints)):
            resource_of(type_url, resource)  # refuse what Envoy would, before any stream is sent it
        self._snapshot, self._packed = snapshot, {}
        metrics.FAST_MODELS.set(len(snapshot.models))
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _resource(self, type_url: str, resource: dict[str, Any], version: str) -> any_pb2.Any:
        if version not in self._packed:
            self._packed[version] = resource_of(type_url, resource)
        return self._packed[version]

    async def StreamAggregatedResources(  # noqa: N802 - gRPC's name
            self, request_iterator: AsyncIterator[discovery_pb2.DiscoveryRequest],
            context: grpc.aio.ServicerContext) -> AsyncIterator[discovery_pb2.DiscoveryResponse]:
        wanted: set[str] = set()
        sent: dict[str, str] = {}
        sent_endpoints: dict[str, Any] | None = None
        nonces = iter(range(1, 1 << 62))
        reader = asyncio.create_task(self._read(request_iterator, wanted))
        waiter: asyncio.Future[bool] | None = None
        try:
            while not reader.done():
                changed = self._changed
                steps = plan(self._snapshot, wanted, sent, sent_endpoints) if self._snapshot is not None else []
                for type_url, resource in steps:
                    version = fastpath.version_of(resource)
                    sent[type_url] = version
                    if type_url == ENDPOINTS:
                        sent_endpoints = resource
                    yield discovery_pb2.DiscoveryResponse(
                        version_info=version, type_url=type_url, nonce=str(next(nonces)),
                        resources=[self._resource(type_url, resource, version)])
                waiter = asyncio.ensure_future(changed.wait())
                await asyncio.wait([reader, waiter], return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
        finally:
            reader.cancel()
            if waiter is not None:
                waiter.cancel()

    async def _read(self, requests: AsyncIterator[discovery_pb2.DiscoveryRequest], wanted: set[str]) -> None:
        async for request in requests:
            if request.type_url not in (ROUTES, ENDPOINTS):
                continue
            if request.HasField("error_detail"):
                log.error("Envoy refused %s (nonce %s): %s; it keeps version %r", request.type_url.rsplit(".", 1)[-1],
                          request.response_nonce, request.error_detail.message, request.version_info)
                metrics.XDS_REJECTED.inc()
            if request.type_url not in wanted:
                wanted.add(request.type_url)
                self._wake()
