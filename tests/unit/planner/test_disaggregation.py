"""The disaggregation planner on published P/D setups (tests/fixtures/planner-sources/
pd-disaggregation.yaml, each source quoted verbatim): Auto picks the pair where the source found
it better for the SLO at stake and aggregated where it did not, and the predicted figures move
the way the published ones did."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from planner_builders import node

from shardwise import planner
from shardwise.planner import disaggregation as dg
from shardwise.planner import hfconfig, inventory, layouts

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CASES = yaml.safe_load((FIXTURES / "planner-sources" / "pd-disaggregation.yaml").read_text())["cases"]


def _setup(case: dict[str, Any]) -> tuple[planner.PlanRequest, inventory.GpuShape]:
    hub = FIXTURES / "hub-configs" / case["model"]
    config = json.loads((hub / "config.json").read_text())
    published = json.loads((hub / ".hub.json").read_text())
    arch = hfconfig.arch_from_config(case["model"], config,
                                     safetensors_parameters=published["safetensors"]["parameters"])
    work = case["workload"]
    spec = {"model": {"name": case["model"]},
            "serving": {"maxModelLen": work["promptTokens"] + work["outputTokens"] + 250, "maxConcurrency": 128},
            "workload": {"promptTokens": work["promptTokens"], "outputTokens": work["outputTokens"]}}
    per_node = case["gpus"] // case["nodes"]
    nodes = [node(f"n{i}", case["gpu"], per_node, interconnect="nvswitch", domain=per_node, bandwidth=900)
             for i in range(case["nodes"])]
    return planner.request_from_spec(spec, architecture=arch), planner.inventory_from_nodes(nodes).pools[0].shape


def _choose(case: dict[str, Any], policy: str = "Auto") -> dg.Choice:
    request, shape = _setup(case)
    slo = dg.SLO(ttft_s=case["slo"].get("ttftMs", 0) / 1e3 or None, itl_s=case["slo"].get("itlMs", 0) / 1e3 or None)
    return dg.choose(request, shape, case["gpus"], float(case["workload"]["requestsPerSecond"]), slo, policy=policy)


def _case(case_id: str) -> dict[str, Any]:
    return next(c for c in CASES if c["id"] == case_id)


def test_fixtures_quote_their_sources() -> None:
    assert len(CASES) >= 3
    for case in CASES:
        assert case["source"] and case["quotes"] and case["expect"] in (dg.AGGREGATED, dg.DISAGGREGATED)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_auto_picks_what_the_source_found_better(case: dict[str, Any]) -> None:
    choice = _choose(case)
    assert choice.mode == case["expect"], choice.reason
    assert choice.aggregated is not None and choice.pair is not None


def test_long_prompts_pair_moves_itl_down_and_ttft_up_as_published() -> None:
    """llm-d: ITL mean 25 -> 4.9 ms, TTFT mean 532 -> 1157 ms; prefill wide and shallow, decode
    narrow and deep ("P workers with less parallelism and more replicas")."""
    choice = _choose(_case("llm-d-gpt-oss-120b-itl"))
    pair, agg = choice.pair, choice.aggregated
    assert pair is not None and agg is not None
    assert pair.outcome.itl_s < agg.outcome.itl_s / 1.5, choice.reason
    assert pair.outcome.ttft_s > agg.outcome.ttft_s, choice.reason
    assert pair.prefill_replicas > pair.decode_replicas and pair.prefill.tp < pair.decode.tp, choice.reason
    assert pair.outcome.gpus <= 16 and pair.link == dg.NVLINK  # a TP1 + TP4 pair fits one 8-GPU node


def test_throughput_alone_costs_less_aggregated() -> None:
    """vLLM: "Disaggregated prefill DOES NOT improve throughput": with no latency target the best
    aggregated layout serves the same load at no higher cost per token than the best pair."""
    choice = _choose(_case("vllm-throughput-only"), policy=dg.DISAGGREGATED)
    assert choice.aggregated is not None and choice.pair is not None
    assert choice.aggregated.outcome.per_million_usd <= choice.pair.outcome.per_million_usd, choice.reason


def test_handoff_is_costed_on_the_link_it_crosses() -> None:
    request, shape = _setup(_case("llm-d-gpt-oss-120b-itl"))
    times = {link: dg.handoff_s(request, shape, link, 1) for link in (dg.NVLINK, dg.SAME_NODE, dg.ACROSS_NODES)}
    assert times[dg.NVLINK] < times[dg.SAME_NODE] < times[dg.ACROSS_NODES]
    lay = layouts.Layout
    assert dg.handoff_link(shape, lay(1, 1, 1, 1), lay(4, 1, 1, 4)) == dg.NVLINK
    assert dg.handoff_link(shape, lay(8, 1, 1, 8), lay(4, 1, 1, 4)) == dg.ACROSS_NODES


def test_policy_off_never_disaggregates() -> None:
    choice = _choose(_case("llm-d-gpt-oss-120b-itl"), policy=dg.AGGREGATED)
    assert choice.mode == dg.AGGREGATED and choice.pair is None
