"""The GPU inventory, read from Kubernetes Node (and Pod) objects given as plain dicts.

Nodes that are interchangeable for planning (same GPU product, count, memory, topology labels and
taints) are grouped into pools, so the search costs the same for 10 nodes or 10,000: it runs per
pool, and only capacity checks look at individual nodes.

Labels read (all values are strings): GFD's `nvidia.com/gpu.product`, `nvidia.com/gpu.count`,
`nvidia.com/gpu.memory` (MiB), `nvidia.com/gpu.clique`; shardwise's `shardwise.io/gpu-interconnect`
(nvswitch | nvlink | pcie), `shardwise.io/nvlink-domain-size` (GPUs fully connected by NVLink) and
`shardwise.io/nvlink-bandwidth-gbps` (GB/s per GPU, both directions summed, as datasheets quote
NVLink: "900" on H100 SXM). A node without the topology labels is treated as PCIe-only and marked
unlabelled, because planning TP across GPUs that might not share NVLink is the costlier mistake.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shardwise.planner import gpus, placement

GPU_RESOURCE = "nvidia.com/gpu"
_INTERCONNECTS = ("nvswitch", "nvlink", "pcie")
_FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
# NVLink bandwidth for a node labelled as NVLink-connected whose GPU the catalog knows without it
# (or not at all) and that has no bandwidth label: a 2-GPU bridge's worth, a conservative guess.
_FALLBACK_NVLINK_GBPS = 200.0


@dataclass(frozen=True)
class GpuShape:
    """What makes nodes interchangeable for planning."""

    product: str  # the node's label, as written
    gpu: gpus.GpuFacts
    gpus_per_node: int
    interconnect: str  # nvswitch | nvlink | pcie
    nvlink_domain: int  # GPUs fully connected by NVLink; 1 = none
    nvlink_gbps: float  # per GPU, both directions summed; 0 without NVLink
    topology_labelled: bool
    shared: bool  # GFD `-SHARED`: GPUs time-sliced with other workloads
    mig: bool  # GFD `-MIG-<profile>`: the node's "GPUs" are MIG slices


@dataclass(frozen=True)
class NodeState:
    name: str
    labels: Mapping[str, str] = field(hash=False, compare=False)
    free_gpus: int
    clique: str | None
    blocked: str | None  # why nothing can be scheduled here now: "cordoned", "NotReady"


@dataclass(frozen=True)
class NodePool:
    shape: GpuShape
    taints: tuple[placement.Taint, ...]
    nodes: tuple[NodeState, ...]


@dataclass(frozen=True)
class Inventory:
    pools: tuple[NodePool, ...]
    non_gpu_nodes: int = 0

    @property
    def gpu_nodes(self) -> int:
        return sum(len(pool.nodes) for pool in self.pools)


def _count(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def _gpu_request(pod: Mapping[str, Any]) -> int:
    """GPUs a pod holds: the larger of its containers' sum and its largest init container."""
    spec = pod.get("spec") or {}

    def request(container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        value = (resources.get("requests") or {}).get(GPU_RESOURCE)
        if value is None:  # extended resources may set limits only; requests then default to them
            value = (resources.get("limits") or {}).get(GPU_RESOURCE)
        return _count(value) or 0

    main = sum(request(c) for c in spec.get("containers") or [])
    init = max((request(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def _used_gpus(pods: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    used: dict[str, int] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if node and phase not in _FINISHED_PHASES:
            used[node] = used.get(node, 0) + _gpu_request(pod)
    return used


def _topology(
    labels: Mapping[str, str], gpu: gpus.GpuFacts, count: int
) -> tuple[str, int, float, bool]:
    """(interconnect, NVLink domain size, NVLink GB/s, labelled) from shardwise's labels."""
    if "-MIG-" in labels.get("nvidia.com/gpu.product", "").upper():
        return "pcie", 1, 0.0, True  # MIG slices have no NVLink or peer-to-peer access
    interconnect = labels.get("shardwise.io/gpu-interconnect", "").strip().lower()
    domain = _count(labels.get("shardwise.io/nvlink-domain-size"))
    if interconnect not in _INTERCONNECTS and domain is None:
        return "pcie", 1, 0.0, False
    if interconnect not in _INTERCONNECTS:
        interconnect = "nvlink" if domain and domain > 1 else "pcie"
    if domain is None:
        domain = {"nvswitch": count, "nvlink": 2, "pcie": 1}[interconnect]
    domain = max(1, min(domain, count))
    if interconnect == "pcie" or domain == 1:
        return "pcie", 1, 0.0, True
    bandwidth = labels.get("shardwise.io/nvlink-bandwidth-gbps")
    try:
        nvlink_gbps = float(bandwidth) if bandwidth is not None else gpu.nvlink_gbps
    except ValueError:
        nvlink_gbps = gpu.nvlink_gbps
    return interconnect, domain, nvlink_gbps or gpu.nvlink_gbps or _FALLBACK_NVLINK_GBPS, True


def _taints(node: Mapping[str, Any]) -> tuple[placement.Taint, ...]:
    taints = ((node.get("spec") or {}).get("taints")) or []
    return tuple(
        sorted(
            (
                placement.Taint(
                    str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", ""))
                )
                for t in taints
            ),
            key=lambda t: (t.key, t.value, t.effect),
        )
    )


def _blocked(node: Mapping[str, Any]) -> str | None:
    if (node.get("spec") or {}).get("unschedulable"):
        return "cordoned"
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") != "True":
            return "NotReady"
    return None


def inventory_from_nodes(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]] = ()
) -> Inventory:
    """Build the inventory from Node dicts; GPUs requested by running pods are not free."""
    used = _used_gpus(pods)
    grouped: dict[tuple[GpuShape, tuple[placement.Taint, ...]], list[NodeState]] = {}
    non_gpu = 0
    for node in nodes:
        metadata = node.get("metadata") or {}
        labels: Mapping[str, str] = metadata.get("labels") or {}
        status = node.get("status") or {}
        allocatable = _count((status.get("allocatable") or {}).get(GPU_RESOURCE))
        capacity = _count((status.get("capacity") or {}).get(GPU_RESOURCE))
        count = _count(labels.get("nvidia.com/gpu.count")) or capacity or allocatable
        product = labels.get("nvidia.com/gpu.product")
        if not count or (product is None and not allocatable):
            non_gpu += 1
            continue
        product = product or "unknown"
        gpu = gpus.lookup_gpu(product, _count(labels.get("nvidia.com/gpu.memory")))
        interconnect, domain, nvlink_gbps, labelled = _topology(labels, gpu, count)
        shape = GpuShape(
            product=product,
            gpu=gpu,
            gpus_per_node=count,
            interconnect=interconnect,
            nvlink_domain=domain,
            nvlink_gbps=nvlink_gbps,
            topology_labelled=labelled,
            shared=product.upper().endswith("-SHARED"),
            mig="-MIG-" in product.upper(),
        )
        name = str(metadata.get("name", ""))
        blocked = _blocked(node)
        free = (
            0
            if blocked
            else max(
                0, min(count, allocatable if allocatable is not None else count) - used.get(name, 0)
            )
        )
        state = NodeState(
            name=name,
            labels=labels,
            free_gpus=free,
            clique=labels.get("nvidia.com/gpu.clique") or None,
            blocked=blocked,
        )
        grouped.setdefault((shape, _taints(node)), []).append(state)
    pools = [
        NodePool(shape=shape, taints=taints, nodes=tuple(sorted(states, key=lambda s: s.name)))
        for (shape, taints), states in grouped.items()
    ]
    pools.sort(
        key=lambda p: (
            p.shape.product,
            p.shape.gpus_per_node,
            p.shape.gpu.memory_mib,
            p.shape.interconnect,
            p.shape.nvlink_domain,
            repr(p.taints),
            p.nodes[0].name,
        )
    )
    return Inventory(pools=tuple(pools), non_gpu_nodes=non_gpu)
