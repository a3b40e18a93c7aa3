"""The model's prediction for a plan already running, at the load and request shape observed.

Predicted-versus-observed is only a fair comparison at the same traffic: a plan made for 16
streams of 1,024-token prompts says little about a replica serving 3 streams of 200-token ones.
So the operator replays the plan's layout through the same performance model with the observed
requests in flight and mean prompt/output lengths (no learned correction: the ratio it measures
is what the corrections learn from).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardwise.planner import gpus, inventory, layouts, performance, request, search


def _shape(plan: Mapping[str, Any]) -> inventory.GpuShape:
    product = str(plan.get("gpuProduct") or "")
    gpu = gpus.lookup_gpu(product)
    interconnect = str(plan.get("interconnect") or "pcie")
    per_node = int(plan.get("gpusPerNode") or 1)
    domain = {"nvswitch": per_node, "nvlink": 2}.get(interconnect, 1)
    if domain <= 1:  # one GPU per pod: no NVLink to speak of, whatever the node has
        interconnect = "pcie"
    return inventory.GpuShape(
        product=product,
        gpu=gpu,
        gpus_per_node=per_node,
        interconnect=interconnect,
        nvlink_domain=domain,
        nvlink_gbps=gpu.nvlink_gbps if domain > 1 else 0.0,
        topology_labelled=True,
        shared=False,
        mig=False,
    )


def predict_for_plan(
    spec: Mapping[str, Any],
    plan: Mapping[str, Any],
    *,
    concurrency: float,
    prompt_tokens: float,
    output_tokens: float,
) -> performance.Prediction | None:
    """None when the plan is not a concrete layout or the spec cannot be read."""
    tp, pp = plan.get("tensorParallel"), plan.get("pipelineParallel")
    if not plan.get("feasible") or not tp or not pp:
        return None
    workload = {
        "promptTokens": max(1, round(prompt_tokens)),
        "outputTokens": max(1, round(output_tokens)),
        "concurrency": max(1, round(concurrency)),
    }
    try:
        req = request.request_from_spec({**spec, "workload": workload})
    except request.PlanInputError:
        return None
    shape = _shape(plan)
    per_node = int(plan.get("gpusPerNode") or tp * pp)
    lay = layouts.Layout(
        tp=int(tp),
        pp=int(pp),
        nodes=int(plan.get("nodesPerReplica") or 1),
        gpus_per_node=per_node,
        tp_spans_nodes=int(tp) > per_node,
        dp=int(plan.get("dataParallel") or 1),
        ep=int(plan.get("expertParallel") or 1) > 1,
    )
    return search.predict_layout(req, shape, lay, search.layout_fit(req, shape, lay))


def _sig(value: float) -> float:
    return float(f"{value:.3g}")


def compare(
    spec: Mapping[str, Any], plan: Mapping[str, Any], observed: Mapping[str, float | None]
) -> tuple[dict[str, Any], dict[str, float]] | None:
    """`status.prediction` and the raw observed/predicted ratios, or None without enough traffic.

    `observed` holds the window's plain figures: pods (scraped replicas), requests, promptTokens,
    outputTokens (counts), running, waiting (sums over pods, now), requestsPerSecond, e2eMeanMs,
    ttftMeanMs, itlMeanMs and outputTokensPerSecond (fleet, over the window). Per-replica load and
    throughput divide by pods. The load is the window's mean requests in flight by Little's law
    (rate x mean request time), the same window the latencies are averaged over; the gauges'
    current value stands in only when the window lacks those figures.
    """
    pods = observed.get("pods") or 0
    requests = observed.get("requests") or 0
    if pods <= 0 or requests <= 0:
        return None
    rate, e2e = observed.get("requestsPerSecond"), observed.get("e2eMeanMs")
    if rate and e2e and rate > 0 and e2e > 0:
        in_flight = rate * e2e / 1e3 / pods
    else:
        in_flight = ((observed.get("running") or 0) + (observed.get("waiting") or 0)) / pods
    prompt = (observed.get("promptTokens") or 0) / requests
    output = (observed.get("outputTokens") or 0) / requests
    prediction = predict_for_plan(
        spec, plan, concurrency=max(1.0, in_flight), prompt_tokens=max(1.0, prompt),
        output_tokens=max(1.0, output),
    )
    if prediction is None:
        return None
    tokens = observed.get("outputTokensPerSecond")
    pairs = {
        "ttft": ("ttftMs", prediction.ttft_s * 1e3, observed.get("ttftMeanMs")),
        "itl": ("itlMs", prediction.itl_s * 1e3, observed.get("itlMeanMs")),
        "tokens_per_second": (
            "tokensPerSecond", prediction.tokens_per_s, tokens / pods if tokens is not None else None
        ),
    }
    status: dict[str, Any] = {
        "atObservedLoad": {
            "concurrency": _sig(max(1.0, in_flight)),
            "promptTokens": round(max(1.0, prompt)),
            "outputTokens": round(max(1.0, output)),
        }
    }
    ratios: dict[str, float] = {}
    for metric, (name, predicted, seen) in pairs.items():
        if seen is None or seen <= 0 or predicted <= 0:
            continue
        ratios[metric] = seen / predicted
        status[name] = {
            "predicted": _sig(predicted),
            "observed": _sig(seen),
            "ratio": round(seen / predicted, 2),
        }
    return status, ratios
