"""One regression test per finding of issue 16 ("The pure core survives any input"), numbered as
there. Each failed (crashed, or broke its invariant) before the fix."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from shardwise import planner, pricing
from shardwise.api import bounds, crd, names
from shardwise.api import v1alpha1 as api
from shardwise.autoscale import decision, history, observation, policy
from shardwise.observe import aggregate, parse, status
from shardwise.planner import inventory

FIXTURES = Path(__file__).parents[2] / "fixtures"
SCRAPE_T0 = (FIXTURES / "vllm-0.32-cpu" / "metrics-t0.txt").read_text()
SCRAPE_T1 = (FIXTURES / "vllm-0.32-cpu" / "metrics-t1.txt").read_text()
H100 = "NVIDIA-H100-80GB-HBM3"
KWOK = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
LLAMA_8B = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "placement": {"tolerations": [KWOK]}}
LLAMA_70B = {"model": {"name": "meta-llama/Llama-3.1-70B-Instruct"}, "placement": {"tolerations": [KWOK]}}


def node(name: str = "n0", *, product: str = H100, count: Any = "8", allocatable: Any = "8",
         interconnect: str = "nvswitch", domain: str = "8", bandwidth: Any = "900") -> dict[str, Any]:
    labels = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": count,
              "shardwise.io/gpu-interconnect": interconnect, "shardwise.io/nvlink-domain-size": domain}
    if bandwidth is not None:
        labels["shardwise.io/nvlink-bandwidth-gbps"] = bandwidth
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True"}]}
    if allocatable is not None:
        status["allocatable"] = {"nvidia.com/gpu": allocatable}
    return {"kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {}, "status": status}


def plan_of(spec: dict[str, Any], nodes: list[dict[str, Any]], **kw: Any) -> planner.Plan:
    return planner.plan(planner.request_from_spec(spec), planner.inventory_from_nodes(nodes), **kw)


def assert_finite_positive_predictions(plan: planner.Plan) -> None:
    assert plan.predicted is not None
    for value in (plan.predicted.itl_ms, plan.predicted.ttft_ms, plan.predicted.tokens_per_second):
        assert math.isfinite(value) and value > 0
    json.dumps(plan.to_dict(), allow_nan=False)


# -- 1. decide() overflow when the idle ITL is at least targetUtilization x the SLO ----------------

def test_1_decide_holds_when_an_idle_replica_is_above_the_target_utilisation() -> None:
    pol = policy.policy_from_spec({"minReplicas": 1, "maxReplicas": 8, "slo": {"itlP95": "50ms"}})
    obs = observation.Observation(current_replicas=2, replicas_ready=2, itl_p95_ms=42.0,
                                  itl_floor_ms=40.0, requests_per_second=5.0)
    result = decision.decide(pol, obs, history.History(), 1_000.0)  # raised OverflowError
    assert result.desired_replicas == 2
    assert "exceeds target" in result.reason


# -- 2. head_dim 0 and null architecture fields: a PlanInputError with a sentence -----------------

HEAD_DIM_ZERO = {"model": {"name": "acme/tiny", "architecture": {
    "parameters": 7_000_000_000, "layers": 32, "hiddenSize": 16, "attentionHeads": 32}}}


def test_2_head_dim_below_one_is_an_input_error_naming_the_field() -> None:
    api.InferenceDeploymentSpec.model_validate(HEAD_DIM_ZERO)  # the API server accepts it
    with pytest.raises(planner.PlanInputError) as raised:  # was an AssertionError
        planner.request_from_spec(HEAD_DIM_ZERO)
    assert raised.value.field == "spec.model.architecture.headDim"
    assert "hiddenSize 16 / attentionHeads 32" in raised.value.message


@pytest.mark.parametrize("architecture", [
    {"parameters": 7_000_000_000, "layers": None, "hiddenSize": 4096, "attentionHeads": 32},
    {"parameters": 7_000_000_000, "layers": 32, "hiddenSize": None, "attentionHeads": 32},
    {"parameters": 7_000_000_000, "layers": 32, "hiddenSize": 4096, "attentionHeads": None},
])
def test_2_null_architecture_fields_are_missing_fields(architecture: dict[str, Any]) -> None:
    with pytest.raises(planner.PlanInputError) as raised:
        planner.request_from_spec({"model": {"name": "acme/unknown", "architecture": architecture}})
    assert "not in the built-in catalog; set" in raised.value.message


def test_2_null_fields_on_a_catalog_model_take_the_catalog() -> None:
    spec = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct",
                      "architecture": {"layers": None, "headDim": None}}}
    assert planner.request_from_spec(spec).arch.layers == 32


def test_2_shardwise_plan_prints_one_line_not_a_traceback(tmp_path: Path) -> None:
    deployment = tmp_path / "d.yaml"
    deployment.write_text(yaml.safe_dump({"kind": "InferenceDeployment", "spec": HEAD_DIM_ZERO}))
    nodes = tmp_path / "n.yaml"
    nodes.write_text(yaml.safe_dump({"items": [node()]}))
    result = subprocess.run([sys.executable, "-m", "shardwise.planner.cli", "plan", "-f", str(deployment),
                             "--nodes", str(nodes)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: spec.model.architecture.headDim")


# -- 3. planning time grew with the square of a node's GPU count label ----------------------------

@pytest.mark.parametrize("label", ["16384", "4294967296"])
def test_3_an_absurd_gpu_count_label_is_missing_and_allocatable_counts(label: str) -> None:
    inv = planner.inventory_from_nodes([node(count=label, allocatable="8")])
    assert [p.shape.gpus_per_node for p in inv.pools] == [8]
    plan = plan_of(LLAMA_70B, [node(count=label, allocatable="8")])  # 2^32 never returned
    assert plan.feasible and plan.gpus_per_node <= 8


def test_3_layout_enumeration_is_bounded_by_what_a_node_can_hold() -> None:
    inv = planner.inventory_from_nodes([node(count="16384", allocatable="16384")])
    assert inv.gpu_nodes == 0 and inv.non_gpu_nodes == 1  # nothing plausible: not a GPU node
    shape = planner.inventory_from_nodes([node(count="128", allocatable="128")]).pools[0].shape
    assert shape.gpus_per_node == inventory.MAX_GPUS_PER_NODE


# -- 4. division by zero and NaN/Inf rounding ------------------------------------------------------

def test_4_denormal_nvlink_bandwidth_is_missing() -> None:
    tiny = plan_of(LLAMA_70B, [node(bandwidth="1e-320")])  # was ZeroDivisionError
    catalog = plan_of(LLAMA_70B, [node(bandwidth=None)])
    assert_finite_positive_predictions(tiny)
    assert tiny.to_dict() == catalog.to_dict()


def _with(text: str, series: str, value: str) -> str:
    lines = [f"{line.rsplit(' ', 1)[0]} {value}" if line.startswith(series + "{") else line
             for line in text.splitlines()]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "-3"])
@pytest.mark.parametrize("series", [parse.WAITING, parse.RUNNING, parse.KV_CACHE_USAGE])
def test_4_non_finite_gauges_are_missing_and_the_status_rounds(series: str, value: str) -> None:
    sample = parse.parse(_with(SCRAPE_T1, series, value))
    assert series not in sample.gauges and any(series in why for why in sample.ignored)
    summary = aggregate.summarize([], 300.0, [sample.gauges])
    json.dumps(status.status_latency(summary), allow_nan=False)  # round(inf) raised


def test_4_the_status_leaves_out_a_non_finite_figure_however_it_got_there() -> None:
    summary = aggregate.summarize([], 300.0, [])
    broken = dataclasses.replace(summary, running=math.inf, waiting=math.nan, ttft_p95_ms=math.inf)
    figures = status.status_latency(broken)  # round(inf) raised OverflowError
    assert "running" not in figures and "waiting" not in figures and "ttftP95Ms" not in figures
    json.dumps(figures, allow_nan=False)


@pytest.mark.parametrize("field", ["waiting", "ttft_p95_ms", "kv_cache_usage"])
def test_4_infinite_observation_values_do_not_overflow_decide(field: str) -> None:
    pol = policy.policy_from_spec({"minReplicas": 1, "maxReplicas": 8, "slo": {"ttftP95": "500ms"}})
    base: dict[str, Any] = {"current_replicas": 2, "replicas_ready": 2, "ttft_p95_ms": 200.0,
                            "requests_per_second": 5.0}
    obs = observation.Observation(**{**base, field: math.inf})
    result = decision.decide(pol, obs, history.History(), 1_000.0)  # math.ceil(inf) raised
    assert 1 <= result.desired_replicas <= 8


def test_4_infinite_waiting_from_a_scrape_end_to_end() -> None:
    window = aggregate.Window()
    window.add("p", parse.parse(SCRAPE_T0), 0.0)
    window.add("p", parse.parse(_with(SCRAPE_T1, parse.WAITING, "+Inf")), 15.0)
    summary = window.summary(15.0)
    assert summary.waiting is None
    json.dumps(status.status_latency(summary), allow_nan=False)


def test_4_denormal_previous_waiting_gives_no_drain_estimate() -> None:
    pol = policy.policy_from_spec({"minReplicas": 1, "maxReplicas": 8, "slo": {"ttftP95": "500ms"}})
    past = history.History((history.Record(at=970.0, recommendation=2, desired_replicas=2,
                                           waiting=5e-324),))
    obs = observation.Observation(current_replicas=2, replicas_ready=2, ttft_p95_ms=900.0,
                                  requests_per_second=5.0, waiting=0.0)
    result = decision.decide(pol, obs, past, 1_000.0)  # was ZeroDivisionError
    assert result.desired_replicas == 4


# -- 5. names whose children the API server rejects -------------------------------------------------

@pytest.mark.parametrize("name,message", [
    ("a" * 64, names.LENGTH_MESSAGE), ("a" * 253, names.LENGTH_MESSAGE),
    ("m" * 60, names.LENGTH_MESSAGE), ("m" * 45, names.LENGTH_MESSAGE),
    ("llama.v3", names.SHAPE_MESSAGE), ("3llama", names.SHAPE_MESSAGE), ("Llama", names.SHAPE_MESSAGE),
    ("llama-", names.SHAPE_MESSAGE),
])
def test_5_names_with_invalid_children_are_refused(name: str, message: str) -> None:
    assert names.name_problem(name) == message


def test_5_the_longest_accepted_name_gives_valid_children() -> None:
    name = "m" * names.MAX_NAME_LENGTH
    assert names.name_problem(name) is None
    assert names.is_label_value(names.longest_derived_label_value(name))
    assert names.is_dns1035_label(names.leaderworkerset_name(name))


def test_5_the_crd_carries_the_same_rule() -> None:
    rules = crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
    assert rules == names.admission_rules()
    assert str(names.MAX_NAME_LENGTH) in rules[0]["rule"] and names.DNS1035_PATTERN in rules[1]["rule"]


# -- 6. the pricing table accepted any float --------------------------------------------------------

@pytest.mark.parametrize("bad", [math.nan, -1.0, math.inf, "NaN", "-2", 1e9])
def test_6_an_invalid_cluster_price_counts_as_no_price(bad: Any) -> None:
    price, source = pricing.resolve_gpu_hour_price(H100, None, {H100: bad})
    assert (price, source) == (pricing.DEFAULT_GPU_HOUR_USD[H100], "default")
    plan = plan_of(LLAMA_8B, [node()], prices={H100: bad})
    assert plan.predicted is not None and plan.predicted.hourly_usd >= 0
    assert_finite_positive_predictions(plan)


def test_6_price_table_names_what_it_left_out() -> None:
    prices, problems = pricing.price_table({H100: "2.49", "NVIDIA-L4": "nan", "NVIDIA-L40S": "-1"})
    assert prices == {H100: 2.49} and len(problems) == 2 and all("ignored" in p for p in problems)


@pytest.mark.parametrize("bad", ["NaN", "-1", "inf", "99999"])
def test_6_an_invalid_spec_price_is_an_input_error(bad: str) -> None:
    with pytest.raises(planner.PlanInputError, match="spec.pricing.gpuHourUSD"):
        planner.request_from_spec({**LLAMA_8B, "pricing": {"gpuHourUSD": bad}})


# -- 7. NaN or negative NVLink bandwidth made a wrong TP8 layout win --------------------------------

@pytest.mark.parametrize("bad", ["NaN", "-1", "inf", "0"])
def test_7_implausible_nvlink_bandwidth_is_missing(bad: str) -> None:
    broken = plan_of(LLAMA_70B, [node(bandwidth=bad)])
    assert_finite_positive_predictions(broken)
    assert broken.to_dict() == plan_of(LLAMA_70B, [node(bandwidth=None)]).to_dict()


# -- 8. gpusPerNode from the label although allocatable is lower ------------------------------------

def test_8_allocatable_bounds_the_gpus_per_node() -> None:
    plan = plan_of(LLAMA_8B, [node(count="8", allocatable="2"), node("n1", count="8", allocatable="2")])
    assert plan.feasible and plan.gpus_per_node <= 2
    shapes = planner.inventory_from_nodes([node(count="8", allocatable="2")]).pools
    assert shapes[0].shape.gpus_per_node == 2


@pytest.mark.parametrize("allocatable", ["0", None])
def test_8_gpus_by_label_but_none_allocatable_are_not_planned_on(allocatable: str | None) -> None:
    # A device plugin that has not registered (0) or is not running (no resource at all): the labels
    # describe GPUs the scheduler cannot hand out, so no pool holds the node and the reason names
    # it (issue 23; it was planned TP16 on such a node and called schedulable).
    inv = planner.inventory_from_nodes([node(count="16", allocatable=allocatable)])
    assert inv.pools == () and inv.unallocatable == ("n0",)
    plan = plan_of(LLAMA_70B, [node(count="16", allocatable=allocatable)])
    assert not plan.feasible and not plan.schedulable_now
    assert "device plugin not ready: allocatable nvidia.com/gpu is 0 on n0" in plan.reason


# -- 9. le values, NaN/Inf/negative counters and a decreasing _sum ----------------------------------

def _le(text: str, old: str, new: str) -> str:
    return text.replace(f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{old}"',
                        f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{new}"')


@pytest.mark.parametrize("bound", ["NaN", "-1", "1e308", "-Inf"])
def test_9_implausible_le_bounds_are_dropped(bound: str) -> None:
    before = parse.parse(_le(SCRAPE_T0, "0.001", bound))
    after = parse.parse(_le(SCRAPE_T1, "0.001", bound))
    ttft = after.histograms[parse.TTFT]
    assert all(b == math.inf or 0 <= b <= parse.MAX_BUCKET_BOUND_S for b, _ in ttft.buckets)
    summary = aggregate.summarize([aggregate.delta(before, after)], 300.0, [after.gauges])
    assert summary.ttft_p95_ms is not None and 0 <= summary.ttft_p95_ms < 1e9


def _line(text: str, prefix: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(prefix))


@pytest.mark.parametrize("value", ["NaN", "-5", "+Inf"])
def test_9_broken_counters_are_missing_not_resets(value: str) -> None:
    counter = _line(SCRAPE_T1, parse.OUTPUT_TOKENS).rsplit(" ", 1)[0]
    after = parse.parse(SCRAPE_T1.replace(_line(SCRAPE_T1, parse.OUTPUT_TOKENS), f"{counter} {value}"))
    assert parse.OUTPUT_TOKENS not in after.counters
    step = aggregate.delta(parse.parse(SCRAPE_T0), after)
    assert step.reset is None and all(v >= 0 for v in step.counters.values())


def test_9_a_decreasing_sum_is_a_reset() -> None:
    before = parse.parse(SCRAPE_T0)
    h = before.histograms[parse.QUEUE]
    lower = parse.Sample(before.model_name, {**before.histograms,
                                             parse.QUEUE: parse.Histogram(h.buckets, h.sum / 2, h.count)},
                         before.counters, before.gauges, before.created)
    step = aggregate.delta(before, lower)
    assert step.reset is not None and "sum went backwards" in step.reset
    summary = aggregate.summarize([step], 300.0, [])
    assert summary.queue_mean_ms is None or summary.queue_mean_ms >= 0


# -- contract: gpuMemoryUtilization bounds are one source, and the message says them ----------------

def test_gpu_memory_utilization_bounds_match_the_crd() -> None:
    limits = bounds.of(api.ServingSpec, "gpuMemoryUtilization")
    schema = crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    field = schema["properties"]["spec"]["properties"]["serving"]["properties"]["gpuMemoryUtilization"]
    assert (field["minimum"], field["maximum"]) == (limits.low, limits.high) == (0.05, 0.99)
    assert "exclusiveMinimum" not in field
    # The API server truncates a fractional minimum when the value is a whole number (0 passed
    # `minimum: 0.05`), so a CEL rule states the same lower bound in doubles.
    serving_rules = schema["properties"]["spec"]["properties"]["serving"]["x-kubernetes-validations"]
    assert any(f">= {limits.low}" in r["rule"] and r["fieldPath"] == ".gpuMemoryUtilization"
               for r in serving_rules)
    assert planner.request_from_spec({**LLAMA_8B, "serving": {"gpuMemoryUtilization": 0.05}})
    with pytest.raises(planner.PlanInputError, match=r"must be in \[0.05, 0.99\], got 0.04"):
        planner.request_from_spec({**LLAMA_8B, "serving": {"gpuMemoryUtilization": 0.04}})
