"""The rollout steps of decide: stamp the strategy onto the workload, and read its progress. Pure.

`prepare` runs before the workload is applied: when the rendered pod templates differ from the
live workload's, a rollout starts, and the strategy is chosen now, from the GPUs free on the
nodes this deployment may use (rollout.strategy), then written onto the workload with the new
template in one apply. Otherwise the live workload's decision is kept, so it never flips
mid-rollout. `observe` turns the live workload and its pods into status.rollout.
"""

from __future__ import annotations

import logging
from typing import Any

from shardwise import planner
from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.kube.compare import contains
from shardwise.decide import planning, workload_health
from shardwise.rollout import progress, room, strategy, workload

log = logging.getLogger(__name__)
WORKLOAD_KINDS = ("Deployment", "LeaderWorkerSet")


def _unit(rendered: dict[str, Any]) -> str:
    return "group" if rendered.get("kind") == "LeaderWorkerSet" else "replica"


def measure_room(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], spec: InferenceDeploymentSpec,
                 plan: dict[str, Any], replicas: int, namespace: str, name: str) -> room.Room | None:
    """Room for one more replica, from the nodes and every GPU pod (the planner's inputs)."""
    others = planning.pods_of_others(pods, namespace, name)
    return room.measure(plan, spec.placement, everything=planner.inventory_from_nodes(nodes, pods),
                        without_own=planner.inventory_from_nodes(nodes, others), replicas=replicas)


def prepare(nodes: list[dict[str, Any]], gpu_pods: list[dict[str, Any]], spec: InferenceDeploymentSpec, plan: dict[str, Any], rendered: dict[str, Any],
            live: dict[str, Any] | None, replicas: int, *, namespace: str, name: str) -> dict[str, Any]:
    """The workload to apply: rendered, plus its revision and the rollout's strategy."""
    rev = workload.revision(rendered)
    unchanged = live is not None and contains(workload.pod_templates(live), workload.pod_templates(rendered))
    carried = workload.carry(rev, live, pods_unchanged=unchanged)
    decision = carried.decision
    if carried.starts:
        measured = measure_room(nodes, gpu_pods, spec, plan, replicas, namespace, name)
        decision = strategy.choose(spec.rollout.whenNoRoom, replicas, measured, unit=_unit(rendered),
                                   rollback=carried.rollback)
        log.info("%s/%s: rollout to revision %s: %s (%s)", namespace, name, rev, decision.strategy, decision.reason)
    return workload.stamp(rendered, rev, decision, carried.previous)


def observe(nodes: list[dict[str, Any]], gpu_pods: list[dict[str, Any]], spec: InferenceDeploymentSpec, plan: dict[str, Any], applied: dict[str, Any],
            live: dict[str, Any] | None, pods: list[dict[str, Any]], replicas: int, *,
            namespace: str, name: str) -> progress.View | None:
    """status.rollout from the live workload, when it carries a rollout decision.

    Why a new pod cannot start or finds no node is read as for the whole workload
    (workload_health), over the new version's pods only: the old ones' troubles are not the rollout's.
    """
    decision = workload.decision(live)
    rev = workload.live_revision(live)
    if decision is None or rev is None or rev != workload.revision(applied):
        return None
    by_version = progress.versions(applied, pods)
    failed = workload_health.pod_failure(by_version.new)
    stuck = workload_health.unschedulable(by_version.new)
    args: dict[str, Any] = {
        "revision": rev, "previous": workload.previous_revision(live), "rendered": applied, "pods": by_version,
        "replicas": replicas, "failure": (failed.reason, failed.message) if failed else None,
        "waiting": stuck.message if stuck else None}
    seen = progress.view(decision, **args)
    if seen.state == progress.BLOCKED:  # what is free now: the words, and whether it is a block at all
        seen = progress.view(decision, **args, room=measure_room(nodes, gpu_pods, spec, plan, replicas, namespace, name))
    return seen
