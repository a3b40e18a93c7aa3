"""The single-node workload: a Deployment whose pod runs `vllm serve`, and its Service."""

from __future__ import annotations

from typing import Any

import pytest
from render_builders import H100, OWNER, help_flags, plan, spec
from shardwise.render import children, labels, probes
from shardwise_runtime import vllm_flags


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    [only] = deployment["spec"]["template"]["spec"]["containers"]
    return only


def deployment(s: Any = None, p: dict[str, Any] | None = None, replicas: int = 1) -> dict[str, Any]:
    return children.build_deployment(OWNER, s or spec(), p or plan(), replicas)


def test_render_is_a_deployment_then_its_service() -> None:
    objects = children.render(OWNER, spec(), plan(), 3)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [("Deployment", "llama"),
                                                                     ("Service", "llama")]
    assert objects[0]["spec"]["replicas"] == 3
    assert objects[1]["spec"]["selector"] == labels.selector_labels("llama")
    assert objects[0]["spec"]["selector"]["matchLabels"] == labels.selector_labels("llama")


@pytest.mark.parametrize("model", [
    {"name": "meta-llama/Llama-3.1-70B-Instruct", "dtype": "bfloat16"},
    {"name": "meta-llama/Llama-3.1-70B-Instruct", "dtype": "float16"},
    {"name": "deepseek-ai/DeepSeek-R1", "dtype": "fp8"},
    {"name": "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "dtype": "float16",
     "quantization": "awq"},
    {"name": "TheBloke/Llama-2-70B-GPTQ", "dtype": "float16", "quantization": "gptq",
     "servedName": "llama"},
])
def test_every_emitted_flag_is_a_vllm_serve_flag(model: dict[str, Any]) -> None:
    args = container(deployment(spec(model=model, serving={"extraArgs": ["--enable-prefix-caching"]}),
                                plan(tp=4, pp=2)))["args"]
    assert args[0] == model["name"]
    assert vllm_flags.unknown_flags(args[1:], help_flags()) == []


def test_parallelism_and_serving_flags_come_from_plan_and_spec() -> None:
    args = container(deployment(spec(serving={"maxModelLen": 4096, "maxConcurrency": 8,
                                              "gpuMemoryUtilization": 0.85}), plan(tp=4, pp=2)))["args"]
    pairs = dict(zip(args[1::2], args[2::2]))
    assert pairs["--tensor-parallel-size"] == "4"
    assert pairs["--pipeline-parallel-size"] == "2"
    assert pairs["--max-model-len"] == "4096"
    assert pairs["--max-num-seqs"] == "8"
    assert pairs["--gpu-memory-utilization"] == "0.85"
    assert pairs["--served-model-name"] == "llama"  # the resource name when servedName is unset


def test_extra_args_are_separate_list_items_after_the_planned_flags() -> None:
    extra = ["--override-generation-config", '{"temperature": 0.2, "top_p": 0.9}',
             "--enable-prefix-caching"]
    args = container(deployment(spec(serving={"extraArgs": extra})))["args"]
    assert args[-3:] == extra  # one token each, JSON with spaces intact: no shell re-splits them
    assert container(deployment())["command"] == ["vllm", "serve"]


@pytest.mark.parametrize("per_node", [1, 2, 8])
def test_gpu_limit_and_request_are_the_gpus_per_node(per_node: int) -> None:
    resources = container(deployment(p=plan(tp=per_node, per_node=per_node)))["resources"]
    assert resources == {"limits": {"nvidia.com/gpu": str(per_node)},
                         "requests": {"nvidia.com/gpu": str(per_node)}}


def test_probes_hit_health_and_the_startup_probe_is_sized_from_the_plan() -> None:
    c = container(deployment())
    assert c["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= probes.startup_budget_s(plan())


def test_pods_require_the_planned_gpu_product() -> None:
    pod = deployment()["spec"]["template"]["spec"]
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert term == {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                          "values": [H100]}]}
    assert "affinity" not in deployment(p=plan(product=None))["spec"]["template"]["spec"]


def test_tolerations_and_node_selector_pass_through() -> None:
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                   {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoExecute",
                    "tolerationSeconds": 30}]
    pod = deployment(spec(placement={"tolerations": tolerations,
                                     "nodeSelector": {"pool": "gpu"}}))["spec"]["template"]["spec"]
    assert pod["tolerations"] == tolerations
    assert pod["nodeSelector"] == {"pool": "gpu"}
    bare = deployment()["spec"]["template"]["spec"]
    assert "tolerations" not in bare and "nodeSelector" not in bare


def test_hf_token_comes_from_the_named_secret_and_pod_ip_from_the_downward_api() -> None:
    model = {"name": "meta-llama/Llama-3.1-8B-Instruct", "hfTokenSecretRef": {"name": "hf"}}
    env = {e["name"]: e["valueFrom"] for e in container(deployment(spec(model=model)))["env"]}
    assert env == {"POD_IP": {"fieldRef": {"fieldPath": "status.podIP"}},
                   "HF_TOKEN": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    assert [e["name"] for e in container(deployment())["env"]] == ["POD_IP"]


def test_shared_memory_is_an_in_memory_volume_at_dev_shm() -> None:
    pod = deployment()["spec"]["template"]["spec"]
    [volume] = pod["volumes"]
    assert volume["emptyDir"]["medium"] == "Memory"
    assert pod["containers"][0]["volumeMounts"] == [{"name": volume["name"], "mountPath": "/dev/shm"}]


def test_every_child_is_owned_by_the_inference_deployment() -> None:
    for obj in children.render(OWNER, spec(), plan(), 1):
        assert obj["metadata"]["namespace"] == "ml"
        assert obj["metadata"]["ownerReferences"] == [{
            "apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment", "name": "llama",
            "uid": "0b5e-uid", "controller": True, "blockOwnerDeletion": True}]
        assert obj["metadata"]["labels"] == labels.common_labels("llama")


def test_pods_carry_the_common_labels_and_model_facts_not_predictions() -> None:
    template = deployment()["spec"]["template"]
    assert template["metadata"]["labels"] == labels.common_labels("llama")
    # Predictions change with every re-plan (learned corrections): on the template they would
    # roll the pods. The parameter count is a fact the simulated engine sizes itself by.
    assert template["metadata"]["annotations"] == {labels.MAX_CONCURRENCY_ANNOTATION: "8",
                                                   labels.MODEL_PARAMETERS_ANNOTATION: "405900000000"}


def test_progress_deadline_outlasts_the_startup_probe() -> None:
    from shardwise.render.children import PROGRESS_MARGIN_S, with_progress_deadline
    deployment = {"kind": "Deployment", "spec": {"template": {"spec": {"containers": [
        {"name": "vllm", "startupProbe": {"periodSeconds": 10, "failureThreshold": 180}}]}}}}
    assert with_progress_deadline(deployment)["spec"]["progressDeadlineSeconds"] == 1800 + PROGRESS_MARGIN_S
    service = {"kind": "Service", "spec": {}}
    assert with_progress_deadline(service) == {"kind": "Service", "spec": {}}
