"""What the autoscaler decides around `autoscale.decide`, from plain data: the capacity bound from
the GPUs that exist, HPA conflicts, the ITL floor, the Observation, and the status a Decision
writes.

Pure (no I/O); `autoscaling` gathers the inputs and applies the outcome.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from shardwise import autoscale
from shardwise.api import v1alpha1 as api
from shardwise.autoscale import Decision, Observation
from shardwise.conditions import Condition
from shardwise.observe.aggregate import Summary
from shardwise.planner import corrections, inventory, placement
from shardwise.rollout import progress as rollout_progress
from shardwise.render import disaggregation
from shardwise.render.labels import WAKE_ANNOTATION
from shardwise.rollout import room

CONFLICT = "AutoscalingConflict"
# Stabilization only reads the last window of records; this bounds the memory even when a window
# is long and the period short.
MAX_HISTORY = 64


def capacity_replicas(plan: Mapping[str, Any], inv: inventory.Inventory,
                      node_selector: Mapping[str, str],
                      tolerations: Sequence[placement.Toleration] = ()) -> int | None:
    """Replicas the planned GPU product can hold: free GPUs on usable nodes, in whole pods.

    `inv` must be built without this deployment's own pods, so the GPUs its running replicas hold
    count as free: the answer includes them. Nodes with taints the pods do not tolerate hold
    none. The same accounting decides a rollout's strategy (rollout.room). None without a
    usable plan (nothing to bound by).
    """
    return room.replicas_that_fit(plan, inv, node_selector=node_selector, tolerations=tolerations)


def hpa_conflicts(hpas: list[dict[str, Any]], name: str) -> list[str]:
    """Names of HorizontalPodAutoscalers whose scaleTargetRef is this InferenceDeployment."""
    found = []
    for hpa in hpas:
        ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        if ref.get("kind") == api.KIND and ref.get("name") == name \
                and str(ref.get("apiVersion", api.GROUP)).split("/")[0] == api.GROUP:
            found.append(hpa["metadata"]["name"])
    return sorted(found)


def itl_floor_ms(predicted: Mapping[str, Any] | None, compared: Mapping[str, Any] | None) -> float | None:
    """An idle replica's inter-token latency: the floor that adding replicas cannot lower.

    The plan predicts it (`idleItlMs`); where the status already holds observed versus predicted
    ITL for this deployment (`status.prediction`), the observed ratio replaces whatever correction
    the plan was made with, so the floor follows what the engines really do.
    """
    figures = predicted or {}
    idle = figures.get("idleItlMs", figures.get("itlMs"))
    if idle is None:
        return None
    ratio = ((compared or {}).get("itlMs") or {}).get("ratio")
    if ratio:
        planned = (figures.get("correction") or {}).get("itlFactor") or 1.0
        return float(idle) / float(planned) * corrections.clamp(float(ratio))
    return float(idle)


def observation(summary: Summary | None, *, current: int, ready: int,
                capacity: int | None, predicted: Mapping[str, Any] | None = None,
                compared: Mapping[str, Any] | None = None,
                expected_startup_s: float | None = None,
                rollout: Mapping[str, Any] | None = None, held: float = 0.0) -> Observation:
    """What `decide` sees; no summary (no scrape yet) means no latency and no load known.

    Scale-down projections count only the inter-token latency above an idle replica's
    (`itl_floor_ms`: observed where the status has it, else the plan's prediction).
    """
    s = summary
    return Observation(
        itl_floor_ms=itl_floor_ms(predicted, compared),
        expected_startup_s=expected_startup_s,
        current_replicas=current,
        replicas_ready=min(ready, current),
        replicas_starting=max(0, current - ready),
        ttft_p95_ms=s.ttft_p95_ms if s else None,
        itl_p95_ms=s.itl_p95_ms if s else None,
        e2e_p95_ms=s.e2e_p95_ms if s else None,
        waiting=(s.waiting or 0.0) if s else 0.0,
        running=(s.running or 0.0) if s else 0.0,
        kv_cache_usage=s.kv_cache_usage if s else None,
        requests_per_second=(s.requests_per_second or 0.0) if s else 0.0,
        held_requests=held,
        capacity_replicas=capacity,
        rollout_in_progress=bool(rollout) and (rollout or {}).get("state") != rollout_progress.COMPLETE,
    )


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one evaluation writes and announces."""

    update: dict[str, Any]
    events: tuple[tuple[str, str, str], ...]  # (type, reason, message)
    changed: bool


def apply_decision(status: Mapping[str, Any], decision: Decision, *, capacity: int | None,
                   stamp: str) -> Outcome:
    """The status update and events for a decision; no update when nothing material changed.

    Holds repeat every period with fresh numbers in their reason; writing each would make the
    object churn, so the status moves only when the replica count or the capacity bound does.
    """
    previous = status.get("autoscaling") or {}
    changed = decision.direction is not autoscale.Direction.HOLD
    found: list[tuple[str, str, str]] = []
    if changed:
        reason = "ScaledUp" if decision.direction is autoscale.Direction.UP else "ScaledDown"
        found.append(("Normal", reason, decision.event_message()))
    if decision.capacity_limited and not previous.get("capacityLimited"):
        found.append(("Warning", "InsufficientGPUCapacity",
                      f"{decision.event_message()}: only {capacity} replicas fit on the GPUs that exist"))
    material = {"desiredReplicas": decision.desired_replicas, "capacityLimited": decision.capacity_limited,
                "capacityReplicas": capacity,
                # minReplicas 0: the expected time from a request at zero to a ready replica.
                "wakeSeconds": round(decision.wake_s) if decision.wake_s is not None else None}
    if previous and status.get("desiredReplicas") == decision.desired_replicas and all(
            previous.get(k) == v for k, v in material.items() if v is not None):
        return Outcome({}, tuple(found), changed)
    summary: dict[str, Any] = {
        **material,
        "reason": decision.reason,
        "lastScaleTime": stamp if changed else previous.get("lastScaleTime"),
    }
    update = {"desiredReplicas": decision.desired_replicas,
              "autoscaling": {k: v for k, v in summary.items() if v is not None}}
    return Outcome(update, tuple(found), changed)


def held_at_gateway(annotations: Mapping[str, Any], status: Mapping[str, Any]) -> float:
    """1 when the gateway asked to wake this deployment since its last scaling decision, else 0.

    The gateway writes the time it held a request for a model with no ready replica; a request
    newer than the last scale (RFC 3339 strings in UTC order as times do) is demand not yet
    answered. Once the wake-up is decided, lastScaleTime passes it and the demand is spent.
    """
    wake = str(annotations.get(WAKE_ANNOTATION) or "")
    last = str((status.get("autoscaling") or {}).get("lastScaleTime") or "")
    return 1.0 if wake and wake > last else 0.0


def conflict_condition(names: list[str]) -> Condition:
    if names:
        return Condition(CONFLICT, True, "HorizontalPodAutoscaler",
                         f"HorizontalPodAutoscaler {', '.join(names)} targets this InferenceDeployment while "
                         "spec.autoscaling is set; shardwise makes no scaling decision until one is removed")
    return Condition(CONFLICT, False, "NoConflict", "no HorizontalPodAutoscaler targets this resource")


# A disaggregated deployment scales each role on the latency it answers for (docs/disaggregation.md).
ROLE_SLO = {disaggregation.PREFILL: "ttftP95", disaggregation.DECODE: "itlP95"}


def role_spec(spec: api.InferenceDeploymentSpec, role: str) -> Any:
    assert spec.disaggregation is not None
    return spec.disaggregation.prefill if role == disaggregation.PREFILL else spec.disaggregation.decode


def scaled_roles(spec: api.InferenceDeploymentSpec) -> tuple[str, ...]:
    """The roles of a disaggregated deployment that autoscale; () for anything else."""
    if not disaggregation.enabled(spec):
        return ()
    return tuple(role for role in disaggregation.ROLES if role_spec(spec, role).autoscaling is not None)


def role_policy(spec: api.InferenceDeploymentSpec, role: str) -> autoscale.Policy:
    """The role's autoscaling settings with its own SLO as the only target: the same `decide`,
    judging prefill engines by their TTFT and decode engines by their ITL."""
    chosen = role_spec(spec, role)
    target = ROLE_SLO[role]
    slo = {target: getattr(chosen.slo, target)}
    assert chosen.autoscaling is not None
    return autoscale.policy_from_spec({**chosen.autoscaling.model_dump(mode="json", exclude_none=True),
                                       "slo": slo})


def role_replicas(spec: api.InferenceDeploymentSpec, status: Mapping[str, Any], role: str) -> int:
    """The role's replicas: its spec's, or its last autoscaling decision clamped to its bounds."""
    chosen = role_spec(spec, role)
    if chosen.autoscaling is None:
        return int(chosen.replicas)
    decided = (((status.get("autoscaling") or {}).get("roles") or {}).get(role) or {}).get("desiredReplicas")
    low, high = chosen.autoscaling.minReplicas, chosen.autoscaling.maxReplicas
    return min(max(int(decided) if decided is not None else low, low), high)


def with_role_replicas(spec: api.InferenceDeploymentSpec, status: Mapping[str, Any]) -> api.InferenceDeploymentSpec:
    """`spec` with each autoscaled role's replicas set to what the autoscaler decided, so the
    renderer and the status read one number per role."""
    roles = scaled_roles(spec)
    if not roles:
        return spec
    assert spec.disaggregation is not None
    d = spec.disaggregation
    updated = {role: role_spec(spec, role).model_copy(update={"replicas": role_replicas(spec, status, role)})
               for role in roles}
    return spec.model_copy(update={"disaggregation": d.model_copy(update=updated)})


def paired(decisions: Mapping[str, Decision], current: Mapping[str, int]) -> dict[str, Decision]:
    """Scale to zero applies to the pair: it goes to zero only when both roles decide zero, and a
    role that wants replicas wakes the other (a prefill engine alone answers nothing; a decode
    engine alone would prefill every prompt itself while its prefill role sleeps).

    `decisions` are both roles' (both autoscale when either may reach zero: admission's rule);
    `current` their replicas now.
    """
    if set(decisions) != set(disaggregation.ROLES):
        return dict(decisions)
    if all(d.desired_replicas == 0 for d in decisions.values()) or all(
            d.desired_replicas > 0 for d in decisions.values()):
        return dict(decisions)
    out = {}
    for role, d in decisions.items():
        if d.desired_replicas > 0:
            out[role] = d
            continue
        other = next(r for r in decisions if r != role)
        out[role] = dataclasses.replace(
            d, desired_replicas=1, current_replicas=current.get(role, d.current_replicas),
            notes=(*d.notes, f"kept at 1: the {other} role serves, and scale to zero applies to the pair"))
    return out


def apply_role_decisions(status: Mapping[str, Any], decisions: Mapping[str, Decision], *,
                         capacity: Mapping[str, int | None], stamp: str) -> Outcome:
    """`apply_decision` per role, under status.autoscaling.roles.<role>; reconcile carries each
    role's count to its Deployment and sums them into status.desiredReplicas.

    status.autoscaling.lastScaleTime is the newest role change: the gateway's wake request is
    spent once a decision after it is written (held_at_gateway), for both roles together.
    """
    previous = status.get("autoscaling") or {}
    roles_before = previous.get("roles") or {}
    roles: dict[str, Any] = {}
    found: list[tuple[str, str, str]] = []
    changed = False
    for role, decision in decisions.items():
        before = roles_before.get(role) or {}
        view = {"desiredReplicas": before.get("desiredReplicas"), "autoscaling": before}
        outcome = apply_decision(view, decision, capacity=capacity.get(role), stamp=stamp)
        found += [(t, reason, f"{role}: {message}") for t, reason, message in outcome.events]
        changed = changed or outcome.changed
        roles[role] = outcome.update.get("autoscaling") or before
    if all(roles.get(r) == roles_before.get(r) for r in roles) and set(roles) == set(roles_before):
        return Outcome({}, tuple(found), changed)
    stamps = [str(r.get("lastScaleTime")) for r in roles.values() if r.get("lastScaleTime")]
    summary = {"roles": roles, "lastScaleTime": max(stamps) if stamps else None,
               "reason": "; ".join(f"{role}: {decisions[role].reason}" for role in decisions)}
    return Outcome({"autoscaling": {k: v for k, v in summary.items() if v is not None}}, tuple(found), changed)
