"""One spec planned for several engines side by side (`shardwise plan --engine all`), and which
wins for the spec's objective. Pure: the same search per engine (search.plan with the request's
engine replaced), then a comparison of the chosen plans' figures.

An engine is not offered when the spec's features need another (the admission rules: LoRA and
P/D need vLLM) or when its plan is one this version cannot render (trtllm across nodes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from shardwise.planner import engines, inventory, plans, search
from shardwise.planner.request import PlanRequest


@dataclass(frozen=True)
class EngineOption:
    engine: str
    plan: plans.Plan | None  # None when not offered
    not_offered: str | None = None  # why, in a sentence

    @property
    def offered(self) -> bool:
        return self.plan is not None and self.plan.feasible and self.not_offered is None


@dataclass(frozen=True)
class Comparison:
    options: tuple[EngineOption, ...]
    best: str | None
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {
            "best": self.best,
            "reason": self.reason,
            "engines": [
                {"engine": o.engine, "offered": o.offered,
                 **({"notOffered": o.not_offered} if o.not_offered else {}),
                 **({"plan": o.plan.to_dict()} if o.plan is not None else {})}
                for o in self.options
            ],
        }


def _option(request: PlanRequest, engine: str, inv: inventory.Inventory,
            prices: Mapping[str, float] | None,
            learned: Mapping[str, plans.Correction] | None) -> EngineOption:
    refused = engines.refusal(engine, lora=request.lora_slots > 0,
                              disaggregated=request.disaggregated)
    if refused is not None:
        return EngineOption(engine, None, refused)
    result = search.plan(dataclasses.replace(request, engine=engine), inv, prices=prices,
                         learned=learned)
    if engine in engines.ONE_NODE_ONLY and (result.nodes_per_replica or 1) > 1:
        return EngineOption(engine, result, f"{engines.LABELS[engine]} is rendered on one node "
                            f"per replica in this version; this plan needs "
                            f"{result.nodes_per_replica}")
    if not result.feasible:
        return EngineOption(engine, result, result.reason)
    return EngineOption(engine, result)


def _score(objective: str, p: plans.Plan) -> tuple[float, ...]:
    figures = p.predicted
    assert figures is not None and p.gpus_per_replica  # a feasible plan has both
    if objective == "Throughput":
        return (-figures.tokens_per_second / p.gpus_per_replica, figures.itl_ms)
    if objective == "Cost":
        return (figures.per_million_output_tokens_usd, figures.itl_ms)
    return (figures.itl_ms, p.gpus_per_replica)


def _figure(objective: str, o: EngineOption) -> str:
    assert o.plan is not None and o.plan.predicted is not None
    p, label = o.plan.predicted, engines.LABELS[o.engine]
    if objective == "Throughput":
        return f"{label} {o.plan.layout}: {p.tokens_per_second / (o.plan.gpus_per_replica or 1):.0f} tokens/s per GPU"
    if objective == "Cost":
        return f"{label} {o.plan.layout}: ${p.per_million_output_tokens_usd:.2f}/1M output tokens"
    return f"{label} {o.plan.layout}: {p.itl_ms:.1f} ms ITL"


def compare(request: PlanRequest, inv: inventory.Inventory, candidates: Sequence[str], *,
            prices: Mapping[str, float] | None = None,
            learned: Mapping[str, plans.Correction] | None = None) -> Comparison:
    options = tuple(_option(request, e, inv, prices, learned) for e in candidates)
    offered = [o for o in options if o.offered]
    if not offered:
        return Comparison(options, None, "No engine asked for can serve this spec.")
    ranked = sorted(offered, key=lambda o: (_score(request.objective, o.plan), o.engine))  # type: ignore[arg-type]
    figures = ", ".join(_figure(request.objective, o) for o in ranked)
    best = ranked[0].engine
    return Comparison(options, best, f"{engines.LABELS[best]} wins for objective "
                      f"{request.objective}: {figures}.")
