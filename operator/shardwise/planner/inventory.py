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

Labels describe the hardware; `status.allocatable` is what Kubernetes can hand out. A node whose
labels say it has GPUs but whose allocatable `nvidia.com/gpu` is missing or 0 (the device plugin
is not running or not registered yet) is left out of the pools, so nothing is planned on GPUs the
scheduler cannot place a pod on, and listed in `Inventory.unallocatable` for the reason to name.
"""

from __future__ import annotations

import functools
import logging
import math
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from shardwise.planner import gpus, placement

GPU_RESOURCE = "nvidia.com/gpu"
_PRODUCT = "nvidia.com/gpu.product"
_COUNT = "nvidia.com/gpu.count"
_MEMORY = "nvidia.com/gpu.memory"
_CLIQUE = "nvidia.com/gpu.clique"
_INTERCONNECT = "shardwise.io/gpu-interconnect"
_DOMAIN = "shardwise.io/nvlink-domain-size"
_BANDWIDTH = "shardwise.io/nvlink-bandwidth-gbps"
_INTERCONNECTS = ("nvswitch", "nvlink", "pcie")
_FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
# NVLink bandwidth for a node labelled as NVLink-connected whose GPU the catalog knows without it
# (or not at all) and that has no bandwidth label: a 2-GPU bridge's worth, a conservative guess.
_FALLBACK_NVLINK_GBPS = 200.0
# Plausible ranges of label and resource values. A value outside (negative, non-finite, or absurd,
# like a gpu.count of 2^32) is treated as missing, with a debug log saying so: one broken label
# must neither crash planning nor make it enumerate billions of layouts. A Kubernetes node has at
# most 16 GPUs today; 128 leaves room without letting the search blow up.
MAX_GPUS_PER_NODE = 128
_MAX_GPU_MEMORY_MIB = 1 << 21  # 2 TiB per GPU; a B200 has 180 GiB
_NVLINK_GBPS_RANGE = (1.0, 100_000.0)  # NVLink 5 is 1,800 GB/s per GPU

log = logging.getLogger(__name__)


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
    # GPU nodes by their labels with no allocatable nvidia.com/gpu (device plugin not ready),
    # sorted by name; not in any pool.
    unallocatable: tuple[str, ...] = ()

    @property
    def gpu_nodes(self) -> int:
        return sum(len(pool.nodes) for pool in self.pools)


def _count(value: Any) -> int | None:
    if value is None:
        return None
    if type(value) is str:  # labels and quantities are strings; cached
        return _count_text(value)
    try:
        return int(str(value).strip())
    except ValueError:
        return None


@functools.lru_cache(maxsize=1024)  # a cluster has a handful of distinct counts and quantities
def _count_text(value: str) -> int | None:
    try:
        return int(value.strip())
    except ValueError:
        return None


def _count_within(value: Any, low: int, high: int, what: str) -> int | None:
    """`_count`, or None (logged) when outside [low, high]."""
    count = _count(value)
    if count is not None and not low <= count <= high:
        log.debug("%s=%r is outside %d..%d; treated as missing", what, value, low, high)
        return None
    return count


def _gbps(value: Any, what: str) -> float | None:
    """A bandwidth label in GB/s, or None (logged) when missing, non-finite or implausible."""
    if value is None:
        return None
    try:
        gbps = float(value)
    except (TypeError, ValueError):
        gbps = math.nan
    low, high = _NVLINK_GBPS_RANGE
    if not low <= gbps <= high:  # also rejects NaN
        log.debug("%s=%r is not a bandwidth in %g..%g GB/s; treated as missing", what, value, low, high)
        return None
    return gbps


def _request(container: Mapping[str, Any]) -> int:
    resources = container.get("resources") or {}
    value = (resources.get("requests") or {}).get(GPU_RESOURCE)
    if value is None:  # extended resources may set limits only; requests then default to them
        value = (resources.get("limits") or {}).get(GPU_RESOURCE)
    if value is None:
        return 0
    return max(0, _count(value) or 0)  # a negative request frees nothing


def _spec_gpu_request(spec: Mapping[str, Any]) -> int:
    """GPUs a pod holds: the larger of its containers' sum and its largest init container."""
    main = 0
    for container in spec.get("containers") or ():
        main += _request(container)
    init_containers = spec.get("initContainers")
    if not init_containers:
        return max(0, main)  # as max(main, no init containers) was
    return max(main, max((_request(c) for c in init_containers), default=0))


def _object(value: Any) -> Mapping[str, Any]:
    """`value` when it is an object, else an empty one: an offline file may hold anything."""
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def _used_gpus(pods: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """GPUs requested per node by the pods bound to it that have not finished, in one pass."""
    used: dict[str, int] = {}
    get_used = used.get
    finished = _FINISHED_PHASES
    for pod in pods:
        spec = _object(pod.get("spec"))
        node = spec.get("nodeName")
        phase = _object(pod.get("status")).get("phase")
        if node and type(node) is str and phase not in finished:
            used[node] = get_used(node, 0) + _spec_gpu_request(spec)
    return used


def _topology(
    labels: Mapping[str, str], gpu: gpus.GpuFacts, count: int
) -> tuple[str, int, float, bool]:
    """(interconnect, NVLink domain size, NVLink GB/s, labelled) from shardwise's labels."""
    if "-MIG-" in str(labels.get(_PRODUCT) or "").upper():
        return "pcie", 1, 0.0, True  # MIG slices have no NVLink or peer-to-peer access
    interconnect = str(labels.get("shardwise.io/gpu-interconnect", "")).strip().lower()
    domain = _count_within(labels.get(_DOMAIN), 1, MAX_GPUS_PER_NODE, _DOMAIN)
    if interconnect not in _INTERCONNECTS and domain is None:
        return "pcie", 1, 0.0, False
    if interconnect not in _INTERCONNECTS:
        interconnect = "nvlink" if domain and domain > 1 else "pcie"
    if domain is None:
        domain = {"nvswitch": count, "nvlink": 2, "pcie": 1}[interconnect]
    domain = max(1, min(domain, count))
    if interconnect == "pcie" or domain == 1:
        return "pcie", 1, 0.0, True
    nvlink_gbps = _gbps(labels.get(_BANDWIDTH), _BANDWIDTH) or gpu.nvlink_gbps
    return interconnect, domain, nvlink_gbps or _FALLBACK_NVLINK_GBPS, True


def _taints_from(taints: Any) -> tuple[placement.Taint, ...]:
    if not isinstance(taints, list):  # an offline file may hold anything here
        return ()
    return tuple(
        sorted(
            (
                placement.Taint(
                    str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", ""))
                )
                for t in taints
                if isinstance(t, Mapping)
            ),
            key=lambda t: (t.key, t.value, t.effect),
        )
    )


class NodeGpus(NamedTuple):
    count: int  # GPUs one pod on the node can get
    allocatable: int | None
    product: str
    memory_mib: int | None  # the gpu.memory label, when plausible


def node_gpus(
    labels: Mapping[str, Any], allocatable_value: Any, capacity_value: Any
) -> NodeGpus | None:
    """A node's GPUs from its labels and its GPU allocatable and capacity; None without GPUs.

    The count is the gpu.count label, else capacity, else allocatable, and never more than the
    allocatable when the node reports any: a pod gets no more GPUs than the node can hold, whatever
    the label says. (Allocatable 0 or missing is a device plugin that has not registered yet: the
    label then stands here, and `inventory_from_nodes` leaves the node out of the pools.) Values
    outside their plausible range count as missing.
    """
    allocatable = _count_within(allocatable_value, 0, MAX_GPUS_PER_NODE, f"allocatable {GPU_RESOURCE}")
    capacity = _count_within(capacity_value, 0, MAX_GPUS_PER_NODE, f"capacity {GPU_RESOURCE}")
    count = _count_within(labels.get(_COUNT), 1, MAX_GPUS_PER_NODE, _COUNT) or capacity or allocatable
    if count and allocatable:
        count = min(count, allocatable)
    product = labels.get(_PRODUCT)
    if product is not None and type(product) is not str:
        product = str(product)
    if not count or (product is None and not allocatable):
        return None
    memory_mib = _count_within(labels.get(_MEMORY), 1, _MAX_GPU_MEMORY_MIB, _MEMORY)
    return NodeGpus(count, allocatable, product or "unknown", memory_mib)


@dataclass
class _Kind:
    """What a GPU node is for planning, shared by every node with the same raw GPU labels and
    resources: its shape, the GPUs free when nothing runs on it, and the pools' nodes of that
    shape by taint set (`id` of the one tuple per distinct set)."""

    shape: GpuShape
    most_free: int
    by_taints: dict[int, list[NodeState]]
    allocatable: bool = True  # False: allocatable nvidia.com/gpu is missing or 0


def _kind(
    labels: Mapping[str, str],
    allocatable_value: Any,
    capacity_value: Any,
    by_shape: dict[GpuShape, tuple[GpuShape, dict[int, list[NodeState]]]],
) -> _Kind | None:
    """What a node is for planning from its labels and GPU allocatable and capacity; None when it
    has no GPUs. Equal shapes share one `by_taints` (`by_shape` remembers them), so nodes whose raw
    labels differ but mean the same (`NVSwitch`, `nvswitch`) land in one pool."""
    found = node_gpus(labels, allocatable_value, capacity_value)
    if found is None:
        return None
    count, allocatable, product, memory_mib = found
    gpu = gpus.lookup_gpu(product, memory_mib)
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
    shape, by_taints = by_shape.setdefault(shape, (shape, {}))
    most_free = min(count, allocatable if allocatable is not None else count)
    return _Kind(shape=shape, most_free=most_free, by_taints=by_taints, allocatable=bool(allocatable))


def _all_text(values: Iterable[Any]) -> bool:
    """Only keys of strings (and None) are cached: 1 == 1.0 == True would otherwise share an entry
    although `_count` reads them differently."""
    return all(v is None or type(v) is str for v in values)


_NOT_SEEN: Any = object()
_NAME = operator.attrgetter("name")


def inventory_from_nodes(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]] = ()
) -> Inventory:
    """Build the inventory from Node dicts; GPUs requested by running pods are not free.

    One pass over the nodes. What makes a node's pool (its GPU labels, allocatable and capacity,
    and its taints) is parsed once per distinct combination of raw values, not once per node, so a
    10,000-node cluster of a few node types costs a few dict lookups and two objects per node.
    """
    used_get = _used_gpus(pods).get
    kinds: dict[tuple[Any, ...], _Kind | None] = {}  # raw GPU label/resource values -> kind
    by_shape: dict[GpuShape, tuple[GpuShape, dict[int, list[NodeState]]]] = {}
    taint_sets: dict[tuple[tuple[Any, ...], ...], tuple[placement.Taint, ...]] = {}  # raw -> parsed
    taint_canon: dict[tuple[placement.Taint, ...], tuple[placement.Taint, ...]] = {(): ()}
    # Pools in order of their first node, as (shape, taints, nodes) before sorting.
    found: list[tuple[GpuShape, tuple[placement.Taint, ...], list[NodeState]]] = []
    new = object.__new__
    set_attribute = object.__setattr__
    non_gpu = 0
    unallocatable: list[str] = []
    for node in nodes:
        # `type(x) is dict` first: the API's objects always are, and this loop runs per node.
        metadata = node.get("metadata")
        if type(metadata) is not dict:
            metadata = _object(metadata)
        labels: Mapping[str, str] = metadata.get("labels") or {}
        if type(labels) is not dict:
            labels = _object(labels)
        status = node.get("status")
        if type(status) is not dict:
            status = _object(status)
        label = labels.get
        allocatable = status.get("allocatable")
        allocatable_value = (allocatable if type(allocatable) is dict else _object(allocatable)).get(GPU_RESOURCE)
        capacity = status.get("capacity")
        capacity_value = (capacity if type(capacity) is dict else _object(capacity)).get(GPU_RESOURCE)
        key = (
            label(_PRODUCT),
            label(_COUNT),
            label(_MEMORY),
            label(_INTERCONNECT),
            label(_DOMAIN),
            label(_BANDWIDTH),
            allocatable_value,
            capacity_value,
        )
        try:
            kind = kinds.get(key, _NOT_SEEN)
            hashable = True
        except TypeError:  # an unhashable value: parse this node on its own, remember nothing
            kind, hashable = _NOT_SEEN, False
        if kind is _NOT_SEEN:
            kind = _kind(labels, allocatable_value, capacity_value, by_shape)
            if hashable and _all_text(key):
                kinds[key] = kind
        if kind is None:
            non_gpu += 1
            continue
        if not kind.allocatable:
            # GPUs by the labels, none allocatable: the scheduler cannot place a GPU pod here.
            name = metadata.get("name", "")
            unallocatable.append(name if type(name) is str else str(name))
            continue

        spec = node.get("spec")
        if type(spec) is not dict:
            spec = _object(spec)
        raw_taints = spec.get("taints") or []
        if raw_taints:
            try:
                if type(raw_taints) is list and len(raw_taints) == 1:  # the usual case
                    t = raw_taints[0]  # the same key as the general case, without a generator
                    taint_key: tuple[tuple[Any, ...], ...] = (
                        (t.get("key", ""), t.get("value"), t.get("effect", "")),
                    )
                else:
                    taint_key = tuple(
                        (t.get("key", ""), t.get("value"), t.get("effect", "")) for t in raw_taints
                    )
                taints = taint_sets.get(taint_key)
            except (TypeError, AttributeError):  # unhashable or malformed: parse, remember nothing
                taint_key, taints = (), None
            if taints is None:
                taints = _taints_from(raw_taints)
                taints = taint_canon.setdefault(taints, taints)  # one object per distinct set
                if taint_key and all(_all_text(t) for t in taint_key):
                    taint_sets[taint_key] = taints
        else:
            taints = ()

        name = metadata.get("name", "")
        if type(name) is not str:
            name = str(name)
        if spec.get("unschedulable"):
            blocked: str | None = "cordoned"
        else:
            blocked = None
            for condition in status.get("conditions") or []:
                if isinstance(condition, Mapping) and condition.get("type") == "Ready" and condition.get("status") != "True":
                    blocked = "NotReady"
                    break
        # NodeState(name, labels, free_gpus, clique, blocked), left exactly as the frozen
        # dataclass's __init__ leaves it (its fields in the instance dict), without that __init__'s
        # object.__setattr__ call per field: a third of the build time on 10,000 nodes.
        # test_planner_inventory_build.py holds them to constructed ones.
        clique = label(_CLIQUE) or None
        state = new(NodeState)
        set_attribute(
            state,
            "__dict__",
            {
                "name": name,
                "labels": labels,
                "free_gpus": 0 if blocked else max(0, kind.most_free - used_get(name, 0)),
                "clique": clique if clique is None or type(clique) is str else str(clique),
                "blocked": blocked,
            },
        )
        members = kind.by_taints.get(id(taints))
        if members is None:
            members = kind.by_taints[id(taints)] = []
            found.append((kind.shape, taints, members))
        members.append(state)

    pools = []
    for shape, taints, members in found:
        members.sort(key=_NAME)  # stable, as sorting the states by name was
        pools.append(NodePool(shape=shape, taints=taints, nodes=tuple(members)))
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
    return Inventory(
        pools=tuple(pools), non_gpu_nodes=non_gpu, unallocatable=tuple(sorted(unallocatable))
    )


def unallocatable_note(inv: Inventory, *, shown: int = 5) -> str:
    """The reason's words for the nodes left out because nothing of their GPUs is allocatable."""
    names = inv.unallocatable
    if not names:
        return ""
    listed = ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")
    return (
        f" Not planned on {len(names)} GPU node(s) whose labels show GPUs: device plugin not ready: "
        f"allocatable {GPU_RESOURCE} is 0 on {listed}."
    )
