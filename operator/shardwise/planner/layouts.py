"""Which TP x PP layouts are legal on a group of identical nodes.

Rules (GPU-FACTS.md): TP divides the attention heads, and kvHeads and TP divide one another (vLLM
splits or replicates KV heads); PP <= layers. TP stays inside one NVLink domain because every layer
does two all-reduces; on nodes with no NVLink at all TP over PCIe is legal and the performance model
weighs it against PP. A replica spans nodes only when it does not fit on one, and then uses whole
nodes with TP = the node's NVLink domain and PP across nodes, except inside a multi-node NVLink
fabric (same `nvidia.com/gpu.clique`) where TP may span nodes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from shardwise.planner import inventory, models


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    nodes: int
    gpus_per_node: int
    tp_spans_nodes: bool = False

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


def tp_error(arch: models.ModelArch, tp: int) -> str | None:
    """Why TP cannot split this model, or None."""
    if arch.attention_heads % tp:
        return f"TP{tp} does not divide the {arch.attention_heads} attention heads of {arch.name}"
    if arch.kv_heads % tp and tp % arch.kv_heads:
        return (
            f"TP{tp} and the {arch.kv_heads} KV heads of {arch.name} do not divide one another "
            "(vLLM splits or replicates KV heads)"
        )
    return None


def pp_error(arch: models.ModelArch, pp: int) -> str | None:
    if pp > arch.layers:
        return f"PP{pp} exceeds the {arch.layers} layers of {arch.name}"
    return None


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def tp_fits_domain(shape: inventory.GpuShape, tp: int) -> bool:
    """TP inside one NVLink domain; any TP inside a node that has no NVLink at all."""
    return shape.nvlink_domain == 1 or tp <= shape.nvlink_domain


def single_node(arch: models.ModelArch, shape: inventory.GpuShape) -> Iterator[Layout]:
    # A process sees one MIG slice and slices have no peer-to-peer path: one slice per replica.
    for gpus in range(1, 1 + (1 if shape.mig else shape.gpus_per_node)):
        for tp in _divisors(gpus):
            pp = gpus // tp
            if tp_error(arch, tp) or pp_error(arch, pp) or not tp_fits_domain(shape, tp):
                continue
            yield Layout(tp=tp, pp=pp, nodes=1, gpus_per_node=gpus)


def multi_node(
    arch: models.ModelArch,
    shape: inventory.GpuShape,
    nodes: int,
    *,
    per_node: int,
    clique_nodes: int,
) -> Iterator[Layout]:
    """Layouts over exactly `nodes` nodes using `per_node` GPUs on each."""
    if per_node > shape.gpus_per_node or shape.mig:
        return
    tps = [t for t in _divisors(per_node) if not tp_error(arch, t) and tp_fits_domain(shape, t)]
    if shape.nvlink_domain > 1 and tps:
        tps = [max(tps)]  # the NVLink domain, or the largest legal TP inside it
    for tp in tps:
        pp = nodes * per_node // tp
        if not pp_error(arch, pp):
            yield Layout(tp=tp, pp=pp, nodes=nodes, gpus_per_node=per_node)
    whole_domain = shape.nvlink_domain == shape.gpus_per_node == per_node > 1
    if whole_domain and clique_nodes >= nodes:
        for group in _divisors(nodes)[1:]:
            tp = group * per_node
            pp = nodes // group
            if not tp_error(arch, tp) and not pp_error(arch, pp):
                yield Layout(tp=tp, pp=pp, nodes=nodes, gpus_per_node=per_node, tp_spans_nodes=True)
