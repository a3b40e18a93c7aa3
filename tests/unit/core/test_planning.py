"""When the operator re-plans: only for planning inputs, a re-plan request, or vanished nodes."""

from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.decide import planning

SPEC = {"model": {"name": "meta-llama/Llama-3.1-70B-Instruct"}, "replicas": 1}


def node(name: str, product: str = "NVIDIA-H100-80GB-HBM3", gpus: int = 8) -> dict:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


PLAN = {"feasible": True, "gpuProduct": "NVIDIA-H100-80GB-HBM3", "gpusPerNode": 8, "nodesPerReplica": 2}


def fingerprint(**changes) -> str:
    return planning.planning_fingerprint(InferenceDeploymentSpec.model_validate({**SPEC, **changes}))


def test_fingerprint_ignores_replicas_image_and_autoscaling_but_not_context_length() -> None:
    base = fingerprint()
    assert fingerprint(replicas=5) == base
    assert fingerprint(serving={"image": "my/vllm:1", "extraArgs": ["--enforce-eager"]}) == base
    assert fingerprint(autoscaling={"maxReplicas": 3, "slo": {"ttftP95": "1s"}}) == base
    assert fingerprint(serving={"maxModelLen": 4096}) != base
    assert fingerprint(parallelism={"objective": "Cost"}) != base


def test_plan_kept_while_its_nodes_exist_and_inputs_are_unchanged() -> None:
    current = {**PLAN, "specFingerprint": "f", "replanToken": ""}
    nodes = [node("a"), node("b"), node("l40s", "NVIDIA-L40S", 4)]
    assert not planning.needs_new_plan(current, "f", "", nodes)
    assert not planning.needs_new_plan(current, "f", "", nodes[:2]), "an unrelated node left: keep the plan"
    assert planning.needs_new_plan(current, "f", "", nodes[1:]), "one of two needed nodes is gone"
    assert planning.needs_new_plan(current, "g", "", nodes), "planning inputs changed"
    assert planning.needs_new_plan(current, "f", "2026-11-30", nodes), "a re-plan was requested"
    assert planning.needs_new_plan({**current, "feasible": False}, "f", "", nodes), "infeasible plans retry"
    assert planning.needs_new_plan(None, "f", "", nodes)


def test_a_node_change_reconciles_a_planned_deployment_only_when_a_node_stopped_fitting_its_plan() -> None:
    relabelled = node("a")
    relabelled["metadata"]["labels"]["beta.kubernetes.io/arch"] = "amd64"
    shrunk = node("a", gpus=4)
    assert not planning.node_change_matters(PLAN, node("a"), relabelled), "labels the node controller adds"
    assert not planning.node_change_matters(PLAN, None, node("c")), "a node joining moves no running model"
    assert not planning.node_change_matters(PLAN, node("l", "NVIDIA-L40S"), None), "another product's node left"
    assert planning.node_change_matters(PLAN, node("a"), None), "one of its product's nodes left"
    assert planning.node_change_matters(PLAN, node("a"), shrunk), "too few GPUs left on it"
    assert planning.node_change_matters(PLAN, node("a"), node("a", "NVIDIA-A100-SXM4-80GB")), "product changed"
    for unplaced in ({}, {"feasible": False, "reasonCode": "NoMatchingNodes"}):
        assert planning.node_change_matters(unplaced, None, node("c")), "an unplaced model may fit now"


def test_unknown_model_becomes_an_infeasible_plan_not_an_exception() -> None:
    spec = {"model": {"name": "acme/never-heard-of-it-13B"}}
    result = planning.make_plan(spec, [node("a")], [], None, fingerprint="f", token="")
    assert result["feasible"] is False and result["reasonCode"] == "InvalidModel"
    assert "spec.model" in result["reason"]


def test_max_model_len_beyond_the_context_window_is_not_planned() -> None:
    from shardwise.decide import planning
    spec = {"model": {"name": "Qwen/Qwen2.5-7B-Instruct"}, "serving": {"maxModelLen": 65536}}
    plan = planning.make_plan(spec, [], [], None, fingerprint="f", token="")
    assert (plan["feasible"], plan["reasonCode"]) == (False, "MaxModelLenExceedsContext")
    assert "65536" in plan["reason"] and "32768 tokens" in plan["reason"] and "at most 32768" in plan["reason"]
    assert planning.context_exceeded({**spec, "serving": {"maxModelLen": 32768}}) is None
    assert planning.context_exceeded({"model": {"name": "my-org/unknown"}, "serving": {"maxModelLen": 10**6}}) is None
