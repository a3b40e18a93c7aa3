"""The walking skeleton end to end on a real control plane: apply, place, ready, edit, scale,
self-heal, restart, delete. Every wait is a bounded poll that reports what it last saw."""

from __future__ import annotations

import time

import pytest
import yaml

from shardwise.devcluster.cluster import LocalCluster
from tests.e2e.support import OPERATOR_USER, ROOT, Kubectl, OperatorProcess, eventually, writes_by

pytestmark = pytest.mark.e2e


def small_model(name: str, **spec_overrides) -> str:
    spec = {
        "model": {"name": "Qwen/Qwen2.5-7B-Instruct"},
        "serving": {"maxModelLen": 4096, "maxConcurrency": 8},
        "parallelism": {"objective": "Cost"},
        "placement": {"gpuProducts": ["NVIDIA-H100-80GB-HBM3"]},
        "replicas": 1,
    }
    spec.update(spec_overrides)
    return yaml.safe_dump({"apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment",
                           "metadata": {"name": name}, "spec": spec})


def ready(kubectl: Kubectl, name: str) -> dict:
    obj = kubectl.get("infd", name) or {}
    status = obj.get("status") or {}
    ok = status.get("phase") == "Ready" and status.get("observedGeneration") == obj["metadata"]["generation"]
    return obj if ok else {}


def test_examples_are_placed_on_gpu_nodes_and_become_ready(operator: OperatorProcess, kubectl: Kubectl,
                                                           cluster: LocalCluster) -> None:
    for path in ("examples/llama-8b.yaml", "examples/mixtral-l40s.yaml"):
        doc = yaml.safe_load((ROOT / path).read_text())
        doc["metadata"].pop("namespace", None)
        kubectl.apply_yaml(yaml.safe_dump(doc))

    for name, product in (("llama-8b", None), ("mixtral-l40s", "NVIDIA-L40S")):
        infd = eventually(lambda: ready(kubectl, name), timeout=90, what=f"{name} Ready")
        status = infd["status"]
        assert status["endpoint"] == f"http://{name}.{kubectl.namespace}.svc:8000/v1"
        assert status["selector"] == f"shardwise.io/inference-deployment={name}"
        plan = status["plan"]
        if product:
            assert plan["gpuProduct"] == product
        deploy = kubectl.get("deployment", name)
        owner = deploy["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("InferenceDeployment", name, True)
        assert owner["uid"] == infd["metadata"]["uid"]
        container = deploy["spec"]["template"]["spec"]["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == str(plan["gpusPerNode"])
        args = container["args"]
        assert args[args.index("--tensor-parallel-size") + 1] == str(plan["tensorParallel"])
        assert args[args.index("--pipeline-parallel-size") + 1] == str(plan["pipelineParallel"])
        assert kubectl.get("service", name)["spec"]["ports"][0]["name"] == "http"

        pods = kubectl.get("pods", selector=f"shardwise.io/inference-deployment={name}")["items"]
        assert pods, f"no pods for {name}"
        for pod in pods:
            node = cluster.kubectl("get", "node", pod["spec"]["nodeName"], "-o", "jsonpath={.metadata.labels}").stdout
            assert plan["gpuProduct"] in node, f"{pod['metadata']['name']} landed on {pod['spec']['nodeName']}"
            assert pod["status"]["podIP"].startswith(cluster.pod_cidr.split(".0.0/")[0] + ".")

    table = kubectl.run("get", "infd").stdout
    assert "llama-8b" in table and "Ready" in table


def test_spec_edit_rolls_out_and_scale_subresource_changes_replicas(operator: OperatorProcess,
                                                                    kubectl: Kubectl) -> None:
    kubectl.apply_yaml(small_model("edit-me"))
    eventually(lambda: ready(kubectl, "edit-me"), timeout=90, what="edit-me Ready")
    before = kubectl.get("deployment", "edit-me")

    kubectl.run("patch", "infd", "edit-me", "--type=merge", "-p", '{"spec":{"serving":{"maxModelLen":2048}}}')

    def rolled() -> bool:
        deploy = kubectl.get("deployment", "edit-me")
        args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        return args[args.index("--max-model-len") + 1] == "2048" and deploy["metadata"]["generation"] > \
            before["metadata"]["generation"]

    eventually(rolled, timeout=60, what="the Deployment to carry --max-model-len 2048")
    eventually(lambda: ready(kubectl, "edit-me"), timeout=90, what="edit-me Ready after the rollout")

    kubectl.run("scale", "infd/edit-me", "--replicas=3")
    eventually(lambda: kubectl.get("deployment", "edit-me")["spec"]["replicas"] == 3, timeout=60,
               what="Deployment replicas 3 after kubectl scale")
    infd = eventually(lambda: (o := ready(kubectl, "edit-me")) and o["status"]["readyReplicas"] == 3 and o,
                      timeout=90, what="3 ready replicas on the status")
    assert infd["status"]["replicas"] == 3


def test_deleted_service_comes_back_and_delete_collects_children(operator: OperatorProcess,
                                                                 kubectl: Kubectl) -> None:
    kubectl.apply_yaml(small_model("heal"))
    eventually(lambda: ready(kubectl, "heal"), timeout=90, what="heal Ready")
    uid = kubectl.get("service", "heal")["metadata"]["uid"]
    kubectl.run("delete", "service", "heal")
    eventually(lambda: (s := kubectl.get("service", "heal")) and s["metadata"]["uid"] != uid, timeout=60,
               what="the Service to be recreated")

    kubectl.run("delete", "infd", "heal", "--wait=true", "--timeout=60s")
    eventually(lambda: kubectl.get("deployment", "heal") is None and kubectl.get("service", "heal") is None,
               timeout=90, what="garbage collection of the Deployment and Service")


def test_operator_restart_mid_rollout_creates_no_duplicates(operator: OperatorProcess, kubectl: Kubectl) -> None:
    kubectl.apply_yaml(small_model("restart", replicas=2))
    eventually(lambda: kubectl.get("deployment", "restart"), timeout=60, what="the Deployment")
    operator.restart()
    kubectl.run("patch", "infd", "restart", "--type=merge", "-p", '{"spec":{"serving":{"maxConcurrency":4}}}')
    eventually(lambda: ready(kubectl, "restart"), timeout=120, what="restart Ready after an operator restart")
    deployments = kubectl.get("deployments")["items"]
    services = kubectl.get("services")["items"]
    assert [d["metadata"]["name"] for d in deployments] == ["restart"]
    assert [s["metadata"]["name"] for s in services] == ["restart"]
    pods = kubectl.get("pods", selector="shardwise.io/inference-deployment=restart")["items"]
    running = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    assert len(running) == 2


def test_idle_reconciles_write_nothing(operator: OperatorProcess, kubectl: Kubectl, cluster: LocalCluster) -> None:
    kubectl.apply_yaml(small_model("idle"))
    eventually(lambda: ready(kubectl, "idle"), timeout=90, what="idle Ready")
    # Let the rollout's last status updates and the first metrics verdict settle, then watch
    # several resync and metrics periods.
    settle = len(eventually(lambda: _stable_count(cluster, kubectl.namespace), timeout=60,
                            what="operator writes to settle"))
    before = settle
    time.sleep(4 * 3.0)  # four resync periods of the test operator (resync_seconds=3)
    after = writes_by(cluster, OPERATOR_USER, kubectl.namespace)
    new = after[before:]
    assert new == [], "idle reconciles wrote: " + ", ".join(
        f"{e['verb']} {e['objectRef'].get('resource')}/{e['objectRef'].get('subresource', '')}" for e in new)
    assert before > 0, "the audit log saw no operator writes at all: the check would be vacuous"


def _stable_count(cluster: LocalCluster, namespace: str) -> list:
    """The operator's writes so far, once none came for two resync (3 s) and metrics (2 s) periods."""
    first = writes_by(cluster, OPERATOR_USER, namespace)
    time.sleep(6.0)
    second = writes_by(cluster, OPERATOR_USER, namespace)
    return second if len(second) == len(first) and second else []


def test_specs_that_cannot_be_placed_get_a_condition_with_numbers_and_no_children(
        operator: OperatorProcess, kubectl: Kubectl) -> None:
    too_big = small_model("too-big", model={"name": "meta-llama/Llama-3.1-405B-Instruct"},
                          placement={"gpuProducts": ["NVIDIA-L40S"]})
    unknown = small_model("unknown", model={"name": "acme/never-heard-of-it-13B"})
    kubectl.apply_yaml(too_big)
    kubectl.apply_yaml(unknown)

    planned = eventually(lambda: kubectl.condition("too-big", "Planned"), timeout=60, what="Planned on too-big")
    assert planned["status"] == "False" and planned["reason"] == "InsufficientGPUMemory"
    assert "GiB" in planned["message"], planned["message"]
    assert kubectl.get("infd", "too-big")["status"]["phase"] == "Pending"

    invalid = eventually(lambda: kubectl.condition("unknown", "Planned"), timeout=60, what="Planned on unknown")
    assert invalid["status"] == "False" and "architecture" in invalid["message"], invalid["message"]
    assert kubectl.get("deployments")["items"] == [] and kubectl.get("services")["items"] == []

    events = kubectl.get("events")["items"]
    assert any(e["reason"] == "InsufficientGPUMemory" and e["involvedObject"]["name"] == "too-big" for e in events)
    assert operator.process.alive()
