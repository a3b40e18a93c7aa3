"""A rollout's state from its pods: in progress with the pod loading, blocked with GPU figures,
failed with the kubelet's reason, complete once the old version is gone."""

from __future__ import annotations

import copy
from typing import Any

from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.render import children
from shardwise.rollout import progress, strategy
from shardwise.rollout.room import Room

OWNER = children.Owner(name="m", namespace="ns", uid="u")
PLAN = {"feasible": True, "gpusPerNode": 1, "nodesPerReplica": 1, "gpuProduct": "NVIDIA-L4", "tensorParallel": 1,
        "pipelineParallel": 1, "interconnect": "pcie"}
LWS_PLAN = {**PLAN, "gpusPerNode": 8, "nodesPerReplica": 2, "tensorParallel": 8, "pipelineParallel": 2,
            "gpuProduct": "NVIDIA-H100-80GB-HBM3", "interconnect": "nvswitch"}
REPLACE = strategy.Decision(strategy.REPLACE_IN_PLACE, "no room for one more replica", free_gpus=0, needed_gpus=1)
WAIT = strategy.Decision(strategy.WAIT_FOR_ROOM, "no room; Wait", free_gpus=0, needed_gpus=1,
                         unblock="free 1 GPU on one node for NVIDIA-L4")


def rendered(image: str, plan: dict[str, Any] = PLAN) -> dict[str, Any]:
    spec = InferenceDeploymentSpec.model_validate({"model": {"name": "m"}, "serving": {"image": image}})
    return children.render(OWNER, spec, plan, 3)[0]


def pod(name: str, template: dict[str, Any], *, ready: bool = True, node: str | None = "n0",
        labels: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    spec = copy.deepcopy(template["spec"])
    if node:
        spec["nodeName"] = node
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"metadata": {"name": name, "labels": {**template["metadata"]["labels"], **(labels or {})},
                         "annotations": dict(template["metadata"].get("annotations") or {})},
            "spec": spec, "status": {"phase": "Running", "conditions": conditions, **status}}


OLD, NEW = rendered("v:1"), rendered("v:2")
OLD_T, NEW_T = OLD["spec"]["template"], NEW["spec"]["template"]


def see(decision: strategy.Decision, pods: list[dict[str, Any]], replicas: int = 3, **kw: Any) -> progress.View:
    return progress.view(decision, revision="r2", previous="r1", rendered=NEW, pods=progress.versions(NEW, pods),
                         replicas=replicas, **kw)


def test_in_progress_names_the_loading_pod_and_counts_updated_and_serving() -> None:
    pods = [pod("a-old", OLD_T), pod("b-old", OLD_T), pod("c-new", NEW_T), pod("d-new", NEW_T, ready=False, node="n3")]
    seen = see(REPLACE, pods)
    assert seen.state == progress.IN_PROGRESS and seen.active
    assert seen.status["updatedReplicas"] == 1 and seen.status["replicas"] == 3
    assert seen.status["loading"] == "pod d-new on n3"
    assert seen.status["strategy"] == "ReplaceInPlace" and seen.status["revision"] == "r2"
    assert seen.status["previousRevision"] == "r1"
    assert [(c.type, c.status, c.reason) for c in seen.conditions] == [("Progressing", True, "RollingOut")]
    assert "1/3 replicas updated, 3 serving; pod d-new loading on n3" in seen.conditions[0].message


def test_complete_once_every_replica_is_new_and_ready_and_no_old_one_serves() -> None:
    new = [pod(f"{i}-new", NEW_T) for i in "abc"]
    assert see(REPLACE, new).state == progress.COMPLETE
    assert see(REPLACE, new).conditions == ()
    terminating = pod("z-old", OLD_T)
    terminating["metadata"]["deletionTimestamp"] = "t"
    assert see(REPLACE, [*new, terminating]).state == progress.COMPLETE
    assert see(REPLACE, [*new, pod("z-old", OLD_T)]).state == progress.IN_PROGRESS


def test_a_new_pod_that_cannot_pull_its_image_fails_the_rollout_while_the_old_serve() -> None:
    bad = pod("d-new", NEW_T, ready=False)
    pods = [pod("a-old", OLD_T), pod("b-old", OLD_T), bad]
    assert [p["metadata"]["name"] for p in progress.versions(NEW, pods).new] == ["d-new"]
    seen = see(REPLACE, pods, failure=("ImagePullBackOff", "pod d-new container vllm: ImagePullBackOff: Back-off"))
    assert seen.state == progress.FAILED
    by_type = {c.type: c for c in seen.conditions}
    assert (by_type["Progressing"].status, by_type["Progressing"].reason) == (False, "RolloutFailed")
    assert (by_type["Degraded"].status, by_type["Degraded"].reason) == (True, "RolloutFailed")
    assert "pod d-new container vllm: ImagePullBackOff" in by_type["Degraded"].message
    assert "2 serving" in by_type["Degraded"].message and "revert" in by_type["Degraded"].message


def test_a_new_pod_without_a_node_blocks_with_gpus_needed_and_free() -> None:
    pending = pod("b-new", NEW_T, ready=False, node=None)
    pods = [pod("a-old", OLD_T), pending]
    waiting = "pod b-new cannot be scheduled: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    now = Room(spare_replicas=0, free_gpus=0, gpus_per_node=1, nodes_per_replica=1, product="NVIDIA-L4", shortfall="")
    seen = see(WAIT, pods, replicas=1, waiting=waiting, room=now)
    assert seen.state == progress.BLOCKED
    assert seen.status["unblock"] == "free 1 GPU on one node for NVIDIA-L4"
    message = {c.type: c for c in seen.conditions}["Progressing"].message
    assert "needs 1 GPU on one node, 0 free on usable NVIDIA-L4 nodes" in message
    assert {c.type: c.reason for c in seen.conditions} == {"Progressing": "RolloutBlocked", "Degraded": "RolloutBlocked"}
    # Without a fresh measure, the figures from when the rollout started.
    assert "needs 1 GPUs, 0 were free when it started" in see(WAIT, pods, replicas=1, waiting=waiting).status["message"]


def test_waiting_for_the_gpus_of_a_terminating_old_pod_is_progress_not_a_block() -> None:
    leaving = pod("a-old", OLD_T, node="n1")
    leaving["metadata"]["deletionTimestamp"] = "t"
    pods = [leaving, pod("c-old", OLD_T), pod("d-old", OLD_T), pod("b-new", NEW_T, ready=False, node=None)]
    seen = see(REPLACE, pods, waiting="pod b-new cannot be scheduled: Insufficient nvidia.com/gpu")
    assert seen.state == progress.IN_PROGRESS
    assert "a new pod waits for the GPUs of terminating pod a-old" in seen.status["message"]
    assert ("Degraded", False, "AsExpected") in [(c.type, c.status, c.reason) for c in seen.conditions]


def test_free_gpus_the_scheduler_has_yet_to_use_are_not_a_block() -> None:
    pods = [pod("a-old", OLD_T), pod("b-new", NEW_T, ready=False, node=None)]
    free = Room(spare_replicas=0, free_gpus=1, gpus_per_node=1, nodes_per_replica=1, product="NVIDIA-L4",
                shortfall="", pod_fits_now=True)
    seen = see(REPLACE, pods, replicas=1, waiting="pod b-new cannot be scheduled: stale", room=free)
    assert seen.state == progress.IN_PROGRESS
    assert "the scheduler has yet to place it" in seen.status["message"]


def test_same_pods_same_view() -> None:
    pods = [pod("a-old", OLD_T), pod("c-new", NEW_T, ready=False)]
    assert see(REPLACE, pods) == see(REPLACE, list(reversed(pods)))


def test_groups_count_by_leader_and_name_the_loading_group() -> None:
    old, new = rendered("v:1", LWS_PLAN), rendered("v:2", LWS_PLAN)
    assert new["kind"] == "LeaderWorkerSet"
    lwt_old, lwt_new = old["spec"]["leaderWorkerTemplate"], new["spec"]["leaderWorkerTemplate"]

    def member(name: str, lwt: dict[str, Any], group: int, worker: int, ready: bool = True) -> dict[str, Any]:
        template = lwt["leaderTemplate"] if worker == 0 else lwt["workerTemplate"]
        return pod(name, template, ready=ready, labels={progress.WORKER_INDEX_LABEL: str(worker),
                                                        progress.GROUP_INDEX_LABEL: str(group)})

    pods = [member("g0", lwt_new, 0, 0), member("g0-1", lwt_new, 0, 1),
            member("g1", lwt_new, 1, 0, ready=False), member("g1-1", lwt_new, 1, 1)]
    seen = progress.view(REPLACE, revision="r2", previous=None, rendered=new, pods=progress.versions(new, pods),
                         replicas=2)
    assert seen.state == progress.IN_PROGRESS
    assert seen.status["updatedReplicas"] == 1
    assert seen.status["loading"] == "group 1 (pod g1) on n0"
    assert "1/2 groups updated" in seen.status["message"]
    done = [member("g0", lwt_new, 0, 0), member("g0-1", lwt_new, 0, 1), member("g1", lwt_new, 1, 0),
            member("g1-1", lwt_new, 1, 1)]
    assert progress.view(REPLACE, revision="r2", previous=None, rendered=new, pods=progress.versions(new, done),
                         replicas=2).state == progress.COMPLETE
    with_old = [*done[:2], member("h0", lwt_old, 1, 0), member("h0-1", lwt_old, 1, 1)]
    assert progress.view(REPLACE, revision="r2", previous=None, rendered=new, pods=progress.versions(new, with_old),
                         replicas=2).state == progress.IN_PROGRESS
