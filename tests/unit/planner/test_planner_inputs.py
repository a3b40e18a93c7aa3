"""Reading specs, nodes and pods: defaults, tolerant matching, and errors that name the field."""

from __future__ import annotations

import pytest
from planner_builders import H100, h100_node, node, pod, spec
from shardwise import planner, pricing
from shardwise.planner import gpus, models, placement


def test_defaults() -> None:
    request = planner.request_from_spec({"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}})
    assert (request.dtype, request.max_model_len, request.max_concurrency) == ("auto", 8192, 16)
    assert request.weights.loaded == "bfloat16" and request.bytes_per_weight == 2.0
    assert (request.gpu_memory_utilization, request.objective, request.bytes_per_weight) == (
        0.9,
        "Latency",
        2.0,
    )


@pytest.mark.parametrize(
    ("name", "catalog_id"),
    [
        ("META-LLAMA/LLAMA-3.1-70B-INSTRUCT", "llama-3.1-70b"),
        ("Llama-3.3-70B-Instruct", "llama-3.3-70b"),
        ("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "llama-3.1-70b"),
        ("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4", "qwen2.5-72b"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
        ("deepseek-ai/DeepSeek-V3-0324", "deepseek-v3"),
        ("google/gemma-2-9b-it", "gemma-2-9b"),
    ],
)
def test_model_names_match_tolerantly(name: str, catalog_id: str) -> None:
    arch = models.lookup_model(name)
    assert arch is not None and arch.name == catalog_id


def test_moe_and_mla_catalog_entries() -> None:
    mixtral = models.lookup_model("mistralai/Mixtral-8x7B-v0.1")
    assert mixtral and mixtral.is_moe and mixtral.active_parameters == 12.9e9
    deepseek = models.lookup_model("deepseek-ai/DeepSeek-R1")
    assert deepseek and deepseek.active_parameters == 37e9
    # MLA latent: (512 + 64) elements per token and layer, not 2 x 128 heads x 192.
    assert deepseek.kv_elements_per_token() == 61 * 576


def test_architecture_overrides_and_supplies() -> None:
    request = planner.request_from_spec(
        spec(
            "acme/new-13b",
            model_fields={
                "architecture": {
                    "parameters": "13B",
                    "layers": 40,
                    "hiddenSize": 5120,
                    "attentionHeads": 40,
                }
            },
        )
    )
    assert (
        request.arch.kv_heads == 40
        and request.arch.head_dim == 128
        and request.arch.parameters == 13e9
    )
    overridden = planner.request_from_spec(
        spec("meta-llama/Llama-3.1-8B-Instruct", model_fields={"architecture": {"layers": 30}})
    )
    assert overridden.arch.layers == 30 and overridden.arch.hidden_size == 4096


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"model": {}}, "spec.model.name"),
        ({"model": {"name": "acme/unknown"}}, "spec.model.architecture"),
        ({"model": {"name": "acme/x", "architecture": {"layers": 2}}}, "spec.model.architecture"),
        ({"model": {"name": "Qwen/Qwen2.5-7B", "dtype": "int3"}}, "spec.model.dtype"),
        ({"model": {"name": "Qwen/Qwen2.5-7B", "quantization": "bnb"}}, "spec.model.quantization"),
        (
            {"model": {"name": "Qwen/Qwen2.5-7B"}, "serving": {"maxModelLen": 0}},
            "spec.serving.maxModelLen",
        ),
        (
            {"model": {"name": "Qwen/Qwen2.5-7B"}, "serving": {"maxConcurrency": "many"}},
            "spec.serving.maxConcurrency",
        ),
        (
            {"model": {"name": "Qwen/Qwen2.5-7B"}, "serving": {"gpuMemoryUtilization": 1.5}},
            "spec.serving.gpuMemoryUtilization",
        ),
        (
            {"model": {"name": "Qwen/Qwen2.5-7B"}, "parallelism": {"objective": "Speed"}},
            "spec.parallelism.objective",
        ),
        (
            {"model": {"name": "Qwen/Qwen2.5-7B"}, "parallelism": {"tensor": -2}},
            "spec.parallelism.tensor",
        ),
        (
            {"model": {"name": "Qwen/Qwen2.5-7B"}, "placement": {"gpuProducts": "H100"}},
            "spec.placement.gpuProducts",
        ),
        (
            {
                "model": {"name": "Qwen/Qwen2.5-7B"},
                "placement": {"tolerations": [{"operator": "In"}]},
            },
            "spec.placement.tolerations[0].operator",
        ),
        (
            {"model": {"name": "Qwen/Qwen2.5-7B"}, "pricing": {"gpuHourUSD": "cheap"}},
            "spec.pricing.gpuHourUSD",
        ),
    ],
)
def test_bad_input_names_the_field(bad: dict, field: str) -> None:
    with pytest.raises(planner.PlanInputError) as caught:
        planner.request_from_spec(bad)
    assert caught.value.field == field
    assert str(caught.value).startswith(field)


def test_gpu_products_match_tolerantly() -> None:
    assert gpus.lookup_gpu("NVIDIA-H100-80GB-HBM3-SHARED").product == H100
    assert gpus.lookup_gpu("A100-SXM4-40GB").product == "NVIDIA-A100-SXM4-40GB"
    mig = gpus.lookup_gpu("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", memory_mib=9728)
    assert mig.memory_mib == 9728 and mig.memory_bandwidth_gbps < 300 and mig.nvlink_gbps == 0
    unknown = gpus.lookup_gpu("NVIDIA-Z1", memory_mib=1000)
    assert not unknown.known and unknown.memory_mib == 1000
    assert "NVIDIA-L4" in gpus.known_products()


def test_prices_resolve_spec_then_cluster_then_default() -> None:
    assert pricing.resolve_gpu_hour_price(H100, "$3.10", {H100: 2.0}) == (3.10, "spec")
    assert pricing.resolve_gpu_hour_price(H100 + "-SHARED", None, {H100: 2.0}) == (2.0, "cluster")
    assert pricing.resolve_gpu_hour_price(H100) == (2.49, "default")
    assert pricing.resolve_gpu_hour_price("NVIDIA-Z1") == (pricing.UNKNOWN_GPU_HOUR_USD, "default")
    with pytest.raises(ValueError):
        pricing.parse_price("-1")


def test_inventory_groups_identical_nodes_and_counts_free_gpus() -> None:
    nodes = [h100_node(f"n{i}") for i in range(5)] + [node("cpu", "", 0, taints=[])]
    del nodes[-1]["metadata"]["labels"]["nvidia.com/gpu.product"]
    nodes[-1]["status"] = {"allocatable": {"cpu": "8"}}
    busy = [pod("n1", 3), pod("n1", 1, phase="Succeeded"), pod("n2", 8), pod("gone", 2)]
    inventory = planner.inventory_from_nodes(nodes, busy)
    assert len(inventory.pools) == 1 and inventory.non_gpu_nodes == 1
    free = {n.name: n.free_gpus for n in inventory.pools[0].nodes}
    assert free == {"n0": 8, "n1": 5, "n2": 0, "n3": 8, "n4": 8}


def test_init_containers_hold_the_larger_request() -> None:
    p = pod("n0", 1)
    p["spec"]["initContainers"] = [
        {"name": "i", "resources": {"requests": {"nvidia.com/gpu": "4"}}}
    ]
    inventory = planner.inventory_from_nodes([h100_node("n0")], [p])
    assert inventory.pools[0].nodes[0].free_gpus == 4


def test_topology_labels_and_defaults() -> None:
    inventory = planner.inventory_from_nodes(
        [
            node("a", H100, 8, interconnect="nvswitch"),  # domain defaults to the node's GPUs
            node("b", H100, 8, domain=4),  # a domain without interconnect implies NVLink
            node("c", H100, 8),  # nothing: PCIe, unlabelled
            node("d", H100, 8, interconnect="pcie", domain=8),  # PCIe wins over a stray domain
        ]
    )
    shapes = {p.nodes[0].name: p.shape for p in inventory.pools}
    assert (shapes["a"].interconnect, shapes["a"].nvlink_domain, shapes["a"].nvlink_gbps) == (
        "nvswitch",
        8,
        900,
    )
    assert (shapes["b"].interconnect, shapes["b"].nvlink_domain) == ("nvlink", 4)
    assert (shapes["c"].interconnect, shapes["c"].topology_labelled) == ("pcie", False)
    assert (shapes["d"].interconnect, shapes["d"].nvlink_domain) == ("pcie", 1)


def test_not_ready_nodes_have_no_free_gpus() -> None:
    inventory = planner.inventory_from_nodes([h100_node("down", ready=False)])
    assert inventory.pools[0].nodes[0].free_gpus == 0
    assert inventory.pools[0].nodes[0].blocked == "NotReady"


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        (placement.Toleration(operator="Exists"), True),
        (placement.Toleration(key="k", operator="Exists"), True),
        (placement.Toleration(key="k", value="v"), True),
        (placement.Toleration(key="k", value="other"), False),
        (placement.Toleration(key="k", value="v", effect="NoExecute"), False),
        (placement.Toleration(key="other", operator="Exists"), False),
    ],
)
def test_tolerations(toleration: placement.Toleration, tolerated: bool) -> None:
    taint = placement.Taint("k", "v", "NoSchedule")
    assert (placement.untolerated_taints([taint], [toleration]) == []) is tolerated


def test_prefer_no_schedule_does_not_block() -> None:
    assert placement.untolerated_taints([placement.Taint("k", "v", "PreferNoSchedule")], []) == []


@pytest.mark.parametrize(
    ("workload", "field"),
    [
        ({"promptTokens": 0}, "spec.workload.promptTokens"),
        ({"outputTokens": "many"}, "spec.workload.outputTokens"),
        ({"concurrency": 10**9}, "spec.workload.concurrency"),
        ({"requestsPerSecond": -1}, "spec.workload.requestsPerSecond"),
        ({"requestsPerSecond": True}, "spec.workload.requestsPerSecond"),
        ({"requestsPerSecond": "nan"}, "spec.workload.requestsPerSecond"),
    ],
)
def test_bad_workload_fields_are_named(workload: dict, field: str) -> None:
    spec = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "workload": workload}
    with pytest.raises(planner.PlanInputError) as caught:
        planner.request_from_spec(spec)
    assert caught.value.field == field


def test_workload_defaults_and_values() -> None:
    base = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}}
    default = planner.request_from_spec(base)
    assert (default.prompt_tokens, default.output_tokens, default.concurrency, default.request_rate) == (
        1024, 256, None, None)
    given = planner.request_from_spec({**base, "workload": {"promptTokens": "300", "requestsPerSecond": "2.5"}})
    assert (given.prompt_tokens, given.request_rate) == (300, 2.5)
