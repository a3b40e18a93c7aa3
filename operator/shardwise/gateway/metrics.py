"""The gateway's Prometheus series, in a registry of its own (served on the gateway's port).

Per model: requests by status code (the gateway's own refusals and the engines' answers), shed
requests (429 hold queue full, 503 wake timeout), held requests now, TTFT and end-to-end as the
client sees them through the gateway (from arrival, so a held request's wait is in its TTFT),
prompt and completion tokens from the engines' usage. Per-key series come with API keys.
"""

from __future__ import annotations

import prometheus_client as prom

REGISTRY = prom.CollectorRegistry(auto_describe=True)
# Seconds: fine below 100 ms (the gateway's own cost shows there) up to a cold start.
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

REQUESTS = prom.Counter("shardwise_gateway_requests", "Requests by model and HTTP status code.",
                        ["model", "code"], registry=REGISTRY)
SERVED = prom.Counter("shardwise_gateway_served_requests", "Responses by model and the engine that served them "
                      "(IP:PORT, as the response's x-gateway-destination-endpoint-served header names it).",
                      ["model", "endpoint"], registry=REGISTRY)
SHED = prom.Counter("shardwise_gateway_shed_requests", "Requests refused for capacity (429 queue full, 503 "
                    "wake timeout).", ["model", "code"], registry=REGISTRY)
HELD = prom.Gauge("shardwise_gateway_held_requests", "Requests held while their model wakes.", ["model"],
                  registry=REGISTRY)
WAKES = prom.Counter("shardwise_gateway_wake_signals", "Wake annotations written.", ["model"], registry=REGISTRY)
TTFT = prom.Histogram("shardwise_gateway_time_to_first_byte_seconds", "Arrival at the gateway to the first "
                      "response body byte (the first token of a stream).", ["model"], buckets=_LATENCY_BUCKETS,
                      registry=REGISTRY)
E2E = prom.Histogram("shardwise_gateway_request_duration_seconds", "Arrival at the gateway to the end of the "
                     "response.", ["model"], buckets=_LATENCY_BUCKETS, registry=REGISTRY)
TOKENS = prom.Counter("shardwise_gateway_tokens", "Tokens from the engines' usage (direction: prompt or "
                      "completion).", ["model", "direction"], registry=REGISTRY)
BROKEN = prom.Counter("shardwise_gateway_broken_responses", "Responses that ended before their end of stream "
                      "(engine died or client left).", ["model"], registry=REGISTRY)
SYNCED = prom.Gauge("shardwise_gateway_caches_synced", "1 once the informers have synced.", registry=REGISTRY)
ENDPOINTS = prom.Gauge("shardwise_gateway_endpoints", "Ready endpoints per model.", ["model"], registry=REGISTRY)
FAST_MODELS = prom.Gauge("shardwise_gateway_fast_path_models", "Models Envoy routes by itself (fast path routes "
                         "sent over ADS); the others go through the ext_proc picker.", registry=REGISTRY)
SPARED_ENGINES = prom.Gauge("shardwise_gateway_spared_engines", "Engines (per model they serve) left out of the "
                            "fast path for queueing far beyond the model's other engines.", registry=REGISTRY)
INTERNAL_ERRORS = prom.Counter("shardwise_gateway_internal_errors", "Requests the gateway failed itself (a bug): "
                                "answered 500 server_error, by the exception's type.", ["exception"],
                                registry=REGISTRY)
XDS_REJECTED = prom.Counter("shardwise_gateway_xds_rejected", "Routes or endpoints Envoy refused (NACKs; it keeps "
                            "the last version it accepted).", registry=REGISTRY)
PREFILL_LEGS = prom.Counter("shardwise_gateway_prefill_legs", "Requests to a disaggregated pair by how their prefill "
                            "went (prefilled: on a prefill engine; failed: that engine failed and decode did both; "
                            "short, cached, no_prefill_engine, not_generation: sent whole to decode).",
                            ["model", "outcome"], registry=REGISTRY)

# Per API key (key = namespace/name of its APIKey, never the key itself; "anonymous" when allowed).
KEY_REQUESTS = prom.Counter("shardwise_gateway_key_requests", "Requests by API key, model and HTTP status code "
                            "(key \"\" when no valid key was given).", ["key", "model", "code"], registry=REGISTRY)
KEY_TOKENS = prom.Counter("shardwise_gateway_key_tokens", "Tokens from the engines' usage by API key (direction: "
                          "prompt or completion).", ["key", "direction"], registry=REGISTRY)
KEY_COST = prom.Counter("shardwise_gateway_key_cost_usd", "Cost by API key: completion tokens at the serving "
                        "deployment's status.cost.perMillionOutputTokensUSD.", ["key"], registry=REGISTRY)
RATE_LIMITED = prom.Counter("shardwise_gateway_rate_limited", "429s for a key's own limits (limit: requests, "
                            "tokens or concurrency).", ["key", "limit"], registry=REGISTRY)
QUOTA_STORE_UP = prom.Gauge("shardwise_gateway_quota_store_up", "1 while the shared quota store (Redis) answers; "
                            "0: per-replica limits apply.", registry=REGISTRY)
QUOTA_CHECK = prom.Histogram("shardwise_gateway_quota_check_seconds", "Time the key's quota check adds to a "
                             "request (one Redis round trip, or the local fallback).",
                             buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25),
                             registry=REGISTRY)

# Usage records out of the cluster (service/export.py; sink: "stdout" or "webhook:HOST:PORT").
USAGE_EXPORTED = prom.Counter("shardwise_gateway_usage_exported", "Usage records delivered (stdout: written; "
                              "webhook: acknowledged 2xx).", ["sink"], registry=REGISTRY)
USAGE_DROPPED = prom.Counter("shardwise_gateway_usage_dropped", "Usage records lost (reason: buffer_full while the "
                             "receiver was slow or away, rejected by a 4xx, sink_error).", ["sink", "reason"],
                             registry=REGISTRY)
USAGE_BUFFERED = prom.Gauge("shardwise_gateway_usage_buffered", "Usage records waiting for their webhook.", ["sink"],
                            registry=REGISTRY)
