"""Hosted providers in Envoy: a TLS cluster per Provider, sent over CDS, one route to whichever the
picker names, and the picker's answer for a request to a hosted model.

Why a cluster per provider (and not Envoy's dynamic forward proxy with auto_sni): a forward-proxy
cluster has one TLS context, so one trust store for every host it reaches; a Provider with a
private CA bundle would make that CA trusted for every other provider's hostname too. A cluster of
its own gives each provider its own trust (system or its bundle), SNI and SAN check on its host,
connect timeout, stream duration and circuit breaker, and its own Envoy stats
(`cluster.provider/NS/NAME.upstream_rq_5xx`...). The clusters come from the service over CDS on a
stream of their own (not the fast path's ADS stream): they change only when Providers or their
Secrets do, and no route names them (the route takes the cluster from a header), so there is no
ordering to keep with the routes.

Why the key crosses in the picker's answer and not in Envoy's config: a key in a cluster or a
route would sit in Envoy's config dump (/config_dump on the admin port) in clear; a header
mutation on one request is in no dump, no access log (only the model and key-id headers and
metadata are logged) and no stat. The caller's own Authorization is overwritten by it.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf import any_pb2, json_format, struct_pb2
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2  # noqa: F401 - an Any in the clusters
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2  # noqa: F401 - an Any in the clusters
from envoy.service.cluster.v3 import cds_pb2_grpc
from envoy.service.discovery.v3 import discovery_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from shardwise.gateway.dataplane import envoy, fastpath
from shardwise.gateway.decide import providers

log = logging.getLogger(__name__)

CLUSTERS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
PROVIDER_HEADER = envoy.PROVIDER_HEADER  # the cluster the provider route sends to; set by the picker only
SYSTEM_CA_FILE = "/etc/ssl/certs/ca-certificates.crt"
# Removed before the provider: every header of shardwise's. The picker sets only the cluster's
# name, which the route reads before this removal; the model, the key id and the cluster reach the
# access log and the failure mapper as dynamic metadata (envoy.ROUTE_NAMESPACE), because Envoy's
# upstream request shares the downstream header map: a header removed here is gone from the log's
# entry too (measured: the request went uncounted). The model and key headers are in the list for
# a request whose headers an earlier filter set.
NOT_FOR_PROVIDERS = (envoy.AFFINITY_HEADER, envoy.MODEL_MATCH_HEADER, envoy.PROVIDER_HEADER, envoy.MODEL_HEADER,
                     envoy.KEY_HEADER, envoy.DESTINATION_HEADER)
_TLS = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
_HTTP_OPTIONS = "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
_OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD


def cluster(upstream: providers.Upstream, system_ca_file: str = SYSTEM_CA_FILE) -> dict[str, Any]:
    """The provider's cluster: its host by DNS, TLS with SNI and the certificate checked against the
    host (DNS or IP SAN) with the provider's trust, its cap as Envoy's circuit breaker (the picker
    refuses first, with an OpenAI 429; this bounds what gets past it), and its request timeout as the
    upstream stream's duration."""
    trusted = {"inline_string": upstream.ca_pem} if upstream.ca_pem else {"filename": system_ca_file}
    san = {"san_type": "IP_ADDRESS" if upstream.is_ip else "DNS", "matcher": {"exact": upstream.host}}
    tls: dict[str, Any] = {"@type": _TLS, "common_tls_context": {"validation_context": {
        "trusted_ca": trusted, "match_typed_subject_alt_names": [san]}}}
    if not upstream.is_ip:  # SNI must be a name
        tls["sni"] = upstream.host
    cap = upstream.max_concurrent
    return {
        "name": upstream.cluster, "type": "LOGICAL_DNS", "dns_lookup_family": "V4_PREFERRED",
        "connect_timeout": f"{upstream.connect_timeout_s}s",
        "load_assignment": {"cluster_name": upstream.cluster, "endpoints": [{"lb_endpoints": [{"endpoint": {
            "address": {"socket_address": {"address": upstream.host, "port_value": upstream.port}},
            "hostname": upstream.host}}]}]},
        "transport_socket": {"name": "envoy.transport_sockets.tls", "typed_config": tls},
        "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": _HTTP_OPTIONS, "explicit_http_config": {"http_protocol_options": {}},
            "common_http_protocol_options": {"max_stream_duration": f"{upstream.request_timeout_s}s"}}},
        "circuit_breakers": {"thresholds": [{"max_connections": cap, "max_pending_requests": cap,
                                             "max_requests": cap, "max_retries": 3}]},
    }


def clusters(catalogue: providers.Catalogue, system_ca_file: str = SYSTEM_CA_FILE) -> list[dict[str, Any]]:
    return [cluster(catalogue.upstreams[pid], system_ca_file) for pid in sorted(catalogue.upstreams)]


def route() -> dict[str, Any]:
    """The route a hosted-model request takes once the picker named its provider's cluster: placed
    before the picker's route. A client's own copy of the header never reaches it (the match filter
    removes it, envoy.py). The Host becomes the provider's host (auto_host_rewrite, from the
    cluster's endpoint hostname)."""
    return {"name": "providers",
            "match": {"prefix": "/", "headers": [{"name": PROVIDER_HEADER, "present_match": True}]},
            "route": {"cluster_header": PROVIDER_HEADER, "timeout": "0s", "auto_host_rewrite": True,
                      # Only a connection that never opened is retried: nothing reached the provider.
                      "retry_policy": {"retry_on": "connect-failure", "num_retries": 1}},
            "request_headers_to_remove": list(NOT_FOR_PROVIDERS),
            "typed_per_filter_config": fastpath._NO_KEYS_FILTER}  # noqa: SLF001 - the keys filter has run already


def with_route(snapshot: fastpath.Snapshot) -> fastpath.Snapshot:
    """The fast path's snapshot with the provider route placed before the picker's (the last)."""
    config = copy.deepcopy(snapshot.route_config)
    for host in config.get("virtual_hosts", ()):
        host["routes"] = [*host["routes"][:-1], route(), *host["routes"][-1:]]
    return dataclasses.replace(snapshot, route_config=config)


def routed(upstream: providers.Upstream, hosted: providers.HostedModel, path: str, body: bytes, *,
           key_id: str | None) -> pb.ProcessingResponse:
    """The picker's answer for a hosted model: the provider's cluster, its path, its key in place of
    the caller's, the body with the provider's model id. The alias (the observer's model), the key id
    (charged) and the cluster are dynamic metadata for the access log, never headers the provider
    would get; the cluster's header, for the route, is removed before the provider (route())."""
    values = [(PROVIDER_HEADER, upstream.cluster), (":path", upstream.upstream_path(path)),
              ("authorization", f"Bearer {upstream.key}"), ("content-length", str(len(body)))]
    routed_as = {"model": hosted.model, "provider": upstream.cluster}
    if key_id is not None:
        routed_as["key"] = key_id
    set_headers = [base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=k, raw_value=v.encode()),
                                              append_action=_OVERWRITE) for k, v in values]
    common = pb.CommonResponse(header_mutation=pb.HeaderMutation(
        set_headers=set_headers, remove_headers=[envoy.MODEL_MATCH_HEADER, envoy.DESTINATION_HEADER,
                                                 envoy.MODEL_HEADER, envoy.KEY_HEADER]),
        clear_route_cache=True)
    common.body_mutation.body = body
    metadata = struct_pb2.Struct()
    metadata.update({envoy.ROUTE_NAMESPACE: routed_as})
    return pb.ProcessingResponse(request_body=pb.BodyResponse(response=common), dynamic_metadata=metadata)


def resource(cluster_dict: dict[str, Any]) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(json_format.ParseDict(cluster_dict, cluster_pb2.Cluster()))
    return packed


class ClusterDiscovery(cds_pb2_grpc.ClusterDiscoveryServiceServicer):
    """CDS, state of the world: every stream gets the current clusters when it asks and on each
    change (a version is a digest of the content; an ACKed version is not sent again)."""

    def __init__(self, system_ca_file: str = SYSTEM_CA_FILE) -> None:
        self.system_ca_file = system_ca_file
        self._clusters: list[dict[str, Any]] = []
        self._packed: list[any_pb2.Any] = []
        self._version = fastpath.version_of(self._clusters)
        self._changed = asyncio.Event()

    def update(self, catalogue: providers.Catalogue) -> None:
        wanted = clusters(catalogue, self.system_ca_file)
        version = fastpath.version_of(wanted)
        if version == self._version:
            return
        self._packed = [resource(c) for c in wanted]  # refuse what Envoy would, before sending
        self._clusters, self._version = wanted, version
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def StreamClusters(  # noqa: N802 - gRPC's name
            self, request_iterator: AsyncIterator[discovery_pb2.DiscoveryRequest],
            context: grpc.aio.ServicerContext) -> AsyncIterator[discovery_pb2.DiscoveryResponse]:
        asked = asyncio.Event()
        nonces = iter(range(1, 1 << 62))

        async def read() -> None:
            async for request in request_iterator:
                if request.HasField("error_detail"):
                    # The message names the cluster and Envoy's reason; the key is never in a cluster.
                    log.error("Envoy refused the provider clusters: %s", request.error_detail.message)
                asked.set()

        reader = asyncio.create_task(read())
        sent: str | None = None
        waiter: asyncio.Future[bool] = asyncio.ensure_future(asked.wait())
        try:
            await asyncio.wait([reader, waiter], return_when=asyncio.FIRST_COMPLETED)
            while not reader.done():
                changed = self._changed
                if sent != self._version:
                    sent = self._version
                    yield discovery_pb2.DiscoveryResponse(version_info=sent, type_url=CLUSTERS,
                                                          nonce=str(next(nonces)), resources=list(self._packed))
                waiter.cancel()
                waiter = asyncio.ensure_future(changed.wait())
                await asyncio.wait([reader, waiter], return_when=asyncio.FIRST_COMPLETED)
        finally:
            reader.cancel()
            waiter.cancel()
