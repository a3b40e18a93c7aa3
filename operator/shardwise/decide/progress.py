"""Status of an InferenceDeployment, derived purely from its spec, plan and live workload.

Same inputs, same dict: nothing time-dependent enters except `now`, which only reaches a
condition's lastTransitionTime when that condition flips, so an idle reconcile writes nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from shardwise import conditions
from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.conditions import Condition
from shardwise.decide.workload_health import Failure, pod_failure, unschedulable, workload_failure
from shardwise.render import children, labels, leaderworkerset
from shardwise.rollout import pods as rollout_pods
from shardwise.rollout import progress as rollout_progress


def desired_replicas(spec: InferenceDeploymentSpec, status: dict[str, Any]) -> int:
    """spec.replicas, unless autoscaling owns the count (then its last decision, clamped)."""
    if spec.autoscaling is None:
        return spec.replicas
    decided = status.get("desiredReplicas")
    low, high = spec.autoscaling.minReplicas, spec.autoscaling.maxReplicas
    return min(max(int(decided) if decided is not None else low, low), high)


def kstatus_conditions(updates: list[Condition]) -> list[Condition]:
    """Reconciling and Stalled, the abnormal-true pair kstatus (Flux, `kubectl wait`) reads.

    They mirror Progressing and a Degraded that needs a person (a spec that cannot be placed or
    is invalid), so plain kstatus tells "still working" from "stuck" without custom health checks.
    """
    by_type = {c.type: c for c in updates}
    progressing, degraded = by_type.get("Progressing"), by_type.get("Degraded")
    out = []
    if progressing is not None:
        out.append(Condition("Reconciling", progressing.status, progressing.reason, progressing.message))
    if degraded is not None:
        # Waiting for GPUs resolves itself when they are freed; everything else needs a person.
        stuck = bool(degraded.status) and degraded.reason not in ("Unschedulable", "RolloutBlocked")
        out.append(Condition("Stalled", stuck, degraded.reason if stuck else "AsExpected",
                             degraded.message if stuck else ""))
    return out


def invalid_spec_status(status: dict[str, Any], message: str, *, generation: int | None, now: str,
                        reason: str = "InvalidSpec") -> dict[str, Any]:
    updates = [
        Condition("Ready", False, reason, message),
        Condition("Degraded", True, reason, message),
        Condition("Progressing", False, reason, message),
    ]
    updates += kstatus_conditions(updates)
    return {
        "observedGeneration": generation,
        "phase": "Failed",
        "conditions": conditions.merge(status.get("conditions") or [], updates, generation=generation, now=now),
    }


def _workload_counts(workload: dict[str, Any] | None) -> tuple[int, int, int, bool]:
    """(replicas, ready, updated, observed) of a Deployment or LeaderWorkerSet."""
    if workload is None:
        return 0, 0, 0, False
    st = workload.get("status") or {}
    if workload.get("kind") == "LeaderWorkerSet":
        # LWS v0.7 publishes no observedGeneration; its conditions say whether a rollout is pending.
        busy = {"Progressing", "UpdateInProgress"}
        observed = not any(c.get("type") in busy and c.get("status") == "True" for c in st.get("conditions") or [])
    else:
        observed = st.get("observedGeneration", 0) >= workload["metadata"].get("generation", 0)
    return int(st.get("replicas", 0)), int(st.get("readyReplicas", 0)), int(st.get("updatedReplicas", 0)), observed


Counts = tuple[int, int, int, bool]  # (replicas, ready, updated, observed)


def _counts(workload: dict[str, Any] | None, pods: list[dict[str, Any]] | None, desired: int) -> Counts:
    """The workload's counts, its ready replicas read from `pods` (its own) when its status has
    not caught up yet.

    The deployment controller reports a pod's readiness seconds after the kubelet (its writes are
    rate-limited: 20 a second for the whole controller manager by default, shared with every
    ReplicaSet, Endpoints and Event write), so with hundreds of deployments converging, Ready
    would lag its pods by that much. Only where the pods cannot be of an older template: the
    controller has observed the current generation and runs exactly `desired` pods, all updated,
    and no other pod of this deployment exists. Multi-node groups keep their LeaderWorkerSet's count.
    """
    replicas, ready, updated, observed = _workload_counts(workload)
    if pods is None or workload is None or workload.get("kind") != "Deployment" or not observed \
            or replicas != desired or updated < desired:
        return replicas, ready, updated, observed
    live = [p for p in pods if not rollout_pods.terminating(p)]
    if len(live) == desired:
        ready = max(ready, sum(1 for p in live if rollout_pods.ready(p)))
    return replicas, ready, updated, observed


def _serving(counts: Counts, desired: int) -> bool:
    replicas, ready, updated, observed = counts
    return observed and replicas == desired and updated >= desired and ready >= desired


def workload_ready(workload: dict[str, Any], desired: int, pods: list[dict[str, Any]] | None = None) -> bool:
    """Serving `desired` replicas, all of the current template; `pods` (the deployment's own) let
    readiness be read ahead of the workload's status."""
    return _serving(_counts(workload, pods, desired), desired)


def _selector(name: str, plan: dict[str, Any]) -> str:
    """Pods that serve: for multi-node groups only the leaders (workers have no HTTP server)."""
    selector = labels.selector_labels(name)
    if int(plan.get("nodesPerReplica") or 1) > 1:
        selector = leaderworkerset.leader_selector(name)
    return ",".join(f"{k}={v}" for k, v in selector.items())


def replicas_ignored(spec: InferenceDeploymentSpec) -> Condition:
    """spec.replicas set on an autoscaled resource (`kubectl scale`, an HPA): said, not silently dropped.

    Admission refuses both in a new object; the scale subresource can still write spec.replicas.
    """
    scaling = spec.autoscaling
    if scaling is None or "replicas" not in spec.model_fields_set:
        return Condition("ReplicasIgnored", False, "AsExpected", "")
    return Condition("ReplicasIgnored", True, "AutoscalingOwnsReplicas",
                     f"spec.replicas={spec.replicas} (kubectl scale or an HPA?) is ignored: spec.autoscaling keeps "
                     f"the count between {scaling.minReplicas} and {scaling.maxReplicas} from the SLOs; "
                     f"change autoscaling.minReplicas/maxReplicas instead, or remove spec.autoscaling")


def dtype_ignored(plan: dict[str, Any]) -> Condition:
    """spec.model.dtype (or quantization) that vLLM will not honour for this checkpoint (bf16 asked
    of an FP8 or MXFP4 one): it loads the weights as stored, and the plan counted those."""
    said = (plan.get("weights") or {}).get("dtypeIgnored") if plan.get("feasible") else None
    if not said:
        return Condition("DtypeIgnored", False, "AsExpected", "")
    return Condition("DtypeIgnored", True, "CheckpointStoredQuantized", said)


def _failed(failure: Failure, counts: str = "") -> list[Condition]:
    """A failure that needs a person: not ready, not progressing (kstatus Stalled), degraded, with its reason."""
    message = f"{failure.message} ({counts})" if counts else failure.message
    return [Condition("Ready", False, failure.reason, message),
            Condition("Progressing", False, failure.reason, message),
            Condition("Degraded", True, failure.reason, message)]


@dataclasses.dataclass(frozen=True)
class Role:
    """One role of a disaggregated deployment (prefill, decode): its workload as it will be after
    the writes, its own pods, the replicas it should run and the layout it was rendered with."""

    name: str
    workload: dict[str, Any] | None
    pods: list[dict[str, Any]]
    desired: int
    tensor: int
    gpus_per_replica: int


def role_status(role: Role) -> dict[str, Any]:
    replicas, ready, _, _ = _counts(role.workload, role.pods, role.desired)
    return {"workload": (role.workload or {}).get("metadata", {}).get("name"), "layout": f"TP{role.tensor}",
            "tensorParallel": role.tensor, "gpusPerReplica": role.gpus_per_replica,
            "replicas": replicas, "readyReplicas": ready, "desiredReplicas": role.desired}


def role_summary(entries: dict[str, dict[str, Any]]) -> str:
    """One line for `kubectl get -o wide`: 'prefill 2/2 TP1, decode 1/1 TP4'."""
    return ", ".join(f"{name} {e['readyReplicas']}/{e['desiredReplicas']} {e['layout']}" for name, e in entries.items())


def _roles_serving(roles: tuple[Role, ...]) -> tuple[bool, str, Failure | None, Failure | None]:
    """(every role serving, the counts in words, a failure, why a pod waits) over all roles."""
    counted = [(r, _counts(r.workload, r.pods, r.desired)) for r in roles]
    ready = all(r.workload is not None and _serving(c, r.desired) for r, c in counted)
    words = ", ".join(f"{r.name} {c[1]}/{r.desired}" for r, c in counted) + " replicas ready"
    if ready:
        return ready, words, None, None
    failure = next(((r.name, f) for r in roles for f in [workload_failure(r.workload) or pod_failure(r.pods)]
                    if f is not None), None)
    named = Failure(failure[1].reason, f"{failure[0]}: {failure[1].message}") if failure else None
    waiting = next((w for r in roles for w in [unschedulable(r.pods)] if w is not None), None)
    return ready, words, named, waiting


def build_status(spec: InferenceDeploymentSpec, plan: dict[str, Any], workload: dict[str, Any] | None,
                 pods: list[dict[str, Any]], status: dict[str, Any], *, owner: children.Owner,
                 generation: int | None, now: str, apply_failure: Failure | None = None,
                 rollout: rollout_progress.View | None = None,
                 roles: tuple[Role, ...] | None = None) -> dict[str, Any]:
    """`apply_failure`: what the API server (or an object we do not own) refused when applying the children.
    `rollout`, while one is tracked, adds status.rollout, and while it is active its words replace the
    generic Progressing/Degraded ones. `roles` (a disaggregated deployment) replaces `workload` and
    `pods`: Ready when every role serves its replicas, the counts summed over the roles and each
    role's own under status.roles."""
    if roles is None:
        desired = desired_replicas(spec, status)
        seen = _counts(workload, pods, desired)
    else:
        desired = sum(r.desired for r in roles)
        per_role = [_counts(r.workload, r.pods, r.desired) for r in roles]
        seen = (sum(c[0] for c in per_role), sum(c[1] for c in per_role), sum(c[2] for c in per_role),
                all(c[3] for c in per_role))
    replicas, ready = seen[0], seen[1]
    updates: list[Condition] = []

    if plan.get("feasible"):
        updates.append(Condition("Planned", True, "Planned", plan.get("reason", "")))
    else:
        reason_code = plan.get("reasonCode") or "Infeasible"
        updates.append(Condition("Planned", False, reason_code, plan.get("reason", "")))

    if not plan.get("feasible"):
        phase = "Pending"
        updates += [Condition("Ready", False, "NotPlanned", plan.get("reason", "")),
                    Condition("Progressing", False, "NotPlanned", "no feasible plan; nothing was created"),
                    Condition("Degraded", True, plan.get("reasonCode") or "Infeasible", plan.get("reason", ""))]
    elif apply_failure is not None:
        phase = "Degraded"
        updates += _failed(apply_failure)
    elif desired == 0:
        phase = "Ready"
        updates += [Condition("Ready", True, "ScaledToZero", "0 replicas requested"),
                    Condition("Progressing", False, "ScaledToZero", "0 replicas requested"),
                    Condition("Degraded", False, "AsExpected", "")]
    else:
        if roles is None:
            counts = f"{ready}/{desired} replicas ready"
            is_ready = workload is not None and _serving(seen, desired)
            failure = None if is_ready else (workload_failure(workload) or pod_failure(pods))
            waiting = None if is_ready else unschedulable(pods)
        else:
            is_ready, counts, failure, waiting = _roles_serving(roles)
        if failure is not None:
            phase = "Degraded"
            updates += _failed(failure, counts)
        else:
            updates.append(Condition("Ready", is_ready, "Ready" if is_ready else "ReplicasNotReady", counts))
            updates.append(Condition("Progressing", not is_ready, "RollingOut" if not is_ready else "RolloutComplete",
                                     counts if not is_ready else f"{desired} replicas up to date"))
            if waiting is not None:
                updates.append(Condition("Degraded", True, waiting.reason, waiting.message))
            else:
                updates.append(Condition("Degraded", False, "AsExpected", ""))
            phase = "Ready" if is_ready else ("Degraded" if waiting else "Progressing")
        if rollout is not None and rollout.active and rollout.conditions:
            replaced = {c.type for c in rollout.conditions}
            updates = [c for c in updates if c.type not in replaced] + list(rollout.conditions)
            phase = "Degraded" if any(c.type == "Degraded" and c.status for c in updates) else "Progressing"

    updates += kstatus_conditions(updates)
    updates.append(replicas_ignored(spec))
    updates.append(dtype_ignored(plan))
    return {
        "observedGeneration": generation,
        "phase": phase,
        "conditions": conditions.merge(status.get("conditions") or [], updates, generation=generation, now=now),
        "replicas": replicas,
        "readyReplicas": ready,
        "desiredReplicas": desired,
        "selector": _selector(owner.name, plan),
        "endpoint": children.endpoint(owner),
        "plan": plan,
        "rollout": rollout.status if rollout is not None and plan.get("feasible") else None,
        # None, not absent, when aggregated: the status patch only removes what the update names.
        "roles": {r.name: role_status(r) for r in roles} if roles is not None else None,
        "roleSummary": role_summary({r.name: role_status(r) for r in roles}) if roles is not None else None,
    }
