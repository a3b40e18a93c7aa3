"""Issue 38's additions to the calibration: per-engine factors fitted only from paired figures,
EP/DP cases, orderings a source states in words, the expert-width penalty and the API server's
wait in TTFT."""

from __future__ import annotations

import dataclasses

from shardwise.planner import calibrate, efficiency, performance


def _deepseek(engine: str, **layout: object) -> calibrate.Case:
    raw = {"source": "gpustack-deepseek-r1-h200", "engine": engine,
           "model": "deepseek-ai/DeepSeek-R1-0528", "gpu": "NVIDIA-H200", "interconnect": "nvswitch",
           "weights": "fp8", "tp": 8, "pp": 1, "prompt": 219, "output": 201, "saturation": True,
           "maxNumSeqs": 1000, **layout}
    return calibrate.case(raw, {})


def test_engine_factors_are_fitted_only_for_engines_measured_beside_vllm() -> None:
    cases = calibrate.cases()
    assert calibrate.paired_engines(cases) == ["sglang", "trtllm"]
    without_pairs = [c for c in cases if c.source != "gpustack-deepseek-r1-h200"
                     and not c.source.startswith("gpustack-qwen3")]
    assert calibrate.paired_engines(without_pairs) == []


def test_an_engine_factor_scales_that_engine_and_never_vllm() -> None:
    eff = dataclasses.replace(efficiency.fitted(), engines={"sglang": 2.0})
    vllm, sglang = _deepseek("vllm-0.11.0"), _deepseek("sglang-0.5.3")
    a, b = calibrate.predicted(vllm, eff), calibrate.predicted(sglang, eff)
    assert b["itlMs"] == a["itlMs"] * 2 and b["tokensPerSecond"] == a["tokensPerSecond"] / 2


def test_ep_and_dp_cases_predict_their_own_layout() -> None:
    tp8, dep8 = _deepseek("vllm-0.11.0"), _deepseek("vllm-0.11.0", tp=1, dp=8, ep=True)
    assert (tp8.dp, tp8.ep) == (1, False) and (dep8.dp, dep8.ep) == (8, True)
    assert "DP8xTP1xPP1xEP8" in dep8.label
    # DP ranks each keep their KV cache: MLA's latent is no longer replicated 8 times.
    assert dep8.work.kv_capacity_tokens > 4 * tp8.work.kv_capacity_tokens
    assert calibrate.predicted(dep8) != calibrate.predicted(tp8)


def test_stated_orderings_count_by_their_sign() -> None:
    stated = [p for p in calibrate.comparisons(calibrate.cases())
              if p.source == "vllm-recipe-deepseek-r1-h200" and p.a.measured == {}]
    assert {p.metric for p in stated} == {"itlMs", "ttftMs", "tokensPerSecond"}
    assert all(p.measured_ratio == 2.0 for p in stated)


def test_narrow_expert_slices_cost_compute_and_ep_keeps_experts_whole() -> None:
    eff = efficiency.fitted()
    assert eff.moe_width > 0
    c = _deepseek("vllm-0.11.0")
    tp8 = performance._Engine(c.work, c.hw, 8, 1, eff)
    tep8 = performance._Engine(c.work, c.hw, 8, 1, eff, ep=True)
    assert tep8.expert_width() == 8 * tp8.expert_width()
    assert 1900 < tep8.expert_width() < 2200  # DeepSeek's moe_intermediate_size, 2,048
    prefill = 8192.0
    assert tp8.stage_s(0, prefill, 219, 219) > tep8.stage_s(0, prefill, 219, 219)
    no_penalty = dataclasses.replace(eff, moe_width=0.0)
    assert performance._Engine(c.work, c.hw, 8, 1, no_penalty).stage_s(0, prefill, 219, 219) \
        < tp8.stage_s(0, prefill, 219, 219)


def test_ttft_pays_the_api_servers_stream_work_only_as_far_as_it_fills_a_step() -> None:
    eff = efficiency.fitted()
    raw = {"source": "x", "model": "meta-llama/Llama-3.3-70B-Instruct",
           "gpu": "NVIDIA-H100-80GB-HBM3", "interconnect": "nvswitch", "weights": "bf16", "tp": 4,
           "pp": 1, "prompt": 256, "output": 256, "concurrency": 16}
    c = calibrate.case(raw, {})
    engine = performance._Engine(c.work, c.hw, 4, 1, eff)
    state = performance._steady(engine, 16.0)
    others = eff.stream_overhead_s * 15
    wait = state.prefill_s - performance._steady(
        performance._Engine(c.work, c.hw, 4, 1, dataclasses.replace(eff, stream_overhead_s=0.0)),
        16.0).prefill_s
    assert 0 < wait <= others + 1e-9
    assert abs(wait - min(1.0, others / state.itl_s) * others) < 1e-9
