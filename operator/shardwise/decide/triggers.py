"""Which watch events ask for a reconcile: controller-runtime's predicates, for our kinds.

Pure functions of (old, new) as the informers hand them over: an event whose before and after
read the same here changes nothing a reconcile reads, and is dropped. Node events are decided
by planning.node_change_matters (which deployments a node change can move).
"""

from __future__ import annotations

from typing import Any

from shardwise.decide.workload_health import pod_failure, unschedulable
from shardwise.render.labels import WAKE_ANNOTATION
from shardwise.rollout import pods as rollout_pods

Obj = dict[str, Any]


def needs_reconcile(old: Obj | None, new: Obj | None) -> bool:
    """Does this InferenceDeployment event ask for a reconcile?

    Not for a change of status alone (controller-runtime's GenerationChangedPredicate): those
    are our own writes, or the observer's and autoscaler's, which enqueue explicitly when they
    need one. Spec changes bump the generation; annotations (replan) and deletion show in metadata.
    """
    if new is None:
        return False
    if old is None:
        return True
    before, after = old.get("metadata") or {}, new.get("metadata") or {}
    return any(before.get(k) != after.get(k) for k in ("generation", "annotations", "labels", "deletionTimestamp"))


def wake_requested(old: Obj | None, new: Obj) -> bool:
    """Did the gateway (again) ask to wake this deployment? Then the autoscaler evaluates now."""
    def wake(obj: Obj | None) -> Any:
        return (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(WAKE_ANNOTATION)
    return wake(new) is not None and wake(new) != wake(old)


# Bookkeeping the deployment controller writes on its Deployments (the revision counter): no news.
_CONTROLLER_ANNOTATIONS = "deployment.kubernetes.io/"
# Workload conditions a reconcile reads (workload_health, progress); the rest (Available, the
# Progressing reason of a healthy rollout) change as a rollout advances and tell nothing new.
_READ_CONDITIONS = {"ReplicaFailure", "UpdateInProgress"}


def child_signal(child: Obj | None) -> Any:
    """What of a child (Deployment, Service, LeaderWorkerSet, InferencePool, HTTPRoute) a reconcile
    reads, to skip the events that change nothing of it: controller-runtime's predicates, for our
    children.

    Spec, labels, annotations, owners and deletion (drift and ownership); the counts and the
    observed generation (progress); and only the conditions that report trouble. Of the
    status updates of a converging Deployment, those that move its counts matter, not its
    conditions' progress.
    """
    if child is None:
        return None
    meta, status = child.get("metadata") or {}, child.get("status") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if not k.startswith(_CONTROLLER_ANNOTATIONS)}
    conditions = [(c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                  for c in status.get("conditions") or []
                  if c.get("type") in _READ_CONDITIONS
                  or (c.get("type") == "Progressing" and c.get("reason") == "ProgressDeadlineExceeded")
                  or (c.get("type") == "Progressing" and child.get("kind") == "LeaderWorkerSet")]
    counts = {k: status.get(k) for k in ("replicas", "readyReplicas", "updatedReplicas", "observedGeneration")}
    # A routing child's gateways (status.parents: Accepted, ResolvedRefs) become the Routed condition.
    parents = [((p.get("parentRef") or {}).get("namespace"), (p.get("parentRef") or {}).get("name"),
                [(c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in p.get("conditions") or []])
               for p in status.get("parents") or []]
    return (child.get("spec"), meta.get("labels"), annotations, meta.get("ownerReferences"),
            meta.get("deletionTimestamp"), meta.get("generation"), counts, conditions, parents)


def pod_signal(pod: Obj | None) -> tuple[str | None, str | None, bool, bool]:
    """What of one of our pods the status reads beyond its workload's counts: a container failure,
    waiting for GPUs, readiness (read ahead of the deployment controller, see progress.py), and
    whether it failed. A pod's normal progress (created, scheduled, pulling, started) changes none
    of these, so it reconciles nothing; a missing pod reads like a new one."""
    if pod is None or rollout_pods.terminating(pod):
        return None, None, False, False
    failure, waiting = pod_failure([pod]), unschedulable([pod])
    return (failure.reason if failure else None, waiting.reason if waiting else None, rollout_pods.ready(pod),
            (pod.get("status") or {}).get("phase") == "Failed")
