"""`shardwise run`: start the operator."""

from __future__ import annotations

import argparse
import asyncio
import logging


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help="run the operator against the current kubeconfig or in-cluster config")
    p.add_argument("--namespace", "-n", action="append", default=None,
                   help="watch only this namespace (repeatable); default: all namespaces")
    p.add_argument("--resync-seconds", type=float, default=None, help="periodic full reconcile interval")
    p.add_argument("--metrics-interval-seconds", type=float, default=None, help="how often serving pods are scraped")
    p.add_argument("--metrics-window-seconds", type=float, default=None,
                   help="sliding window of the latency and cost figures on the status")
    p.add_argument("--scrape-timeout-seconds", type=float, default=None, help="per-pod /metrics timeout")
    p.add_argument("--metrics-port", type=int, default=None, help="port of the operator's own /metrics")
    p.add_argument("--health-port", type=int, default=None, help="port of the liveness endpoint /healthz")
    p.add_argument("--verbose", "-v", action="store_true")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import kopf

    from shardwise.controller import handlers
    from shardwise.controller.settings import Settings

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.verbose:  # Kopf logs every handler success at INFO; our own log says what changed
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    settings = Settings.from_env(resync_seconds=args.resync_seconds,
                                 metrics_interval_seconds=args.metrics_interval_seconds,
                                 metrics_window_seconds=args.metrics_window_seconds,
                                 scrape_timeout_seconds=args.scrape_timeout_seconds,
                                 metrics_port=args.metrics_port, health_port=args.health_port)
    registry = kopf.OperatorRegistry()
    handlers.register(registry, handlers.Operator(settings))
    namespaces = args.namespace or []
    asyncio.run(kopf.operator(
        registry=registry,
        clusterwide=not namespaces,
        namespaces=namespaces,
        standalone=True,
        liveness_endpoint=f"http://0.0.0.0:{settings.health_port}/healthz",
    ))
    return 0
