"""Kopf handlers: the thin shell. They only route events to `reconcile` and run the periodic loops.

No Kopf change-detection handlers (on.create/update) and no timers: those store progress in
annotations or need a finalizer on every InferenceDeployment. Watch events plus a periodic resync
give the same level-triggered behaviour, leave the user's object untouched, and let `kubectl
delete` finish even when the operator is down (children go by owner-reference GC).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import kopf

from shardwise.api import v1alpha1 as api
from shardwise.controller import autoscaling, observing
from shardwise.controller import reconcile as reconciling
from shardwise.controller.cache import ClusterCache
from shardwise.controller.kube import ApiException, Kube
from shardwise.controller.settings import Settings
from shardwise.observe import operator_metrics
from shardwise.render.labels import INSTANCE_LABEL

log = logging.getLogger(__name__)


class Operator:
    """State shared by the handlers: the API client, settings and one lock per resource."""

    def __init__(self, settings: Settings, kube: Kube | None = None) -> None:
        self.settings = settings
        self._kube = kube
        self._locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
        self._locks_guard = threading.Lock()
        self.cache = ClusterCache()

    @property
    def kube(self) -> Kube:
        if self._kube is None:
            self._kube = Kube()
            self._kube.cache = self.cache
        return self._kube

    @contextlib.contextmanager
    def lock(self, namespace: str, name: str) -> Iterator[None]:
        """Held by everything that writes one object's status: reconcile, observer, autoscaler."""
        with self._locks_guard:
            lock = self._locks[(namespace, name)]
        with lock:
            yield

    def reconcile(self, namespace: str, name: str) -> None:
        with self.lock(namespace, name), \
                operator_metrics.RECONCILE_DURATION.labels("reconcile").time():
            try:
                reconciling.reconcile(self.kube, self.settings, namespace, name)
            except ApiException as exc:
                if exc.status == 409:  # someone wrote in between; the next event reconciles again
                    return
                operator_metrics.RECONCILE_ERRORS.labels("reconcile").inc()
                raise
            except Exception:
                operator_metrics.RECONCILE_ERRORS.labels("reconcile").inc()
                raise

    def resync_all(self) -> None:
        for item in self.kube.list_inference_deployments():
            meta = item["metadata"]
            try:
                self.reconcile(meta["namespace"], meta["name"])
            except Exception:  # one broken object must not starve the others
                log.exception("reconcile of %s/%s failed", meta["namespace"], meta["name"])


def register(registry: kopf.OperatorRegistry, operator: Operator) -> None:
    settings = operator.settings

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False  # we post our own, meaningful events
        settings.watching.server_timeout = 300
        settings.networking.request_timeout = 60
        settings.peering.standalone = True

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # The same credentials as our own client: in-cluster service account, else kubeconfig.
        return kopf.login_via_client(**kwargs)

    @kopf.on.event(api.GROUP, api.VERSION, api.PLURAL, registry=registry)
    def on_inference_deployment(event: dict[str, Any], namespace: str, name: str, **_: Any) -> None:
        if event.get("type") == "DELETED":
            return
        operator.reconcile(namespace, name)

    @kopf.on.event("apps", "v1", "deployments", labels={INSTANCE_LABEL: kopf.PRESENT}, registry=registry)
    @kopf.on.event("", "v1", "services", labels={INSTANCE_LABEL: kopf.PRESENT}, registry=registry)
    @kopf.on.event("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", labels={INSTANCE_LABEL: kopf.PRESENT},
                   registry=registry)
    def on_child(namespace: str, labels: dict[str, str], **_: Any) -> None:
        # A child changed (rollout progress, hand edit, deletion): converge its owner now.
        operator.reconcile(namespace, labels[INSTANCE_LABEL])

    @kopf.on.event("", "v1", "nodes", registry=registry)
    def on_node(event: dict[str, Any], **_: Any) -> None:
        operator.cache.on_node(event.get("type"), event["object"])

    @kopf.on.event("", "v1", "pods", registry=registry)
    def on_pod(event: dict[str, Any], **_: Any) -> None:
        operator.cache.on_pod(event.get("type"), event["object"])

    @kopf.on.startup(registry=registry)
    async def start_resync(memo: kopf.Memo, **_: Any) -> None:
        memo["resync"] = asyncio.create_task(_every(settings.resync_seconds, operator.resync_all))
        observer = observing.Observer(operator.kube, settings, operator.lock)
        memo["observe"] = asyncio.create_task(observer.run_forever())
        scaler = autoscaling.Autoscaler(operator.kube, settings, operator.lock, observer.latest, operator.reconcile)
        memo["autoscale"] = asyncio.create_task(scaler.run_forever())
        operator_metrics.start_server(settings.metrics_port)

    @kopf.on.cleanup(registry=registry)
    async def stop_loops(memo: kopf.Memo, **_: Any) -> None:
        for key in ("resync", "observe", "autoscale"):
            task = memo.get(key)
            if task is not None:
                task.cancel()

    @kopf.on.probe(id="api", registry=registry)
    def api_reachable(**_: Any) -> bool:
        operator.kube.request("GET", "/readyz")
        return True


async def _every(seconds: float, work: Any) -> None:
    while True:
        await asyncio.sleep(seconds)
        try:
            await asyncio.to_thread(work)
        except Exception:
            log.exception("periodic %s failed", getattr(work, "__name__", work))
