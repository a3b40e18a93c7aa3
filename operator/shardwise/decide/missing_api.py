"""The status when a multi-node replica needs the LeaderWorkerSet API and the cluster lacks it.

LeaderWorkerSet is an add-on (sigs.k8s.io/lws), not part of Kubernetes. Without its CRD the API
server answers 404 to an apply of one; that is the user's cluster to fix, not a fault to retry
noisily, so reconcile carries on (the Service and the rest of the status are still written) and
the conditions say how to install it. The next reconcile after installation applies the
workload, level-triggered, with nothing to restart.
"""

from __future__ import annotations

from typing import Any

from shardwise import conditions
from shardwise.conditions import Condition
from shardwise.decide import progress

REASON = "LeaderWorkerSetNotInstalled"
MESSAGE = ("this plan spans nodes and needs a LeaderWorkerSet, but the cluster has no "
           "leaderworkerset.x-k8s.io/v1 API: install LeaderWorkerSet (sigs.k8s.io/lws v0.7.0 or "
           "later), e.g. `kubectl apply --server-side -f https://github.com/kubernetes-sigs/lws/"
           "releases/download/v0.7.0/manifests.yaml`; shardwise applies the workload on its next "
           "reconcile")


def lws_not_installed_status(update: dict[str, Any], status: dict[str, Any], *,
                             generation: int | None, now: str) -> dict[str, Any]:
    """`update` (from progress.build_status) with the missing API in its phase and conditions.

    The override is merged against the stored `status`, not against `update`: that is what keeps
    lastTransitionTime still from one reconcile to the next while the API stays missing.
    """
    overrides = [Condition("Ready", False, REASON, MESSAGE),
                 Condition("Progressing", False, REASON, MESSAGE),
                 Condition("Degraded", True, REASON, MESSAGE)]
    overrides += progress.kstatus_conditions(overrides)  # Stalled: it needs a person
    stored = conditions.merge(status.get("conditions") or [], overrides, generation=generation, now=now)
    replaced = {c["type"]: c for c in stored if c["type"] in {o.type for o in overrides}}
    return {**update, "phase": "Degraded",
            "conditions": [replaced.get(c["type"], c) for c in update["conditions"]]}
