"""The multi-node workload: a LeaderWorkerSet whose pods run shardwise-launch, and a leader Service.

The launcher's own parser and planner read the rendered command lines here, with the environment
LWS gives each pod, so the operator and the launcher cannot drift apart unnoticed.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

import pytest
from render_builders import (
    GB200,
    H100,
    OWNER,
    gb200_plan,
    help_flags,
    multi_node_plan,
    plan,
    spec,
)
from shardwise.render import children, labels, leaderworkerset
from shardwise_runtime import vllm_flags
from shardwise_runtime.launcher import main as launcher_main
from shardwise_runtime.launcher import spec as launcher_spec

LEADER_ADDRESS = "llama-lws-0.llama-lws.ml"


def lws(s: Any = None, p: dict[str, Any] | None = None, replicas: int = 1) -> dict[str, Any]:
    return leaderworkerset.build_leaderworkerset(OWNER, s or spec(), p or multi_node_plan(), replicas)


def template(obj: dict[str, Any], role: str) -> dict[str, Any]:
    result: dict[str, Any] = obj["spec"]["leaderWorkerTemplate"][f"{role}Template"]
    return result


def container(obj: dict[str, Any], role: str) -> dict[str, Any]:
    [only] = template(obj, role)["spec"]["containers"]
    return only


def launch(c: dict[str, Any], worker_index: int) -> launcher_spec.LaunchSpec:
    """What the launcher would do with this container's command line in pod `worker_index`."""
    env = {"LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": str(worker_index),
           "LWS_LEADER_ADDRESS": LEADER_ADDRESS, "POD_IP": f"10.0.0.{worker_index + 1}"}
    inputs, dry_run = launcher_main.parse_args(c["args"])
    assert not dry_run
    return launcher_spec.build_launch(inputs, env)


def test_render_is_a_leaderworkerset_then_a_service_for_leaders_only() -> None:
    objects = children.render(OWNER, spec(), multi_node_plan(), 2)
    assert [o["kind"] for o in objects] == ["LeaderWorkerSet", "Service"]
    workload, service = objects
    assert workload["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert workload["spec"]["replicas"] == 2
    assert service["spec"]["selector"] == {"shardwise.io/inference-deployment": "llama",
                                           "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    # The client Service keeps the resource's name (status.endpoint); LWS's own headless
    # Service takes the LeaderWorkerSet's, so the two must differ.
    assert service["metadata"]["name"] == "llama"
    assert workload["metadata"]["name"] != service["metadata"]["name"]
    assert children.endpoint(OWNER) == "http://llama.ml.svc:8000/v1"


def test_one_group_per_replica_recreated_whole_when_any_pod_restarts() -> None:
    body = lws(replicas=3)["spec"]
    assert body["replicas"] == 3
    assert body["leaderWorkerTemplate"]["size"] == 2
    assert body["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert body["startupPolicy"] == "LeaderCreated"
    assert lws(p=multi_node_plan(pp=4, nodes=4))["spec"]["leaderWorkerTemplate"]["size"] == 4


def test_pods_run_the_installed_launcher_entry_point() -> None:
    [entry] = metadata.entry_points(group="console_scripts", name=leaderworkerset.LAUNCHER)
    assert entry.value == "shardwise_runtime.launcher.main:main"
    obj = lws(spec(serving={"image": "registry.example/shardwise-runtime:1"}))
    for role in ("leader", "worker"):
        assert container(obj, role)["command"] == ["shardwise-launch"]
        assert container(obj, role)["image"] == "registry.example/shardwise-runtime:1"


def test_leader_command_line_as_the_launcher_reads_it() -> None:
    plan_ = launch(container(lws(), "leader"), worker_index=0)
    argv = plan_.argv
    assert argv[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-405B-Instruct"]
    assert argv[argv.index("--tensor-parallel-size") + 1] == "8"
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"
    assert argv[-8:] == ["--distributed-executor-backend", "mp", "--nnodes", "2", "--node-rank", "0",
                         "--master-addr", LEADER_ADDRESS]
    assert "--headless" not in argv
    assert plan_.rendezvous is not None and plan_.rendezvous.role is launcher_spec.Role.LEADER
    assert plan_.rendezvous.timeout_s == leaderworkerset.GROUP_TIMEOUT_S
    assert plan_.env == {"VLLM_HOST_IP": "10.0.0.1"}
    assert plan_.warnings == ()


def test_worker_command_line_as_the_launcher_reads_it() -> None:
    plan_ = launch(container(lws(), "worker"), worker_index=1)
    assert plan_.argv[-9:] == ["--distributed-executor-backend", "mp", "--nnodes", "2",
                               "--node-rank", "1", "--master-addr", LEADER_ADDRESS, "--headless"]
    assert plan_.rendezvous is not None and plan_.rendezvous.role is launcher_spec.Role.WORKER
    assert plan_.warnings == ()


@pytest.mark.parametrize("p", [multi_node_plan(), multi_node_plan(interconnect="pcie", per_node=4,
                                                                   tp=4, product="NVIDIA-L40S"),
                               gb200_plan()], ids=["h100", "l40s", "gb200"])
@pytest.mark.parametrize("role, index", [("leader", 0), ("worker", 1)])
def test_every_flag_the_pod_execs_is_a_vllm_serve_flag(p: dict[str, Any], role: str, index: int) -> None:
    extra = spec(serving={"maxModelLen": 4096, "extraArgs": ["--enable-prefix-caching"]})
    argv = launch(container(lws(extra, p), role), worker_index=index).argv
    assert vllm_flags.unknown_flags(argv[3:], help_flags()) == []


def test_pcie_nodes_get_the_launchers_nccl_settings() -> None:
    p = multi_node_plan(interconnect="pcie", tp=4, per_node=4, product="NVIDIA-L40S")
    assert launch(container(lws(p=p), "worker"), 1).env["NCCL_P2P_DISABLE"] == "1"


def test_only_the_leader_serves_and_is_probed() -> None:
    obj = lws()
    leader, worker = container(obj, "leader"), container(obj, "worker")
    assert leader["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert leader["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert leader["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    for key in ("ports", "startupProbe", "readinessProbe", "livenessProbe"):
        assert key not in worker


@pytest.mark.parametrize("role", ["leader", "worker"])
def test_every_pod_gets_its_nodes_gpus_pod_ip_shm_and_labels(role: str) -> None:
    obj = lws(p=multi_node_plan(per_node=8))
    c = container(obj, role)
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert c["resources"]["requests"] == {"nvidia.com/gpu": "8"}
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in c["env"]
    assert c["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert template(obj, role)["metadata"]["labels"] == labels.common_labels("llama")


@pytest.mark.parametrize("role", ["leader", "worker"])
def test_placement_passes_through_to_both_templates(role: str) -> None:
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    pod = template(lws(spec(placement={"tolerations": tolerations, "nodeSelector": {"pool": "a"}})),
                   role)["spec"]
    assert pod["tolerations"] == tolerations
    assert pod["nodeSelector"] == {"pool": "a"}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": [H100]}]}]
    assert "podAffinity" not in pod["affinity"]  # TP stays inside each node: any two nodes do


@pytest.mark.parametrize("role", ["leader", "worker"])
def test_tp_across_nodes_keeps_each_group_inside_one_nvlink_clique(role: str) -> None:
    pod = template(lws(p=gb200_plan()), role)["spec"]
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert term["matchExpressions"] == [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": [GB200]},
        {"key": "nvidia.com/gpu.clique", "operator": "Exists"}]
    assert pod["affinity"]["podAffinity"] == {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {"shardwise.io/inference-deployment": "llama"}},
        "matchLabelKeys": ["leaderworkerset.sigs.k8s.io/group-key"],
        "topologyKey": "nvidia.com/gpu.clique"}]}
    # Not LWS's exclusive-topology: other groups may share the clique (see the module docstring).
    assert "annotations" not in lws(p=gb200_plan())["metadata"]


def test_clique_placement_without_a_planned_product_still_requires_a_clique() -> None:
    pod = template(lws(p={**gb200_plan(), "gpuProduct": None}), "worker")["spec"]
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "nvidia.com/gpu.clique",
                                                     "operator": "Exists"}]}]}


def test_the_leaderworkerset_is_owned_by_the_inference_deployment() -> None:
    meta = lws()["metadata"]
    assert meta["namespace"] == "ml"
    assert meta["labels"] == labels.common_labels("llama")
    assert meta["ownerReferences"] == [OWNER.reference()]
    assert meta["ownerReferences"][0]["controller"] is True


def test_single_node_plans_keep_the_deployment() -> None:
    assert [o["kind"] for o in children.render(OWNER, spec(), plan(nodes=1), 1)] == ["Deployment",
                                                                                     "Service"]

def test_runtime_image_replaces_only_the_default_vllm_image() -> None:
    from shardwise.api.v1alpha1 import DEFAULT_IMAGE, InferenceDeploymentSpec
    from shardwise.render import children

    owner = children.Owner(name="big", namespace="ns", uid="u")
    plan = {"feasible": True, "tensorParallel": 8, "pipelineParallel": 2, "gpusPerNode": 8, "nodesPerReplica": 2,
            "gpusPerReplica": 16, "gpuProduct": "NVIDIA-H100-80GB-HBM3", "interconnect": "nvswitch"}

    def images(image: str, runtime: str | None) -> set[str]:
        spec = InferenceDeploymentSpec.model_validate({"model": {"name": "m"}, "serving": {"image": image}})
        lws = children.render(owner, spec, plan, 1, runtime_image=runtime)[0]
        templates = lws["spec"]["leaderWorkerTemplate"]
        return {t["spec"]["containers"][0]["image"] for t in (templates["leaderTemplate"], templates["workerTemplate"])}

    assert images(DEFAULT_IMAGE, "reg/shardwise/runtime:0.1.0") == {"reg/shardwise/runtime:0.1.0"}
    assert images("my/vllm-with-launcher:1", "reg/shardwise/runtime:0.1.0") == {"my/vllm-with-launcher:1"}
    assert images(DEFAULT_IMAGE, None) == {DEFAULT_IMAGE}
