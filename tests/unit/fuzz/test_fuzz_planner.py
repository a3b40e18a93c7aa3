"""Fuzz: spec validation, request building and planning never crash, and every plan they give holds
its invariants (stated as code below)."""

from __future__ import annotations

import json
import math
from typing import Any

import fuzz_inputs
import pydantic
from hypothesis import given
from hypothesis import strategies as st
from shardwise import planner
from shardwise.api import bounds
from shardwise.api import v1alpha1 as api
from shardwise.planner import inventory, plans

# Fields whose bounds the CRD states: a spec the API server accepts is never refused on them.
_CRD_BOUNDED = {"spec.serving.gpuMemoryUtilization", "spec.serving.maxModelLen",
                "spec.serving.maxConcurrency", "spec.parallelism.tensor", "spec.parallelism.pipeline",
                "spec.pricing.gpuHourUSD"}


def _positive_finite(value: float) -> bool:
    return math.isfinite(value) and value > 0


def assert_plan_invariants(plan: plans.Plan, nodes: list[dict[str, Any]],
                           request: planner.PlanRequest) -> None:
    json.dumps(plan.to_dict(), allow_nan=False)  # the status takes no NaN or Infinity
    assert plan.reason and isinstance(plan.reason, str)
    for candidate in (plan, *plan.alternatives):
        if candidate.predicted is None:
            continue
        p = candidate.predicted
        assert _positive_finite(p.itl_ms) and _positive_finite(p.ttft_ms), p
        assert _positive_finite(p.tokens_per_second), p
        assert math.isfinite(p.hourly_usd) and p.hourly_usd >= 0, p
        assert math.isfinite(p.per_million_output_tokens_usd) and p.per_million_output_tokens_usd >= 0
    if not plan.feasible:
        return
    tp, pp, per_node, n = (plan.tensor_parallel, plan.pipeline_parallel, plan.gpus_per_node,
                           plan.nodes_per_replica)
    dp = plan.data_parallel  # a data-parallel MoE plan runs DP engines of TP x PP GPUs each
    assert tp and pp and dp and per_node and n
    assert tp * pp * dp == plan.gpus_per_replica == n * per_node
    if request.tensor is not None:
        assert (tp, pp) == (request.tensor, request.pipeline)
    # The named nodes: of the plan's product, able to hold a pod of `per_node` GPUs. A node's
    # allocatable, when it reports a plausible positive one, bounds what it can hold.
    holding = []
    for node in nodes:
        labels = node["metadata"]["labels"] if isinstance(node["metadata"]["labels"], dict) else {}
        status = node["status"] if isinstance(node["status"], dict) else {}
        raw_product = labels.get("nvidia.com/gpu.product")
        product = (str(raw_product) if raw_product is not None else "") or "unknown"
        if product != plan.gpu_product:
            continue
        allocatable_map = status.get("allocatable")
        raw = allocatable_map.get("nvidia.com/gpu") if isinstance(allocatable_map, dict) else None
        try:
            allocatable = int(str(raw).strip()) if raw is not None and not isinstance(raw, bool) else None
        except ValueError:
            allocatable = None
        if allocatable is not None and 1 <= allocatable <= inventory.MAX_GPUS_PER_NODE:
            if per_node > allocatable:
                continue
        holding.append(node)
    assert len(holding) >= n, f"{n} nodes x {per_node} GPUs planned, {len(holding)} can hold them"
    assert per_node <= inventory.MAX_GPUS_PER_NODE


@given(body=fuzz_inputs.spec())
def test_spec_validation_and_request_building_agree(body: dict[str, Any]) -> None:
    fuzz_inputs.ran("spec validation")
    try:
        # As the API server reads it: JSON (no NaN), no coercion of "1.0" or true into a count.
        validated = api.InferenceDeploymentSpec.model_validate_json(
            json.dumps(body, allow_nan=False), strict=True)
    except (pydantic.ValidationError, ValueError):
        validated = None
    try:
        planner.request_from_spec(body)
    except planner.PlanInputError as error:
        assert error.message and error.field.startswith("spec"), error
        if validated is not None:
            # What the API server accepts, the planner accepts on the same bounds.
            assert error.field not in _CRD_BOUNDED, error
            assert not error.field.startswith("spec.model.architecture.") or error.field.endswith(
                ("kvHeads", "headDim", "activeParameters", "parameters")), error


@given(body=fuzz_inputs.spec(hostile=0.1), cluster=fuzz_inputs.nodes(), prices=fuzz_inputs.price_tables,
       data=st.data())
def test_planning_holds_its_invariants(body: dict[str, Any], cluster: list[dict[str, Any]],
                                       prices: dict[str, Any] | None, data: st.DataObject) -> None:
    fuzz_inputs.ran("planning")
    try:
        request = planner.request_from_spec(body)
    except planner.PlanInputError:
        return  # request building's own target covers these; nodes and prices are hostile here
    pods = data.draw(fuzz_inputs.gpu_pods(len(cluster)))
    plan = planner.plan(request, planner.inventory_from_nodes(cluster, pods), prices=prices)
    assert_plan_invariants(plan, cluster, request)


def test_crd_and_planner_bounds_are_one_source() -> None:
    limits = bounds.of(api.ServingSpec, "gpuMemoryUtilization")
    assert (limits.low, limits.high) == (0.05, 0.99)
    schema = api.ServingSpec.model_json_schema()["properties"]["gpuMemoryUtilization"]
    assert (schema["minimum"], schema["maximum"]) == (limits.low, limits.high)
