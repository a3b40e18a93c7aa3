"""Envoy's aggregated discovery service (ADS, state of the world), for the fast path's two resources.

The gateway's Envoy asks for the route configuration (RDS) and the fast cluster's endpoints (EDS)
on one gRPC stream to this service (envoy.py's bootstrap). Each stream is sent the newest
snapshot of a type when it asks for that type and whenever the snapshot changes; Envoy answers
each response with an ACK (the version it now runs) or a NACK (the version it keeps, and why),
and a response is not sent again for a version the stream already has, so neither loops.

Order on a change: endpoints before routes when models gain endpoints (a route never points at
an empty subset), routes before endpoints when they lose them. The snapshot exists before the
informers sync: the ext_proc route alone, which holds every request until they have.

Why not a library: the Python xDS control planes on PyPI are unmaintained or pull in a web
framework; the protocol for two resource types of one client is this module.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
from google.protobuf import any_pb2, json_format
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.http.ext_proc.v3 import ext_proc_pb2  # noqa: F401 - an Any in the routes
from envoy.extensions.retry.host.previous_hosts.v3 import previous_hosts_pb2  # noqa: F401 - an Any in the routes
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

from shardwise.gateway import fastpath, metrics

log = logging.getLogger(__name__)

ROUTES = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
ENDPOINTS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"


def _packed(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def resources(snapshot: fastpath.Snapshot) -> dict[str, any_pb2.Any]:
    """type URL -> the resource, as Envoy's protos (a malformed dict fails here, not in Envoy)."""
    return {
        ROUTES: _packed(json_format.ParseDict(snapshot.route_config, route_pb2.RouteConfiguration())),
        ENDPOINTS: _packed(json_format.ParseDict(snapshot.endpoints, endpoint_pb2.ClusterLoadAssignment())),
    }


def send_order(old: fastpath.Snapshot | None, new: fastpath.Snapshot) -> tuple[str, str]:
    """Endpoints first when they grow or stay, routes first when routes go away."""
    if old is not None and _route_names(new) < _route_names(old):
        return ROUTES, ENDPOINTS
    return ENDPOINTS, ROUTES


def _route_names(snapshot: fastpath.Snapshot) -> set[str]:
    return {r["name"] for vhost in snapshot.route_config["virtual_hosts"] for r in vhost["routes"]}


class Discovery(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):
    def __init__(self, snapshot: fastpath.Snapshot) -> None:
        self._snapshot = snapshot
        self._resources = resources(snapshot)
        self._order: tuple[str, str] = (ENDPOINTS, ROUTES)
        self._changed = asyncio.Event()  # set (and replaced) on every new snapshot

    @property
    def version(self) -> str:
        return self._snapshot.version

    def update(self, snapshot: fastpath.Snapshot) -> None:
        """A new snapshot for every stream (nothing is sent when the content is the same)."""
        if snapshot.version == self._snapshot.version:
            return
        self._order = send_order(self._snapshot, snapshot)
        self._snapshot, self._resources = snapshot, resources(snapshot)
        metrics.FAST_MODELS.set(len(snapshot.models))
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def StreamAggregatedResources(  # noqa: N802 - gRPC's name
            self, request_iterator: AsyncIterator[discovery_pb2.DiscoveryRequest],
            context: grpc.aio.ServicerContext) -> AsyncIterator[discovery_pb2.DiscoveryResponse]:
        wanted: set[str] = set()
        sent: dict[str, str] = {}  # type URL -> the version this stream was sent last
        nonces = iter(range(1, 1 << 62))
        reader = asyncio.create_task(self._read(request_iterator, wanted))
        waiter: asyncio.Future[bool] | None = None
        try:
            while not reader.done():
                changed = self._changed
                for type_url in self._order:
                    if type_url in wanted and sent.get(type_url) != self.version:
                        sent[type_url] = self.version
                        yield discovery_pb2.DiscoveryResponse(
                            version_info=self.version, type_url=type_url, nonce=str(next(nonces)),
                            resources=[self._resources[type_url]])
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
                log.error("Envoy refused %s version %s: %s (it keeps version %r)", request.type_url.rsplit(".", 1)[-1],
                          request.response_nonce, request.error_detail.message, request.version_info)
                metrics.XDS_REJECTED.inc()
            if request.type_url not in wanted:
                wanted.add(request.type_url)
                self._wake()
