"""A replica that spans nodes, on a real API server: Llama 3.1 405B as TP 8 x PP 2 on two 8-GPU nodes.

The session cluster has the LeaderWorkerSet CRD (sigs.k8s.io/lws v0.7.0) but no LWS controller,
so no pods appear: these tests check what the API server accepted and that the status says
honestly that nothing is serving yet. The cluster without the CRD is covered by
tests/unit/controller/test_reconcile_missing_lws.py (the CRD cannot leave a shared cluster safely).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.kube.compare import contains
from shardwise.render import children, leaderworkerset, modelcache

from tests.e2e.support import Kubectl, OperatorProcess, eventually

pytestmark = pytest.mark.e2e

NAME = "llama-405b"
SPEC: dict[str, Any] = {
    "model": {"name": "meta-llama/Llama-3.1-405B-Instruct", "dtype": "bfloat16"},
    # 4K tokens x 8 sequences leaves 405B's 756 GiB of weights room on 16 H100s, not on 8.
    "serving": {"maxModelLen": 4096, "maxConcurrency": 8},
    "placement": {"gpuProducts": ["NVIDIA-H100-80GB-HBM3"]},
}


def planned(kubectl: Kubectl) -> dict[str, Any]:
    obj = kubectl.get("infd", NAME) or {}
    plan = (obj.get("status") or {}).get("plan") or {}
    return obj if plan.get("feasible") else {}


def test_405b_becomes_one_leaderworkerset_group_behind_a_leader_service(
        operator: OperatorProcess, kubectl: Kubectl) -> None:
    kubectl.apply_yaml(yaml.safe_dump({"apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment",
                                       "metadata": {"name": NAME}, "spec": SPEC}))
    infd = eventually(lambda: planned(kubectl), timeout=60, what=f"{NAME} planned")
    plan = infd["status"]["plan"]
    assert (plan["tensorParallel"], plan["pipelineParallel"], plan["nodesPerReplica"],
            plan["gpusPerNode"], plan["gpuProduct"]) == (8, 2, 2, 8, "NVIDIA-H100-80GB-HBM3"), plan["reason"]

    lws_name = leaderworkerset.workload_name(NAME)
    lws = eventually(lambda: kubectl.get("leaderworkerset", lws_name), timeout=30,
                     what=f"LeaderWorkerSet {lws_name}")
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert lws["spec"]["replicas"] == 1
    [owner] = lws["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "InferenceDeployment", NAME, infd["metadata"]["uid"], True)
    for role, gpus in (("leaderTemplate", "8"), ("workerTemplate", "8")):
        [container] = template[role]["spec"]["containers"]
        assert container["command"] == ["shardwise-launch"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == gpus
    # The API server kept every field shardwise rendered (nothing pruned by the CRD schema), so
    # the next reconcile finds no drift and applies nothing.
    spec = InferenceDeploymentSpec.model_validate(infd["spec"])
    owner_ = children.Owner(name=NAME, namespace=kubectl.namespace, uid=infd["metadata"]["uid"])
    # As the operator renders it with no model cache: the startup probe allows the weights' download.
    expected_start_s = modelcache.expected_start_seconds(modelcache.weight_bytes(plan), cached=False)
    rendered = children.render(owner_, spec, plan, 1, expected_start_s=expected_start_s)[0]
    assert contains(lws, rendered)

    service = kubectl.get("service", NAME)
    assert service["spec"]["selector"] == {"shardwise.io/inference-deployment": NAME,
                                           "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    assert kubectl.get("deployment", NAME) is None

    # No LWS controller runs here: the group never starts, and the status must not pretend.
    def waiting(kubectl: Kubectl = kubectl) -> dict[str, Any]:
        status = (kubectl.get("infd", NAME) or {}).get("status") or {}
        return status if status.get("phase") == "Progressing" else {}

    status = eventually(waiting, timeout=30, what=f"{NAME} Progressing")
    assert (status["replicas"], status["readyReplicas"]) == (0, 0)
    conditions = {c["type"]: c for c in status["conditions"]}
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "ReplicasNotReady")
    assert conditions["Progressing"]["status"] == "True"
    assert conditions["Degraded"]["status"] == "False"
    assert status["endpoint"] == f"http://{NAME}.{kubectl.namespace}.svc:8000/v1"


def test_api_server_keeps_the_nvlink_clique_placement(kubectl: Kubectl) -> None:
    """GB200: TP 8 across two 4-GPU trays; the pod affinity fields must survive the CRD schema."""
    plan = {"feasible": True, "tensorParallel": 8, "pipelineParallel": 1, "gpusPerReplica": 8,
            "nodesPerReplica": 2, "gpusPerNode": 4, "gpuProduct": "NVIDIA-GB200", "interconnect": "nvswitch"}
    owner = children.Owner(name="gb200", namespace=kubectl.namespace, uid="00000000-0000-4000-8000-000000000001")
    rendered = leaderworkerset.build_leaderworkerset(owner, InferenceDeploymentSpec.model_validate(SPEC), plan, 2)
    result = kubectl.run("apply", "--server-side", "--dry-run=server", "-o", "json", "-f", "-",
                         input=yaml.safe_dump(rendered))
    accepted = yaml.safe_load(result.stdout)
    assert contains(accepted, rendered)
    affinity = accepted["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["affinity"]
    assert affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["matchLabelKeys"] == [
        "leaderworkerset.sigs.k8s.io/group-key"]
