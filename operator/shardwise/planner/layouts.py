"""Which TP x PP layouts are legal on a group of identical nodes.

Rules (GPU-FACTS.md): TP divides the attention heads, and kvHeads and TP divide one another (vLLM
splits or replicates KV heads); PP <= layers. TP stays inside one NVLink domain because every layer
does two all-reduces; on nodes with no NVLink at all TP over PCIe is legal and the performance model
weighs it against PP. A replica spans nodes only when it does not fit on one, and then uses whole
nodes with TP = the node's NVLink domain and PP across nodes, except inside a multi-node NVLink
fabric (same `nvidia.com/gpu.clique`) where TP may span nodes.

Mixture-of-experts models (the expert count known) add vLLM's expert and data parallelism
(SERVING-SHAPES.md A): DP attention runs DP engines of TP GPUs each (GPUs = DP x TP, each engine
with its own KV cache), and `--enable-expert-parallel` shards the experts over EP = TP x DP ranks
with an all-to-all per MoE layer; without it the experts form one DP x TP tensor-parallel group.
EP needs the experts divisible by EP; DP is for MoE only (vLLM: "non-MoE models should use
independent vLLM instances"). EP and DP layouts keep PP1: vLLM's wide-EP path spreads over nodes by
DP, each node one group of ranks (a LeaderWorkerSet pod), TP inside its NVLink domain.
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
    dp: int = 1  # data-parallel attention engines, each TP x PP GPUs with its own KV cache
    ep: bool = False  # experts sharded over TP x DP ranks (--enable-expert-parallel)

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def ep_size(self) -> int:
        return self.dp * self.tp if self.ep else 1

    @property
    def dp_local(self) -> int:
        """DP engines on each node (vLLM's --data-parallel-size-local)."""
        return max(1, self.dp // self.nodes)

    @property
    def label(self) -> str:
        """TP8xPP1 for a plain layout (as `kubectl get infd` has always shown it), else only the
        axes in use: TP8xEP8, DP8xTP1xEP8, DP2xTP4xEP8, DP2xTP4 (DP attention, experts TP)."""
        if self.dp == 1 and not self.ep:
            return f"TP{self.tp}xPP{self.pp}"
        parts = [f"DP{self.dp}"] if self.dp > 1 else []
        parts.append(f"TP{self.tp}")
        if self.pp > 1:
            parts.append(f"PP{self.pp}")
        if self.ep:
            parts.append(f"EP{self.ep_size}")
        return "x".join(parts)


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


def ep_error(arch: models.ModelArch, ep_size: int) -> str | None:
    """Why EP of this size cannot shard this model's experts, or None."""
    if not arch.experts or not arch.is_moe:
        return f"{arch.name} has no routed experts to shard (EP needs a mixture of experts)"
    if arch.experts % ep_size:
        return f"EP{ep_size} does not divide the {arch.experts} experts of {arch.name}"
    return None


def dp_error(arch: models.ModelArch, dp: int) -> str | None:
    if dp > 1 and not (arch.experts and arch.is_moe):
        return (
            f"DP{dp} attention is for mixtures of experts; {arch.name} is dense (serve more "
            "replicas instead)"
        )
    return None


def _expert_variants(arch: models.ModelArch, gpus: int, tp: int, nodes: int, per_node: int
                     ) -> Iterator[Layout]:
    """The EP/DP layouts of `gpus` GPUs with attention TP `tp` (PP1): TP with EP (TEP), and DP
    engines with experts EP-sharded or TP over the DP x TP group."""
    dp = gpus // tp
    # Without EP the experts are one DP x TP tensor-parallel group: it must split them as TP
    # would (the heads' rule stands in for the experts' widths, which the catalog lacks).
    if dp > 1 and dp_error(arch, dp) is None and dp % nodes == 0 and not tp_error(arch, gpus):
        yield Layout(tp=tp, pp=1, nodes=nodes, gpus_per_node=per_node, dp=dp)
    if gpus > 1 and ep_error(arch, gpus) is None and dp % nodes == 0:
        yield Layout(tp=tp, pp=1, nodes=nodes, gpus_per_node=per_node, dp=dp, ep=True)


def searches_experts(arch: models.ModelArch) -> bool:
    return bool(arch.experts) and arch.is_moe


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
        if not searches_experts(arch):
            continue
        for tp in _divisors(gpus):
            if not tp_error(arch, tp) and tp_fits_domain(shape, tp):
                yield from _expert_variants(arch, gpus, tp, 1, gpus)


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
    if searches_experts(arch) and shape.nvlink_domain > 1:
        # DP across nodes, each node a group of DP ranks with TP inside its NVLink domain; without
        # NVLink the all-to-all of EP over PCIe and the network is not searched.
        for tp in _divisors(per_node):
            if tp_error(arch, tp) or not tp_fits_domain(shape, tp):
                continue
            yield from _expert_variants(arch, nodes * per_node, tp, nodes, per_node)
    whole_domain = shape.nvlink_domain == shape.gpus_per_node == per_node > 1
    if whole_domain and clique_nodes >= nodes:
        for group in _divisors(nodes)[1:]:
            tp = group * per_node
            pp = nodes // group
            if not tp_error(arch, tp) and not pp_error(arch, pp):
                yield Layout(tp=tp, pp=pp, nodes=nodes, gpus_per_node=per_node, tp_spans_nodes=True)
