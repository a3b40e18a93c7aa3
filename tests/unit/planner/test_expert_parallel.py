"""Expert and data parallelism for mixtures of experts (issue 38, items 2 and 6).

The layout space (TP, PP, EP on/off with EP = TP x DP, DP attention), the memory per layout, the
orderings the publishers state for TP against DP + EP (sources and excerpts in
/work/shared/design/SERVING-SHAPES.md, section B), and what `shardwise plan` shows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from planner_builders import h100_node, node, spec
from shardwise import planner
from shardwise.planner import cli, layouts, memory, search
from shardwise.planner.layouts import Layout

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
H200 = "NVIDIA-H200"
B200 = "NVIDIA-B200"


def _h200_node(name: str = "h") -> dict[str, Any]:
    return node(name, H200, 8, interconnect="nvswitch", domain=8, bandwidth=900)


def _request(model: str, *, concurrency: int, max_concurrency: int | None = None,
             prompt: int = 1024, output: int = 2048, max_model_len: int = 4096) -> planner.PlanRequest:
    body = spec(model, serving={"maxConcurrency": max_concurrency or concurrency,
                                "maxModelLen": max_model_len})
    body["workload"] = {"concurrency": concurrency, "promptTokens": prompt, "outputTokens": output}
    return planner.request_from_spec(body)


def _shape(nodes: list[dict[str, Any]]) -> Any:
    return planner.inventory_from_nodes(nodes, []).pools[0].shape


def _figures(request: planner.PlanRequest, nodes: list[dict[str, Any]], lay: Layout) -> Any:
    shape = _shape(nodes)
    fit = search.layout_fit(request, shape, lay)
    return fit, search.predict_layout(request, shape, lay, fit)


TP8 = Layout(tp=8, pp=1, nodes=1, gpus_per_node=8)
TEP8 = Layout(tp=8, pp=1, nodes=1, gpus_per_node=8, ep=True)
DEP8 = Layout(tp=1, pp=1, nodes=1, gpus_per_node=8, dp=8, ep=True)


# --- the layout space ------------------------------------------------------------------------

def test_labels_name_every_axis_in_use() -> None:
    assert TP8.label == "TP8xPP1"  # a plain layout prints as it always has
    assert TEP8.label == "TP8xEP8"
    assert DEP8.label == "DP8xTP1xEP8"
    assert Layout(tp=4, pp=1, nodes=2, gpus_per_node=4, dp=2, ep=True).label == "DP2xTP4xEP8"
    assert Layout(tp=4, pp=1, nodes=1, gpus_per_node=8, dp=2).label == "DP2xTP4"
    assert (DEP8.gpus, DEP8.ep_size, TEP8.ep_size, TP8.ep_size) == (8, 8, 8, 1)


def test_deepseek_on_one_h200_node_searches_tp_tep_and_dep() -> None:
    arch = _request("deepseek-ai/DeepSeek-V3", concurrency=1).arch
    found = {lay.label for lay in layouts.single_node(arch, _shape([_h200_node()]))}
    assert {"TP8xPP1", "TP8xEP8", "DP8xTP1xEP8", "DP2xTP4xEP8", "DP4xTP2xEP8", "DP8xTP1"} <= found
    for lay in layouts.single_node(arch, _shape([_h200_node()])):
        assert lay.gpus <= 8
        if lay.ep:
            assert arch.experts % lay.ep_size == 0  # 256 experts over the EP ranks
        assert arch.attention_heads % lay.tp == 0


def test_ep_size_must_divide_the_experts() -> None:
    arch = _request("mistralai/Mixtral-8x7B-Instruct-v0.1", concurrency=1).arch
    assert arch.experts == 8
    labels = {lay.label for lay in layouts.single_node(arch, _shape([_h200_node()]))}
    assert "TP8xEP8" in labels and "DP2xTP1" in labels
    # Without EP the experts are one DP x TP tensor-parallel group, split like TP: not by 3.
    assert "DP3xTP1" not in labels and "DP3xTP1xEP3" not in labels
    assert not any(lay.ep and 8 % lay.ep_size for lay in layouts.single_node(arch, _shape([_h200_node()])))
    assert layouts.ep_error(arch, 16) == "EP16 does not divide the 8 experts of mixtral-8x7b"
    # Two nodes: 16 ranks cannot split 8 experts, so DP16 over the nodes has no EP variant.
    labels = {lay.label for lay in layouts.multi_node(arch, _shape([_h200_node()]), 2, per_node=8,
                                                      clique_nodes=0)}
    assert "DP2xTP8" in labels and not any("EP16" in label for label in labels)


def test_dense_models_get_no_dp_or_ep() -> None:
    arch = _request("meta-llama/Llama-3.1-70B-Instruct", concurrency=1).arch
    assert all(lay.dp == 1 and not lay.ep for lay in layouts.single_node(arch, _shape([_h200_node()])))
    assert layouts.dp_error(arch, 2) is not None


def test_dp_spans_nodes_with_one_rank_group_per_node() -> None:
    arch = _request("deepseek-ai/DeepSeek-V3", concurrency=1).arch
    shape = _shape([h100_node("a"), h100_node("b")])
    found = {lay.label: lay for lay in layouts.multi_node(arch, shape, 2, per_node=8, clique_nodes=0)}
    assert {"TP8xPP2", "DP16xTP1xEP16", "DP2xTP8xEP16"} <= set(found)
    assert found["DP2xTP8xEP16"].dp_local == 1 and found["DP16xTP1xEP16"].dp_local == 8


# --- memory per layout -----------------------------------------------------------------------

def test_dep8_splits_experts_and_keeps_attention_whole_per_rank() -> None:
    request = _request("deepseek-ai/DeepSeek-V3", concurrency=256)
    arch, bpw = request.arch, request.bytes_per_weight
    tp8, _ = _figures(request, [_h200_node()], TP8)
    dep8, _ = _figures(request, [_h200_node()], DEP8)
    routed = arch.routed_expert_parameters
    assert 0.9 < routed / arch.parameters < 0.99  # DeepSeek-V3: ~95 % of its weights are experts
    assert tp8.weights_gib == pytest.approx(arch.parameters * bpw / 8 / memory.GIB)
    assert dep8.weights_gib == pytest.approx(((arch.parameters - routed) + routed / 8) * bpw / memory.GIB)
    # MLA's latent is whole on every TP rank: TP8 holds all 256 sequences' latents on each GPU,
    # DP8 holds 32 (its rank's) on each.
    assert tp8.kv_gib_per_sequence == pytest.approx(dep8.kv_gib_per_sequence)
    assert tp8.kv_cache_gib == pytest.approx(8 * dep8.kv_cache_gib)
    assert memory.rank_sequences(256, 8) == 32 and memory.rank_sequences(250, 8) == 32


# --- published orderings (SERVING-SHAPES.md B) ------------------------------------------------

def test_vllm_recipe_tp_for_low_load_dp_for_high_load_deepseek_v3_8xh200() -> None:
    """vLLM's DeepSeek-V3 recipe on 8 x H200, TP8 + EP against DP8 + EP
    (docs.vllm.ai/projects/recipes/en/latest/DeepSeek/DeepSeek-V3.html): "Tensor-parallel is
    usually better for low-latency / low-load scenarios, while data-parallel works better for
    high-load workloads"."""
    for concurrency in (1, 4):
        request = _request("deepseek-ai/DeepSeek-V3", concurrency=concurrency)
        _, tep = _figures(request, [_h200_node()], TEP8)
        _, dep = _figures(request, [_h200_node()], DEP8)
        assert tep.itl_s < dep.itl_s and tep.ttft_s < dep.ttft_s, concurrency
    for concurrency in (256, 1024):
        request = _request("deepseek-ai/DeepSeek-V3", concurrency=concurrency)
        _, tep = _figures(request, [_h200_node()], TEP8)
        _, dep = _figures(request, [_h200_node()], DEP8)
        assert dep.tokens_per_s > tep.tokens_per_s, concurrency


def test_trtllm_attention_dp_holds_8x_the_concurrency_of_attention_tp() -> None:
    """TensorRT-LLM blog3, DeepSeek-R1 on 8 x B200 (NVIDIA/TensorRT-LLM@02643c1): attention TP
    "will duplicate the KV cache memory ... thus 8x for TP8"; "global concurrency of 4000. When
    using attention TP, the global concurrency will become just 500." and attention DP gives a
    "400% speedup in the max throughput cases" (ISL/OSL 1K/2K)."""
    b200 = [node("b", B200, 8, interconnect="nvswitch", domain=8, bandwidth=1800)]
    request = _request("deepseek-ai/DeepSeek-R1", concurrency=4000, prompt=1024, output=2048,
                       max_model_len=3072)
    tp, tp_pred = _figures(request, b200, TEP8)
    dp, dp_pred = _figures(request, b200, DEP8)
    assert tp.kv_gib_per_sequence == pytest.approx(dp.kv_gib_per_sequence)  # the latent, whole
    tp_room = tp.kv_room_tokens(3072) / 3072
    dp_room = dp.kv_room_tokens(3072) / 3072
    # Ours is a little under 8x: each DP rank also holds its own copy of attention and shared
    # weights, which the room left for KV pays for.
    assert 5 < dp_room / tp_room <= 8
    assert dp_pred.tokens_per_s > 2 * tp_pred.tokens_per_s


# --- the plan and `shardwise plan` -----------------------------------------------------------

def _plan_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], body: dict[str, Any],
              nodes: list[dict[str, Any]], *extra: str) -> tuple[int, str]:
    (tmp_path / "d.yaml").write_text(yaml.safe_dump({"kind": "InferenceDeployment", "spec": body}))
    (tmp_path / "n.yaml").write_text(yaml.safe_dump({"kind": "List", "items": nodes}))
    status = cli.main(["plan", "-f", str(tmp_path / "d.yaml"), "--nodes", str(tmp_path / "n.yaml"),
                       *extra])
    return status, capsys.readouterr().out


MOE_CASES = {
    # model, nodes, --model-config (None: the catalog)
    "DeepSeek-V3 on 8 H200": ("deepseek-ai/DeepSeek-V3", [_h200_node()],
                              FIXTURES / "checkpoints/deepseek-ai/DeepSeek-V3"),
    "Qwen3-235B-A22B on 8 H200": ("Qwen/Qwen3-235B-A22B", [_h200_node()], None),
    "Qwen3-30B-A3B FP8 on 8 H100": ("Qwen/Qwen3-30B-A3B-Thinking-2507-FP8", [h100_node("a")],
                                    FIXTURES / "checkpoints/Qwen/Qwen3-30B-A3B-Thinking-2507-FP8"),
    "gpt-oss-120b on 8 H100": ("openai/gpt-oss-120b", [h100_node("a")],
                               FIXTURES / "hub-configs/openai/gpt-oss-120b"),
    "Mixtral-8x7B on 8 H100": ("mistralai/Mixtral-8x7B-Instruct-v0.1", [h100_node("a")], None),
}


def _score(objective: str, shown: dict[str, Any]) -> float:
    p = shown["predicted"]
    if objective == "Throughput":
        return p["tokensPerSecond"] / shown["gpusPerReplica"]
    return -p["hourlyUSD"]


@pytest.mark.parametrize("objective", ["Throughput", "Latency"])
@pytest.mark.parametrize("case", sorted(MOE_CASES))
def test_plan_shows_ep_and_dp_layouts_and_picks_by_the_objective(
    case: str, objective: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, nodes, config = MOE_CASES[case]
    body = spec(model, objective=objective, serving={"maxConcurrency": 128, "maxModelLen": 8192})
    body["workload"] = {"concurrency": 128}
    extra = ["--model-config", str(config)] if config else []
    status, out = _plan_cli(tmp_path, capsys, body, nodes, *extra, "-o", "json")
    shown = json.loads(out)
    assert status == 0, shown["reason"]
    everything = [shown, *[a for a in shown["alternatives"] if a["feasible"]]]
    kinds = {(p["dataParallel"] > 1 or p["expertParallel"] > 1) for p in everything}
    assert kinds == {True, False}, [p["layout"] for p in everything]  # both kinds, side by side
    if objective == "Throughput":
        assert _score(objective, shown) >= max(_score(objective, a) for a in everything) - 0.5
    else:
        same_gpus = [a for a in everything if a["gpusPerReplica"] <= shown["gpusPerReplica"]]
        assert shown["predicted"]["itlMs"] <= min(a["predicted"]["itlMs"] for a in same_gpus)
    for p in everything:
        assert p["layout"] in {lay.label for lay in _layouts_for(p)}
    # The table lists the alternatives' layouts with their figures.
    status, table = _plan_cli(tmp_path, capsys, body, nodes, *extra)
    assert "ALTERNATIVES" in table and "TTFT ms" in table
    for alternative in shown["alternatives"]:
        assert alternative["layout"] in table


def _layouts_for(p: dict[str, Any]) -> list[Layout]:
    tp, pp, dp, ep = p["tensorParallel"], p["pipelineParallel"], p["dataParallel"], p["expertParallel"]
    return [Layout(tp=tp, pp=pp, nodes=p["nodesPerReplica"], gpus_per_node=p["gpusPerNode"], dp=dp,
                   ep=ep > 1)]


def test_reasons_say_why_dp_won_at_high_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = spec("deepseek-ai/DeepSeek-V3", objective="Throughput",
                serving={"maxConcurrency": 256, "maxModelLen": 4096})
    body["workload"] = {"concurrency": 256, "promptTokens": 1024, "outputTokens": 2048}
    status, out = _plan_cli(tmp_path, capsys, body, [_h200_node()], "-o", "json")
    shown = json.loads(out)
    assert status == 0 and shown["dataParallel"] > 1, shown["layout"]
    assert f"256 streams need {shown['dataParallel']} copies of the KV budget" in shown["reason"]
    words = shown["reason"] + " ".join(a["rejectedBecause"] for a in shown["alternatives"])
    assert "replicates MLA's latent KV" in words
    # The model once in the WEIGHTS line, not per GPU x TP: DP ranks each hold attention weights.
    _, table = _plan_cli(tmp_path, capsys, body, [_h200_node()])
    assert f"{shown['memory']['weightsGiB']:.1f} GiB in all" in table


def test_reasons_say_why_tp_won_at_low_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = spec("deepseek-ai/DeepSeek-V3", objective="Latency",
                serving={"maxConcurrency": 8, "maxModelLen": 4096})
    body["workload"] = {"concurrency": 1}
    status, out = _plan_cli(tmp_path, capsys, body, [_h200_node()], "-o", "json")
    shown = json.loads(out)
    assert status == 0 and shown["layout"] == "TP8xPP1", shown["reason"]
    dp_alternatives = [a for a in shown["alternatives"] if a["dataParallel"] > 1]
    assert dp_alternatives
    for alternative in dp_alternatives:
        assert "DP ranks reads its own" in alternative["rejectedBecause"]


def test_status_plan_carries_the_full_layout() -> None:
    request = _request("deepseek-ai/DeepSeek-V3", concurrency=256, max_concurrency=256)
    result = planner.plan(request, planner.inventory_from_nodes([_h200_node()], [])).to_dict()
    assert result["layout"].startswith(f"DP{result['dataParallel']}x") or result["dataParallel"] == 1
    assert result["gpusPerReplica"] == result["dataParallel"] * result["tensorParallel"] * result["pipelineParallel"]
    if result["expertParallel"] > 1:
        assert result["layout"].endswith(f"xEP{result['expertParallel']}")


def test_a_dp_plan_is_its_own_layout_for_corrections_replay_and_events() -> None:
    from shardwise.decide import transitions
    from shardwise.planner import corrections, replay

    body = spec("deepseek-ai/DeepSeek-V3", objective="Throughput",
                serving={"maxConcurrency": 256, "maxModelLen": 4096})
    body["workload"] = {"concurrency": 256, "promptTokens": 1024, "outputTokens": 2048}
    shown = planner.plan(planner.request_from_spec(body),
                         planner.inventory_from_nodes([_h200_node()], [])).to_dict()
    assert shown["dataParallel"] > 1
    # A correction learned on DP8xTP1xEP8 is not TP1xPP1's; plain layouts keep their old keys.
    assert corrections.key("m", H200, 1, 1, "DP8xTP1xEP8") != corrections.key("m", H200, 1, 1)
    assert corrections.key("m", H200, 8, 1, "TP8xPP1") == corrections.key("m", H200, 8, 1)
    # The fleet's replay predicts the plan's own layout, DP and EP included.
    again = replay.predict_for_plan(body, shown, concurrency=256, prompt_tokens=1024, output_tokens=2048)
    assert again is not None
    assert again.itl_s * 1e3 == pytest.approx(shown["predicted"]["itlMs"], rel=0.01)
    # The Planned event names it as LAYOUT does.
    tp8 = {**shown, "dataParallel": 1, "expertParallel": 1, "tensorParallel": 8, "layout": "TP8xPP1"}
    events = transitions.transitions({"plan": tp8}, {"plan": shown})
    assert any(reason == "Planned" and message.startswith(f"{shown['layout']} on ")
               for _, reason, message in events)
