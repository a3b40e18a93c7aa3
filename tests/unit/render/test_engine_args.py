"""SGLang and TensorRT-LLM command lines (issue 40): every one rendered, over real planner plans and
hand-made layouts, passes the parsers rebuilt from the pinned copies of each engine's flags
(engine_parsers.py), and vLLM's rendering is untouched by the engine switch."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from engine_parsers import sglang_problems, trtllm_key_problems, trtllm_problems
from render_builders import OWNER, gb200_plan, multi_node_plan, plan
from shardwise import planner
from shardwise.api import engine_flags
from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.render import children, engine, sglang_args, trtllm_args


def _node(name: str, product: str, gpus: int) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus),
        "shardwise.io/gpu-interconnect": "nvswitch", "shardwise.io/nvlink-domain-size": str(gpus)}},
        "spec": {}, "status": {"capacity": {"nvidia.com/gpu": str(gpus)}, "allocatable": {"nvidia.com/gpu": str(gpus)},
                               "conditions": [{"type": "Ready", "status": "True"}]}}


H100 = "NVIDIA-H100-80GB-HBM3"
H200 = "NVIDIA-H200"


def _spec(engine_name: str, model: str, **more: Any) -> InferenceDeploymentSpec:
    body: dict[str, Any] = {"engine": engine_name, "model": {"name": model}, **more}
    return InferenceDeploymentSpec.model_validate(body)


def _planned(spec: InferenceDeploymentSpec, nodes: list[dict[str, Any]]) -> dict[str, Any]:
    request = planner.request_from_spec(spec.model_dump(mode="json", by_alias=True, exclude_none=True))
    found = planner.plan(request, planner.inventory_from_nodes(nodes)).to_dict()
    assert found["feasible"], found["reason"]
    return found


def _moe(dp: int, tp: int, ep: int, nodes: int = 1) -> dict[str, Any]:
    return {**plan(tp=tp, nodes=nodes, per_node=dp * tp // nodes), "dataParallel": dp,
            "expertParallel": ep, "gpusPerReplica": dp * tp}


EIGHT_H100 = [_node("a", H100, 8)]
TWO_H100_NODES = [_node("a", H100, 8), _node("b", H100, 8)]
EIGHT_H200 = [_node("a", H200, 8)]
# (case, spec body beyond engine, nodes for the planner or a hand-made plan)
CASES: list[tuple[str, dict[str, Any], Any]] = [
    ("8B latency", {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}}, EIGHT_H100),
    ("8B throughput", {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                       "parallelism": {"objective": "Throughput"}}, EIGHT_H100),
    ("8B cost long context", {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "parallelism": {"objective": "Cost"},
                              "serving": {"maxModelLen": 65536, "maxConcurrency": 4}}, EIGHT_H100),
    ("70B bf16", {"model": {"name": "meta-llama/Llama-3.1-70B-Instruct", "dtype": "bfloat16"}}, EIGHT_H100),
    ("70B fp8", {"model": {"name": "meta-llama/Llama-3.1-70B-Instruct", "dtype": "fp8"}}, EIGHT_H100),
    ("70B awq", {"model": {"name": "meta-llama/Llama-3.1-70B-Instruct", "quantization": "awq"}}, EIGHT_H100),
    ("70B pinned TP2xPP2", {"model": {"name": "meta-llama/Llama-3.1-70B-Instruct"},
                            "parallelism": {"tensor": 2, "pipeline": 2}}, EIGHT_H100),
    ("Mixtral", {"model": {"name": "mistralai/Mixtral-8x7B-Instruct-v0.1"}}, EIGHT_H100),
    ("Qwen3 30B MoE", {"model": {"name": "Qwen/Qwen3-30B-A3B"}, "parallelism": {"objective": "Throughput"}}, EIGHT_H100),
    ("Qwen3 235B MoE", {"model": {"name": "Qwen/Qwen3-235B-A22B"}}, EIGHT_H200),
    ("DeepSeek-V3 H200", {"model": {"name": "deepseek-ai/DeepSeek-V3"}, "parallelism": {"objective": "Throughput"},
                          "serving": {"maxConcurrency": 256}}, EIGHT_H200),
    ("gemma revision served name", {"model": {"name": "google/gemma-2-27b-it", "revision": "v1",
                                              "servedName": "gemma"}}, EIGHT_H100),
    ("405B two nodes", {"model": {"name": "meta-llama/Llama-3.1-405B-Instruct", "dtype": "bfloat16"},
                        "serving": {"maxModelLen": 4096, "maxConcurrency": 8}}, TWO_H100_NODES),
    ("TP1", {"model": {"name": "m/x"}}, plan(tp=1, per_node=1)),
    ("TP4", {"model": {"name": "m/x"}, "serving": {"gpuMemoryUtilization": 0.8}}, plan(tp=4, per_node=4)),
    ("TP4xPP2", {"model": {"name": "m/x"}}, plan(tp=4, pp=2)),
    ("TP8xPP2 two nodes", {"model": {"name": "m/x"}}, multi_node_plan()),
    ("GB200 TP8 two trays", {"model": {"name": "m/x"}}, gb200_plan()),
    ("DP8xTP1xEP8", {"model": {"name": "deepseek-ai/DeepSeek-V3"}}, _moe(8, 1, 8)),
    ("DP2xTP4xEP8", {"model": {"name": "deepseek-ai/DeepSeek-V3"}}, _moe(2, 4, 8)),
    ("DP2xTP4", {"model": {"name": "deepseek-ai/DeepSeek-V3"}}, _moe(2, 4, 1)),
    ("TP8xEP8", {"model": {"name": "deepseek-ai/DeepSeek-V3"}}, _moe(1, 8, 8)),
    ("DP2xTP8xEP16 two nodes", {"model": {"name": "deepseek-ai/DeepSeek-V3"}}, _moe(2, 8, 16, nodes=2)),
    ("extra args", {"model": {"name": "m/x"}, "serving": {
        "sglangExtraArgs": ["--chunked-prefill-size", "4096", "--enable-torch-compile"],
        "trtllmExtraArgs": ["--trust_remote_code", "--max_beam_width=1"]}}, plan(tp=2, per_node=2)),
]


def _case(engine_name: str, body: dict[str, Any], where: Any) -> tuple[InferenceDeploymentSpec, dict[str, Any]]:
    serving = dict(body.get("serving") or {})
    for key, owner in (("sglangExtraArgs", "sglang"), ("trtllmExtraArgs", "trtllm")):
        if owner != engine_name:
            serving.pop(key, None)
    spec = InferenceDeploymentSpec.model_validate({**body, "engine": engine_name, "serving": serving})
    return spec, (_planned(spec, where) if isinstance(where, list) else where)


def _containers(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for obj in objects:
        if obj["kind"] == "Deployment":
            out.append(("leader", obj["spec"]["template"]["spec"]["containers"][0]))
        elif obj["kind"] == "LeaderWorkerSet":
            template = obj["spec"]["leaderWorkerTemplate"]
            out += [(role, template[f"{role}Template"]["spec"]["containers"][0]) for role in ("leader", "worker")]
    return out


def test_at_least_twenty_specs() -> None:
    assert len(CASES) >= 20


@pytest.mark.parametrize("case,body,where", CASES, ids=[c[0] for c in CASES])
def test_every_sglang_argv_passes_the_captured_parser(case: str, body: dict[str, Any], where: Any) -> None:
    spec, found = _case("sglang", body, where)
    objects = children.render(OWNER, spec, found, 1)
    nodes = int(found["nodesPerReplica"])
    for role, container in _containers(objects):
        assert container["command"] == sglang_args.COMMAND
        assert container["image"] == engine.DEFAULT_IMAGES[spec.engine]
        argv = container["args"]
        for rank in ([0] if role == "leader" else range(1, nodes)):
            assert sglang_problems(argv, rank=rank) == [], f"{case} {role} rank {rank}: {argv}"
        assert {a.split("=")[0] for a in argv if a.startswith("--")} <= set(engine_flags.sglang())
        # The GPUs SGLang will use are the ones the plan placed.
        size = int(argv[argv.index("--tp-size") + 1]) * int(argv[argv.index("--pp-size") + 1])
        assert size == int(found["gpusPerReplica"]), case
        assert int(container["resources"]["limits"]["nvidia.com/gpu"]) * nodes == size
        if nodes > 1:
            assert argv[argv.index("--nnodes") + 1] == str(nodes)


@pytest.mark.parametrize("case,body,where", CASES, ids=[c[0] for c in CASES])
def test_every_trtllm_argv_and_options_key_is_in_the_pinned_copy(case: str, body: dict[str, Any], where: Any) -> None:
    spec, found = _case("trtllm", body, where)
    if int(found["nodesPerReplica"]) > 1:
        assert engine.plan_problem(spec, found) is not None  # refused before rendering: see below
        return
    objects = children.render(OWNER, spec, found, 1)
    configmap = objects[0]
    assert configmap["kind"] == "ConfigMap" and configmap["metadata"]["ownerReferences"]
    options = yaml.safe_load(configmap["data"][trtllm_args.OPTIONS_FILE])
    assert trtllm_key_problems(options) == [], case
    assert (options.get("enable_attention_dp") is True) == (int(found.get("dataParallel") or 1) > 1)
    for _, container in _containers(objects):
        assert container["command"] == trtllm_args.COMMAND
        argv = container["args"]
        assert trtllm_problems(argv) == [], f"{case}: {argv}"
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert argv[argv.index("--extra_llm_api_options") + 1].startswith(next(
            path for path, name in mounts.items() if name == trtllm_args.OPTIONS_VOLUME))
        size = int(argv[argv.index("--tp_size") + 1]) * int(argv[argv.index("--pp_size") + 1])
        assert size == int(found["gpusPerReplica"]), case


def test_a_flag_the_copy_lacks_fails_the_checks() -> None:
    spec, found = _case("sglang", CASES[19][1], CASES[19][2])
    argv = sglang_args.build_args(spec, found, "m")
    assert sglang_problems([a.replace("--attn-dp-size", "--dp-attention-size") for a in argv])
    assert sglang_problems([a.replace("--tp-size", "--tp_size") for a in argv])
    assert sglang_problems(argv + ["--dtype", "fp8"])  # a value outside the captured choices
    targs = trtllm_args.build_args(_spec("trtllm", "m/x"), plan(tp=2, per_node=2))
    assert trtllm_problems([a.replace("--tp_size", "--tensor-parallel-size") for a in targs])
    assert trtllm_key_problems({"kv_cache_config": {"free_gpu_mem_fraction": 0.9}})


def test_trtllm_across_nodes_is_refused_with_a_sentence() -> None:
    problem = engine.plan_problem(_spec("trtllm", "m/x"), multi_node_plan())
    assert problem is not None and "2 nodes per replica" in problem
    assert engine.plan_problem(_spec("sglang", "m/x"), multi_node_plan()) is None


def test_vllm_is_rendered_as_before_whatever_the_engine_images() -> None:
    spec = _spec("vllm", "meta-llama/Llama-3.1-8B-Instruct")
    before = children.render(OWNER, spec, plan(tp=1, per_node=1), 1)
    after = children.render(OWNER, spec, plan(tp=1, per_node=1), 1, engine_images={"sglang": "x", "trtllm": "y"})
    assert before == after
    container = _containers(before)[0][1]
    assert container["command"] == ["vllm", "serve"] and container["image"] == spec.serving.image


def test_engine_images_from_the_operator_settings_or_the_spec() -> None:
    found = plan(tp=1, per_node=1)
    chosen = children.render(OWNER, _spec("sglang", "m/x"), found, 1, engine_images={"sglang": "reg/sglang:mine"})
    assert _containers(chosen)[0][1]["image"] == "reg/sglang:mine"
    own = _spec("trtllm", "m/x", serving={"image": "reg/trt:1.2"})
    assert _containers(children.render(OWNER, own, found, 1, engine_images={"trtllm": "x"}))[0][1]["image"] == "reg/trt:1.2"
