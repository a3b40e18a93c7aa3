"""`shardwise plan-pd`: aggregated or prefill/decode pools for an InferenceDeployment, offline.

Reads the same files as `shardwise plan` (the InferenceDeployment, nodes as `kubectl get nodes -o
yaml` prints them, a model's config.json for models the catalog lacks) and prints what
planner/disaggregation.py decides: the best aggregated layout and the best prefill/decode pair
within the GPU budget at the total request rate, each with TTFT, ITL and cost per 1M output
tokens, and which the declared SLOs need. The SLOs are spec.disaggregation's role targets
(prefill ttftP95, decode itlP95), else spec.autoscaling.slo's.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from typing import Any

from shardwise import planner
from shardwise.planner import cli as plan_cli
from shardwise.planner import disaggregation as dg

_DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(ms|s|m)$")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plan-pd", help="aggregated or prefill/decode pools for an InferenceDeployment",
        description="Compare the best aggregated layout with the best prefill/decode pair, offline.")
    parser.add_argument("-f", "--filename", required=True, help="InferenceDeployment YAML")
    parser.add_argument("--nodes", required=True, help="nodes as printed by `kubectl get nodes -o yaml`")
    parser.add_argument("--model-config", help="a model's config.json or its folder (models the catalog lacks)")
    parser.add_argument("--rate", type=float, help="total requests/s (default: spec.workload.requestsPerSecond "
                        "x spec.replicas)")
    parser.add_argument("--gpus", type=int, help="GPU budget (default: every GPU of the pool)")
    parser.add_argument("--policy", choices=("Auto", "Disaggregated", "Aggregated"), default="Auto",
                        help="Auto (the SLOs decide), or one side forced")
    parser.add_argument("-o", "--output", choices=("json", "table"), default="table")
    parser.set_defaults(func=run)


def seconds(text: str | None) -> float | None:
    if not text:
        return None
    match = _DURATION.match(text)
    if match is None:
        raise plan_cli._InputError(f"{text!r} is not a duration such as 500ms, 2s or 1m")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def slo_of(spec: Mapping[str, Any]) -> dg.SLO:
    roles = spec.get("disaggregation") or {}
    scaling = (spec.get("autoscaling") or {}).get("slo") or {}
    ttft = ((roles.get("prefill") or {}).get("slo") or {}).get("ttftP95") or scaling.get("ttftP95")
    itl = ((roles.get("decode") or {}).get("slo") or {}).get("itlP95") or scaling.get("itlP95")
    return dg.SLO(ttft_s=seconds(ttft), itl_s=seconds(itl))


def _outcome(o: dg.Outcome) -> dict[str, Any]:
    return {"ttftMs": round(o.ttft_s * 1e3, 1), "itlMs": round(o.itl_s * 1e3, 2), "gpus": o.gpus,
            "outputTokensPerSecond": round(o.output_tokens_per_s), "perMillionOutputTokensUSD": round(o.per_million_usd, 3),
            "saturated": o.saturated, "meetsSLO": o.meets}


def to_dict(choice: dg.Choice) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": choice.mode, "reason": choice.reason}
    if choice.aggregated is not None:
        a = choice.aggregated
        out["aggregated"] = {"replicas": a.replicas, "tensorParallel": a.layout.tp, **_outcome(a.outcome)}
    if choice.pair is not None:
        p = choice.pair
        out["disaggregated"] = {
            "prefill": {"replicas": p.prefill_replicas, "tensorParallel": p.prefill.tp,
                        "ttftMs": round(p.prefill_ttft_s * 1e3, 1)},
            "decode": {"replicas": p.decode_replicas, "tensorParallel": p.decode.tp},
            "handoff": {"link": p.link, "ms": round(p.handoff_s * 1e3, 3)}, **_outcome(p.outcome)}
    return out


def run(args: argparse.Namespace) -> int:
    try:
        spec = plan_cli._deployment_spec(args.filename)
        request = planner.request_from_spec(spec, architecture=plan_cli._resolved_architecture(spec, args.model_config))
        nodes, pods = plan_cli._objects(args.nodes)
        pools = planner.inventory_from_nodes(nodes, pods).pools
        if not pools:
            raise plan_cli._InputError(f"--nodes: no GPU node in {args.nodes}")
        pool = max(pools, key=lambda p: len(p.nodes) * p.shape.gpus_per_node)
        gpus = args.gpus or len(pool.nodes) * pool.shape.gpus_per_node
        per_replica = (spec.get("workload") or {}).get("requestsPerSecond")
        rate = args.rate or (float(per_replica) * max(1, int(spec.get("replicas") or 1)) if per_replica else None)
        if not rate:
            raise plan_cli._InputError("give --rate or spec.workload.requestsPerSecond: the pools are sized for a rate")
        choice = dg.choose(request, pool.shape, gpus, rate, slo_of(spec), policy=args.policy)
    except (planner.PlanInputError, plan_cli._InputError) as error:
        print(f"error: {error}", file=sys.stderr)
        return plan_cli.EXIT_BAD_INPUT
    if args.output == "json":
        print(json.dumps(to_dict(choice), indent=2))
    else:
        print(f"{choice.mode}: {choice.reason}")
    return plan_cli.EXIT_FEASIBLE if choice.aggregated or choice.pair else plan_cli.EXIT_INFEASIBLE
