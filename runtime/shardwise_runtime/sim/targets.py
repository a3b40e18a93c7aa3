"""Load-generator targets that follow a deployment's replicas as they come and go.

An autoscaling test is only meaningful if new replicas receive traffic: the simulated cluster has
no kube-proxy, so the load generator itself spreads requests over the serving pods' loopback IPs,
refreshed from the API server in a daemon thread. The pod rules are those of the fleet (`pods`),
plus readiness, as a Service would apply them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes import client, config

from shardwise_runtime.sim import pods

log = logging.getLogger(__name__)


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def target_urls(pod_list: Sequence[Mapping[str, Any]]) -> list[str]:
    """OpenAI base URLs of the ready pods that have (or will have) a simulated engine, sorted."""
    urls = []
    for pod in pod_list:
        engine_config = pods.engine_config_from_pod(pod)
        if engine_config is not None and _ready(pod):
            urls.append(f"http://{engine_config.host}:{engine_config.port}/v1")
    return sorted(urls)


def follow_deployment(
    kubeconfig: str, namespace: str, deployment: str, refresh_s: float = 2.0
) -> Callable[[], list[str]]:
    """A callable for `load.run_load` returning the deployment's current engine URLs.

    The first listing happens before returning, so a run starts with the replicas of the moment;
    later listings replace the set every `refresh_s`. A failed listing keeps the previous set.
    """
    kube = config.new_client_from_config(kubeconfig)  # type: ignore[no-untyped-call]
    api = client.CoreV1Api(kube)
    selector = f"{pods.INFERENCE_LABEL}={deployment}"
    serialize = api.api_client.sanitize_for_serialization
    current: list[list[str]] = [[]]

    def refresh() -> None:
        listing = api.list_namespaced_pod(namespace, label_selector=selector)
        current[0] = target_urls([serialize(pod) for pod in listing.items])

    def loop() -> None:
        while True:
            time.sleep(refresh_s)
            try:
                refresh()
            except Exception as error:  # noqa: BLE001 - keep the last known targets
                log.warning("listing %s/%s failed: %s", namespace, deployment, error)

    refresh()
    threading.Thread(target=loop, name="load-targets", daemon=True).start()
    return lambda: current[0]
