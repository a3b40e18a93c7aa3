"""The operator process: informers feed one work queue, workers reconcile, one leader acts.

Kopf is not used (docs/architecture.md, "Why not Kopf", has the facts): this process is
controller-runtime's manager in a few hundred lines, on the machinery in shardwise.kube:

    informers (cache.py) --events--> WorkQueue --keys--> N worker threads: reconcile.py
         |  list+watch, synced       collapse, backoff      gather -> decide -> act
         '--------- reads (cluster.py: from the caches) <--------'
    LeaderElector: only the leader's workers, observer and autoscaler act.
    health: /healthz and /readyz from flags in memory.

Threads, not asyncio, for the informers and workers: the Kubernetes client is blocking. The
observer (aiohttp scrapes) and the autoscaler run on one asyncio loop in the main thread.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import prometheus_client
import urllib3

from shardwise.controller import adapters, autoscaling, autoscaling_store, calibration, errors, modelcache, observing
from shardwise.decide import planning
from shardwise.controller.architectures import ArchitectureReader
from shardwise.controller.cluster import Cluster
from shardwise.kube import events, health
from shardwise.controller import reconcile as reconciling
from shardwise.controller.cache import Caches, node_material, pod_owner
from shardwise.kube.informer import Obj, wait_for_sync
from shardwise.kube.client import ApiException, Kube, retry_after
from shardwise.kube.leader import LeaderElector, Timing
from shardwise.controller.settings import Settings
from shardwise.decide.triggers import child_signal, needs_reconcile, pod_signal, wake_requested
from shardwise.kube.workqueue import HIGH, LOW, NORMAL, ShutDown, WorkQueue
from shardwise.observe import operator_metrics
from shardwise.render.labels import FIELD_MANAGER, INSTANCE_LABEL

log = logging.getLogger(__name__)

Key = tuple[str, str]
# Children and pods report in bursts (a Deployment converging updates its status two or three
# times within a second, its pod turns ready beside it): waiting this long makes a burst one
# reconcile (the queue keeps one pending delayed add per key) and costs Ready that much delay.
BATCH_SECONDS = 0.5
LEASE_NAME = "shardwise-operator"

LEADER = prometheus_client.Gauge("shardwise_leader", "1 while this process holds the Lease and acts.",
                                 registry=operator_metrics.REGISTRY)
QUEUE_DEPTH = prometheus_client.Gauge("shardwise_workqueue_depth", "Keys queued, processing or scheduled.",
                                      registry=operator_metrics.REGISTRY)
RECONCILES = prometheus_client.Counter("shardwise_reconciles", "Reconciles run (one object each).",
                                       registry=operator_metrics.REGISTRY)
TRIGGERS = prometheus_client.Counter(
    "shardwise_reconcile_triggers", "Enqueues of a deployment's key by what asked (collapsed ones included).",
    ["source"], registry=operator_metrics.REGISTRY)
SYNCED = prometheus_client.Gauge("shardwise_caches_synced", "1 once every informer has listed.",
                                 registry=operator_metrics.REGISTRY)


@dataclass(frozen=True)
class RunOptions:
    namespaces: list[str] = field(default_factory=list)  # empty: all namespaces
    workers: int = 4
    lease_namespace: str = "default"
    lease_timing: Timing = Timing()
    identity: str | None = None
    unreachable_limit: float = 60.0  # liveness fails after this long without the API server


class Manager:
    def __init__(self, settings: Settings, options: RunOptions, kube: Kube | None = None) -> None:
        self.settings, self.options = settings, options
        self.kube = kube or Kube(field_manager=FIELD_MANAGER)
        self.stop = threading.Event()
        self.queue: WorkQueue[Key] = WorkQueue()
        self.contact = health.ApiContact()
        own = ((settings.namespace, settings.pricing_configmap), (settings.namespace, calibration.CONFIGMAP),
               (settings.namespace, autoscaling_store.CONFIGMAP))
        self.caches = Caches(self.kube, options.namespaces, on_infd=self._on_infd, on_child=self._on_child,
                             on_node=self._on_node, on_pod=self._on_pod, on_contact=self.contact.mark,
                             configmaps=own)
        self.cluster = Cluster(self.kube, self.caches)
        self.architectures = ArchitectureReader(endpoint=settings.hub_endpoint)
        self.events = events.EventSink(self.kube.post_event)
        self.kube.event_sink = self.events
        self.elector = LeaderElector(self.kube, options.lease_namespace, LEASE_NAME, identity=options.identity,
                                     timing=options.lease_timing, on_contact=self.contact.mark,
                                     on_started=self.enqueue_all)
        self.observer = observing.Observer(self.cluster, settings, acting=self.acting)
        self.adapters = adapters.AdapterSync(self.cluster, settings, acting=self.acting)
        self.autoscaler = autoscaling.Autoscaler(self.cluster, settings, self.observer.latest, self.request,
                                                 acting=self.acting, latest_role=self.observer.latest_role)
        self.synced = threading.Event()
        # Namespaces a write was refused in because they are being deleted: their keys are
        # dropped until an InferenceDeployment is created there again (only possible once the
        # namespace is gone and made anew).
        self.terminating: set[str] = set()
        self.threads: list[threading.Thread] = []
        LEADER.set_function(lambda: 1.0 if self.acting() else 0.0)
        QUEUE_DEPTH.set_function(lambda: float(self.queue.pending()))
        SYNCED.set_function(lambda: 1.0 if self.synced.is_set() else 0.0)

    # -- who may act -------------------------------------------------------------------------
    def acting(self) -> bool:
        return self.synced.is_set() and self.elector.acting()

    def watched(self, namespace: str) -> bool:
        return not self.options.namespaces or namespace in self.options.namespaces

    # -- triggers: every one only enqueues a key ---------------------------------------------
    # Priorities (workqueue.py): what finishes a resource under way (its workload's status moved,
    # one of its pods is in trouble) goes before new and edited resources, and the bulk
    # re-enqueues (startup, resync, node changes) after both: with hundreds of resources applied at
    # once, a model whose pods are ready turns Ready in moments instead of after the backlog.
    def request(self, namespace: str, name: str, priority: int = NORMAL, source: str = "loop",
                delay: float = 0.0) -> None:
        """Reconcile this deployment soon; `source` (what asked) is counted for `make bench-scale`."""
        TRIGGERS.labels(source).inc()
        self.queue.add_after((namespace, name), delay, priority)

    def enqueue_all(self, spread: float = 0.0) -> None:
        for item in self.caches.inference_deployments():
            TRIGGERS.labels("resync").inc()
            key = (item["metadata"]["namespace"], item["metadata"]["name"])
            self.queue.add_after(key, random.random() * spread, LOW)

    def _on_infd(self, old: Obj | None, new: Obj | None) -> None:
        if new is None and old is not None:
            meta = old["metadata"]
            operator_metrics.forget(meta["namespace"], meta["name"])
            return
        if new is not None and wake_requested(old, new):  # the gateway holds a request for it
            self.autoscaler.wake(new["metadata"]["namespace"], new["metadata"]["name"])
        if needs_reconcile(old, new):
            assert new is not None
            if old is None:
                self.terminating.discard(new["metadata"]["namespace"])
            self.request(new["metadata"]["namespace"], new["metadata"]["name"], source="inference-deployment")

    def _on_child(self, old: Obj | None, new: Obj | None) -> None:
        meta = (new or old or {}).get("metadata") or {}
        owner = (meta.get("labels") or {}).get(INSTANCE_LABEL)
        if owner and child_signal(old) != child_signal(new):
            self.request(meta.get("namespace", ""), owner, HIGH if old is not None and new is not None else NORMAL,
                         source="child", delay=BATCH_SECONDS)

    def _on_node(self, old: Obj | None, new: Obj | None) -> None:
        # Before the sync, the enqueue-everything that follows it covers every node seen so far.
        if self.synced.is_set() and node_material(old) != node_material(new):
            self._enqueue_planning(lambda plan: planning.node_change_matters(plan, old, new), source="nodes")

    def _on_pod(self, old: Obj | None, new: Obj | None) -> None:
        if not self.synced.is_set():
            return
        owner = pod_owner(new or old or {})
        if owner is not None and self.watched(owner[0]) and pod_signal(old) != pod_signal(new):
            self.request(*owner, priority=HIGH, source="pod", delay=BATCH_SECONDS)
        if new is None and old is not None and old.get("spec", {}).get("nodeName"):
            # GPUs were freed: unplaced models may fit now.
            self._enqueue_planning(lambda plan: not plan.get("feasible"), source="freed-gpus")

    def _enqueue_planning(self, matters: Callable[[dict[str, Any]], bool], *, source: str) -> None:
        """Deployments whose plan this change may move (their plan's status in, a yes out). A short
        delay lets a burst (a node pool joining) collapse into one reconcile per deployment."""
        for item in self.caches.inference_deployments():
            if matters((item.get("status") or {}).get("plan") or {}):
                TRIGGERS.labels(source).inc()
                self.queue.add_after((item["metadata"]["namespace"], item["metadata"]["name"]), 1.0, LOW)

    # -- workers -----------------------------------------------------------------------------
    def _worker(self) -> None:
        while not self.stop.is_set():
            if not self.acting():
                self.elector.is_leader.wait(1.0)
                if not self.acting():
                    self.stop.wait(0.2)
                continue
            try:
                key = self.queue.get(timeout=1.0)
            except ShutDown:
                return
            if key is None:
                continue
            try:
                if not self.acting():  # lost the lease while waiting: leave the key for later
                    self.queue.add_after(key, 1.0)
                    continue
                self._process(key)
            finally:
                self.queue.done(key)

    def _process(self, key: Key) -> None:
        if key[0] in self.terminating:  # everything there goes with the namespace: nothing to do
            self.queue.forget(key)
            return
        RECONCILES.inc()
        try:
            with operator_metrics.RECONCILE_DURATION.labels("reconcile").time():
                outcome = reconciling.reconcile(self.cluster, self.settings, *key, self.architectures)
        except Exception as exc:  # noqa: BLE001 - every failure requeues with backoff
            self._requeue_after_failure(key, exc)
        else:
            self.queue.forget(key)
            if outcome.requeue:  # a child waits for one this pass created
                self.request(*key, priority=HIGH, source="requeue")

    def _requeue_after_failure(self, key: Key, exc: Exception) -> None:
        failures = self.queue.backoff.failures(key)
        if errors.is_namespace_terminating(exc):
            # The namespace and everything in it are being deleted: nothing to do, and no retry
            # (the deletion events end the key; a hot retry would fight the namespace controller).
            self.queue.forget(key)
            self.terminating.add(key[0])
            log.info("%s/%s: namespace %s is being terminated; nothing to do there", *key, key[0])
            return
        if isinstance(exc, ApiException) and exc.status == 409:
            # Someone wrote the object since our copy (another loop, a user): redo from the
            # fresh copy, which the watch delivers within moments. Not an error.
            TRIGGERS.labels("conflict").inc()
            self.queue.add_rate_limited(key)
            log.debug("%s/%s: conflict, reconciling again", *key)
            return
        operator_metrics.RECONCILE_ERRORS.labels("reconcile").inc()
        TRIGGERS.labels("retry").inc()
        wait = retry_after(exc)  # HTTP 429/503: the server says when; never sooner than our backoff
        delay = max(wait, self.queue.backoff.when(key)) if wait is not None else self.queue.backoff.when(key)
        self.queue.add_after(key, delay)
        # Bounded: the first failure of a streak says why (a traceback only for what is neither an
        # API answer nor a connection failure: that is a bug), then one line per ten retries.
        if failures == 0 or failures % 10 == 0:
            api_side = isinstance(exc, (ApiException, urllib3.exceptions.HTTPError, OSError))
            detail = f"HTTP {exc.status} {exc.reason}" if isinstance(exc, ApiException) else f"{type(exc).__name__}: {exc}"
            log.warning("reconcile of %s/%s failed (%d in a row): %s; retrying in %.1f s", *key, failures + 1,
                        detail[:300], delay, exc_info=failures == 0 and not api_side)

    # -- the process -------------------------------------------------------------------------
    def start(self) -> None:
        """Informers, the elector and the health server; workers start once caches synced."""
        self.threads += self.caches.start(self.stop)
        self.threads.append(self._thread(self.elector.run, "leader-election", self.stop))
        self.threads.append(self._thread(self.events.run, "events", self.stop))
        checks = {
            "/healthz": health.liveness(self.contact, self.options.unreachable_limit, lambda: self.threads),
            "/readyz": health.readiness(self.synced.is_set, self.elector.state),
        }
        self.health_server = health.serve(self.settings.health_port, checks)
        self._thread(self._after_sync, "startup")  # one-shot: not among the threads liveness watches

    def _after_sync(self) -> None:
        if not wait_for_sync(self.caches.informers, self.stop):
            return
        log.info("caches synced: %d InferenceDeployments, %d GPU nodes, %d pods kept",
                 len(self.caches.inference_deployments()),
                 sum(1 for n in self.caches.nodes() if "status" in n), len(self.caches.pod_informer))
        self.synced.set()
        self.enqueue_all()
        for index in range(self.options.workers):
            self.threads.append(self._thread(self._worker, f"worker-{index}"))
        self.threads.append(self._thread(self._resync, "resync"))

    def _resync(self) -> None:
        """The level-triggered safety net: every key again, spread over a tenth of the period."""
        while not self.stop.wait(self.settings.resync_seconds):
            if self.acting():
                self.enqueue_all(spread=self.settings.resync_seconds / 10)

    def _thread(self, target: Any, name: str, *args: Any) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        return thread

    def shutdown(self) -> None:
        self.stop.set()
        self.queue.shut_down()
        for thread in self.threads:
            if thread.name in ("leader-election", "events"):  # releases the Lease; posts what is left
                thread.join(timeout=5.0)
        self.health_server.shutdown()

    async def run_loops(self) -> None:
        """The observer, autoscaler and model cache loop until stopped (they check `acting`)."""
        tasks = [asyncio.create_task(self.observer.run_forever()), asyncio.create_task(self.autoscaler.run_forever()),
                 asyncio.create_task(self.adapters.run_forever()),
                 asyncio.create_task(modelcache.run_forever(self.cluster, self.settings, self.request, self.acting,
                                                               self.watched))]
        operator_metrics.start_server(self.settings.metrics_port)
        try:
            await asyncio.to_thread(self.stop.wait)
        finally:
            for task in tasks:
                task.cancel()


def run(settings: Settings, options: RunOptions) -> int:
    manager = Manager(settings, options)
    manager.start()

    def on_signal(signum: int, _: Any) -> None:
        log.info("signal %d: stopping", signum)
        manager.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        asyncio.run(manager.run_loops())
    finally:
        manager.shutdown()
    return 0
