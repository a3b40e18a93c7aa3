"""Builders for Node, Pod and spec dicts, so planner tests read as the cluster they describe."""

from __future__ import annotations

from typing import Any

KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}

H100 = "NVIDIA-H100-80GB-HBM3"
L40S = "NVIDIA-L40S"
A100_PCIE = "NVIDIA-A100-80GB-PCIe"
GB200 = "NVIDIA-GB200"


def node(
    name: str,
    product: str,
    gpus: int,
    *,
    interconnect: str | None = None,
    domain: int | None = None,
    bandwidth: int | None = None,
    memory_mib: int | None = None,
    clique: str | None = None,
    taints: list[dict[str, str]] | None = None,
    labels: dict[str, str] | None = None,
    allocatable: int | None = None,
    unschedulable: bool = False,
    ready: bool = True,
) -> dict[str, Any]:
    all_labels = {
        "kubernetes.io/hostname": name,
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(gpus),
    }
    if memory_mib:
        all_labels["nvidia.com/gpu.memory"] = str(memory_mib)
    if interconnect:
        all_labels["shardwise.io/gpu-interconnect"] = interconnect
    if domain:
        all_labels["shardwise.io/nvlink-domain-size"] = str(domain)
    if bandwidth:
        all_labels["shardwise.io/nvlink-bandwidth-gbps"] = str(bandwidth)
    if clique:
        all_labels["nvidia.com/gpu.clique"] = clique
    all_labels.update(labels or {})
    resources = {"nvidia.com/gpu": str(gpus if allocatable is None else allocatable)}
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": {
            "taints": [KWOK_TAINT] if taints is None else taints,
            "unschedulable": unschedulable,
        },
        "status": {
            "capacity": {"nvidia.com/gpu": str(gpus)},
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def h100_node(name: str, **kw: Any) -> dict[str, Any]:
    return node(name, H100, 8, interconnect="nvswitch", domain=8, bandwidth=900, **kw)


def l40s_node(name: str, **kw: Any) -> dict[str, Any]:
    return node(name, L40S, 4, interconnect="pcie", domain=1, **kw)


def a100_pcie_node(name: str, **kw: Any) -> dict[str, Any]:
    return node(name, A100_PCIE, 4, interconnect="nvlink", domain=2, bandwidth=600, **kw)


def gb200_node(name: str, clique: str | None = "cluster-1.7", **kw: Any) -> dict[str, Any]:
    return node(
        name, GB200, 4, interconnect="nvswitch", domain=4, bandwidth=1800, clique=clique, **kw
    )


def pod(node_name: str, gpus: int, *, phase: str = "Running", name: str = "p") -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase},
    }


def spec(
    model: str,
    *,
    objective: str | None = None,
    tolerate: bool = True,
    model_fields: dict[str, Any] | None = None,
    serving: dict[str, Any] | None = None,
    parallelism: dict[str, Any] | None = None,
    placement: dict[str, Any] | None = None,
    pricing: dict[str, Any] | None = None,
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "model": {"name": model, **(model_fields or {})},
        "serving": serving or {},
        "parallelism": {**({"objective": objective} if objective else {}), **(parallelism or {})},
        "placement": {"tolerations": [KWOK_TOLERATION] if tolerate else [], **(placement or {})},
    }
    if pricing:
        result["pricing"] = pricing
    return result
