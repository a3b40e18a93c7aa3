"""Prefill/decode disaggregation: size both pools, predict the pair against the best aggregated
layout on the same GPUs, and say which the declared SLOs need. Pure: plain data in and out.

Why a rule and not "always disaggregate": vLLM's own docs say "Disaggregated prefill DOES NOT
improve throughput" (docs/features/disagg_prefill.md); it separates TTFT from ITL ("Controlling
tail ITL") and pays in GPUs and in the KV hand-off. So `choose` picks the pair only where the
aggregated layouts cannot meet the SLOs and the pair can (policy Auto).

Models, all the planner's own (memory.py, performance.py, through search.py):
- Aggregated: every single-node layout that fits memory, 1..N replicas within the GPU budget,
  each at rate/replicas, predicted exactly as the layout search predicts it.
- Prefill pool: the same prediction with one output token (the prefill engine stops after the
  first token, `max_tokens=1` in vLLM's proxy protocol) at rate/prefill engines: its TTFT.
- Decode pool: the same step model with no prompt tokens in the steps (prompts arrive
  computed): ITL is a pure decode step of R sequences at the mean context, R from Little's law
  (rate/decode engines x output tokens x step), bounded by max-num-seqs and the KV room.
- Hand-off: the prompt's KV bytes (every layer) over the link it crosses, per engine GPU in
  parallel (each TP rank sends its own heads): NVLink when the pair shares an NVLink domain,
  PCIe inside a node without one, the inter-node network otherwise (the same constants as the
  performance model's PP hops). Pairs are placed inside one node when a prefill and a decode
  engine fit on one together: Dynamo's issue 10171 shows ~50 % of the throughput lost when not.
- Pair TTFT = prefill TTFT + hand-off + one decode step; cost per 1M output tokens from the GPUs
  the configuration holds and the output tokens it delivers.
Predictions are the model's means; SLOs are compared with them as the layout search does.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from shardwise import pricing
from shardwise.planner import efficiency, inventory, layouts, memory, performance, search
from shardwise.planner.request import PlanRequest

AGGREGATED = "Aggregated"
DISAGGREGATED = "Disaggregated"
NVLINK, SAME_NODE, ACROSS_NODES = "nvlink", "same-node", "across-nodes"
_MAX_ENGINES_PER_ROLE = 64
# A prefill pool busier than this queues without bound in practice (M/D/1 at 0.9: 4.5 services).
_MAX_PREFILL_UTILIZATION = 0.9


@dataclass(frozen=True)
class SLO:
    ttft_s: float | None = None
    itl_s: float | None = None

    def ratios(self, ttft_s: float, itl_s: float) -> tuple[float, ...]:
        """Predicted over target, per declared target (above 1: missed)."""
        return tuple(p / t for p, t in ((ttft_s, self.ttft_s), (itl_s, self.itl_s)) if t)


@dataclass(frozen=True)
class Outcome:
    """One configuration's predicted figures."""

    ttft_s: float
    itl_s: float
    gpus: int
    output_tokens_per_s: float
    per_million_usd: float
    saturated: bool
    worst_ratio: float  # the worst predicted/target over the declared SLOs; 0 without SLOs

    @property
    def meets(self) -> bool:
        return not self.saturated and self.worst_ratio <= 1.0


@dataclass(frozen=True)
class Aggregated:
    layout: layouts.Layout
    replicas: int
    outcome: Outcome

    def describe(self) -> str:
        return f"{self.replicas} x TP{self.layout.tp}" + (f"xPP{self.layout.pp}" if self.layout.pp > 1 else "")


@dataclass(frozen=True)
class Pair:
    prefill: layouts.Layout
    prefill_replicas: int
    decode: layouts.Layout
    decode_replicas: int
    link: str
    handoff_s: float
    prefill_ttft_s: float
    outcome: Outcome

    def describe(self) -> str:
        return (f"{self.prefill_replicas} prefill TP{self.prefill.tp} + {self.decode_replicas} decode "
                f"TP{self.decode.tp}")


@dataclass(frozen=True)
class Choice:
    mode: str  # AGGREGATED | DISAGGREGATED
    reason: str
    aggregated: Aggregated | None
    pair: Pair | None


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms" if seconds >= 0.0095 else f"{seconds * 1e3:.1f} ms"


def _outcome(request: PlanRequest, shape: inventory.GpuShape, gpus: int, rate: float, ttft_s: float,
             itl_s: float, delivered: float, saturated: bool, slo: SLO) -> Outcome:
    price, _ = pricing.resolve_gpu_hour_price(shape.product, request.gpu_hour_usd, None)
    tokens = min(delivered, rate * request.output_tokens)
    per_million = price * gpus / (tokens * 3600) * 1e6 if tokens > 0 else math.inf
    ratios = slo.ratios(ttft_s, itl_s)
    return Outcome(ttft_s=ttft_s, itl_s=itl_s, gpus=gpus, output_tokens_per_s=tokens,
                   per_million_usd=per_million, saturated=saturated,
                   worst_ratio=max(ratios) if ratios else 0.0)


def _fitting_layouts(request: PlanRequest, shape: inventory.GpuShape) -> list[tuple[layouts.Layout, memory.MemoryFit]]:
    out = []
    for lay in layouts.single_node(request.arch, shape):
        if lay.pp != 1 or getattr(lay, "dp", 1) != 1 or getattr(lay, "ep", False):
            # TP engines on one node, as render/disaggregation.py renders each role; the
            # aggregated side is held to the same kind so the comparison is of like with like.
            continue
        fit = search.layout_fit(request, shape, lay)
        if fit.fits:
            out.append((lay, fit))
    return out


def _rank_key(outcome: Outcome) -> tuple[bool, bool, float, float, float]:
    # Configurations that meet the SLOs first, cheapest first; the others unsaturated first, then
    # by how far they miss.
    return (not outcome.meets, outcome.saturated,
            outcome.per_million_usd if outcome.meets else outcome.worst_ratio, outcome.itl_s, outcome.ttft_s)


def best_aggregated(request: PlanRequest, shape: inventory.GpuShape, gpus: int, rate: float,
                    slo: SLO) -> Aggregated | None:
    """The best aggregated layout and replica count within `gpus` GPUs at `rate` requests/s."""
    found = [aggregated_at(request, shape, lay, fit, replicas, rate, slo)
             for lay, fit in _fitting_layouts(request, shape) for replicas in range(1, gpus // lay.gpus + 1)]
    return min(found, key=lambda a: _rank_key(a.outcome), default=None)


def aggregated_at(request: PlanRequest, shape: inventory.GpuShape, lay: layouts.Layout, fit: memory.MemoryFit,
                  replicas: int, rate: float, slo: SLO) -> Aggregated:
    """One aggregated configuration: `replicas` engines of `lay`, each at rate/replicas."""
    each = dataclasses.replace(request, request_rate=rate / replicas, concurrency=None)
    pred = search.predict_layout(each, shape, lay, fit)
    return Aggregated(lay, replicas, _outcome(request, shape, replicas * lay.gpus, rate, pred.ttft_s, pred.itl_s,
                                              pred.tokens_per_s * replicas, pred.saturated, slo))


def aggregated_on(request: PlanRequest, shape: inventory.GpuShape, tp: int, gpus: int, rate: float,
                  slo: SLO) -> Aggregated | None:
    """TP`tp` engines filling exactly `gpus` GPUs (a comparison at equal GPU count), if TP`tp` fits."""
    return next((aggregated_at(request, shape, lay, fit, gpus // lay.gpus, rate, slo)
                 for lay, fit in _fitting_layouts(request, shape) if lay.tp == tp and gpus >= lay.gpus), None)


def handoff_link(shape: inventory.GpuShape, prefill: layouts.Layout, decode: layouts.Layout) -> str:
    """The link a prompt's KV crosses when pairs are kept inside a node where they fit one."""
    if prefill.gpus + decode.gpus > shape.gpus_per_node:
        return ACROSS_NODES
    if shape.nvlink_domain >= prefill.gpus + decode.gpus:
        return NVLINK
    return SAME_NODE


def handoff_s(request: PlanRequest, shape: inventory.GpuShape, link: str, tp: int) -> float:
    """Seconds to move one prompt's KV (every layer) from a prefill to a decode engine."""
    kv_bytes = request.prompt_tokens * memory.kv_bytes_per_token(request.arch)
    if link == NVLINK:
        gbps, latency = shape.nvlink_gbps / 2 * tp, performance.INTRA_NODE_HOP_LATENCY_S
    elif link == SAME_NODE:
        gbps, latency = shape.gpu.pcie_gbps * tp, performance.INTRA_NODE_HOP_LATENCY_S
    else:
        gbps, latency = performance.INTER_NODE_GBPS, performance.INTER_NODE_LATENCY_S
    return latency + kv_bytes / (gbps * 1e9 * performance.LINK_EFFICIENCY)


def _engine(request: PlanRequest, shape: inventory.GpuShape, lay: layouts.Layout,
            fit: memory.MemoryFit) -> performance._Engine:
    work = performance.Workload(
        arch=request.arch, bytes_per_weight=request.bytes_per_weight, max_model_len=request.max_model_len,
        max_concurrency=request.max_concurrency, prompt_tokens=request.prompt_tokens,
        output_tokens=request.output_tokens, kv_capacity_tokens=fit.kv_room_tokens(request.max_model_len),
        fp8_compute=request.fp8_compute,
        batched_tokens=performance.default_batched_tokens(shape.gpu.memory_mib))
    # The aggregated model's own step (performance._Engine), read for one phase at a time.
    return performance._Engine(work, search._hardware(shape, lay), lay.tp, lay.pp, efficiency.fitted())


def _prefill_capacity(request: PlanRequest, shape: inventory.GpuShape, lay: layouts.Layout,
                      fit: memory.MemoryFit) -> float:
    """Prompt tokens/s one prefill engine computes at full chunks (its compute bound)."""
    engine = _engine(request, shape, lay, fit)
    chunk = float(min(request.prompt_tokens, engine.work.batched_tokens))
    prompt = float(request.prompt_tokens)
    return chunk / engine.step_s(0.0, chunk, prompt, prompt, chunk=True)


def _decode_pool(request: PlanRequest, shape: inventory.GpuShape, lay: layouts.Layout, fit: memory.MemoryFit,
                 rate: float) -> tuple[float, float, bool]:
    """(ITL, output tokens/s, saturated) of one decode engine at `rate` requests/s whose prompts
    arrive computed: the performance model's step with no prompt tokens in it."""
    engine = _engine(request, shape, lay, fit)
    context = request.prompt_tokens + request.output_tokens / 2
    cap = float(request.max_concurrency)
    room = fit.kv_room_tokens(request.max_model_len)
    cap = min(cap, max(1.0, math.floor(room / (request.prompt_tokens + request.output_tokens))))

    def step(running: float) -> float:
        return engine.step_s(running, 0.0, context, float(request.prompt_tokens))

    output = max(request.output_tokens, 1)
    saturated = rate * output * step(cap) >= cap
    running = cap if saturated else 1.0
    if not saturated:
        for _ in range(50):  # Little's law: R = rate x output x step(R)
            following = min(cap, max(1.0, rate * output * step(running)))
            if abs(following - running) <= 0.005 * running:
                break
            running = following
    itl = step(running)
    floor = request.arch.active_parameters * request.bytes_per_weight / (lay.tp * shape.gpu.memory_bandwidth_gbps * 1e9)
    return max(itl, floor), running / max(itl, floor), saturated


def best_pair(request: PlanRequest, shape: inventory.GpuShape, gpus: int, rate: float, slo: SLO) -> Pair | None:
    """The best prefill/decode pools within `gpus` GPUs at `rate` requests/s."""
    fitting = _fitting_layouts(request, shape)
    prefill_one = dataclasses.replace(request, output_tokens=1, concurrency=None)
    prefill_cache: dict[tuple[int, int], performance.Prediction] = {}
    decode_cache: dict[tuple[int, int], tuple[float, float, bool]] = {}
    found = []
    for p_lay, p_fit in fitting:
        for n_p in range(1, min(gpus // p_lay.gpus, _MAX_ENGINES_PER_ROLE) + 1):
            key = (p_lay.tp, n_p)
            if key not in prefill_cache:
                prefill_cache[key] = search.predict_layout(
                    dataclasses.replace(prefill_one, request_rate=rate / n_p), shape, p_lay, p_fit)
            pre = prefill_cache[key]
            pre_saturated = pre.saturated or rate / n_p * request.prompt_tokens > _prefill_capacity(
                request, shape, p_lay, p_fit) * _MAX_PREFILL_UTILIZATION
            left = gpus - n_p * p_lay.gpus
            for d_lay, d_fit in fitting:
                for n_d in range(1, min(left // d_lay.gpus, _MAX_ENGINES_PER_ROLE) + 1):
                    dkey = (d_lay.tp, n_d)
                    if dkey not in decode_cache:
                        decode_cache[dkey] = _decode_pool(request, shape, d_lay, d_fit, rate / n_d)
                    itl, per_engine_tokens, d_saturated = decode_cache[dkey]
                    link = handoff_link(shape, p_lay, d_lay)
                    hand = handoff_s(request, shape, link, min(p_lay.tp, d_lay.tp))
                    ttft = pre.ttft_s + hand + itl
                    used = n_p * p_lay.gpus + n_d * d_lay.gpus
                    found.append(Pair(p_lay, n_p, d_lay, n_d, link, hand, pre.ttft_s, _outcome(
                        request, shape, used, rate, ttft, itl, per_engine_tokens * n_d,
                        pre_saturated or d_saturated, slo)))
    return min(found, key=lambda p: _rank_key(p.outcome), default=None)


def _figures(o: Outcome) -> str:
    return (f"TTFT {_ms(o.ttft_s)}, ITL {_ms(o.itl_s)}, ${o.per_million_usd:.2f} per 1M output tokens on "
            f"{o.gpus} GPUs" + (" (saturated)" if o.saturated else ""))


def choose(request: PlanRequest, shape: inventory.GpuShape, gpus: int, rate: float, slo: SLO,
           *, policy: str = "Auto") -> Choice:
    """Aggregated or disaggregated for `rate` requests/s on at most `gpus` GPUs of `shape`.

    policy Aggregated: aggregated; Disaggregated: the best pair; Auto: the pair only where the aggregated layouts
    miss a declared SLO and the pair meets them all (or misses by less)."""
    agg = best_aggregated(request, shape, gpus, rate, slo)
    pair = best_pair(request, shape, gpus, rate, slo) if policy != AGGREGATED else None
    if agg is None and pair is None:
        return Choice(AGGREGATED, "no layout fits memory", None, None)
    a_text = f"aggregated {agg.describe()}: {_figures(agg.outcome)}" if agg else "no aggregated layout fits"
    p_text = (f"disaggregated {pair.describe()} (KV hand-off {_ms(pair.handoff_s)} over {pair.link}): "
              f"{_figures(pair.outcome)}") if pair else "no prefill/decode pair fits"
    both = f"{a_text}; {p_text}"
    if policy == AGGREGATED or pair is None:
        return Choice(AGGREGATED, f"disaggregation off; {both}", agg, pair)
    if policy == DISAGGREGATED or agg is None:
        return Choice(DISAGGREGATED, f"disaggregation asked for; {both}", agg, pair)
    if not (slo.ttft_s or slo.itl_s):
        return Choice(AGGREGATED, "no TTFT or ITL target declared, and disaggregation does not raise "
                      f"throughput: aggregated. {both}", agg, pair)
    if agg.outcome.meets:
        return Choice(AGGREGATED, "the aggregated layout meets every declared SLO, so the pair's extra hand-off "
                      f"and split GPUs buy nothing: {both}", agg, pair)
    if pair.outcome.meets:
        return Choice(DISAGGREGATED, "no aggregated layout meets the SLOs (prompts stall the decode steps); "
                      f"the pair does: {both}", agg, pair)
    if pair.outcome.worst_ratio < agg.outcome.worst_ratio and not pair.outcome.saturated:
        return Choice(DISAGGREGATED, f"neither meets the SLOs; the pair misses by less: {both}", agg, pair)
    return Choice(AGGREGATED, f"neither meets the SLOs; the aggregated layout misses by less: {both}", agg, pair)


def choose_all(requests: Sequence[tuple[PlanRequest, inventory.GpuShape, int, float, SLO]]) -> list[Choice]:
    return [choose(*args) for args in requests]
