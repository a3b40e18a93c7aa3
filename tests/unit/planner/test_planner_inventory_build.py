"""The fast inventory build is the plain one: the same pools, shapes, taints and node states as a
straightforward per-node reading of the same Node and Pod dicts (kept here as the reference), on
generated clusters that include odd values (ints where strings belong, bad counts, duplicate
names, differently spelt but equal labels)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from planner_builders import h100_node, l40s_node
from shardwise import planner
from shardwise.planner import gpus, inventory, placement

# ---- the reference: one NodeState and one GpuShape per node, grouped by value ----------------


def _count(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def _gpu_request(pod: Mapping[str, Any]) -> int:
    spec = pod.get("spec") or {}

    def request(container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        value = (resources.get("requests") or {}).get("nvidia.com/gpu")
        if value is None:
            value = (resources.get("limits") or {}).get("nvidia.com/gpu")
        return max(0, _count(value) or 0)

    main = sum(request(c) for c in spec.get("containers") or [])
    init = max((request(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def _used_gpus(pods: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    used: dict[str, int] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if node and phase not in ("Succeeded", "Failed"):
            used[node] = used.get(node, 0) + _gpu_request(pod)
    return used


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


def reference_inventory(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]] = ()
) -> inventory.Inventory:
    used = _used_gpus(pods)
    grouped: dict[Any, list[inventory.NodeState]] = {}
    non_gpu = 0
    unallocatable: list[str] = []
    for node in nodes:
        metadata = node.get("metadata") or {}
        labels = metadata.get("labels") or {}
        status = node.get("status") or {}
        # What a node's labels and resources mean (ranges, allocatable bounding the count) is
        # inventory.node_gpus, tested on its own; this reference checks the caching around it.
        found = inventory.node_gpus(
            labels,
            (status.get("allocatable") or {}).get("nvidia.com/gpu"),
            (status.get("capacity") or {}).get("nvidia.com/gpu"),
        )
        if found is None:
            non_gpu += 1
            continue
        count, allocatable, product, memory_mib = found
        if not allocatable:  # GPUs by the labels, none allocatable: named, in no pool
            unallocatable.append(str(metadata.get("name", "")))
            continue
        gpu = gpus.lookup_gpu(product, memory_mib)
        interconnect, domain, nvlink_gbps, labelled = inventory._topology(labels, gpu, count)
        shape = inventory.GpuShape(
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
        most = min(count, allocatable if allocatable is not None else count)
        free = 0 if blocked else max(0, most - used.get(name, 0))
        state = inventory.NodeState(
            name=name,
            labels=labels,
            free_gpus=free,
            clique=labels.get("nvidia.com/gpu.clique") or None,
            blocked=blocked,
        )
        grouped.setdefault((shape, _taints(node)), []).append(state)
    pools = [
        inventory.NodePool(shape=shape, taints=taints, nodes=tuple(sorted(states, key=_name)))
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
    return inventory.Inventory(
        pools=tuple(pools), non_gpu_nodes=non_gpu, unallocatable=tuple(sorted(unallocatable))
    )


def _name(state: inventory.NodeState) -> str:
    return state.name


# ---- generated clusters ----------------------------------------------------------------------

_ABSENT = object()
_LABELS: dict[str, list[Any]] = {
    "nvidia.com/gpu.product": [
        "",
        "NVIDIA-H100-80GB-HBM3",
        "NVIDIA-H100-80GB-HBM3-SHARED",
        "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        "NVIDIA-L40S",
        "nvidia-l40s",
        "NVIDIA-Z9",
        "NVIDIA-GB200",
    ],
    "nvidia.com/gpu.memory": ["81559", "40000", "", "10240", 40000],
    "shardwise.io/gpu-interconnect": ["nvswitch", "NVSwitch", "NVLink", "pcie", "weird", ""],
    "shardwise.io/nvlink-domain-size": ["8", "2", "1", "0", "x", 4, True],
    "shardwise.io/nvlink-bandwidth-gbps": ["900", "0", "abc", "1", 600, True, "nan", "-1", "1e-320"],
    "nvidia.com/gpu.count": ["8", "4", " 4", "0", "x", "-2", "2", 8, 1, True, 1.0, "4294967296"],
    "nvidia.com/gpu.clique": ["", "c1", "c2"],
    "zone": ["a", "b"],
}
_TAINTS: list[dict[str, Any]] = [
    {"key": "k", "value": "v", "effect": "NoSchedule"},
    {"key": "a", "effect": "NoExecute"},
    {"key": "a", "value": None, "effect": "NoExecute"},
    {"key": "k", "value": 1, "effect": "NoSchedule"},
    {"key": "k", "value": True, "effect": "NoSchedule"},
    {"key": 1, "value": "v", "effect": "NoSchedule"},
    {"key": True, "value": "v", "effect": "NoSchedule"},
]
_QUANTITIES: list[Any] = ["8", "4", "0", "2", None, "q", 8, True, 1]


def _random_node(r: random.Random) -> dict[str, Any]:
    labels = {}
    for key, values in _LABELS.items():
        value = r.choice([_ABSENT, *values])
        if value is not _ABSENT:
            labels[key] = value
    node: dict[str, Any] = {}
    if r.random() < 0.95:
        name: Any = f"n{r.randrange(300)}" if r.random() < 0.8 else r.choice([7, None, "n1"])
        node["metadata"] = {"name": name, "labels": labels}
        if r.random() < 0.05:
            del node["metadata"]["name"]
    status: dict[str, Any] = {}
    for resource in ("allocatable", "capacity"):
        if r.random() < 0.8:
            status[resource] = {"nvidia.com/gpu": r.choice(_QUANTITIES)}
    if r.random() < 0.8:
        status["conditions"] = [
            {"type": "Ready", "status": r.choice(["True", "False", "Unknown"])}
        ] + ([{"type": "Other", "status": "False"}] if r.random() < 0.3 else [])
    node["status"] = status
    spec: dict[str, Any] = {}
    if r.random() < 0.7:
        spec["taints"] = r.sample(_TAINTS, r.randrange(0, 4))
    if r.random() < 0.1:
        spec["unschedulable"] = r.choice([True, False, 1])
    node["spec"] = spec
    return node


def _random_pod(r: random.Random) -> dict[str, Any]:
    def container() -> dict[str, Any]:
        resources = {}
        for kind in ("requests", "limits"):
            if r.random() < 0.5:
                resources[kind] = {"nvidia.com/gpu": r.choice(["1", "2", "-3", "x", 2, None, True])}
        return {"resources": resources} if r.random() < 0.9 else {}

    spec: dict[str, Any] = {}
    if r.random() < 0.9:
        spec["nodeName"] = r.choice([f"n{r.randrange(300)}", "", None, "n1"])
    if r.random() < 0.9:
        spec["containers"] = [container() for _ in range(r.randrange(0, 3))]
    if r.random() < 0.3:
        spec["initContainers"] = [container() for _ in range(r.randrange(0, 3))]
    pod: dict[str, Any] = {"spec": spec}
    if r.random() < 0.9:
        pod["status"] = {"phase": r.choice(["Running", "Pending", "Succeeded", "Failed", None])}
    return pod


def _snapshot(inv: inventory.Inventory) -> tuple[Any, ...]:
    """Everything an Inventory holds, labels included (NodeState equality leaves them out)."""
    return (
        inv.non_gpu_nodes,
        [
            (
                pool.shape,
                pool.taints,
                [(n.name, n.free_gpus, n.clique, n.blocked, dict(n.labels)) for n in pool.nodes],
            )
            for pool in inv.pools
        ],
    )


@pytest.mark.parametrize("seed", range(8))
def test_fast_build_equals_the_reference_on_generated_clusters(seed: int) -> None:
    r = random.Random(seed)
    for _ in range(60):
        nodes = [_random_node(r) for _ in range(r.randrange(0, 60))]
        pods = [_random_pod(r) for _ in range(r.randrange(0, 40))]
        fast = planner.inventory_from_nodes(nodes, pods)
        assert _snapshot(fast) == _snapshot(reference_inventory(nodes, pods))


def test_node_states_keep_the_nodes_own_labels_and_equal_constructed_ones() -> None:
    nodes = [h100_node(f"h{i}") for i in range(3)] + [l40s_node("l0", ready=False)]
    fast = planner.inventory_from_nodes(nodes)
    slow = reference_inventory(nodes)
    assert fast == slow
    fields = [f.name for f in dataclasses.fields(inventory.NodeState)]
    by_name = {n["metadata"]["name"]: n for n in nodes}
    for fast_pool, slow_pool in zip(fast.pools, slow.pools, strict=True):
        for a, b in zip(fast_pool.nodes, slow_pool.nodes, strict=True):
            assert type(a) is inventory.NodeState
            assert list(vars(a)) == fields and vars(a) == vars(b)
            assert (a == b, hash(a) == hash(b), repr(a) == repr(b)) == (True, True, True)
            assert a.labels is by_name[a.name]["metadata"]["labels"]
            with pytest.raises(dataclasses.FrozenInstanceError):
                a.free_gpus = 1  # type: ignore[misc]


def test_differently_spelt_equal_labels_share_one_pool() -> None:
    nodes = [
        h100_node("a", labels={"shardwise.io/gpu-interconnect": "NVSwitch"}),
        h100_node("b"),
        h100_node("c", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]),
    ]
    pools = planner.inventory_from_nodes(nodes).pools
    assert [[n.name for n in p.nodes] for p in pools] == [["c"], ["a", "b"]]  # by taint repr
    assert pools == reference_inventory(nodes).pools
