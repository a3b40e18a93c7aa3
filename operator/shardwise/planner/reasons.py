"""The words of a plan: one or two sentences with the numbers that decided it.

A platform engineer should be able to check every claim against the node labels and the spec, so
each reason names the layout, the per-GPU memory arithmetic and the comparison that won, and says
plainly when a figure rests on an assumption (unlabelled topology, unknown GPU, shared GPUs).
"""

from __future__ import annotations

from collections.abc import Sequence

from shardwise.planner import inventory, memory, plans
from shardwise.planner.candidates import Candidate
from shardwise.planner.request import PlanRequest


def _label(c: Candidate) -> str:
    return c.layout.label.replace("x", " x ")


def _load(request: PlanRequest) -> str:
    """The planned load in words: what the predictions assume."""
    if request.request_rate is not None:
        return f"{request.request_rate:g} requests/s"
    return f"{request.concurrency or request.max_concurrency} streams"


def topology(shape: inventory.GpuShape) -> str:
    if not shape.topology_labelled:
        return "topology unlabelled, treated as PCIe"
    if shape.interconnect == "nvswitch":
        return f"NVSwitch, {shape.nvlink_gbps:.0f} GB/s NVLink"
    if shape.interconnect == "nvlink":
        domain = "bridge pairs" if shape.nvlink_domain == 2 else f"domains of {shape.nvlink_domain}"
        return f"NVLink {domain}"
    return "PCIe only"


def _where(c: Candidate) -> str:
    shape, lay = c.shape, c.layout
    if lay.tp_spans_nodes:
        return (
            f"across {lay.nodes} nodes of one NVLink clique "
            f"({shape.gpus_per_node}x {shape.product} each)"
        )
    where = f"({topology(shape)})"
    if lay.nodes > 1:
        return f"across {lay.nodes} nodes of {shape.gpus_per_node}x {shape.product} {where}"
    if lay.gpus_per_node < shape.gpus_per_node:
        return (
            f"on {lay.gpus_per_node} of the {shape.gpus_per_node} {shape.product} GPUs "
            f"of one node {where}"
        )
    return f"on one node of {shape.gpus_per_node}x {shape.product} {where}"


def _memory_words(request: PlanRequest, fit: memory.MemoryFit) -> str:
    return (
        f"per GPU {fit.weights_gib:.1f} GiB weights + {fit.kv_cache_gib:.1f} GiB KV cache "
        + _kv_words(request, fit) + " + "
        f"{fit.overhead_gib:.1f} GiB overhead"
        + (f" + {fit.lora_gib:.2f} GiB LoRA ({request.lora_slots} adapter slots of rank {request.lora_rank})"
           if request.lora_slots else "")
        + f" = {fit.needed_gib:.1f} of "
        f"{fit.usable_gib:.1f} GiB usable"
    )


def _kv_words(request: PlanRequest, fit: memory.MemoryFit) -> str:
    if fit.dp == 1:
        return f"({request.max_concurrency} x {request.max_model_len} tokens)"
    per_rank = memory.rank_sequences(request.max_concurrency, fit.dp)
    return (f"({per_rank} x {request.max_model_len} tokens: {request.max_concurrency} sequences "
            f"over {fit.dp} DP ranks, each with its own KV cache)")


def _totals(request: PlanRequest) -> tuple[float, float]:
    """(weights GiB, KV cache GiB) for the whole replica."""
    arch = request.arch
    weights = arch.parameters * request.bytes_per_weight / memory.GIB
    kv = (
        request.max_concurrency
        * request.max_model_len
        * memory.kv_bytes_per_token(arch)
        / memory.GIB
    )
    return weights, kv


def layout_summary(request: PlanRequest, c: Candidate) -> str:
    return f"{_label(c)} {_where(c)}: {_memory_words(request, c.fit)}."


def rejected_because(request: PlanRequest, chosen: Candidate | None, c: Candidate) -> str:
    text = _rejected(request, chosen, c)
    if chosen is None or not c.fit.fits:
        return text
    if chosen.layout.dp > 1 and c.layout.dp == 1:
        return f"{text}; {_why_dp(request, chosen, c)}"
    if c.layout.dp > 1 and chosen.layout.dp == 1:
        return f"{text}; {_why_tp(request, c)}"
    return text


def _rejected(request: PlanRequest, chosen: Candidate | None, c: Candidate) -> str:
    fit = c.fit
    if not fit.fits:
        text = (
            f"does not fit: needs {fit.needed_gib:.1f} GiB per GPU, {fit.usable_gib:.1f} GiB usable"
        )
        if fit.sequences_that_fit:
            text += (
                f" (KV room for {fit.sequences_that_fit} of {request.max_concurrency} sequences)"
            )
        return text
    assert chosen is not None  # a fitting alternative only exists beside a chosen plan
    mine, theirs = c.prediction, chosen.prediction
    if request.objective == "Throughput":
        return (
            f"lower throughput per GPU: {c.tokens_per_gpu:.0f} vs "
            f"{chosen.tokens_per_gpu:.0f} tokens/s/GPU"
        )
    if request.objective == "Cost":
        if c.hourly_usd > chosen.hourly_usd:
            text = f"costs more: ${c.hourly_usd:.2f}/h vs ${chosen.hourly_usd:.2f}/h per replica"
            if c.per_million_usd < chosen.per_million_usd:
                text += (
                    f" (though ${c.per_million_usd:.2f} vs ${chosen.per_million_usd:.2f} "
                    "per 1M output tokens when kept busy)"
                )
            return text
        return f"${c.per_million_usd:.2f} vs ${chosen.per_million_usd:.2f} per 1M output tokens"
    if mine.itl_s < theirs.itl_s:
        gain = (1 - mine.itl_s / theirs.itl_s) * 100
        return (
            f"{gain:.0f}% lower ITL ({mine.itl_s * 1e3:.1f} vs {theirs.itl_s * 1e3:.1f} ms) "
            f"is not worth {c.layout.gpus} GPUs instead of {chosen.layout.gpus}"
        )
    return f"higher predicted ITL: {mine.itl_s * 1e3:.1f} ms vs {theirs.itl_s * 1e3:.1f} ms"


def _multi_node(request: PlanRequest, c: Candidate) -> str:
    weights, kv = _totals(request)
    node_usable = c.fit.usable_gib * c.shape.gpus_per_node
    head = (
        f"One node holds {node_usable:.0f} GiB usable, less than the {weights:.0f} GiB of "
        f"weights + {kv:.0f} GiB of KV cache"
    )
    lay = c.layout
    if lay.tp_spans_nodes:
        spanned = lay.tp // lay.gpus_per_node
        return f"{head}; the nodes share an NVLink clique, so TP{lay.tp} spans {spanned} nodes."
    if lay.dp > 1:
        spread = "EP's all-to-all" if lay.ep else f"the experts' DP{lay.dp} x TP{lay.tp} group"
        return (f"{head}, so each of the {lay.nodes} nodes runs {lay.dp_local} DP rank(s) of "
                f"TP{lay.tp} inside its NVLink domain and {spread} crosses the inter-node fabric.")
    return f"{head}, so TP stays inside each node and PP{lay.pp} runs across {lay.nodes} nodes."


def _objective(
    request: PlanRequest,
    chosen: Candidate,
    ranked: Sequence[Candidate],
    everything: Sequence[Candidate],
) -> str:
    pred = chosen.prediction
    runner = ranked[1] if len(ranked) > 1 else None
    if request.tensor or request.pipeline:
        return (
            f"Layout set in spec.parallelism; predicted ITL {pred.itl_s * 1e3:.1f} ms, "
            f"TTFT {pred.ttft_s * 1e3:.0f} ms, {pred.tokens_per_s:.0f} tokens/s."
        )
    if request.objective == "Throughput":
        text = (
            f"Highest predicted throughput per GPU: {chosen.tokens_per_gpu:.0f} tokens/s/GPU "
            f"({pred.tokens_per_s:.0f} tokens/s for {_load(request)})"
        )
        if runner:
            text += (
                f"; next {_label(runner)} on {runner.shape.product} at {runner.tokens_per_gpu:.0f}"
            )
        return text + "."
    if request.objective == "Cost":
        text = (
            f"Cheapest replica that fits: {chosen.layout.gpus} GPU(s) at "
            f"${chosen.hourly_usd:.2f}/h ({chosen.price_source} price), "
            f"${chosen.per_million_usd:.2f} per 1M output tokens"
        )
        smaller = [
            c
            for c in everything
            if not c.fit.fits and c.shape == chosen.shape and c.layout.gpus < chosen.layout.gpus
        ]
        if smaller:
            near = max(smaller, key=lambda c: (c.layout.gpus, -c.fit.needed_gib))
            text += f"; {_label(near)} would need {near.fit.needed_gib:.1f} GiB per GPU"
        return text + "."
    text = (
        f"Lowest predicted ITL of the {len(ranked)} layout{'s' if len(ranked) > 1 else ''} "
        "that fit: "
        f"{pred.itl_s * 1e3:.1f} ms/token "
        f"(TTFT {pred.ttft_s * 1e3:.0f} ms)"
    )
    faster = [c for c in ranked[1:] if c.prediction.itl_s < pred.itl_s]
    if faster:
        best = faster[0]
        gain = (1 - best.prediction.itl_s / pred.itl_s) * 100
        text += f"; {_label(best)} would be only {gain:.0f}% faster on {best.layout.gpus} GPUs"
    elif runner:
        text += f"; next {_label(runner)} at {runner.prediction.itl_s * 1e3:.1f} ms"
    return text + "."


def _pcie_comparison(
    request: PlanRequest, chosen: Candidate, everything: Sequence[Candidate]
) -> str:
    """TP over PCIe against PP on the same GPUs, with the margin, when the node has no NVLink."""
    lay = chosen.layout
    if chosen.shape.nvlink_domain > 1 or lay.gpus_per_node == 1:
        return ""
    want = (1, lay.gpus) if lay.tp > 1 else (lay.gpus_per_node, lay.nodes)
    others = [
        c
        for c in everything
        if c.eligible == chosen.eligible
        and (c.layout.tp, c.layout.pp) == want
        and c.layout.nodes == lay.nodes
    ]
    if not others or want == (lay.tp, lay.pp):
        return ""
    tp_side, pp_side = (chosen, others[0]) if lay.tp > 1 else (others[0], chosen)
    t, p = tp_side.prediction, pp_side.prediction
    text = (
        f"Without NVLink, {_label(tp_side)} predicts {t.itl_s * 1e3:.1f} ms/token and "
        f"{t.tokens_per_s:.0f} tokens/s, {_label(pp_side)} {p.itl_s * 1e3:.1f} ms and "
        f"{p.tokens_per_s:.0f} tokens/s"
    )
    all_reduces = f"{2 * request.arch.layers} PCIe all-reduces per token"
    itl_gain, tps_gain = p.itl_s / t.itl_s, t.tokens_per_s / p.tokens_per_s
    if itl_gain >= 1 and tps_gain >= 1:
        text += (
            f": TP is {itl_gain:.1f}x faster per token with {tps_gain:.1f}x the throughput, its "
            f"split of the weight reads outweighing {all_reduces}, so vLLM's advice to prefer PP "
            f"on PCIe does not pay at {_load(request)}"
        )
    elif itl_gain < 1 and tps_gain < 1:
        text += (
            f": PP is {1 / itl_gain:.1f}x faster per token with {1 / tps_gain:.1f}x the "
            f"throughput by avoiding {all_reduces}, as vLLM's docs advise without NVLink"
        )
    else:
        faster, richer = ("TP", "PP") if itl_gain >= 1 else ("PP", "TP")
        text += (
            f": {faster} is {max(itl_gain, 1 / itl_gain):.1f}x faster per token, {richer} gives "
            f"{max(tps_gain, 1 / tps_gain):.1f}x the throughput (vLLM's docs expect PP to win "
            f"throughput on PCIe); the {request.objective} objective decides"
        )
    other = pp_side if lay.tp > 1 else tp_side
    if not other.fit.fits:
        text += f" ({_label(other)} does not fit memory)"
    return text + "."


def _replicated_gib(request: PlanRequest, c: Candidate) -> float:
    """GiB per GPU of the weights every DP rank holds whole: attention, shared experts, embeddings."""
    arch = request.arch
    rest = arch.parameters - arch.routed_expert_parameters
    return rest * request.bytes_per_weight / c.layout.tp / memory.GIB


def _kv_copies(request: PlanRequest, c: Candidate) -> str:
    """How many times TP holds the same KV (MLA's latent, or KV heads fewer than TP)."""
    arch, tp = request.arch, c.layout.tp
    copies = tp // min(tp, arch.kv_heads)
    if copies <= 1:
        return ""
    what = "MLA's latent KV" if arch.latent_kv else f"the {arch.kv_heads} KV heads"
    return f"TP{tp} replicates {what} {copies} times"


def _why_dp(request: PlanRequest, dp_side: Candidate, tp_side: Candidate) -> str:
    lay = dp_side.layout
    streams = request.concurrency or request.max_concurrency
    words = [f"{streams} streams need {lay.dp} copies of the KV budget (one cache per DP rank)"]
    copies = _kv_copies(request, tp_side)
    if copies:
        words.append(copies)
    words.append(
        f"KV room for {dp_side.fit.sequences_that_fit} vs {tp_side.fit.sequences_that_fit} sequences"
    )
    return "; ".join(words)


def _why_tp(request: PlanRequest, dp_side: Candidate) -> str:
    lay = dp_side.layout
    text = (f"every one of the {lay.dp} DP ranks reads its own {_replicated_gib(request, dp_side):.1f}"
            " GiB of attention and shared weights per step")
    if lay.ep:
        link = "the inter-node fabric" if lay.nodes > 1 else "NVLink" if (
            dp_side.shape.nvlink_domain > 1) else "PCIe"
        text += f" and EP{lay.ep_size}'s all-to-all crosses {link} twice per MoE layer"
    return text


def expert_comparison(
    request: PlanRequest, chosen: Candidate, everything: Sequence[Candidate]
) -> str:
    """Why EP / DP won or lost against the best layout of the other kind on the same GPUs."""
    lay = chosen.layout
    expert_kind = lay.dp > 1 or lay.ep
    others = [
        c for c in everything
        if c.eligible == chosen.eligible and c.layout.gpus == lay.gpus
        and (c.layout.dp > 1 or c.layout.ep) != expert_kind and c.fit.fits
    ]
    if not others:
        return ""
    if request.objective == "Throughput" or request.objective == "Cost":
        other = max(others, key=lambda c: (c.prediction.tokens_per_s, -c.prediction.itl_s))
    else:
        other = min(others, key=lambda c: (c.prediction.itl_s, -c.prediction.tokens_per_s))
    mine, theirs = chosen.prediction, other.prediction
    figures = (
        f"{_label(chosen)} {mine.tokens_per_s:.0f} tokens/s at {mine.itl_s * 1e3:.1f} ms ITL, "
        f"{_label(other)} {theirs.tokens_per_s:.0f} at {theirs.itl_s * 1e3:.1f} ms"
    )
    if chosen.layout.dp > 1:
        return f"{_label(chosen)} over {_label(other)} at {_load(request)}: " + _why_dp(
            request, chosen, other) + f" ({figures})."
    if other.layout.dp > 1:
        return f"{_label(chosen)} over {_label(other)} at {_load(request)}: " + _why_tp(
            request, other) + f" ({figures})."
    # EP against TP on the same TP size: the experts' all-to-all against their all-reduce.
    return f"{_label(chosen)} over {_label(other)} at {_load(request)} ({figures})."


def _caveats(shape: inventory.GpuShape) -> str:
    notes = []
    if not shape.topology_labelled:
        notes.append(
            "Nodes lack shardwise.io/gpu-interconnect and nvlink-domain-size labels, so GPUs are "
            "treated as PCIe-only (run the shardwise labeler to allow NVLink TP)."
        )
    if not shape.gpu.known:
        notes.append(
            f"{shape.product} is not in the GPU catalog: conservative bandwidth "
            f"({shape.gpu.memory_bandwidth_gbps:.0f} GB/s) and compute assumed."
        )
    if shape.shared:
        notes.append("GPUs are time-shared (-SHARED): predictions assume exclusive use.")
    if shape.mig:
        notes.append("MIG slices cannot be combined for TP or PP: one slice per replica.")
    return " ".join(notes)


def planned(
    request: PlanRequest,
    chosen: Candidate,
    ranked: Sequence[Candidate],
    everything: Sequence[Candidate],
) -> str:
    parts = [layout_summary(request, chosen)]
    if chosen.layout.nodes > 1:
        parts.append(_multi_node(request, chosen))
    parts.append(_objective(request, chosen, ranked, everything))
    parts.append(_pcie_comparison(request, chosen, everything))
    parts.append(expert_comparison(request, chosen, everything))
    parts.append(_caveats(chosen.shape))
    return " ".join(p for p in parts if p)


def no_matching_nodes(
    request: PlanRequest, inv: inventory.Inventory, excluded: dict[str, int]
) -> str:
    if not inv.gpu_nodes:
        return f"No GPU nodes in the inventory ({inv.non_gpu_nodes} nodes without nvidia.com/gpu)."
    parts = ", ".join(f"{count} by {rule}" for rule, count in excluded.items())
    text = f"None of the {inv.gpu_nodes} GPU nodes matches spec.placement: excluded {parts}."
    if "gpuProducts" in excluded:
        have = sorted({p.shape.product for p in inv.pools})
        text += f" Asked for {', '.join(request.gpu_products)}; the cluster has {', '.join(have)}."
    return text


def no_layout(
    request: PlanRequest, shapes: Sequence[inventory.GpuShape], node_counts: Sequence[int]
) -> tuple[str, str]:
    """Why a hand-set TP/PP has no legal placement: (reason code, text)."""
    tp, pp = request.tensor or 1, request.pipeline or 1
    domains = [s for s in shapes if s.nvlink_domain > 1]
    if (
        request.tensor
        and domains
        and all(tp > s.nvlink_domain for s in domains)
        and len(domains) == len(shapes)
    ):
        widest = max(domains, key=lambda s: (s.nvlink_domain, s.product))
        return plans.NO_NVLINK_DOMAIN, (
            f"TP{tp} must stay inside one NVLink domain; the largest on matching nodes is "
            f"{widest.nvlink_domain} GPUs ({widest.product}, {topology(widest)})."
        )
    most = max(s.gpus_per_node for s in shapes)
    total = sum(s.gpus_per_node * n for s, n in zip(shapes, node_counts, strict=True))
    return plans.NOT_ENOUGH_GPUS, (
        f"TP{tp} x PP{pp} has no placement: TP needs {tp} GPUs in one node (or NVLink clique) "
        f"and the replica {tp * pp} GPUs; matching nodes have at most {most} GPUs each, "
        f"{total} in total."
    )


def insufficient_memory(request: PlanRequest, closest: Candidate) -> str:
    weights, kv = _totals(request)
    fit = closest.fit
    text = (
        f"{request.model_name} ({request.weight_format}) needs {weights:.1f} GiB of weights + "
        f"{kv:.1f} GiB of KV cache for {request.max_concurrency} x {request.max_model_len} tokens; "
        f"the closest layout, {_label(closest)} {_where(closest)}, needs "
        f"{fit.needed_gib:.1f} GiB per GPU against "
        f"{fit.usable_gib:.1f} GiB usable ({request.gpu_memory_utilization:g} x GPU memory)."
    )
    if fit.sequences_that_fit:
        text += (
            f" It has KV room for {fit.sequences_that_fit} of {request.max_concurrency} "
            "sequences: lower spec.serving.maxConcurrency or maxModelLen, or add nodes."
        )
    else:
        text += f" Weights alone take {fit.weights_gib:.1f} GiB per GPU there."
    if closest.layout.nodes == len(closest.eligible.nodes) and closest.layout.nodes > 1:
        text += f" All {closest.layout.nodes} matching {closest.shape.product} nodes are used."
    return text


def correction_note(c: Candidate) -> str:
    """Says when the figures include the fleet's learned correction, and by how much."""
    corr = c.correction
    if corr is None:
        return ""
    return (
        f" Predictions include a correction learned from {corr.samples} observed window(s) of this "
        f"model on {c.shape.product} at {_label(c)}: TTFT x{corr.ttft:.2f}, ITL x{corr.itl:.2f}, "
        f"tokens/s x{corr.tokens_per_second:.2f}."
    )
