"""Is there room for one more replica? The planner's GPU accounting, seen from one deployment.

Two views of the same nodes: with every pod counted (what is free now, in a person's words) and
without this deployment's own pods (so the GPUs its replicas hold count as its own, as the
autoscaler counts them). One more replica fits when the second view holds more replicas than the
deployment wants.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shardwise.api.v1alpha1 import PlacementSpec
from shardwise.planner import capacity, inventory, placement


@dataclass(frozen=True)
class Room:
    spare_replicas: int  # replicas that fit beside the ones this deployment wants
    free_gpus: int  # free now on the nodes it may use, every pod counted
    gpus_per_node: int
    nodes_per_replica: int
    product: str
    shortfall: str  # the planner's words for placing one more replica on the free GPUs now
    pod_fits_now: bool = False  # some usable node has one pod's GPUs free now

    @property
    def gpus_per_replica(self) -> int:
        return self.gpus_per_node * self.nodes_per_replica

    def need(self) -> str:
        """What one more replica needs, e.g. "4 GPUs on one node" or "16 GPUs (8 on each of 2 nodes)"."""
        if self.nodes_per_replica == 1:
            return f"{self.gpus_per_node} GPU{_s(self.gpus_per_node)} on one node"
        return f"{self.gpus_per_replica} GPUs ({self.gpus_per_node} on each of {self.nodes_per_replica} nodes)"


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def tolerations(spec_placement: PlacementSpec) -> tuple[placement.Toleration, ...]:
    return tuple(
        placement.Toleration(key=t.key or "", operator=t.operator or "Equal", value=t.value or "",
                             effect=t.effect or "")
        for t in spec_placement.tolerations
    )


def replicas_that_fit(plan: Mapping[str, Any], inv: inventory.Inventory, *, node_selector: Mapping[str, str],
                      tolerations: Sequence[placement.Toleration]) -> int | None:
    """Whole replicas of the plan the usable nodes of `inv` hold; None without a usable plan."""
    per_node = int(plan.get("gpusPerNode") or 0)
    product = plan.get("gpuProduct")
    if per_node < 1 or not product:
        return None
    nodes = capacity.usable_nodes(inv, product=str(product), node_selector=node_selector, tolerations=tolerations)
    return capacity.replica_slots(nodes, gpus_per_node=per_node,
                                  nodes_per_replica=int(plan.get("nodesPerReplica") or 1))


def measure(plan: Mapping[str, Any], spec_placement: PlacementSpec, *, everything: inventory.Inventory,
            without_own: inventory.Inventory, replicas: int) -> Room | None:
    """Room for one more replica beside `replicas`; None when the plan names no GPUs to count.

    `everything` is built from every pod; `without_own` from every pod but this deployment's.
    """
    fit = replicas_that_fit(plan, without_own, node_selector=spec_placement.nodeSelector,
                            tolerations=tolerations(spec_placement))
    if fit is None:
        return None
    per_node = int(plan["gpusPerNode"])
    nodes_per_replica = int(plan.get("nodesPerReplica") or 1)
    usable = capacity.usable_nodes(everything, product=str(plan["gpuProduct"]),
                                   node_selector=spec_placement.nodeSelector,
                                   tolerations=tolerations(spec_placement))
    if usable:
        _, shortfall = capacity.check(usable, nodes_needed=nodes_per_replica, gpus_per_node=per_node,
                                      one_clique=False)
    else:
        shortfall = f"no usable {plan['gpuProduct']} nodes are left"
    pod_fits_now = any(n.free_gpus >= per_node for n in usable)
    return Room(spare_replicas=max(0, fit - replicas), free_gpus=sum(n.free_gpus for n in usable),
                gpus_per_node=per_node, nodes_per_replica=nodes_per_replica, product=str(plan["gpuProduct"]),
                shortfall=shortfall, pod_fits_now=pod_fits_now)
