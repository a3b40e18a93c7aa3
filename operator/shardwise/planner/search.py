"""The TP/PP search: enumerate legal layouts per node pool, score them, pick one per the objective.

Steps, in order:
1. reject hand-set TP/PP the model cannot take (InvalidParallelism);
2. keep the pools the spec may use: GPU products, node selector, taints vs tolerations
   (NoMatchingNodes, with what excluded each node);
3. per pool, the single-node layouts; when none fits memory, the fewest nodes that fit;
4. score each layout: memory fit, predicted ITL/TTFT/tokens/s, price;
5. rank the ones that fit by the objective (InsufficientGPUMemory when none does) and keep up to
   three runners-up as alternatives, each saying why it lost.
Iteration is sorted throughout so the same inputs always give the same plan.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from shardwise import pricing
from shardwise.planner import (
    capacity,
    corrections,
    efficiency,
    engines,
    inventory,
    layouts,
    memory,
    performance,
    placement,
    plans,
    reasons,
)
from shardwise.planner.candidates import Candidate, Eligible
from shardwise.planner.request import PlanRequest

# Under the Latency objective a layout with more GPUs must cut ITL by this much to win: halving a
# few percent of latency is not worth doubling the GPUs (vllm #8089, #12205 in GPU-FACTS.md).
LATENCY_GAIN_FOR_MORE_GPUS = 0.10
MAX_NODES_PER_REPLICA = 64


def _eligible(
    request: PlanRequest, inv: inventory.Inventory
) -> tuple[list[Eligible], dict[str, int]]:
    """Pools the spec may use, and how many GPU nodes each rule excluded."""
    excluded: Counter[str] = Counter()
    result = []
    for pool in inv.pools:
        count = len(pool.nodes)
        if not placement.product_allowed(pool.shape.product, request.gpu_products):
            excluded["gpuProducts"] += count
            continue
        blocking = placement.untolerated_taints(pool.taints, request.tolerations)
        if blocking:
            taint = blocking[0]
            excluded[f"taint {taint.key}={taint.value}:{taint.effect}"] += count
            continue
        if pool.shape.gpu.memory_mib <= 0:
            excluded["unknown GPU product without nvidia.com/gpu.memory"] += count
            continue
        nodes = placement.matching_nodes(pool.nodes, request.node_selector)
        excluded["nodeSelector"] += count - len(nodes)
        if nodes:
            result.append(Eligible(pool=pool, nodes=nodes))
    return result, {k: v for k, v in sorted(excluded.items()) if v}


def _hardware(shape: inventory.GpuShape, lay: layouts.Layout) -> performance.Hardware:
    gpu = shape.gpu
    if lay.tp_spans_nodes:
        tp_link = performance.nvlink(shape.nvlink_gbps, across_nodes=True)
    elif shape.nvlink_domain > 1:
        tp_link = performance.nvlink(shape.nvlink_gbps)
    else:
        tp_link = performance.pcie(gpu.pcie_gbps)
    stage_link = (
        performance.nvlink(shape.nvlink_gbps)
        if shape.interconnect == "nvswitch"
        else performance.pcie(gpu.pcie_gbps)
    )
    # EP's all-to-all and DP's expert group stay on NVLink inside a node and cross the
    # inter-node fabric when the ranks span nodes (one NVLink clique counts as one domain).
    if lay.nodes > 1 and (lay.dp > 1 or lay.ep):
        ep_link = performance.network()
    else:
        ep_link = tp_link if lay.tp > 1 or shape.nvlink_domain == 1 else (
            performance.nvlink(shape.nvlink_gbps))
    return performance.Hardware(
        ep_link=ep_link,
        memory_bandwidth_gbps=gpu.memory_bandwidth_gbps,
        bf16_tflops=gpu.bf16_tflops,
        fp8_tflops=gpu.fp8_tflops,
        family=gpu.family,
        tp_link=tp_link,
        stage_link=stage_link,
        inter_node_hops=(lay.pp - 1) if lay.tp_spans_nodes else (lay.nodes - 1),
    )


def predict_layout(
    request: PlanRequest, shape: inventory.GpuShape, lay: layouts.Layout, fit: memory.MemoryFit
) -> performance.Prediction:
    """The calibrated model's prediction for one layout under the request's planned workload."""
    work = performance.Workload(
        arch=request.arch,
        bytes_per_weight=request.bytes_per_weight,
        max_model_len=request.max_model_len,
        max_concurrency=request.max_concurrency,
        prompt_tokens=request.prompt_tokens,
        output_tokens=request.output_tokens,
        concurrency=request.concurrency,
        request_rate=request.request_rate,
        kv_capacity_tokens=fit.kv_room_tokens(request.max_model_len),
        fp8_compute=request.fp8_compute,
        batched_tokens=engines.batched_tokens(
            request.engine, shape.gpu.memory_mib, request.max_model_len),
    )
    return engines.apply(
        performance.predict(work, _hardware(shape, lay), lay.tp, lay.pp, dp=lay.dp, ep=lay.ep),
        request.engine)


def layout_fit(
    request: PlanRequest, shape: inventory.GpuShape, lay: layouts.Layout
) -> memory.MemoryFit:
    return memory.memory_per_gpu(
        request.arch,
        bytes_per_weight=request.bytes_per_weight,
        max_model_len=request.max_model_len,
        max_concurrency=request.max_concurrency,
        gpu_memory_utilization=request.gpu_memory_utilization,
        gpu_memory_mib=shape.gpu.memory_mib,
        tp=lay.tp,
        pp=lay.pp,
        lora_slots=request.lora_slots,
        lora_rank=request.lora_rank,
        dp=lay.dp,
        engine=request.engine,
    )


def _evaluate(
    request: PlanRequest,
    eligible: Eligible,
    lay: layouts.Layout,
    prices: Mapping[str, float] | None,
    learned: Mapping[str, plans.Correction],
) -> Candidate:
    shape = eligible.shape
    fit = layout_fit(request, shape, lay)
    prediction = predict_layout(request, shape, lay, fit)
    correction = learned.get(
        corrections.key(request.model_name, shape.product, lay.tp, lay.pp, lay.label)
    )
    if correction is not None:
        prediction = corrections.apply(prediction, correction)
    price, source = pricing.resolve_gpu_hour_price(shape.product, request.gpu_hour_usd, prices)
    return Candidate(
        eligible=eligible,
        layout=lay,
        fit=fit,
        prediction=prediction,
        hourly_usd=price * lay.gpus,
        price_source=source,
        correction=correction,
    )


def _wanted(request: PlanRequest, lay: layouts.Layout) -> bool:
    if (request.tensor or request.pipeline) and (lay.dp > 1 or lay.ep):
        return False  # spec.parallelism names TP and PP: the layout it asks for is TP x PP
    return (request.tensor is None or lay.tp == request.tensor) and (
        request.pipeline is None or lay.pp == request.pipeline
    )


def _evaluated(
    request: PlanRequest,
    eligible: Eligible,
    lays: Iterable[layouts.Layout],
    prices: Mapping[str, float] | None,
    learned: Mapping[str, plans.Correction],
) -> list[Candidate]:
    """The wanted layouts, scored. An EP or DP layout that does not fit memory is dropped before
    its prediction (most of them, and the search's time): the TP x PP layouts of the same GPUs
    already say how close the model comes to fitting."""
    found = []
    for lay in lays:
        if not _wanted(request, lay):
            continue
        if (lay.dp > 1 or lay.ep) and not layout_fit(request, eligible.shape, lay).fits:
            continue
        found.append(_evaluate(request, eligible, lay, prices, learned))
    return found


def _pool_candidates(
    request: PlanRequest,
    eligible: Eligible,
    prices: Mapping[str, float] | None,
    learned: Mapping[str, plans.Correction],
) -> list[Candidate]:
    """Single-node layouts; when none fits memory, layouts over the fewest nodes that fit."""
    arch, shape = request.arch, eligible.shape
    found = _evaluated(request, eligible, layouts.single_node(arch, shape), prices, learned)
    if any(c.fit.fits for c in found):
        return found
    fixed_gpus = request.tensor * request.pipeline if request.tensor and request.pipeline else None
    max_nodes = min(len(eligible.nodes), arch.layers, MAX_NODES_PER_REPLICA)
    for nodes in range(2, max_nodes + 1):
        if fixed_gpus is not None:
            if fixed_gpus % nodes:
                continue
            per_node = fixed_gpus // nodes
        else:
            per_node = shape.gpus_per_node
        step = _evaluated(
            request,
            eligible,
            layouts.multi_node(
                arch, shape, nodes, per_node=per_node, clique_nodes=eligible.largest_clique
            ),
            prices,
            learned,
        )
        found.extend(step)
        if any(c.fit.fits for c in step):
            break
    return found


def _rank(candidates: Sequence[Candidate], objective: str) -> list[Candidate]:
    """Candidates best first for the objective."""
    if objective == "Throughput":
        return sorted(
            candidates,
            key=lambda c: (-round(c.tokens_per_gpu, 6), c.prediction.itl_s, c.tie_break()),
        )
    if objective == "Cost":
        return sorted(
            candidates,
            key=lambda c: (
                round(c.hourly_usd, 6),
                c.per_million_usd,
                c.prediction.itl_s,
                c.tie_break(),
            ),
        )
    by_gpus = sorted(candidates, key=lambda c: (c.layout.gpus, c.prediction.itl_s, c.tie_break()))
    best = by_gpus[0]
    for candidate in by_gpus[1:]:
        if candidate.prediction.itl_s < best.prediction.itl_s * (1 - LATENCY_GAIN_FOR_MORE_GPUS):
            best = candidate
    rest = sorted(
        (c for c in candidates if c is not best),
        key=lambda c: (c.prediction.itl_s, c.tie_break()),
    )
    return [best, *rest]


def _capacity(candidate: Candidate) -> tuple[bool, str]:
    lay = candidate.layout
    return capacity.check(
        candidate.eligible.nodes,
        nodes_needed=lay.nodes,
        gpus_per_node=lay.gpus_per_node,
        one_clique=lay.tp_spans_nodes,
    )


def _idle_itl_ms(request: PlanRequest, candidate: Candidate) -> float:
    """ITL of the layout serving one request at a time, corrected like its other figures."""
    alone = dataclasses.replace(request, concurrency=1, request_rate=None)
    idle = predict_layout(alone, candidate.shape, candidate.layout, candidate.fit)
    if candidate.correction is not None:
        idle = corrections.apply(idle, candidate.correction)
    return idle.itl_s * 1e3


def _to_plan(
    request: PlanRequest,
    candidate: Candidate,
    reason: str,
    code: str,
    rejected: str | None = None,
) -> plans.Plan:
    lay, pred = candidate.layout, candidate.prediction
    schedulable, message = _capacity(candidate)
    family = candidate.shape.gpu.family
    # The error to expect: held out (leave-one-publisher-out) on the deployed engine's figures
    # (every engine's where it has too few of its own).
    held = efficiency.held_out()
    bands = tuple(
        (metric, band.typical_factor, band.p90_factor)
        for metric in ("ttftMs", "itlMs", "tokensPerSecond")
        if (band := held.band(request.engine, family, metric)) is not None
    )
    return plans.Plan(
        feasible=candidate.fit.fits,
        reason=reason,
        reason_code=code,
        tensor_parallel=lay.tp,
        pipeline_parallel=lay.pp,
        data_parallel=lay.dp,
        expert_parallel=lay.ep_size,
        layout=lay.label,
        gpus_per_replica=lay.gpus,
        nodes_per_replica=lay.nodes,
        gpus_per_node=lay.gpus_per_node,
        gpu_product=candidate.shape.product,
        interconnect=candidate.shape.interconnect,
        schedulable_now=schedulable,
        capacity_message=message,
        predicted=plans.Predicted(
            itl_ms=pred.itl_s * 1e3,
            ttft_ms=pred.ttft_s * 1e3,
            tokens_per_second=pred.tokens_per_s,
            hourly_usd=candidate.hourly_usd,
            per_million_output_tokens_usd=candidate.per_million_usd,
            price_source=candidate.price_source,
            error_band=bands,
            gpu_family=held.band_family(request.engine, family),
            saturated=pred.saturated,
            correction=candidate.correction,
            idle_itl_ms=_idle_itl_ms(request, candidate),
        ),
        memory=candidate.fit,
        rejected_because=rejected,
        engine=request.engine,
    )


def _expert_kind(c: Candidate) -> bool:
    return c.layout.dp > 1 or c.layout.ep


def _with_other_kind(chosen: Candidate | None, ranked: Sequence[Candidate]) -> list[Candidate]:
    """`ranked` with the best layout of the other kind (EP/DP vs TP x PP) among the first three
    alternatives, so the plan always shows what the road not taken would have given."""
    out = list(ranked)
    if chosen is None:
        return out
    other = next((c for c in out if _expert_kind(c) != _expert_kind(chosen)), None)
    if other is not None and out.index(other) > 2:
        out.remove(other)
        out.insert(2, other)
    return out


def _alternatives(
    request: PlanRequest,
    chosen: Candidate | None,
    ranked: Sequence[Candidate],
    unfit: Sequence[Candidate],
) -> tuple[plans.Plan, ...]:
    seen = {chosen.identity} if chosen else set()
    picked: list[plans.Plan] = []
    ranked = _with_other_kind(chosen, ranked)
    closest_unfit = sorted(
        unfit, key=lambda c: (c.fit.needed_gib / c.fit.usable_gib, c.tie_break())
    )
    for candidate in [*ranked, *closest_unfit]:
        if len(picked) == 3:
            break
        if candidate.identity in seen:
            continue
        seen.add(candidate.identity)
        code = plans.PLANNED if candidate.fit.fits else plans.INSUFFICIENT_GPU_MEMORY
        picked.append(
            _to_plan(
                request,
                candidate,
                reasons.layout_summary(request, candidate),
                code,
                rejected=reasons.rejected_because(request, chosen, candidate),
            )
        )
    return tuple(picked)


def plan(
    request: PlanRequest,
    inv: inventory.Inventory,
    *,
    prices: Mapping[str, float] | None = None,
    learned: Mapping[str, plans.Correction] | None = None,
) -> plans.Plan:
    """Choose TP, PP, GPUs and nodes for one replica of `request` on `inv`, for its engine.

    `learned` holds the fleet's corrections (corrections.py); a layout with one has its
    predictions scaled by it before ranking, and the reason says so."""
    return dataclasses.replace(_plan(request, inv, prices, learned or {}), engine=request.engine)


def _plan(
    request: PlanRequest,
    inv: inventory.Inventory,
    prices: Mapping[str, float] | None,
    learned: Mapping[str, plans.Correction],
) -> plans.Plan:
    arch = request.arch
    for error in (
        layouts.tp_error(arch, request.tensor) if request.tensor else None,
        layouts.pp_error(arch, request.pipeline) if request.pipeline else None,
    ):
        if error:
            return plans.Plan(False, f"{error}.", plans.INVALID_PARALLELISM)

    eligible, excluded = _eligible(request, inv)
    if not eligible:
        return plans.Plan(
            False, reasons.no_matching_nodes(request, inv, excluded), plans.NO_MATCHING_NODES
        )

    candidates = [c for e in eligible for c in _pool_candidates(request, e, prices, learned)]
    if not candidates:
        code, text = reasons.no_layout(
            request, [e.shape for e in eligible], [len(e.nodes) for e in eligible]
        )
        return plans.Plan(False, text, code)

    fitting = [c for c in candidates if c.fit.fits]
    unfit = [c for c in candidates if not c.fit.fits]
    if not fitting:
        closest = min(unfit, key=lambda c: (c.fit.needed_gib / c.fit.usable_gib, c.tie_break()))
        return plans.Plan(
            feasible=False,
            reason=reasons.insufficient_memory(request, closest),
            reason_code=plans.INSUFFICIENT_GPU_MEMORY,
            alternatives=_alternatives(request, None, [], unfit),
        )

    ranked = _rank(fitting, request.objective)
    chosen = ranked[0]
    text = reasons.planned(request, chosen, ranked, candidates) + reasons.correction_note(chosen)
    result = _to_plan(request, chosen, text, plans.PLANNED)
    return plans.Plan(
        **{**result.__dict__, "alternatives": _alternatives(request, chosen, ranked[1:], unfit)}
    )
