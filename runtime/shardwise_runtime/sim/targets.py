"""Load-generator targets that follow a deployment's replicas as they come and go.

An autoscaling test is only meaningful if new replicas receive traffic: the simulated cluster has
no kube-proxy, so the load generator itself spreads requests over the serving pods' loopback IPs,
refreshed from the API server in a daemon thread. The pod rules are those of the fleet (`pods`),
plus readiness, as a Service would apply them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Self

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


class DeploymentTargets:
    """The deployment's current engine URLs when called; `close` stops the refresh thread.

    Close it (or use it as a context manager) before the process ends: a daemon thread still
    polling the API server when the interpreter finalizes is killed by CPython inside its
    blocking call (`pthread_exit` from `take_gil`), which can abort the whole process (SIGABRT)
    after everything else has finished.
    """

    def __init__(self, current: list[list[str]], stop: threading.Event, thread: threading.Thread,
                 kube: client.ApiClient) -> None:
        self._current = current
        self._stop = stop
        self._thread = thread
        self._kube = kube

    def __call__(self) -> list[str]:
        return self._current[0]

    def close(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._kube.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def follow_deployment(
    kubeconfig: str, namespace: str, deployment: str, refresh_s: float = 2.0
) -> DeploymentTargets:
    """A callable for `load.run_load` returning the deployment's current engine URLs.

    The first listing happens before returning, so a run starts with the replicas of the moment;
    later listings replace the set every `refresh_s` until `close`. A failed listing keeps the
    previous set.
    """
    kube = config.new_client_from_config(kubeconfig)  # type: ignore[no-untyped-call]
    api = client.CoreV1Api(kube)
    selector = f"{pods.INFERENCE_LABEL}={deployment}"
    serialize = api.api_client.sanitize_for_serialization
    current: list[list[str]] = [[]]
    stop = threading.Event()

    def refresh() -> None:
        listing = api.list_namespaced_pod(namespace, label_selector=selector, _request_timeout=10)
        current[0] = target_urls([serialize(pod) for pod in listing.items])

    def loop() -> None:
        while not stop.wait(refresh_s):
            try:
                refresh()
            except Exception as error:  # noqa: BLE001 - keep the last known targets
                log.warning("listing %s/%s failed: %s", namespace, deployment, error)

    refresh()
    thread = threading.Thread(target=loop, name="load-targets", daemon=True)
    thread.start()
    return DeploymentTargets(current, stop, thread, kube)
