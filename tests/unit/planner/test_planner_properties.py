"""Properties every plan must have, over generated clusters and requests (hypothesis), and the
orderings GPU-FACTS.md requires of the performance model."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planner_builders import KWOK_TOLERATION, node
from shardwise import planner
from shardwise.planner import gpus, memory, models, performance

MODEL_NAMES = [
    "meta-llama/Llama-3.2-1B",
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/Llama-3.1-405B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen2.5-72B-Instruct",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "deepseek-ai/DeepSeek-R1",
    "google/gemma-2-9b-it",
    "google/gemma-2-27b-it",
]
PRODUCTS = [
    "NVIDIA-H100-80GB-HBM3",
    "NVIDIA-L40S",
    "NVIDIA-A100-80GB-PCIe",
    "NVIDIA-L4",
    "NVIDIA-H200",
    "NVIDIA-A100-SXM4-40GB",
    "NVIDIA-GB200",
    "NVIDIA-A10G",
]


@st.composite
def pools(draw: st.DrawFn) -> list[dict]:
    result = []
    for index in range(draw(st.integers(1, 3))):
        product = draw(st.sampled_from(PRODUCTS))
        count = draw(st.sampled_from([1, 2, 4, 8]))
        interconnect = draw(st.sampled_from(["nvswitch", "nvlink", "pcie", None]))
        domain = {"nvswitch": count, "nvlink": min(2, count), "pcie": 1, None: None}[interconnect]
        clique = draw(st.sampled_from([None, "fabric.1"])) if interconnect == "nvswitch" else None
        for n in range(draw(st.integers(1, 4))):
            result.append(
                node(
                    f"p{index}-n{n}",
                    product,
                    count,
                    interconnect=interconnect,
                    domain=domain,
                    clique=clique,
                )
            )
    return result


@st.composite
def specs(draw: st.DrawFn) -> dict:
    dtype = draw(st.sampled_from(["bfloat16", "fp8", "awq"]))
    model = {"name": draw(st.sampled_from(MODEL_NAMES))}
    if dtype == "awq":
        model.update(dtype="float16", quantization="awq")
    else:
        model["dtype"] = dtype
    return {
        "model": model,
        "serving": {
            "maxModelLen": draw(st.sampled_from([2048, 8192, 32768])),
            "maxConcurrency": draw(st.integers(1, 64)),
            "gpuMemoryUtilization": draw(st.sampled_from([0.8, 0.9, 0.95])),
        },
        "parallelism": {"objective": draw(st.sampled_from(["Latency", "Throughput", "Cost"]))},
        "placement": {"tolerations": [KWOK_TOLERATION]},
    }


def _shape_of(inventory: planner.Inventory, product: str, gpus_per_node: int) -> list:
    return [
        p.shape
        for p in inventory.pools
        if p.shape.product == product and p.shape.gpus_per_node >= gpus_per_node
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=pools(), spec=specs())
def test_every_feasible_plan_is_legal(nodes: list[dict], spec: dict) -> None:
    request = planner.request_from_spec(spec)
    inventory = planner.inventory_from_nodes(nodes)
    result = planner.plan(request, inventory).to_dict()
    plans = [result] if result["feasible"] else []
    plans += [a for a in result["alternatives"] if a["feasible"]]
    arch = request.arch
    for p in plans:
        tp, pp = p["tensorParallel"], p["pipelineParallel"]
        dp = p["dataParallel"]
        assert dp * tp * pp == p["gpusPerReplica"] == p["nodesPerReplica"] * p["gpusPerNode"]
        if dp > 1 or p["expertParallel"] > 1:  # mixtures of experts only, EP sharding whole experts
            assert arch.experts and pp == 1
            assert p["expertParallel"] in (1, dp * tp) and arch.experts % p["expertParallel"] == 0
        assert arch.attention_heads % tp == 0
        assert arch.kv_heads % tp == 0 or tp % arch.kv_heads == 0
        assert pp <= arch.layers
        m = p["memory"]
        assert (
            m["weightsGiBPerGPU"] + m["kvCacheGiBPerGPU"] + m["overheadGiBPerGPU"]
            <= m["usableGiBPerGPU"] + 0.02
        )
        shapes = _shape_of(inventory, p["gpuProduct"], p["gpusPerNode"])
        assert shapes
        # TP inside one NVLink domain (or one node without NVLink), unless a clique spans nodes.
        if tp > p["gpusPerNode"]:
            assert any(s.interconnect == "nvswitch" for s in shapes)
        else:
            assert any(s.nvlink_domain == 1 or tp <= s.nvlink_domain for s in shapes)
        bandwidth = gpus.lookup_gpu(p["gpuProduct"]).memory_bandwidth_gbps * 1e9
        # Every token reads its active weights once; under DP the active experts are spread over
        # the ranks, the rest (attention, shared experts) read whole by each.
        rest = arch.parameters - arch.routed_expert_parameters
        active = min(rest, arch.active_parameters) + max(0.0, arch.active_parameters - rest) / dp
        floor_ms = active * request.bytes_per_weight / (tp * pp * bandwidth) * 1e3
        assert p["predicted"]["itlMs"] >= floor_ms - 0.01
        assert p["predicted"]["ttftMs"] >= floor_ms - 0.1
    if result["feasible"]:
        assert len(result["alternatives"]) <= 3
        assert all(a["rejectedBecause"] for a in result["alternatives"])


@settings(max_examples=40, deadline=None)
@given(nodes=pools(), spec=specs(), seed=st.integers(0, 1000))
def test_plans_are_deterministic_and_ignore_node_order(
    nodes: list[dict], spec: dict, seed: int
) -> None:
    request = planner.request_from_spec(spec)
    first = planner.plan(request, planner.inventory_from_nodes(nodes)).to_dict()
    shuffled = list(nodes)
    random.Random(seed).shuffle(shuffled)
    assert planner.plan(request, planner.inventory_from_nodes(shuffled)).to_dict() == first


def _hw(link: performance.Link, inter_node_hops: int = 0) -> performance.Hardware:
    return performance.Hardware(
        memory_bandwidth_gbps=3350,
        bf16_tflops=989,
        tp_link=link,
        stage_link=link,
        inter_node_hops=inter_node_hops,
    )


def _work(name: str, concurrency: int = 16) -> performance.Workload:
    arch = models.lookup_model(name)
    assert arch is not None
    return performance.Workload(
        arch=arch, bytes_per_weight=2.0, max_model_len=8192, max_concurrency=concurrency
    )


@pytest.mark.parametrize("gpus_", [2, 4, 8])
def test_on_nvlink_tp_beats_pp_on_itl_and_ttft(gpus_: int) -> None:
    work, hw = _work("meta-llama/Llama-3.1-70B-Instruct"), _hw(performance.nvlink(900))
    tp = performance.predict(work, hw, gpus_, 1)
    pp = performance.predict(work, hw, 1, gpus_)
    assert tp.itl_s < pp.itl_s and tp.ttft_s < pp.ttft_s and tp.tokens_per_s > pp.tokens_per_s


def test_tp_across_nodes_over_network_would_lose_to_pp() -> None:
    """The rule 'PP across nodes' rests on this: an all-reduce over a NIC costs more than a hop."""
    work = _work("meta-llama/Llama-3.1-405B-Instruct")
    network = performance.Link(
        kind="network", gbps=performance.INTER_NODE_GBPS, alpha_s=25e-6, beta_s=10e-6
    )
    tp16 = performance.predict(work, _hw(network), 16, 1)
    tp8_pp2 = performance.predict(work, _hw(performance.nvlink(900), inter_node_hops=1), 8, 2)
    assert tp8_pp2.itl_s < tp16.itl_s


def test_pcie_many_streams_favour_pp_few_streams_favour_tp() -> None:
    """vLLM's advice for PCIe-only nodes (PP for throughput) holds once batches make TP's
    all-reduces large; with few streams TP's split of the weight reads wins."""
    link = performance.pcie(32)
    busy = _work("meta-llama/Llama-3.1-8B-Instruct", concurrency=256)
    assert (
        performance.predict(busy, _hw(link), 1, 4).tokens_per_s
        > performance.predict(busy, _hw(link), 4, 1).tokens_per_s
    )
    quiet = _work("meta-llama/Llama-3.1-8B-Instruct", concurrency=1)
    assert (
        performance.predict(quiet, _hw(link), 4, 1).itl_s
        < performance.predict(quiet, _hw(link), 1, 4).itl_s
    )


def test_prediction_never_beats_the_floor() -> None:
    work, hw = _work("meta-llama/Llama-3.2-1B", concurrency=1), _hw(performance.nvlink(1800))
    for tp in (1, 2, 4, 8):
        prediction = performance.predict(work, hw, tp, 1)
        assert prediction.itl_s >= prediction.floor_s > 0


def test_memory_worked_example_from_the_docstring() -> None:
    arch = models.lookup_model("meta-llama/Llama-3.1-70B-Instruct")
    assert arch is not None
    fit = memory.memory_per_gpu(
        arch,
        bytes_per_weight=2,
        max_model_len=8192,
        max_concurrency=16,
        gpu_memory_utilization=0.9,
        gpu_memory_mib=81559,
        tp=4,
        pp=1,
    )
    assert (round(fit.weights_gib, 1), round(fit.kv_cache_gib, 1), round(fit.usable_gib, 1)) == (
        32.9,
        10.0,
        71.7,
    )
    assert math.isclose(fit.overhead_gib, 1.625) and fit.fits
