"""Reconcile's rollout hooks over an in-memory API: the strategy is chosen when the pod template
changes, from the GPUs free then, written with the template in one apply, and kept until the next
template change, whatever the GPUs do meanwhile; an idle reconcile writes nothing."""

from __future__ import annotations

import copy
import json
from typing import Any

from shardwise.controller import reconcile
from shardwise.controller.cache import slim_pod
from shardwise.controller.settings import Settings
from shardwise.rollout import workload

NS, NAME = "ns", "m"
INFD_KEY = ("shardwise.io/v1alpha1", "InferenceDeployment", NS, NAME)
DEPLOYMENT_KEY = ("apps/v1", "Deployment", NS, NAME)


def node(name: str) -> dict[str, Any]:
    labels = {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "23034"}
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"nvidia.com/gpu": "1"}, "capacity": {"nvidia.com/gpu": "1"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


class FakeKube:
    """What reconcile reads and writes; pods are made from the Deployment's template on demand."""

    def __init__(self, nodes: int, replicas: int) -> None:
        self.nodes = [node(f"n{i}") for i in range(nodes)]
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {INFD_KEY: {
            "apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment",
            "metadata": {"name": NAME, "namespace": NS, "uid": "u", "generation": 1},
            "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "replicas": replicas,
                     "serving": {"maxModelLen": 2048, "maxConcurrency": 4}, "parallelism": {"objective": "Cost"}}}}
        self.pods: list[dict[str, Any]] = []
        self.applies: list[dict[str, Any]] = []
        self.status_patches: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.objects.get((api_version, kind, namespace, name))
        return copy.deepcopy(found) if found else None

    def apply(self, obj: dict[str, Any], *, force: bool = True) -> dict[str, Any]:
        self.applies.append(copy.deepcopy(obj))
        meta = obj["metadata"]
        self.objects[(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])] = copy.deepcopy(obj)
        return copy.deepcopy(obj)

    def installed(self, api_version: str, kind: str, namespace: str) -> bool:
        return True

    def list_nodes(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self.nodes)

    # Pods as the informer cache holds them (slim), as the operator reads them.
    def list_gpu_pods(self) -> list[dict[str, Any]]:
        return [p for p in map(slim_pod, copy.deepcopy(self.pods)) if p is not None]

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return [p for p in map(slim_pod, copy.deepcopy(self.pods)) if p is not None]

    def pricing_table(self, namespace: str, configmap: str) -> dict[str, float]:
        return {}

    def get_cached(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get(api_version, kind, namespace, name)

    def patch_status(self, namespace: str, name: str, status_patch: dict[str, Any], *,
                     resource_version: str | None = None) -> dict[str, Any]:
        self.status_patches.append(status_patch)
        merge_patch(self.objects[INFD_KEY].setdefault("status", {}), status_patch)
        return self.objects[INFD_KEY]

    def create_event(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    # -- what the Deployment controller and the scheduler would do, by hand ----------------
    def run_pods(self, count: int, *, ready: bool = True) -> None:
        """`count` ready pods of the Deployment's current template, one per node."""
        template = self.objects[DEPLOYMENT_KEY]["spec"]["template"]
        self.pods = [{"metadata": {"name": f"m-{i}", "namespace": NS, "labels": dict(template["metadata"]["labels"]),
                                   "annotations": dict(template["metadata"].get("annotations") or {})},
                      "spec": {**copy.deepcopy(template["spec"]), "nodeName": f"n{i}"},
                      "status": {"phase": "Running", "conditions": [{"type": "Ready",
                                                                      "status": "True" if ready else "False"}]}}
                     for i in range(count)]
        deployment = self.objects[DEPLOYMENT_KEY]
        deployment["metadata"]["generation"] = 1
        deployment["status"] = {"observedGeneration": 1, "replicas": count, "readyReplicas": count if ready else 0,
                                "updatedReplicas": count}

    def edit_spec(self, **serving: Any) -> None:
        infd = self.objects[INFD_KEY]
        infd["spec"]["serving"].update(serving)
        infd["metadata"]["generation"] += 1

    def deployment(self) -> dict[str, Any]:
        return self.objects[DEPLOYMENT_KEY]

    def status(self) -> dict[str, Any]:
        return self.objects[INFD_KEY].get("status") or {}


def run(kube: FakeKube) -> reconcile.Outcome:
    return reconcile.reconcile(kube, Settings(), NS, NAME)  # type: ignore[arg-type]


def knobs(kube: FakeKube) -> dict[str, int]:
    return kube.deployment()["spec"]["strategy"]["rollingUpdate"]


def test_creation_is_not_a_rollout() -> None:
    kube = FakeKube(nodes=3, replicas=3)
    run(kube)
    assert knobs(kube) == {"maxSurge": 1, "maxUnavailable": 0}
    assert workload.decision(kube.deployment()) is None
    kube.run_pods(3)
    run(kube)
    assert "rollout" not in kube.status()


def test_full_nodes_replace_in_place_and_the_choice_holds_when_room_appears() -> None:
    kube = FakeKube(nodes=3, replicas=3)
    run(kube)
    kube.run_pods(3)
    run(kube)
    first = workload.live_revision(kube.deployment())

    kube.edit_spec(image="vllm/vllm-openai:v0.33.0")
    run(kube)
    deployment = kube.deployment()
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "vllm/vllm-openai:v0.33.0"
    assert knobs(kube) == {"maxSurge": 0, "maxUnavailable": 1}  # same apply as the new template
    assert workload.previous_revision(deployment) == first
    rollout = kube.status()["rollout"]
    assert (rollout["strategy"], rollout["freeGPUs"], rollout["neededGPUs"]) == ("ReplaceInPlace", 0, 1)
    assert rollout["state"] == "InProgress" and rollout["updatedReplicas"] == 0 and rollout["replicas"] == 3
    assert "2 of 3 serve meanwhile" in rollout["reason"]
    progressing = next(c for c in kube.status()["conditions"] if c["type"] == "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("True", "RollingOut")

    kube.nodes.append(node("n3"))  # room appears mid-rollout: the strategy does not flip
    run(kube)
    assert knobs(kube) == {"maxSurge": 0, "maxUnavailable": 1}
    assert kube.status()["rollout"]["strategy"] == "ReplaceInPlace"

    kube.run_pods(3)  # every pod of the new template ready
    run(kube)
    assert kube.status()["rollout"]["state"] == "Complete"
    assert kube.status()["phase"] == "Ready"
    applies, patches = len(kube.applies), len(kube.status_patches)
    outcome = run(kube)
    assert (outcome.applied, outcome.status_written) == ((), False)
    assert (len(kube.applies), len(kube.status_patches)) == (applies, patches)


def test_room_for_one_more_replica_surges() -> None:
    kube = FakeKube(nodes=4, replicas=3)
    run(kube)
    kube.run_pods(3)
    kube.edit_spec(extraArgs=["--enable-prefix-caching"])
    run(kube)
    assert knobs(kube) == {"maxSurge": 1, "maxUnavailable": 0}
    rollout = kube.status()["rollout"]
    assert (rollout["strategy"], rollout["freeGPUs"], rollout["neededGPUs"]) == ("Surge", 1, 1)
    started = [e for e in kube.events if e["reason"] == "RolloutStarted"]
    assert len(started) == 1 and started[0]["message"].startswith("Surge: room for one more replica")
    run(kube)
    assert len([e for e in kube.events if e["reason"] == "RolloutStarted"]) == 1


def test_scaling_is_not_a_rollout() -> None:
    kube = FakeKube(nodes=4, replicas=3)
    run(kube)
    kube.run_pods(3)
    kube.objects[INFD_KEY]["spec"]["replicas"] = 2
    run(kube)
    assert workload.decision(kube.deployment()) is None
    assert kube.deployment()["spec"]["replicas"] == 2


def test_reverting_the_spec_rolls_back_and_says_so() -> None:
    kube = FakeKube(nodes=1, replicas=1)
    run(kube)
    kube.run_pods(1)
    first = workload.live_revision(kube.deployment())
    kube.edit_spec(image="kwok.shardwise.invalid/image-pull-backoff:1")
    run(kube)
    second = workload.live_revision(kube.deployment())
    kube.edit_spec(image="vllm/vllm-openai:v0.32.0")
    run(kube)
    deployment = kube.deployment()
    assert workload.live_revision(deployment) == first
    assert workload.previous_revision(deployment) == second
    decision = json.loads(deployment["metadata"]["annotations"][workload.DECISION_ANNOTATION])
    assert decision["reason"].startswith("back to the previous version")
