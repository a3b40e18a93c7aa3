"""Room for one more replica: the planner's accounting, this deployment's own GPUs counted as its own."""

from __future__ import annotations

from typing import Any

import pytest
from rollout_builders import gpu_pod, node, plan
from shardwise import planner
from shardwise.api.v1alpha1 import PlacementSpec
from shardwise.rollout import room

TAINT = {"key": "pool", "value": "rollout", "effect": "NoSchedule"}


def measure(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], replicas: int, *,
            the_plan: dict[str, Any] | None = None, placement: dict[str, Any] | None = None) -> room.Room | None:
    others = [p for p in pods if p["metadata"]["labels"].get("shardwise.io/inference-deployment") != "m"]
    return room.measure(the_plan or plan(), PlacementSpec.model_validate(placement or {}),
                        everything=planner.inventory_from_nodes(nodes, pods),
                        without_own=planner.inventory_from_nodes(nodes, others), replicas=replicas)


def own(name: str, node_name: str | None, gpus: int = 1) -> dict[str, Any]:
    return gpu_pod(name, node_name, gpus, namespace="ns", instance="m")


def test_full_nodes_held_by_the_deployment_itself_leave_no_room() -> None:
    nodes = [node(f"n{i}") for i in range(3)]
    found = measure(nodes, [own(f"m-{i}", f"n{i}") for i in range(3)], replicas=3)
    assert found is not None
    assert (found.spare_replicas, found.free_gpus, found.gpus_per_replica, found.pod_fits_now) == (0, 0, 1, False)
    assert "fits when 1 more are freed" in found.shortfall


def test_a_free_matching_node_is_room_for_a_surge() -> None:
    nodes = [node(f"n{i}") for i in range(4)]
    found = measure(nodes, [own(f"m-{i}", f"n{i}") for i in range(3)], replicas=3)
    assert found is not None and (found.spare_replicas, found.free_gpus, found.pod_fits_now) == (1, 1, True)


def test_other_workloads_and_pending_own_pods_take_room() -> None:
    nodes = [node("n0"), node("n1")]
    # The other deployment holds n1; our second replica is Pending: nothing spare for a third.
    found = measure(nodes, [own("m-0", "n0"), own("m-1", None), gpu_pod("x", "n1")], replicas=2)
    assert found is not None and (found.spare_replicas, found.free_gpus) == (0, 0)


@pytest.mark.parametrize(("nodes", "placement", "spare"), [
    ([node("n0", product="NVIDIA-L40S"), node("n1")], {}, 0),  # another product is no room
    ([node("n0", zone="b"), node("n1", zone="a")], {"nodeSelector": {"zone": "a"}}, 0),
    ([node("n0", taints=[TAINT]), node("n1")], {}, 0),  # an untolerated taint
    ([node("n0", taints=[TAINT]), node("n1")],
     {"tolerations": [{"key": "pool", "operator": "Equal", "value": "rollout", "effect": "NoSchedule"}]}, 1),
])
def test_only_nodes_the_pods_may_use_count(nodes: list[dict[str, Any]], placement: dict[str, Any],
                                           spare: int) -> None:
    found = measure(nodes, [own("m-0", "n1")], replicas=1, placement=placement)
    assert found is not None and found.spare_replicas == spare


def test_multi_node_replicas_need_their_pods_on_distinct_slots() -> None:
    nodes = [node(f"h{i}", gpus=8, product="NVIDIA-H100-80GB-HBM3") for i in range(3)]
    two_node = plan(per_node=8, nodes=2, product="NVIDIA-H100-80GB-HBM3")
    found = measure(nodes, [own("g0-0", "h0", 8), own("g0-1", "h1", 8)], replicas=1, the_plan=two_node)
    assert found is not None
    assert (found.spare_replicas, found.free_gpus, found.gpus_per_replica) == (0, 8, 16)
    assert found.need() == "16 GPUs (8 on each of 2 nodes)"


def test_no_plan_product_means_no_measure() -> None:
    assert measure([node("n0")], [], replicas=1, the_plan={"gpusPerNode": 0}) is None
