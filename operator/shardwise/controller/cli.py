"""`shardwise run`: start the operator."""

from __future__ import annotations

import argparse
import logging
import os


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help="run the operator against the current kubeconfig or in-cluster config")
    p.add_argument("--namespace", "-n", action="append", default=None,
                   help="serve only InferenceDeployments in this namespace (repeatable); default: all namespaces")
    p.add_argument("--resync-seconds", type=float, default=None,
                   help="periodic full reconcile from the cache (a safety net; watches trigger the rest)")
    p.add_argument("--metrics-interval-seconds", type=float, default=None, help="how often serving pods are scraped")
    p.add_argument("--metrics-window-seconds", type=float, default=None,
                   help="sliding window of the latency and cost figures on the status")
    p.add_argument("--scrape-timeout-seconds", type=float, default=None, help="per-pod /metrics timeout")
    p.add_argument("--metrics-port", type=int, default=None, help="port of the operator's own /metrics")
    p.add_argument("--health-port", type=int, default=None, help="port of /healthz (liveness) and /readyz (readiness)")
    p.add_argument("--workers", type=int, default=4, help="reconciles that may run at once (different objects)")
    p.add_argument("--leader-election-namespace", default=None,
                   help="namespace of the Lease that elects one active operator "
                        "(default: $POD_NAMESPACE, else 'default')")
    p.add_argument("--leader-election-identity", default=None,
                   help="this process's name on the Lease (default: $POD_NAME, else host name plus a random "
                        "suffix). A container restarted in the same pod keeps its name and so its Lease")
    p.add_argument("--lease-duration-seconds", type=float, default=15.0,
                   help="how long a standby waits for a silent leader before taking over")
    p.add_argument("--renew-deadline-seconds", type=float, default=10.0,
                   help="a leader that could not renew for this long stops acting")
    p.add_argument("--retry-period-seconds", type=float, default=2.0, help="how often the Lease is renewed or tried")
    p.add_argument("--api-unreachable-seconds", type=float, default=60.0,
                   help="/healthz fails once the API server has not answered for this long")
    p.add_argument("--verbose", "-v", action="store_true")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from shardwise.controller import manager
    from shardwise.kube.leader import Timing
    from shardwise.controller.settings import Settings

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.verbose:  # the HTTP client logs every retry; our own log says what failed, boundedly
        logging.getLogger("urllib3").setLevel(logging.ERROR)
    settings = Settings.from_env(resync_seconds=args.resync_seconds,
                                 metrics_interval_seconds=args.metrics_interval_seconds,
                                 metrics_window_seconds=args.metrics_window_seconds,
                                 scrape_timeout_seconds=args.scrape_timeout_seconds,
                                 metrics_port=args.metrics_port, health_port=args.health_port)
    timing = Timing(lease_duration=args.lease_duration_seconds, renew_deadline=args.renew_deadline_seconds,
                    retry_period=args.retry_period_seconds)
    if not timing.retry_period < timing.renew_deadline < timing.lease_duration:
        raise SystemExit("need --retry-period-seconds < --renew-deadline-seconds < --lease-duration-seconds")
    options = manager.RunOptions(
        namespaces=args.namespace or [], workers=max(1, args.workers),
        lease_namespace=args.leader_election_namespace or os.environ.get("POD_NAMESPACE") or "default",
        lease_timing=timing, unreachable_limit=args.api_unreachable_seconds,
        identity=args.leader_election_identity or os.environ.get("POD_NAME") or None)
    return manager.run(settings, options)
