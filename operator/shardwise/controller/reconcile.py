"""One level-triggered reconcile of an InferenceDeployment, in three steps a reader can see:

    gather  a snapshot from the synced caches: the resource, its children and pods, the nodes and
            every GPU pod, the model cache's claim and downloader, pricing and learned corrections;
    decide  with one pure function (decide/reconcile.py) from that snapshot to the objects to
            apply, delete or annotate, the status patch and the events;
    act     apply them: children by server-side apply, then the status patch conditional on the
            resourceVersion it was computed from, then the events.

Every read comes before the decision acted on (when a new plan wants a child name the snapshot
lacks, decide says so, the shell looks it up and decides again), every write after it. An API refusal that retrying cannot fix (errors.py)
goes on the status: decide runs again over the same snapshot with the refusal in it.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from typing import Any

from shardwise.api import v1alpha1 as api
from shardwise.controller import calibration, errors, events, modelcache
from shardwise.controller.architectures import ArchitectureReader, Resolved
from shardwise.controller.cluster import INFD_API_VERSION, Cluster
from shardwise.controller.settings import Settings
from shardwise.decide import reconcile as deciding
from shardwise.decide.workload_health import Failure
from shardwise.kube.client import ApiException
from shardwise.render import labels, leaderworkerset, routing

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Outcome:
    applied: tuple[str, ...]
    status_written: bool
    failure: Failure | None = None  # a permanent failure, reported on the status (not worth a hot retry)
    requeue: bool = False  # come back at once: a child waits for one just created


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def reconcile(cluster: Cluster, settings: Settings, namespace: str, name: str,
              architectures: ArchitectureReader | None = None) -> Outcome:
    snapshot = gather(cluster, settings, namespace, name, architectures)
    if snapshot is None:
        return Outcome((), False)
    decision = deciding.decide(snapshot)
    if decision.lookups:  # a new plan wants names the snapshot lacks: read them, decide anew
        snapshot = look_up(cluster, snapshot, decision.lookups)
        decision = deciding.decide(snapshot)
    return act(cluster, snapshot, decision)


# -- gather ------------------------------------------------------------------------------------
def gather(cluster: Cluster, settings: Settings, namespace: str, name: str,
           architectures: ArchitectureReader | None = None) -> deciding.Snapshot | None:
    """Everything decide reads; None when the resource is gone or going."""
    infd = cluster.get(INFD_API_VERSION, api.KIND, namespace, name)
    if infd is None or infd["metadata"].get("deletionTimestamp"):
        return None
    now = now_rfc3339()
    spec = deciding.parse_spec(infd)
    nodes = cluster.list_nodes()
    if isinstance(spec, str):  # decide reports it; nothing else is read or touched
        return deciding.Snapshot(infd=infd, now=now, nodes=nodes, gpu_pods=[], pods=[], children={},
                                 owned_workloads={}, lws_installed=True)
    lws_installed = cluster.installed(leaderworkerset.API_VERSION, leaderworkerset.KIND, namespace)
    pool_installed = cluster.installed(routing.POOL_API_VERSION, routing.POOL_KIND, namespace)
    route_installed = cluster.installed(routing.ROUTE_API_VERSION, routing.ROUTE_KIND, namespace)
    stored_plan = (infd.get("status") or {}).get("plan")
    checked = deciding.keys_to_check(name, stored_plan, lws_installed=lws_installed, spec=spec,
                                     pool_installed=pool_installed, route_installed=route_installed)
    # Children carrying our label are in the cache; a namesake of someone else's is read live,
    # only for the names this pass may create (at steady state, every one is cached).
    looked_up = {key: cluster.get(key[0], key[1], namespace, key[2]) for key in checked}
    owned = {key: (looked_up[key] if key in looked_up else cluster.get_cached(key[0], key[1], namespace, key[2]))
             for key in deciding.workload_keys(name)
             if key[1] != leaderworkerset.KIND or lws_installed}
    # Routing children spec.routing no longer asks for are deleted: the cache's only (ours carry the label).
    served = {routing.POOL_KIND: pool_installed, routing.ROUTE_KIND: route_installed,
              routing.BBR_CONFIGMAP_KIND: True}
    owned_routing = {key: (looked_up[key] if key in looked_up else cluster.get_cached(key[0], key[1], namespace, key[2]))
                     for key in deciding.routing_keys(name) if served[key[1]]}
    prices = learned = None
    resolved = Resolved()
    if deciding.wants_new_plan(infd, spec, nodes):
        prices = cluster.pricing_table(settings.namespace, settings.pricing_configmap)
        learned = calibration.read_table(cluster, settings.namespace)
        if architectures is not None:  # a model the catalog lacks: its own config.json
            resolved = architectures.resolve((infd.get("spec") or {}).get("model") or {}, spec.model.revision,
                                             spec.model.cache.hubEndpoint)
    return deciding.Snapshot(
        infd=infd, now=now, nodes=nodes, lws_installed=lws_installed, gpu_pods=cluster.list_gpu_pods(),
        pods=cluster.list_pods(namespace, labels.selector_string(name)), children=looked_up,
        owned_workloads=owned, cache=modelcache.gather(cluster, settings, namespace, spec),
        prices=prices, learned=learned, architecture=resolved.architecture,
        architecture_failure=resolved.failure, runtime_image=settings.runtime_image,
        engine_images=dict(settings.engine_images),
        downloader_image=settings.downloader_image, pool_installed=pool_installed,
        route_installed=route_installed, owned_routing=owned_routing,
        neighbours=tuple(i for i in cluster.list_inference_deployments() if i["metadata"]["namespace"] == namespace)
        if spec.adapters else ())


def look_up(cluster: Cluster, snapshot: deciding.Snapshot,
            keys: tuple[deciding.ChildKey, ...]) -> deciding.Snapshot:
    namespace = snapshot.infd["metadata"]["namespace"]
    found = {key: cluster.get(key[0], key[1], namespace, key[2]) for key in keys}
    return dataclasses.replace(snapshot, children={**snapshot.children, **found})


# -- act ---------------------------------------------------------------------------------------
def act(cluster: Cluster, snapshot: deciding.Snapshot, decision: deciding.Decision) -> Outcome:
    meta = snapshot.infd["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    applied: list[str] = []
    refused_keys: set[deciding.ChildKey] = set()
    failure: Failure | None = None
    lws_missing = False
    for action in decision.apply:
        obj = action.obj
        try:
            cluster.apply(obj, force=action.force)
        except ApiException as exc:
            if exc.status == 404 and obj["kind"] == leaderworkerset.KIND:  # the API is not served after all
                lws_missing = True
            else:
                typed = errors.classify(exc)
                if not typed.permanent:
                    raise
                failure = failure or Failure(typed.reason, f"{obj['kind']} {obj['metadata']['name']}: {typed.message}")
            refused_keys.add(deciding.key_of(obj))
            continue
        applied.append(f"{obj['kind']}/{obj['metadata']['name']}")
    for obj, metadata in decision.annotate:
        cluster.patch_metadata(obj, metadata)
    for obj in decision.delete:
        cluster.delete_owned(obj)
        applied.append(f"deleted {obj['kind']}/{obj['metadata']['name']}")
    if applied:
        log.info("%s/%s: applied %s", namespace, name, ", ".join(applied))
    if refused_keys:
        refused = deciding.Refused(failure=failure, lws_missing=lws_missing, keys=frozenset(refused_keys))
        decision = dataclasses.replace(deciding.decide(snapshot, refused), apply=decision.apply)
    written = _write_status(cluster, snapshot.infd, decision.status_patch)
    if written:
        for type_, reason, message in decision.events:
            events.emit(cluster, snapshot.infd, type_=type_, reason=reason, message=message, now=snapshot.now)
    if decision.failure is not None and written:
        log.warning("%s/%s: %s: %s", namespace, name, decision.failure.reason, decision.failure.message)
    return Outcome(tuple(applied), written, decision.failure, decision.requeue)


def _write_status(cluster: Cluster, infd: dict[str, Any], patch: dict[str, Any]) -> bool:
    """The patch holds only the status keys whose value changed; nothing when none did.

    Conditional on the resourceVersion it was computed from: if anyone wrote since, the API
    server answers 409 and the work queue reconciles again from the fresh object.
    """
    if not patch:
        return False
    meta = infd["metadata"]
    cluster.patch_status(meta["namespace"], meta["name"], patch, resource_version=meta.get("resourceVersion"))
    return True
