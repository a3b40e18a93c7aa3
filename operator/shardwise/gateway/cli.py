"""`shardwise gateway serve` runs the ext_proc service; `shardwise gateway envoy-config` prints the
Envoy bootstrap that goes with it (the chart and `make demo` render it from here)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
from typing import Any

from shardwise.gateway.dataplane import envoy
from shardwise.gateway.decide import holding


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("gateway", help="the OpenAI front door (Envoy ext_proc service)")
    commands = parser.add_subparsers(dest="gateway_command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="serve Envoy's ext_proc filter: route, hold, measure")
    serve.add_argument("--namespace", action="append", default=[],
                       help="watch only this namespace (repeatable; default: every namespace)")
    serve.add_argument("--grpc-host", default="127.0.0.1", help="ext_proc listen address (Envoy beside it)")
    serve.add_argument("--grpc-port", type=int, default=9002)
    serve.add_argument("--http-host", default="0.0.0.0",
                       help="/console, /healthz, /readyz and /metrics without per-key series: listen address")
    serve.add_argument("--http-port", type=int, default=9090)
    serve.add_argument("--metrics-host", default="0.0.0.0",
                       help="/metrics with every series, per API key included: listen address (let only "
                            "Prometheus reach it: the chart's NetworkPolicy)")
    serve.add_argument("--metrics-port", type=int, default=9091)
    serve.add_argument("--hold-timeout", type=float, default=holding.DEFAULT_TIMEOUT_S,
                       help="seconds a request waits for its model to wake before a 503")
    serve.add_argument("--hold-max-requests", type=int, default=holding.DEFAULT_MAX_COUNT,
                       help="held requests per model before a 429")
    serve.add_argument("--hold-max-bytes", type=int, default=holding.DEFAULT_MAX_BYTES,
                       help="held body bytes per model before a 429")
    serve.add_argument("--wake-interval", type=float, default=5.0, help="seconds between wake signals per model")
    serve.add_argument("--scrape-interval", type=float, default=2.0, help="seconds between engine /metrics scrapes")
    serve.add_argument("--pd-min-prompt-tokens", type=int, default=256,
                       help="a disaggregated pair's request prefills on a prefill engine only with at least this many "
                            "prompt tokens (estimated) beyond what its decode engine was already sent")
    serve.add_argument("--no-fast-path", action="store_true",
                       help="send every request through the ext_proc picker (engine queue and KV-cache use in "
                            "every pick), not only those Envoy cannot route itself (docs/gateway.md)")
    serve.add_argument("--providers", action="store_true",
                       help="serve the models of Provider objects (hosted APIs); Envoy needs envoy-config --providers")
    serve.add_argument("--system-ca-file", default="/etc/ssl/certs/ca-certificates.crt",
                       help="the trust store for Providers without a CA bundle (a PEM file Envoy reads)")
    serve.add_argument("--provider-probe-interval", type=float, default=30.0,
                       help="seconds between TLS probes of each Provider (its Reachable condition)")
    serve.add_argument("--auth", action="store_true",
                       help="require API keys (APIKey objects and their Secrets in the watched namespaces)")
    serve.add_argument("--auth-anonymous", action="store_true",
                       help="with --auth: requests without an Authorization header pass as 'anonymous'")
    serve.add_argument("--redis-url", default=os.environ.get("SHARDWISE_REDIS_URL", ""),
                       help="the shared quota store (redis://host:port/db); empty: per-replica limits")
    serve.add_argument("--redis-prefix", default="shardwise:", help="prefix of every Redis key")
    serve.add_argument("--quota-fallback-share", type=int, default=1,
                       help="while Redis is away each replica allows 1/N of each limit (N: the replica count)")
    serve.add_argument("--key-status-interval", type=float, default=10.0,
                       help="seconds between APIKey status writes (by the Lease holder only)")
    serve.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "default"),
                       help="namespace of the status writer's Lease shardwise-gateway-keys")
    serve.add_argument("--usage-stdout", action="store_true",
                       help="a usage record per request as a JSON line on stdout (docs/usage-export.md)")
    serve.add_argument("--usage-webhook", action="append", default=[], metavar="URL",
                       help="POST usage records to this URL as signed NDJSON batches (repeatable)")
    serve.add_argument("--usage-webhook-secret-file", default="",
                       help="the HMAC-SHA256 signing secret (a file, e.g. from a Secret); empty: unsigned")
    serve.add_argument("--usage-buffer", type=int, default=10000,
                       help="records held per webhook while its receiver is away; beyond: dropped and counted")
    serve.add_argument("--usage-batch", type=int, default=500, help="records per webhook POST at most")
    serve.add_argument("--usage-flush-interval", type=float, default=1.0,
                       help="seconds a partial webhook batch waits at most")
    serve.add_argument("--event-webhook", action="append", default=[], metavar="URL",
                       help="POST events (a key at 80/100 %% of a quota, revoked; a provider unhealthy; an SLO "
                            "state change) to this URL as signed NDJSON (repeatable; docs/usage-export.md)")
    serve.add_argument("--event-webhook-secret-file", default="",
                       help="the events' HMAC-SHA256 signing secret (a file); empty: unsigned")
    serve.set_defaults(handler=_serve)

    config = commands.add_parser("envoy-config", help="print the Envoy bootstrap (JSON)")
    config.add_argument("--listen-host", default="0.0.0.0")
    config.add_argument("--listen-port", type=int, default=8080)
    config.add_argument("--admin-port", type=int, default=9901)
    config.add_argument("--extproc-port", type=int, default=9002)
    config.add_argument("--body-limit-bytes", type=int, default=envoy.EnvoySettings.body_limit_bytes)
    config.add_argument("--hold-timeout", type=float, default=holding.DEFAULT_TIMEOUT_S)
    config.add_argument("--providers", action="store_true",
                        help="hosted providers: their clusters over CDS from `serve --providers`")
    config.add_argument("--no-observe", action="store_true",
                        help="leave out the observability filter (no per-model latency or token metrics)")
    config.set_defaults(handler=_envoy_config)


def _serve(args: argparse.Namespace) -> int:
    import asyncio

    from shardwise.gateway.service import export, gatekeeper, server
    from shardwise.kube.client import Kube

    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = server.Settings(
        namespaces=tuple(args.namespace), grpc_host=args.grpc_host, grpc_port=args.grpc_port,
        http_host=args.http_host, http_port=args.http_port,
        metrics_host=args.metrics_host, metrics_port=args.metrics_port,
        limits=holding.Limits(max_count=args.hold_max_requests, max_bytes=args.hold_max_bytes,
                              timeout_s=args.hold_timeout),
        wake_interval_s=args.wake_interval, scrape_interval_s=args.scrape_interval,
        fast_path=not args.no_fast_path, providers=args.providers, system_ca_file=args.system_ca_file,
        provider_probe_interval_s=args.provider_probe_interval,
        pd_min_prompt_tokens=args.pd_min_prompt_tokens,
        auth=gatekeeper.AuthSettings(anonymous=args.auth_anonymous, redis_url=args.redis_url,
                                     redis_prefix=args.redis_prefix, fallback_share=args.quota_fallback_share,
                                     status_interval_s=args.key_status_interval,
                                     lease_namespace=args.lease_namespace) if args.auth else None)
    secret = b""
    if args.usage_webhook_secret_file:
        with open(args.usage_webhook_secret_file, "rb") as f:
            secret = f.read().strip()
    settings = dataclasses.replace(settings, usage_stdout=args.usage_stdout, usage_webhooks=tuple(
        export.WebhookSettings(url, secret=secret, buffer=args.usage_buffer, batch=args.usage_batch,
                               flush_interval_s=args.usage_flush_interval) for url in args.usage_webhook))
    if args.event_webhook:
        event_secret = b""
        if args.event_webhook_secret_file:
            with open(args.event_webhook_secret_file, "rb") as f:
                event_secret = f.read().strip()
        settings = dataclasses.replace(settings, event_webhooks=tuple(
            export.WebhookSettings(url, secret=event_secret, batch=50, flush_interval_s=0.5)
            for url in args.event_webhook))
    asyncio.run(server.Gateway(Kube(field_manager="shardwise-gateway"), settings).run())
    return 0


def _envoy_config(args: argparse.Namespace) -> int:
    settings = envoy.EnvoySettings(listen_host=args.listen_host, listen_port=args.listen_port,
                                   admin_port=args.admin_port, extproc_port=args.extproc_port,
                                   body_limit_bytes=args.body_limit_bytes, hold_timeout_s=args.hold_timeout,
                                   observe=not args.no_observe, providers=args.providers)
    print(json.dumps(envoy.bootstrap(settings), indent=2))
    return 0
