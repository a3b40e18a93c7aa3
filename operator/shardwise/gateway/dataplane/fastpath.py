"""The fast path: the requests Envoy can route on its own, as the routes and endpoints it is sent.

Measured on the gateway bench (docs/gateway.md): a request that crosses into Python over ext_proc
pays two gRPC round trips through an event loop, +42 ms TTFT p50 on a busy 2-core machine even
with a picker that does nothing, against Envoy's own +12 ms. So the common request never crosses:
shardwise decides ahead of time and Envoy applies the decision per request.

- Envoy reads the body's `model` itself (the json_to_metadata filter) and the match filter's Lua
  copies it into `MODEL_MATCH_HEADER` and clears the route cache (envoy.py); a model with ready
  endpoints has a route per OpenAI path matching that header, to the `FAST_CLUSTER` subset of its
  endpoints, with the ext_proc filter disabled on it.
- Within the subset Envoy balances by consistent hashing with bounded loads (its ring hash with
  `hash_balance_factor`, Mirrokni et al., the rule `picker` follows) on `AFFINITY_HEADER`, a hash
  the Lua takes of the start of the prompt or messages: conversations return to the engine that
  caches their prefix, and no engine takes more than picker.LOAD_FACTOR (1.25) x the mean of
  Envoy's own active requests.
- Everything else takes the last route, the ext_proc path as before: a model with no ready
  endpoint (held while it wakes), an unknown model, a body that is not JSON or has no model,
  `/v1/models`, any other path, and with API keys on every request the keys filter did not
  admit (keys_lua.py: a key without limits asking a served model is admitted in Envoy).

The engines' own queues and KV-cache use (which count other gateway replicas' and clients'
requests; the ring's bound counts only this Envoy's) reach the fast path every scrape: an engine
queueing far beyond its peers leaves the model's subset until it is back to their mean
(overload.py). The picker weighs them in every pick.

Pure: a Table in, plain dicts in Envoy's JSON (proto3 mapping) out; xds.py sends them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from shardwise.gateway.dataplane import envoy, keys_lua
from shardwise.gateway.decide import overload, routes

ROUTE_CONFIG = envoy.ROUTE_CONFIG
FAST_CLUSTER = envoy.FAST_CLUSTER
MODEL_MATCH_HEADER = envoy.MODEL_MATCH_HEADER
AFFINITY_HEADER = envoy.AFFINITY_HEADER
SUBSET_KEY = "model"
ROUTED_PATHS = envoy.ROUTED_PATHS
_EXT_PROC_PER_ROUTE = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute"
_LUA_PER_ROUTE = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.LuaPerRoute"
_NO_KEYS_FILTER = {keys_lua.FILTER: {"@type": _LUA_PER_ROUTE, "disabled": True}}
_OVERWRITE = "OVERWRITE_IF_EXISTS_OR_ADD"


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What Envoy is told: its route configuration and the fast cluster's endpoints."""

    route_config: dict[str, Any]
    endpoints: dict[str, Any]
    models: tuple[str, ...] = ()  # the models on the fast path

    @property
    def version(self) -> str:
        return version_of([self.route_config, self.endpoints])


def version_of(resource: Any) -> str:
    """A digest of the content: the same table gives the same version, across restarts too."""
    text = json.dumps(resource, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fast_models(table: routes.Table) -> list[routes.Route]:
    """The models Envoy routes by itself: those with a ready endpoint, in name order."""
    # A disaggregated pair with a ready prefill engine takes the picker: its prefill leg is a call
    # the service makes before routing the decode (decide/disaggregation.py), not Envoy's to make.
    return sorted((r for r in table.models() if r.endpoints and not r.prefill_endpoints), key=lambda r: r.model)


def _fast_route(route: routes.Route, path: str, keyed: bool = False) -> dict[str, Any]:
    # With keys on, only a request the keys filter let through (it set the key's id) is fast.
    key_match = [{"name": keys_lua.KEY_HEADER, "present_match": True}] if keyed else []
    return {
        "name": f"{route.model}{path}",
        "match": {"path": path, "headers": [
            {"name": ":method", "string_match": {"exact": "POST"}},
            {"name": MODEL_MATCH_HEADER, "string_match": {"exact": route.model}}, *key_match]},
        "route": {
            "cluster": FAST_CLUSTER, "timeout": "0s",  # a long generation streams for minutes
            "metadata_match": {"filter_metadata": {"envoy.lb": {SUBSET_KEY: route.model}}},
            "hash_policy": [{"header": {"header_name": AFFINITY_HEADER}}],
            "retry_policy": {**envoy.CONNECT_RETRIES,
                             "retry_host_predicate": [{"name": "envoy.retry_host_predicates.previous_hosts",
                                                       "typed_config": {"@type": envoy.PREVIOUS_HOSTS}}],
                             "host_selection_retry_max_attempts": 5}},
        # The observer counts the request under this model (the route filter sets it on the slow path).
        "request_headers_to_add": [{"header": {"key": envoy.MODEL_HEADER, "value": route.model},
                                    "append_action": _OVERWRITE}],
        # The key never reaches the engine (the picker's answer removes it on the slow path).
        **({"request_headers_to_remove": ["authorization"]} if keyed else {}),
        "typed_per_filter_config": {envoy.ROUTE_FILTER: {"@type": _EXT_PROC_PER_ROUTE, "disabled": True},
                                    **_NO_KEYS_FILTER},
    }


def _picker_route(keyed: Mapping[str, Any] | None) -> dict[str, Any]:
    """The last route; with keys on it carries the keys filter's table (keys_lua.metadata), else
    that filter is off on it."""
    if keyed is None:
        return {**envoy.slow_route(), "typed_per_filter_config": _NO_KEYS_FILTER}
    return {**envoy.slow_route(), "metadata": {"filter_metadata": {keys_lua.FILTER: dict(keyed)}}}


def route_config(table: routes.Table, *, enabled: bool = True, keyed: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`keyed`: with API keys on, the keys filter's table (keys_lua.metadata); None: keys off."""
    fast = [_fast_route(route, path, keyed is not None) for route in fast_models(table)
            for path in ROUTED_PATHS] if enabled else []
    return {"name": ROUTE_CONFIG, "response_headers_to_add": [envoy.served_header()], "virtual_hosts": [{
        "name": "openai", "domains": ["*"],
        "routes": [*fast, _picker_route(keyed)],
    }]}


def endpoints(table: routes.Table, *, enabled: bool = True, spared: overload.Spared = frozenset()) -> dict[str, Any]:
    """The fast cluster's endpoints, each with the models it serves (an engine serves its base
    model and the adapters it has loaded) as a list the subset load balancer matches any of,
    less those `spared` leaves out for now (overload.py); a spared engine stays in the cluster,
    so the requests it is running are left alone."""
    serves: dict[tuple[str, int], list[str]] = {}
    for route in fast_models(table) if enabled else []:
        for endpoint in route.endpoints:
            host, _, port = endpoint.rpartition(":")
            models = serves.setdefault((host, int(port)), [])
            if (route.model, endpoint) not in spared:
                models.append(route.model)
    return _assignment(serves)


def merged_endpoints(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Every endpoint of both, serving every model it serves in either: what Envoy runs while its
    routes change from those that went with `old` to those that go with `new`, so that no route
    in between points at an empty subset (the bridge xds.py sends between the two)."""
    serves: dict[tuple[str, int], list[str]] = {}
    for assignment in (old, new):
        for locality in assignment.get("endpoints", ()):
            for entry in locality["lb_endpoints"]:
                address = entry["endpoint"]["address"]["socket_address"]
                models = serves.setdefault((address["address"], address["port_value"]), [])
                models += [m for m in entry["metadata"]["filter_metadata"]["envoy.lb"][SUBSET_KEY] if m not in models]
    return _assignment(serves)


def _assignment(serves: dict[tuple[str, int], list[str]]) -> dict[str, Any]:
    lb_endpoints = [{
        "endpoint": {"address": {"socket_address": {"address": host, "port_value": port}}},
        "metadata": {"filter_metadata": {"envoy.lb": {SUBSET_KEY: sorted(serves[(host, port)])}}},
    } for host, port in sorted(serves)]
    return {"cluster_name": FAST_CLUSTER, "endpoints": [{"lb_endpoints": lb_endpoints}] if lb_endpoints else []}


def snapshot(table: routes.Table, *, enabled: bool = True, spared: overload.Spared = frozenset(),
             keyed: Mapping[str, Any] | None = None) -> Snapshot:
    """`enabled` False (the fast path turned off): every request takes ext_proc.
    `spared`: the engines left out of a model's subset for their queues (overload.py).
    `keyed`: API keys on, the keys filter's table (keys_lua.metadata): a key without limits is
    admitted on the fast path by Envoy, every other request takes ext_proc."""
    models = tuple(r.model for r in fast_models(table)) if enabled else ()
    return Snapshot(route_config(table, enabled=enabled, keyed=keyed), endpoints(table, enabled=enabled, spared=spared),
                    models)

