"""The Envoy bootstrap: a static config that makes Envoy the gateway's data path.

One listener speaks HTTP/1.1 and HTTP/2 to clients. Its routes and the fast cluster's endpoints
come from the service over ADS (fastpath.py, xds.py). The filters, in order:
- `shardwise.body` (json_to_metadata) reads the body's top-level `model` into dynamic metadata;
- `shardwise.match` (Lua, match_lua.py) copies it into the header the fast routes match, hashes
  the prompt's start for affinity, drops the client's copies of shardwise's headers and clears
  the route cache. A fast route (a model with ready endpoints) goes to the `fast` cluster, the
  model's subset, by ring hash with bounded loads, with the next filter disabled on it;
- `shardwise.route` (ext_proc, the last route) sees the request headers and the whole (BUFFERED)
  body and answers with the endpoint in `x-gateway-destination-endpoint` (the Gateway API
  Inference Extension's picker protocol) or an immediate response. Its message timeout is longer
  than the hold timeout: a held request is an unanswered body message. Response phases are
  SKIPped: streams pass unbuffered;
- `shardwise.observe` is a Lua filter (observe_lua.py): inside Envoy, with body chunks streaming
  through unbuffered, it stamps the first body byte and keeps a stream's content-event count and
  last usage in the request's dynamic metadata. The HTTP gRPC access logger hands that, the status
  and Envoy's timings to the service once per request (off the client's path), for TTFT,
  end-to-end and tokens: no body chunk crosses into Python.
The `engines` cluster is ORIGINAL_DST on the picker's header: Envoy connects to exactly the
IP:PORT the picker chose, with no endpoint list of its own. A client's own copy of the header never
counts: the route filter overwrites it on every request it lets through.

Requests whose body exceeds `body_limit_bytes` get Envoy's own 413; `local_reply_config` rewrites
that reply into OpenAI's error shape. Pure: returns a dict (JSON is valid Envoy YAML).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from shardwise.gateway.dataplane import keys_lua, match_lua, observe_lua
from shardwise.gateway.decide import openai_errors, picker

DESTINATION_HEADER = "x-gateway-destination-endpoint"
# The engine that served a response, IP:PORT: the name and value the Gateway API Inference
# Extension's picker protocol gives the endpoint served (there: metadata in `envoy.lb`, for the
# picker), here a response header to the client and the field the access log carries.
SERVED_HEADER = "x-gateway-destination-endpoint-served"
# Which path served a response: `self-hosted` or the provider's cluster `provider/NS/NAME` (set by
# the observe filter, observe_lua.py; absent on the gateway's own answers)
SERVED_BY_HEADER = "x-shardwise-served-by"
MODEL_HEADER = "x-shardwise-model"  # set by the route filter for the observer (and access logs)
KEY_HEADER = "x-shardwise-key"  # the caller's key id, set by the route filter when keys are on
# The provider cluster a hosted model's request goes to (dataplane/providers.py): set by the route
# filter only, a client's copy is removed by the match filter like the two above.
PROVIDER_HEADER = "x-shardwise-provider"
# What the route filter tells the access log and the failure mapper of a hosted model's request
# (keys `model`, `key`, `provider`): dynamic metadata, not headers, because no header set on the
# request can be kept from the provider without leaving the access log too (the upstream request
# shares the downstream header map: removed on the route, it is gone from the log's entry as well).
ROUTE_NAMESPACE = "shardwise.route"
ACCESS_LOG_NAME = "shardwise.observe"
MODEL_MATCH_HEADER, AFFINITY_HEADER = match_lua.MATCH_HEADER, match_lua.AFFINITY_HEADER
ROUTE_FILTER = "shardwise.route"  # the ext_proc filter's name: fast routes disable it by this name
FAST_CLUSTER = "fast"  # the engines Envoy balances itself, by subset of model (fastpath.py, over ADS)
SLOW_CLUSTER = "engines"  # ORIGINAL_DST on the picker's destination header
NODE_ID = "shardwise-gateway"
ROUTE_CONFIG = "openai"  # the RDS resource name
# The OpenAI POST paths routed to an engine (by the picker, or by a fast route per model).
ROUTED_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
PREVIOUS_HOSTS = "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"
_JSON_TO_METADATA = "type.googleapis.com/envoy.extensions.filters.http.json_to_metadata.v3.JsonToMetadata"
_LUA = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua"
_HTTP_GRPC_LOG = "type.googleapis.com/envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig"
_EXT_PROC = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
_HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
_HTTP_OPTIONS = "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
# Far above any real concurrency: Envoy's defaults (1,024 requests per cluster) would shed
# streams with a 503 of its own long before an engine or the gateway is the limit.
_UNLIMITED = {"thresholds": [{"max_connections": 1_000_000, "max_pending_requests": 1_000_000,
                              "max_requests": 1_000_000, "max_retries": 3}]}

# Only a connection that never opened is retried (nothing reached the engine, so a POST is safe):
# a pod picked in the instant it went away, or one Ready a moment before its server listens.
CONNECT_RETRIES = {"retry_on": "connect-failure,refused-stream", "num_retries": 5,
                    "retry_back_off": {"base_interval": "0.1s", "max_interval": "1s"}}


@dataclasses.dataclass(frozen=True)
class EnvoySettings:
    listen_port: int
    admin_port: int
    extproc_port: int
    listen_host: str = "127.0.0.1"
    admin_host: str = "127.0.0.1"
    extproc_host: str = "127.0.0.1"
    body_limit_bytes: int = 4 * 1024 * 1024
    hold_timeout_s: float = 600.0
    engine_connect_timeout_s: float = 5.0
    observe: bool = True
    observe_flush_s: float = 0.1
    observe_buffer_bytes: int = 64 * 1024
    # Hosted providers (issue 42): their clusters come over CDS from the service (providers.py).
    providers: bool = False


def _seconds(value: float) -> str:
    return f"{value:g}s"


def _route_filter(settings: EnvoySettings) -> dict[str, Any]:
    return {
        "@type": _EXT_PROC,
        "grpc_service": {"envoy_grpc": {"cluster_name": "shardwise_gateway"}},
        "failure_mode_allow": False,  # routing never fails open
        "stat_prefix": "route",
        # A held request is a body message the service has not answered yet.
        "message_timeout": _seconds(settings.hold_timeout_s + 30),
        # The service gone (restart, crash): the client gets a status, never a hang.
        "status_on_error": {"code": 503},
        # Envoy keeps none of the service's dynamic metadata unless its namespace is listed: a
        # hosted model's model, key id and cluster, for the access log and the failure mapper.
        "metadata_options": {"receiving_namespaces": {"untyped": [ROUTE_NAMESPACE]}},
        "processing_mode": {"request_header_mode": "SEND", "response_header_mode": "SKIP",
                            "request_body_mode": "BUFFERED", "response_body_mode": "NONE",
                            "request_trailer_mode": "SKIP", "response_trailer_mode": "SKIP"},
    }


def _body_model_filter() -> dict[str, Any]:
    """The body's top-level `model`, into the dynamic metadata the match filter reads (C++, no copy
    to anywhere): the fast path's one look at the body. Anything it cannot read sets nothing."""
    return {
        "@type": _JSON_TO_METADATA,
        "request_rules": {
            "rules": [{"selectors": [{"key": "model"}],
                       "on_present": {"metadata_namespace": match_lua.NAMESPACE, "key": "model", "type": "STRING"}},
                      # For the keys filter: a keyed stream must report its usage (keys_lua.py).
                      {"selectors": [{"key": "stream"}],
                       "on_present": {"metadata_namespace": match_lua.NAMESPACE, "key": "stream"}},
                      {"selectors": [{"key": "stream_options"}, {"key": "include_usage"}],
                       "on_present": {"metadata_namespace": match_lua.NAMESPACE, "key": "include_usage"}}],
            "allow_content_types": ["application/json", "application/json; charset=utf-8",
                                    "application/json;charset=utf-8"],
        },
    }


def _match_filter() -> dict[str, Any]:
    return {"@type": _LUA, "stat_prefix": "match",
            "default_source_code": {"inline_string": match_lua.source((MODEL_HEADER, KEY_HEADER, PROVIDER_HEADER))}}


def _keys_filter() -> dict[str, Any]:
    """Keyed requests of fast models authenticated in Envoy (keys_lua.py); it reads its table from
    the picker route's metadata, so with keys off (no table) it does nothing."""
    return {"@type": _LUA, "stat_prefix": "keys",
            "default_source_code": {"inline_string": keys_lua.source(match_lua.NAMESPACE, MODEL_MATCH_HEADER)}}


def served_header() -> dict[str, Any]:
    """The route table's response header naming the engine that served (fast path and picker
    alike): the upstream host of the last try, so a retried connect names the one that answered.
    A response no engine gave (the route filter's own answers, Envoy's 413) has none: Envoy adds
    no header whose value formats empty."""
    return {"header": {"key": SERVED_HEADER, "value": "%UPSTREAM_HOST%"}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}


def slow_route() -> dict[str, Any]:
    """The last route: through the ext_proc filter to the endpoint its picker names."""
    return {"name": "picker", "match": {"prefix": "/"},
            # No route timeout: a long generation streams for minutes.
            "route": {"cluster": SLOW_CLUSTER, "timeout": "0s", "retry_policy": CONNECT_RETRIES}}


def _ads() -> dict[str, Any]:
    # Never a route table shorter than the service's: until the service answers, the listener
    # stays warming (Envoy not ready) rather than serving with no routes after a fetch timeout.
    return {"ads": {}, "resource_api_version": "V3", "initial_fetch_timeout": "0s"}


def _observe_filter() -> dict[str, Any]:
    return {"@type": _LUA, "stat_prefix": "observe",
            "default_source_code": {"inline_string": observe_lua.SOURCE}}


def _observe_log(settings: EnvoySettings) -> dict[str, Any]:
    """One entry per routed request (the route filter or a fast route stamped its model: a header,
    or for a hosted model the route filter's metadata)."""
    return {
        "name": "envoy.access_loggers.http_grpc",
        "filter": {"or_filter": {"filters": [
            {"header_filter": {"header": {"name": MODEL_HEADER, "present_match": True}}},
            _routed_metadata("model")]}},
        "typed_config": {
            "@type": _HTTP_GRPC_LOG,
            "common_config": {
                "log_name": ACCESS_LOG_NAME, "transport_api_version": "V3",
                "grpc_service": {"envoy_grpc": {"cluster_name": "shardwise_gateway"}},
                # Batches: a message per 64 KiB of entries (~150 requests) or per flush interval,
                # so a key is charged within about that of its response's end (measured through
                # Envoy 1.40, 3,840 streams at 64 concurrent: p50 49 ms, p99 102 ms, max 148 ms
                # late). A message per entry costs the service three times the CPU (0.36 against
                # 0.11 s per 3,000 streams on the gateway bench).
                "buffer_size_bytes": settings.observe_buffer_bytes,
                "buffer_flush_interval": _seconds(settings.observe_flush_s),
            },
            "additional_request_headers_to_log": [MODEL_HEADER, KEY_HEADER],
            "additional_response_headers_to_log": [SERVED_HEADER, SERVED_BY_HEADER],
        },
    }


def _routed_metadata(key: str) -> dict[str, Any]:
    """An access-log filter: the route filter left `key` in ROUTE_NAMESPACE (a hosted model's request)."""
    return {"metadata_filter": {"match_if_key_not_found": False, "matcher": {
        "filter": ROUTE_NAMESPACE, "path": [{"key": key}], "value": {"present_match": True}}}}


def _too_large_mapper(settings: EnvoySettings) -> dict[str, Any]:
    refusal = openai_errors.too_large(settings.body_limit_bytes)
    return {
        "filter": {"status_code_filter": {"comparison": {
            "op": "EQ", "value": {"default_value": 413, "runtime_key": "gateway.too_large_status"}}}},
        "body": {"inline_string": refusal.body.decode()},
        "body_format_override": {"text_format_source": {"inline_string": "%LOCAL_REPLY_BODY%"},
                                 "content_type": openai_errors.JSON},
    }


def _provider_failure_mapper() -> dict[str, Any]:
    """Envoy's own reply when a provider could not be reached, its TLS failed, it reset before its
    headers or overran its request timeout (a request on the provider route: its header is set):
    an OpenAI error body instead of Envoy's plain text. Told by the route filter's metadata: the
    provider header is removed before the provider, from the map this filter reads too. What the
    provider itself answered (its 429 with Retry-After, its 500) passes through untouched."""
    return {
        "filter": {"and_filter": {"filters": [
            _routed_metadata("provider"),
            {"response_flag_filter": {"flags": ["UF", "URX", "UC", "UH", "UT", "UMSDR", "UO"]}}]}},
        "body_format_override": {"json_format": {"error": {
            "message": "The provider could not answer: %RESPONSE_CODE_DETAILS% (%RESPONSE_FLAGS%).",
            "type": "server_error", "param": None, "code": "provider_unavailable"}},
            "content_type": openai_errors.JSON},
    }


def bootstrap(settings: EnvoySettings) -> dict[str, Any]:
    filters = [{"name": "shardwise.body", "typed_config": _body_model_filter()},
               {"name": "shardwise.match", "typed_config": _match_filter()},
               {"name": keys_lua.FILTER, "typed_config": _keys_filter()},
               {"name": ROUTE_FILTER, "typed_config": _route_filter(settings)}]
    if settings.observe:
        filters.append({"name": "shardwise.observe", "typed_config": _observe_filter()})
    filters.append({"name": "envoy.filters.http.router",
                    "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}})
    hcm = {
        "@type": _HCM,
        "stat_prefix": "gateway",
        "codec_type": "AUTO",
        # A held request is silent until its model wakes: idle longer than any hold.
        "stream_idle_timeout": _seconds(settings.hold_timeout_s + 60),
        "request_timeout": "0s",
        "local_reply_config": {"mappers": [_too_large_mapper(settings),
                                           *([_provider_failure_mapper()] if settings.providers else [])]},
        # The routes come from the service (fastpath.py over ADS): a fast route per served model
        # with ready endpoints, then the ext_proc route for everything else.
        "rds": {"route_config_name": ROUTE_CONFIG, "config_source": _ads()},
        "http_filters": filters,
    }
    if settings.observe:
        hcm["access_log"] = [_observe_log(settings)]
    engines = {
        "name": SLOW_CLUSTER, "type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED",
        "connect_timeout": _seconds(settings.engine_connect_timeout_s),
        "original_dst_lb_config": {"use_http_header": True, "http_header_name": DESTINATION_HEADER},
        "circuit_breakers": _UNLIMITED,
    }
    fast = {
        "name": FAST_CLUSTER, "type": "EDS", "eds_cluster_config": {"eds_config": _ads()},
        "connect_timeout": _seconds(settings.engine_connect_timeout_s),
        # Consistent hashing with bounded loads on the affinity header, within the request's model.
        "lb_policy": "RING_HASH",
        "common_lb_config": {"consistent_hashing_lb_config": {
            "hash_balance_factor": round(picker.LOAD_FACTOR * 100)}},
        "ring_hash_lb_config": {"minimum_ring_size": 256, "maximum_ring_size": 4096},
        "lb_subset_config": {"fallback_policy": "NO_FALLBACK", "list_as_any": True,
                             "subset_selectors": [{"keys": ["model"]}]},
        "circuit_breakers": _UNLIMITED,
    }
    extproc = {
        "name": "shardwise_gateway", "type": "STATIC", "connect_timeout": "1s",
        "typed_extension_protocol_options": {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": _HTTP_OPTIONS, "explicit_http_config": {"http2_protocol_options": {}}}},
        "circuit_breakers": _UNLIMITED,
        "load_assignment": {"cluster_name": "shardwise_gateway", "endpoints": [{"lb_endpoints": [{"endpoint": {
            "address": {"socket_address": {"address": settings.extproc_host,
                                           "port_value": settings.extproc_port}}}}]}]},
    }
    dynamic: dict[str, Any] = {"ads_config": {
        "api_type": "GRPC", "transport_api_version": "V3", "set_node_on_first_message_only": True,
        "grpc_services": [{"envoy_grpc": {"cluster_name": "shardwise_gateway"}}]}}
    if settings.providers:  # a stream of its own, not ADS: the fast path's ADS stream carries routes and endpoints
        dynamic["cds_config"] = {"resource_api_version": "V3", "initial_fetch_timeout": "0s", "api_config_source": {
            "api_type": "GRPC", "transport_api_version": "V3",
            "grpc_services": [{"envoy_grpc": {"cluster_name": "shardwise_gateway"}}]}}
    return {
        "node": {"id": NODE_ID, "cluster": NODE_ID},
        "dynamic_resources": dynamic,
        "admin": {"address": {"socket_address": {"address": settings.admin_host,
                                                 "port_value": settings.admin_port}}},
        "static_resources": {
            "listeners": [{"name": "openai", "address": {"socket_address": {
                "address": settings.listen_host, "port_value": settings.listen_port}},
                # The body limit: ext_proc's BUFFERED mode buffers up to the connection's limit and
                # answers 413 past it (the route's buffer limits do not apply to it, measured).
                "per_connection_buffer_limit_bytes": settings.body_limit_bytes,
                "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager",
                                                "typed_config": hcm}]}]}],
            "clusters": [engines, fast, extproc],
        },
    }
