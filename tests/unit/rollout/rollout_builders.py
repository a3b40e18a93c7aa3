"""Nodes, pods and plans for rollout tests, shaped as the API server and the planner give them."""

from __future__ import annotations

from typing import Any

L4 = "NVIDIA-L4"


def node(name: str, gpus: int = 1, product: str = L4, taints: list[dict[str, str]] | None = None,
         **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product,
                                                  "nvidia.com/gpu.count": str(gpus), **labels}},
            "spec": {"taints": taints} if taints else {},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def gpu_pod(name: str, node_name: str | None, gpus: int = 1, *, namespace: str = "other",
            instance: str | None = None) -> dict[str, Any]:
    labels = {"shardwise.io/inference-deployment": instance} if instance else {}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": spec,
            "status": {"phase": "Running" if node_name else "Pending"}}


def plan(per_node: int = 1, nodes: int = 1, product: str = L4) -> dict[str, Any]:
    return {"feasible": True, "gpusPerNode": per_node, "nodesPerReplica": nodes, "gpuProduct": product,
            "tensorParallel": per_node * nodes, "pipelineParallel": 1, "gpusPerReplica": per_node * nodes,
            "interconnect": "pcie", "reason": "test", "reasonCode": "Planned"}
